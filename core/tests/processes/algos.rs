//! The non-default algorithms (forced with `STREAMCOMM_ALGO`) over real
//! shared memory between processes, up to 8 ranks: every element checked
//! against the f64 reference, in and out of place, several dtypes and
//! operators, counts from 0 to several ring buffers.

use crate::harness;

use std::time::Duration;

use streamcomm::Collective;
use streamcomm::{DataType, ReduceOp};

/// Runs `n` copies of this binary with `algo` forced; fails on any rank's
/// failure or a hang.
fn launch(n: usize, algo: &str) {
    let extra = [
        ("STREAMCOMM_ALGO", algo),
        ("STREAMCOMM_BUFFSIZE", "8K"),
        ("STREAMCOMM_NSTEPS", "4"),
        ("STREAMCOMM_TIMEOUT", "60"),
    ];
    let within = Duration::from_secs(240);
    harness::scenario::launch_scenario(module_path!(), n, "algos", &extra, within);
}

#[test]
#[ignore = "entry point of the child processes"]
fn child() {
    let Some((_, seed, comm, stream)) = harness::scenario::child(harness::scenario::SCENARIO)
    else {
        return;
    };
    let n = comm.size();
    let slot = comm.config().slot_bytes();
    let buffsize = comm.config().buffsize;
    let collectives = [
        Collective::AllReduce,
        Collective::AllGather,
        Collective::Broadcast { root: 0 },
        Collective::Broadcast { root: n - 1 },
        Collective::Reduce { root: 0 },
        Collective::Reduce { root: n / 2 },
    ];
    let mut k = 0u64;
    for collective in collectives {
        for (dtype, op) in [
            (DataType::F32, ReduceOp::Sum),
            (DataType::Bf16, ReduceOp::Max),
            (DataType::I32, ReduceOp::Avg),
            (DataType::U8, ReduceOp::Prod),
        ] {
            for count in [0, 1, slot / dtype.size() + 1, 3 * buffsize + 13] {
                k += 1;
                let case = harness::Case {
                    collective,
                    dtype,
                    op,
                    count,
                    in_place: k.is_multiple_of(2),
                    seed: seed ^ (k << 32),
                };
                harness::run_case(&comm, &stream, &case).unwrap_or_else(|e| panic!("{e}"));
            }
        }
    }
    comm.barrier_host().unwrap();
    streamcomm_testkit::child_ran();
}

#[test]
fn tree_bruck_and_binomial() {
    for n in [2, 3, 6] {
        launch(
            n,
            "all_reduce=tree,all_gather=bruck,broadcast=binomial,reduce=binomial",
        );
    }
}

#[test]
fn halving_doubling_and_recursive_doubling() {
    for n in [3, 4] {
        launch(
            n,
            "all_reduce=halving_doubling,all_gather=recursive_doubling",
        );
    }
}

#[test]
fn recursive_doubling_all_reduce() {
    for n in [2, 3, 4] {
        launch(n, "all_reduce=recursive_doubling");
    }
}

#[test]
fn eight_ranks() {
    launch(
        8,
        "all_reduce=halving_doubling,all_gather=recursive_doubling,broadcast=binomial,reduce=binomial",
    );
    launch(8, "all_reduce=tree");
}
