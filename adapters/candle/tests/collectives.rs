//! The adapter on real processes: 1 to 4 ranks launched as processes
//! over shared memory (streamcomm-run's launcher), every call with fresh
//! random tensors (the seed is printed), f32, f16 and bf16, outputs checked
//! element by element against a reference computed in f64 from every
//! rank's inputs, which each rank makes again from the seed.

use candle_core::{DType, Device, Tensor};
use rand::{Rng, SeedableRng};
use streamcomm::ReduceOp;

/// Shape of every rank's input: dimension 1 divides among 1 to 4 ranks.
const SHAPE: (usize, usize) = (4, 12);

mod common;

#[test]
fn every_call_on_one_to_four_ranks() {
    let seed = streamcomm_testkit::seed();
    for n in 1..=4 {
        let what = format!("candle adapter on {n} ranks");
        common::launch(module_path!(), n, seed, &[], &what);
    }
}

/// Rank `rank`'s input: small integers, so sums are exact in every type.
fn input(seed: u64, rank: usize) -> Vec<f64> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ ((rank as u64 + 1) * 0x9E37_79B9));
    (0..SHAPE.0 * SHAPE.1)
        .map(|_| f64::from(rng.gen_range(-8i32..8)))
        .collect()
}

/// The tensor of `values` in `dtype`, of `SHAPE`.
fn tensor(values: &[f64], dtype: DType) -> Tensor {
    Tensor::from_vec(values.to_vec(), SHAPE, &Device::Cpu)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
}

/// The ranks' `inputs` side by side along `dim`, rank `q` giving its first
/// `sizes[q]` rows (`dim` 0) or columns (`dim` 1): rows, columns and the
/// elements (row-major).
fn side_by_side(inputs: &[Vec<f64>], sizes: &[usize], dim: usize) -> (usize, usize, Vec<f64>) {
    let total: usize = sizes.iter().sum();
    let (rows, cols) = if dim == 0 {
        (total, SHAPE.1)
    } else {
        (SHAPE.0, total)
    };
    // Which rank, and which of its rows or columns, position k is.
    let owner = |mut k: usize| {
        let mut q = 0;
        while k >= sizes[q] {
            k -= sizes[q];
            q += 1;
        }
        (q, k)
    };
    let want = (0..rows * cols)
        .map(|k| {
            let (row, col) = (k / cols, k % cols);
            let (q, row, col) = if dim == 0 {
                let (q, row) = owner(row);
                (q, row, col)
            } else {
                let (q, col) = owner(col);
                (q, row, col)
            };
            inputs[q][row * SHAPE.1 + col]
        })
        .collect();
    (rows, cols, want)
}

/// One rank of the test above.
#[test]
#[ignore = "a rank of every_call_on_one_two_and_three_ranks"]
fn child() {
    let (seed, comm) = common::join();
    let (r, n) = (comm.rank(), comm.size());
    let inputs: Vec<Vec<f64>> = (0..n).map(|q| input(seed, q)).collect();
    let len = SHAPE.0 * SHAPE.1;
    let reduce = |i: usize, op: ReduceOp| {
        let vals = inputs.iter().map(|v| v[i]);
        match op {
            ReduceOp::Sum => vals.sum::<f64>(),
            ReduceOp::Avg => vals.sum::<f64>() / n as f64,
            ReduceOp::Max => vals.fold(f64::MIN, f64::max),
            ReduceOp::Min => vals.fold(f64::MAX, f64::min),
            ReduceOp::Prod => vals.product(),
        }
    };
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        // An average of small integers over 3 ranks rounds in the narrow types.
        let tol = match dtype {
            DType::F32 => 1e-6,
            DType::F16 => 8.0 / 1024.0,
            _ => 8.0 / 128.0,
        };
        let mine = tensor(&inputs[r], dtype);
        for op in [ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min] {
            let got = comm.all_reduce(&mine, op).unwrap();
            let want: Vec<f64> = (0..len).map(|i| reduce(i, op)).collect();
            common::assert_elements(
                &got,
                &want,
                tol,
                &format!("rank {r}: all_reduce {op:?} {dtype:?}"),
            );
            // The input stays as it was.
            common::assert_elements(
                &mine,
                &inputs[r],
                0.0,
                &format!("rank {r}: all_reduce's input"),
            );
        }
        let own = tensor(&inputs[r], dtype);
        comm.all_reduce_in_place(&own, ReduceOp::Sum).unwrap();
        let sums: Vec<f64> = (0..len).map(|i| reduce(i, ReduceOp::Sum)).collect();
        common::assert_elements(
            &own,
            &sums,
            0.0,
            &format!("rank {r}: all_reduce_in_place {dtype:?}"),
        );
        let strided = comm.all_reduce_in_place(&mine.t().unwrap(), ReduceOp::Sum);
        let msg = strided.unwrap_err().to_string();
        assert!(msg.contains("not contiguous"), "{msg}");

        // Gathers along both dimensions, against the inputs side by side:
        // whole (all_gather), and uneven shares (all_gatherv: rank q gives
        // the first `full - q` rows or columns of its input).
        for dim in [0, 1] {
            let full = [SHAPE.0, SHAPE.1][dim];
            let whole = vec![full; n];
            let uneven: Vec<usize> = (0..n).map(|q| full - q).collect();
            let gathered = comm.all_gather(&mine, dim).unwrap();
            let share = mine.narrow(dim, 0, uneven[r]).unwrap();
            let gathered_v = comm.all_gatherv(&share, dim, &uneven).unwrap();
            for (call, got, sizes) in [
                ("all_gather", gathered, &whole),
                ("all_gatherv", gathered_v, &uneven),
            ] {
                let (rows, cols, want) = side_by_side(&inputs, sizes, dim);
                assert_eq!(got.dims(), &[rows, cols], "{call} along {dim}");
                common::assert_elements(
                    &got,
                    &want,
                    0.0,
                    &format!("rank {r}: {call} dim {dim} sizes {sizes:?} {dtype:?}"),
                );
            }
        }
        let wrong = comm.all_gatherv(&mine, 0, &vec![1; n]);
        assert!(
            wrong
                .unwrap_err()
                .to_string()
                .contains("all_gatherv: sizes")
        );

        // This rank's columns of the sum.
        let part = SHAPE.1 / n;
        let got = comm.reduce_scatter(&mine, 1, ReduceOp::Sum).unwrap();
        assert_eq!(got.dims(), &[SHAPE.0, part]);
        let want: Vec<f64> = (0..SHAPE.0 * part)
            .map(|k| reduce((k / part) * SHAPE.1 + r * part + k % part, ReduceOp::Sum))
            .collect();
        common::assert_elements(
            &got,
            &want,
            0.0,
            &format!("rank {r}: reduce_scatter {dtype:?}"),
        );
        if n > 1 {
            let rows = comm.reduce_scatter(&mine, 0, ReduceOp::Sum);
            assert_eq!(
                SHAPE.0.is_multiple_of(n),
                rows.is_ok(),
                "{} rows divide among {n} ranks only if {n} divides them",
                SHAPE.0
            );
            if let Err(e) = rows {
                assert!(e.to_string().contains("not divisible"), "{e}");
            }
        }

        let root = n - 1;
        let got = comm.broadcast(&mine, root).unwrap();
        common::assert_elements(
            &got,
            &inputs[root],
            0.0,
            &format!("rank {r}: broadcast {dtype:?}"),
        );

        if n > 1 {
            let (right, left) = ((r + 1) % n, (r + n - 1) % n);
            let got = if r % 2 == 0 {
                comm.send(&mine, right).unwrap();
                comm.recv(SHAPE, dtype, left).unwrap()
            } else {
                let got = comm.recv(SHAPE, dtype, left).unwrap();
                comm.send(&mine, right).unwrap();
                got
            };
            common::assert_elements(
                &got,
                &inputs[left],
                0.0,
                &format!("rank {r}: recv {dtype:?}"),
            );
        }
    }
    streamcomm_testkit::child_ran();
}
