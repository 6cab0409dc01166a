//! Bad input gets a clear error naming what was wrong, never a panic or a hang.

use crate::harness;

use std::time::Duration;

use harness::{run_threads, run_threads_configured, small_config};
use streamcomm::UntypedBuffer;
use streamcomm::bootstrap::UniqueId;
use streamcomm::host::{HostBuffer, HostStream};
use streamcomm::{Communicator, Config, DataType, Error, ReduceOp};

fn msg(e: Error) -> String {
    assert!(
        matches!(e, Error::InvalidArgument(_) | Error::InvalidUsage(_)),
        "{e:?}"
    );
    e.to_string()
}

#[test]
fn size_zero_and_rank_out_of_range() {
    let id = UniqueId::new().unwrap();
    let e = Communicator::builder()
        .unique_id(&id)
        .rank(0)
        .size(0)
        .config(Config::default())
        .build()
        .unwrap_err();
    assert!(msg(e).contains("size"));
    let e = Communicator::builder()
        .unique_id(&id)
        .rank(4)
        .size(4)
        .config(Config::default())
        .build()
        .unwrap_err();
    let m = msg(e);
    assert!(m.contains("rank 4") && m.contains("size 4"), "{m}");
}

#[test]
fn bad_buffers_and_peers_are_refused_at_enqueue() {
    run_threads(2, small_config(), Duration::from_secs(60), |comm| {
        let stream = HostStream::new().unwrap();
        let send = HostBuffer::<f32>::zeroed(100);
        // recv buffer too small
        let mut small = HostBuffer::<f32>::zeroed(99);
        let m = msg(comm
            .all_reduce(&send, &mut small, ReduceOp::Sum, &stream)
            .unwrap_err());
        assert!(
            m.contains("recv") && m.contains("99") && m.contains("100"),
            "{m}"
        );
        let mut gathered = HostBuffer::<f32>::zeroed(199);
        let m = msg(comm.all_gather(&send, &mut gathered, &stream).unwrap_err());
        assert!(m.contains("199") && m.contains("200"), "{m}");
        // dtype mismatch between send and recv
        let mut wrong = UntypedBuffer::zeroed(DataType::F64, 100);
        let m = msg(comm
            .all_reduce(&send, &mut wrong, ReduceOp::Sum, &stream)
            .unwrap_err());
        assert!(m.contains("f32") && m.contains("f64"), "{m}");
        // same buffer as send and recv: two handles to one untyped buffer,
        // or a shared handle and its owner
        let untyped = UntypedBuffer::zeroed(DataType::F32, 100);
        let mut alias = untyped.clone();
        let m = msg(comm
            .all_reduce(&untyped, &mut alias, ReduceOp::Sum, &stream)
            .unwrap_err());
        assert!(m.contains("in_place"), "{m}");
        let mut owner = HostBuffer::<f32>::zeroed(100);
        let shared = owner.share();
        let m = msg(comm
            .all_reduce(&shared, &mut owner, ReduceOp::Sum, &stream)
            .unwrap_err());
        assert!(m.contains("in_place"), "{m}");
        // roots and peers out of range, sending to oneself
        let mut recv = HostBuffer::<f32>::zeroed(100);
        let m = msg(comm.broadcast(&send, &mut recv, 2, &stream).unwrap_err());
        assert!(m.contains('2'), "{m}");
        let m = msg(comm.send(&send, 7, &stream).unwrap_err());
        assert!(m.contains('7'), "{m}");
        assert!(comm.send(&send, comm.rank(), &stream).is_err());
        // lengths not divisible by the size
        let odd = HostBuffer::<f32>::zeroed(101);
        let mut odd2 = HostBuffer::<f32>::zeroed(101);
        assert!(msg(comm.all_to_all(&odd, &mut odd2, &stream).unwrap_err()).contains("101"));
        // Nothing was enqueued: the communicator still works.
        comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &stream)
            .unwrap();
        stream.synchronize().unwrap();
    });
}

#[test]
fn mismatched_counts_fail_on_both_ranks_without_hanging() {
    let config = {
        let mut c = small_config();
        c.timeout = Duration::from_secs(30);
        c
    };
    let results = run_threads(2, config, Duration::from_secs(60), |comm| {
        harness::mismatched_all_reduce(&comm)
    });
    for (rank, (e, took)) in results.into_iter().enumerate() {
        assert!(
            took < Duration::from_secs(10),
            "rank {rank} waited {took:?}"
        );
        assert!(matches!(e, Error::Mismatch(_)), "rank {rank}: {e}");
        let m = e.to_string();
        assert!(
            m.contains("(i32, sum, 10)") && m.contains("(i32, sum, 12)"),
            "{m}"
        );
    }
}

#[test]
fn an_idle_rank_sees_a_peer_failure_in_async_error() {
    let results = run_threads(3, small_config(), Duration::from_secs(60), |comm| {
        comm.barrier_host().unwrap();
        if comm.rank() == 2 {
            comm.abort();
            return None;
        }
        // Idle: no operation is waiting; only async_error looks.
        let t0 = std::time::Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if let Some(e) = comm.async_error() {
                return Some(e);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        None
    });
    for (rank, e) in results.iter().enumerate().take(2) {
        assert!(
            matches!(e, Some(Error::RemoteFailed { peer: 2, .. })),
            "rank {rank}: {e:?}"
        );
    }
}

/// A rank that never comes (alive, making no call) is the one every rank
/// names: rank 2 waits for it and times out (1 s), and rank 0, waiting
/// on rank 2 with a long timeout, learns from rank 2's abort that rank 1
/// is at fault, not rank 2, which only waited for it.
#[test]
fn a_timeout_waiting_for_a_peer_names_that_peer_to_every_rank() {
    let mut configs = vec![small_config(); 3];
    configs[2].timeout = Duration::from_secs(1);
    let done = std::sync::Arc::new(std::sync::Barrier::new(3));
    let results = run_threads_configured(configs, Duration::from_secs(60), move |comm| {
        let rank = comm.rank();
        let stream = HostStream::new().unwrap();
        let mut buf = HostBuffer::<u32>::zeroed(4);
        let waited_for = [Some(2), None, Some(1)][rank];
        let t0 = std::time::Instant::now();
        let e = waited_for.map(|peer| {
            let r = comm.recv(&mut buf, peer, &stream);
            r.and_then(|()| stream.synchronize()).unwrap_err()
        });
        // Rank 1 stays in the communicator until the others have failed.
        done.wait();
        (e, t0.elapsed())
    });
    match &results[2].0 {
        Some(Error::Timeout { what, .. }) => assert!(what.contains("rank 1"), "{what}"),
        other => panic!("rank 2 must time out waiting for rank 1: {other:?}"),
    }
    match &results[0] {
        (Some(Error::RemoteFailed { peer: 1, .. }), took) => {
            assert!(*took < Duration::from_secs(20), "rank 0 waited {took:?}")
        }
        other => panic!("rank 0 must name rank 1, the rank that did not come: {other:?}"),
    }
}

#[test]
fn abort_releases_a_waiting_stream() {
    run_threads(2, small_config(), Duration::from_secs(60), |comm| {
        let stream = HostStream::new().unwrap();
        let buf = HostBuffer::<f32>::zeroed(10);
        let mut out = HostBuffer::<f32>::zeroed(10);
        if comm.rank() == 0 {
            // Rank 1 never joins this all_reduce; rank 0 aborts from another thread.
            comm.all_reduce(&buf, &mut out, ReduceOp::Sum, &stream)
                .unwrap();
            let c = comm.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                c.abort();
            });
            let t0 = std::time::Instant::now();
            let e = stream.synchronize().unwrap_err();
            assert!(t0.elapsed() < Duration::from_secs(20));
            assert!(matches!(e, Error::Aborted(_)), "{e}");
            assert!(comm.async_error().is_some());
            assert!(comm.barrier(&stream).is_err());
        } else {
            // Rank 1 arrives late and sees rank 0's failure in its own barrier.
            std::thread::sleep(Duration::from_millis(400));
            let e = comm.barrier_host().unwrap_err();
            assert!(
                matches!(e, Error::RemoteFailed { peer: 0, .. } | Error::Aborted(_)),
                "{e}"
            );
        }
    });
}

/// Ranks that call different collectives, types or operators with the same
/// byte count get an error naming both calls (slot signatures), on every rank.
#[test]
fn mismatched_ops_types_and_collectives_are_errors() {
    for case in 0..3 {
        let results = run_threads(2, small_config(), Duration::from_secs(60), move |comm| {
            let stream = HostStream::new().unwrap();
            let first = comm.rank() == 0;
            let r = match case {
                0 => {
                    let send = HostBuffer::<f32>::zeroed(1000);
                    let mut recv = HostBuffer::<f32>::zeroed(1000);
                    let op = if first { ReduceOp::Sum } else { ReduceOp::Max };
                    comm.all_reduce(&send, &mut recv, op, &stream)
                }
                1 => {
                    let dtype = if first { DataType::F32 } else { DataType::I32 };
                    let send = UntypedBuffer::zeroed(dtype, 1000);
                    let mut recv = UntypedBuffer::zeroed(dtype, 1000);
                    comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &stream)
                }
                _ => {
                    let send = HostBuffer::<f32>::zeroed(1000);
                    let mut recv = HostBuffer::<f32>::zeroed(1000);
                    if first {
                        comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &stream)
                    } else {
                        comm.broadcast(&send, &mut recv, 1, &stream)
                    }
                }
            };
            // A rank that only sends cannot see the mismatch itself; its
            // peer's failure then fails its next operation (or this enqueue,
            // if the peer failed first).
            r.and_then(|()| stream.synchronize())
                .and_then(|()| comm.barrier_host())
                .unwrap_err()
        });
        for (rank, e) in results.into_iter().enumerate() {
            let m = e.to_string();
            // Both ranks name both calls.
            assert!(
                matches!(e, Error::Mismatch(_)) && m.contains("called"),
                "case {case} rank {rank}: {m}"
            );
        }
    }
}
