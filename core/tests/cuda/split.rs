//! `CudaComm` on a group split from the world: 4 processes on GPU 0 split
//! into two groups of 2 ({0, 2} and {1, 3}, reversed by key), each group
//! binds a `CudaComm` and runs every collective of two dtypes with random
//! data (the seed is printed by the harness), outputs poisoned first and
//! every element checked against an f64 reference; the world's own
//! `CudaComm` runs beside it.

use streamcomm::cuda::CudaComm;
use streamcomm::cuda::cudarc::driver::CudaContext;

use crate::backend::{child_rank, collectives, gpu_present, launch};

#[test]
fn a_cuda_comm_on_a_split_group() {
    if !gpu_present() {
        return;
    }
    launch(module_path!(), 4, 0, "split");
}

/// One rank of the test above.
#[test]
#[ignore = "a rank of the test above"]
fn child() {
    let (seed, world) = child_rank();
    let rank = world.rank();
    let group = world
        .split(Some((rank % 2) as u32), -(rank as i32))
        .unwrap()
        .expect("a colour");
    assert_eq!(
        (group.size(), group.rank()),
        (2, 1 - rank / 2),
        "rank {rank}"
    );
    let ctx = CudaContext::new(0).unwrap();
    let on_group = CudaComm::new(&group, ctx.clone()).unwrap();
    let on_world = CudaComm::new(&world, ctx.clone()).unwrap();
    let s = ctx.new_stream().unwrap();
    let mut bad = collectives::<f32>(&on_group, &s, seed);
    bad.extend(collectives::<i32>(&on_world, &s, seed ^ 1));
    bad.extend(collectives::<f64>(&on_group, &s, seed ^ 2));
    assert!(bad.is_empty(), "rank {rank}, seed {seed}: {bad:#?}");
    assert!(
        on_group.async_error().is_none(),
        "{:?}",
        on_group.async_error()
    );
    streamcomm_testkit::child_ran();
}
