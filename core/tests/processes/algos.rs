//! The non-default algorithms (forced with `STREAMCOMM_ALGO`) over real
//! shared memory between processes, up to 8 ranks: every element checked
//! against the f64 reference, in and out of place, several dtypes and
//! operators, counts from 0 to several ring buffers.

use crate::harness;

use std::time::Duration;

use streamcomm::Collective;
use streamcomm::host::HostStream;
use streamcomm::{Communicator, DataType, ReduceOp};

const ROLE: &str = "STREAMCOMM_TEST_ALGOS_CHILD";
const SEED: &str = "STREAMCOMM_TEST_SEED";

/// Runs `n` copies of this binary with `algo` forced; fails on any rank's
/// failure or a hang.
fn launch(n: usize, algo: &str) {
    let env = [
        (ROLE, "1".to_string()),
        (SEED, streamcomm_testkit::seed().to_string()),
        ("STREAMCOMM_ALGO", algo.to_string()),
        ("STREAMCOMM_BUFFSIZE", "8K".to_string()),
        ("STREAMCOMM_NSTEPS", "4".to_string()),
        ("STREAMCOMM_TIMEOUT", "60".to_string()),
    ];
    let what = format!("STREAMCOMM_ALGO={algo}");
    harness::launch_children(
        n,
        &streamcomm_testkit::test_path(module_path!(), "child"),
        &env,
        Duration::from_secs(240),
        &what,
    );
}

#[test]
#[ignore = "entry point of the child processes"]
fn child() {
    if std::env::var(ROLE).is_err() {
        return;
    }
    let seed: u64 = std::env::var(SEED).unwrap().parse().unwrap();
    let comm = Communicator::from_env().expect("from_env");
    let stream = HostStream::new().unwrap();
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
