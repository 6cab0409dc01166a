//! The tensor-parallel layers on real processes: 1, 2 and 3 ranks (uneven
//! shares: 7 output features over 2 and 3 ranks), weights from a full
//! tensor and from a safetensors file the test writes, every output checked
//! element by element against the whole layer computed on one rank. The
//! data are small integers (the seed is printed), so every sum is exact.

use std::collections::HashMap;

use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Tensor};
use rand::{Rng, SeedableRng};
use streamcomm_candle::tensor_parallel::{
    ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding, shard,
};

mod common;

/// Where the parent wrote the weights.
const FILE: &str = "SC_CANDLE_TP_WEIGHTS";

#[test]
fn layers_match_the_whole_layer_on_one_two_and_three_ranks() {
    let seed = streamcomm_testkit::seed();
    let path =
        std::env::temp_dir().join(format!("sc-candle-tp-{}.safetensors", std::process::id()));
    let w = Weights::new(seed);
    let named: HashMap<String, Tensor> = [
        ("l1.weight", &w.w1),
        ("l1.bias", &w.b1),
        ("l2.weight", &w.w2),
        ("l2.bias", &w.b2),
        ("emb", &w.table),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.clone()))
    .collect();
    candle_core::safetensors::save(&named, &path).unwrap();
    for n in 1..=3 {
        let what = format!("tensor-parallel layers on {n} ranks");
        let file = [(FILE, path.clone().into_os_string())];
        common::launch(module_path!(), n, seed, &file, &what);
    }
    let _ = std::fs::remove_file(&path);
}

/// The whole model, alike on every rank (made from the seed).
struct Weights {
    x: Tensor,
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
    table: Tensor,
}

impl Weights {
    fn new(seed: u64) -> Weights {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut t = |dims: &[usize]| {
            let len = dims.iter().product();
            let v: Vec<f32> = (0..len).map(|_| rng.gen_range(-4i32..4) as f32).collect();
            Tensor::from_vec(v, dims, &Device::Cpu).unwrap()
        };
        Weights {
            x: t(&[3, 10]),
            w1: t(&[7, 10]),
            b1: t(&[7]),
            w2: t(&[5, 7]),
            b2: t(&[5]),
            table: t(&[11, 4]),
        }
    }
}

/// `got` equals `want` element for element.
fn same(got: &Tensor, want: &Tensor, what: &str) {
    assert_eq!(got.dims(), want.dims(), "{what}: shape");
    common::assert_elements(got, &common::elements(want), 0.0, what);
}

/// One rank of the test above.
#[test]
#[ignore = "a rank of layers_match_the_whole_layer_on_one_two_and_three_ranks"]
fn child() {
    let (seed, comm) = common::join();
    let (r, n) = (comm.rank(), comm.size());
    let w = Weights::new(seed);
    // The whole layers, on this rank alone.
    let h =
        w.x.matmul(&w.w1.t().unwrap())
            .unwrap()
            .broadcast_add(&w.b1)
            .unwrap();
    let y = h
        .matmul(&w.w2.t().unwrap())
        .unwrap()
        .broadcast_add(&w.b2)
        .unwrap();
    let ids = Tensor::new(&[[0u32, 3, 10], [7, 5, 1]], &Device::Cpu).unwrap();
    let rows = w.table.embedding(&ids.flatten_all().unwrap()).unwrap();
    let rows = rows.reshape((2, 3, 4)).unwrap();
    // SAFETY: the parent wrote the file before starting the ranks, and
    // nobody changes it while they map it.
    let st = unsafe { MmapedSafetensors::new(std::env::var(FILE).unwrap()) }.unwrap();

    let cols = shard(7, r, n);
    let from_full = ColumnParallelLinear::from_full(&w.w1, Some(&w.b1), &comm).unwrap();
    let loaded = ColumnParallelLinear::load(&st, "l1", &comm).unwrap();
    assert_eq!(loaded.features(), cols);
    let mine = h.narrow(1, cols.start, cols.len()).unwrap();
    for (how, layer) in [("from_full", &from_full), ("load", &loaded)] {
        let what = format!("rank {r}/{n}: column-parallel ({how})");
        same(&layer.forward(&w.x).unwrap(), &mine, &what);
        same(
            &layer.forward_gathered(&w.x).unwrap(),
            &h,
            &format!("{what}, gathered"),
        );
    }
    let h_mine = from_full.forward(&w.x).unwrap();
    for (how, layer) in [
        (
            "from_full",
            RowParallelLinear::from_full(&w.w2, Some(&w.b2), &comm).unwrap(),
        ),
        ("load", RowParallelLinear::load(&st, "l2", &comm).unwrap()),
    ] {
        let got = layer.forward(&h_mine).unwrap();
        same(&got, &y, &format!("rank {r}/{n}: row-parallel ({how})"));
    }
    for (how, emb) in [
        (
            "from_full",
            VocabParallelEmbedding::from_full(&w.table, &comm).unwrap(),
        ),
        (
            "load",
            VocabParallelEmbedding::load(&st, "emb", &comm).unwrap(),
        ),
    ] {
        same(
            &emb.forward(&ids).unwrap(),
            &rows,
            &format!("rank {r}/{n}: embedding ({how})"),
        );
    }
    assert_eq!(w.x.dtype(), DType::F32);
    streamcomm_testkit::child_ran();
}
