//! A call that differs on one rank is reported on every rank with the same
//! story: rank 2 calls `all_reduce` with 999 elements where the others pass
//! 1 << 20, and every rank's error names rank 2, both counts and its own call
//! (over shared memory, and over tcp, where the record travels in the abort
//! notice).

use crate::harness;

use std::time::{Duration, Instant};

use streamcomm::host::{HostBuffer, HostStream};
use streamcomm::{Communicator, Error, ReduceOp};

const SCENARIO: &str = "STREAMCOMM_TEST_MISMATCH";
const COUNT: usize = 1 << 20;
const ODD: usize = 999;
const ODD_RANK: usize = 2;

fn launch(transport: &str) {
    let env = [
        (SCENARIO, "all_reduce".to_string()),
        ("STREAMCOMM_TRANSPORT", transport.to_string()),
        ("STREAMCOMM_TIMEOUT", "60".to_string()),
    ];
    harness::launch_children(
        4,
        &streamcomm_testkit::test_path(module_path!(), "child"),
        &env,
        Duration::from_secs(240),
        &format!("mismatch over {transport}"),
    );
}

#[test]
fn every_rank_names_the_odd_rank_over_shm() {
    launch("shm");
}

#[test]
fn every_rank_names_the_odd_rank_over_tcp() {
    launch("tcp");
}

#[test]
#[ignore = "entry point of the child processes"]
fn child() {
    if std::env::var(SCENARIO).is_err() {
        return;
    }
    let comm = Communicator::from_env().expect("from_env");
    let stream = HostStream::new().unwrap();
    let rank = comm.rank();
    let n = if rank == ODD_RANK { ODD } else { COUNT };
    let send = HostBuffer::from_slice(&vec![1.0f32; n]);
    let mut recv = HostBuffer::<f32>::zeroed(n);
    let t0 = Instant::now();
    // A peer may fail first: then the enqueue returns the stored error.
    let e = comm
        .all_reduce(&send, &mut recv, ReduceOp::Sum, &stream)
        .and_then(|()| stream.synchronize())
        .expect_err("a mismatched all_reduce must fail");
    let took = t0.elapsed();
    let m = e.to_string();
    eprintln!("rank {rank} ({took:?}): {m}");
    assert!(
        took < Duration::from_secs(30),
        "rank {rank} waited {took:?}"
    );
    // The story: rank 2, what it called, and what the others called.
    for needle in [
        format!("rank {ODD_RANK}"),
        ODD.to_string(),
        COUNT.to_string(),
        "all_reduce(f32, sum,".to_string(),
    ] {
        assert!(
            m.contains(&needle),
            "rank {rank}: {needle:?} missing in: {m}"
        );
    }
    let Error::Mismatch(mm) = &e else {
        panic!("rank {rank}: not a Mismatch: {e:?}");
    };
    let streamcomm::Mismatch {
        rank: me,
        culprit,
        culprit_call,
        witness,
        witness_call,
        ours,
        confirmed,
        ..
    } = &**mm;
    assert_eq!(*me, rank);
    assert_ne!(culprit, witness);
    let mut pair = [culprit_call.count, witness_call.count];
    pair.sort_unstable();
    assert_eq!(pair, [ODD as u64, COUNT as u64], "rank {rank}: {m}");
    assert!([culprit, witness].contains(&&ODD_RANK), "rank {rank}: {m}");
    for call in [culprit_call, witness_call] {
        assert_eq!(call.op, "all_reduce");
        assert_eq!(call.dtype, Some(streamcomm::DataType::F32));
        assert_eq!(call.reduce, Some(ReduceOp::Sum));
        assert_eq!(call.root, None);
    }
    if let Some(ours) = ours {
        assert_eq!(ours.count, n as u64, "rank {rank}: {m}");
    }
    // Four ranks: a third call is known, so the culprit is certain.
    assert!(*confirmed, "rank {rank}: {m}");
    assert_eq!(*culprit, ODD_RANK, "rank {rank}: {m}");
    assert_eq!(culprit_call.count, ODD as u64);
    assert!(m.contains(&format!("[culprit: rank {ODD_RANK}")), "{m}");
    streamcomm_testkit::child_ran();
}
