//! The direct path's own cases on the emulated device: a dead peer, a peer
//! that aborts, the fall-back past eight ranks, bad arguments.
//! (Every collective and graph replay run on both paths in `device::tests`.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crate::device::tests::{
    assert_no_errors, close, input, on_ranks_watched, on_ranks_with, random, separate, Path, POISON,
};
use crate::device::DeviceCall;
use crate::plan::Collective;
use crate::{Error, ReduceOp};

#[test]
fn a_dead_peer_releases_waiting_streams_with_the_error_kept() {
    let dead = Arc::new(AtomicBool::new(false));
    // `enqueued`: ranks 0 and 1 have enqueued; `met`: everyone is done.
    let (enqueued, met) = (Arc::new(Barrier::new(3)), Arc::new(Barrier::new(3)));
    let d = dead.clone();
    let results = on_ranks_watched(
        3,
        Path::Direct(1 << 12),
        move |q| !(q == 2 && d.load(Ordering::Relaxed)),
        move |rk| {
            if rk.comm.rank() == 2 {
                // Never joins the all-reduce; "exits" once the others wait.
                enqueued.wait();
                std::thread::sleep(Duration::from_millis(50));
                dead.store(true, Ordering::Relaxed);
                met.wait();
                return None;
            }
            let send = random(5000);
            let recv = vec![POISON; 5000];
            let call = rk.call(separate(Collective::AllReduce, ReduceOp::Sum, &send, &recv));
            enqueued.wait();
            let start = Instant::now();
            let sync = rk.stream.synchronize();
            let waited = start.elapsed();
            let kept = rk.comm.async_error();
            let later = rk.call(DeviceCall::barrier());
            met.wait();
            Some((call.is_ok(), sync.is_ok(), waited, kept, later.is_err()))
        },
    );
    for (rank, r) in results.into_iter().take(2).enumerate() {
        let (enqueued, synced, waited, kept, later_failed) = r.unwrap();
        assert!(enqueued, "rank {rank}: the all-reduce was enqueued");
        assert!(synced, "rank {rank}: the stream drains");
        // Released by the watchdog, not by the emulated wait's 60 s limit.
        assert!(waited < Duration::from_secs(20), "rank {rank}: {waited:?}");
        let kept = kept.expect("the error is kept");
        assert!(
            matches!(kept, Error::RemoteFailed { peer: 2, .. }),
            "rank {rank}: {kept}"
        );
        assert!(later_failed, "rank {rank}: later calls return the error");
    }
}

#[test]
fn an_aborting_peer_releases_the_others() {
    let results = on_ranks_with(2, Path::Direct(1 << 12), |rk| {
        if rk.comm.rank() == 1 {
            rk.comm.abort();
            return None;
        }
        let send = random(64);
        let recv = vec![POISON; 64];
        let r = rk.call(separate(Collective::AllReduce, ReduceOp::Sum, &send, &recv));
        let sync = rk.stream.synchronize();
        Some((r.is_ok(), sync.is_ok(), rk.comm.async_error()))
    });
    let (enqueued, synced, kept) = results[0].clone().unwrap();
    if enqueued {
        assert!(synced, "the device stream drains");
    }
    assert!(kept.is_some(), "the error is kept");
}

#[test]
fn reductions_over_nine_ranks_fall_back_to_staging_and_copies_stay_direct() {
    const N: usize = 9;
    const COUNT: usize = 333;
    let seed: u64 = streamcomm_testkit::seed();
    let errors = on_ranks_with(N, Path::Direct(1 << 12), move |rk| {
        let r = rk.comm.rank();
        let mut bad = Vec::new();
        let inputs: Vec<Vec<f32>> = (0..N).map(|q| input(seed, q, COUNT)).collect();
        let grecv = vec![POISON; N * COUNT];
        rk.call(separate(
            Collective::AllGather,
            ReduceOp::Sum,
            &inputs[r],
            &grecv,
        ))
        .unwrap();
        rk.stream.synchronize().unwrap();
        let staged_after_gather = rk.shared.pool.allocations();
        let recv = vec![POISON; COUNT];
        rk.call(separate(
            Collective::AllReduce,
            ReduceOp::Sum,
            &inputs[r],
            &recv,
        ))
        .unwrap();
        rk.stream.synchronize().unwrap();
        if staged_after_gather != 0 || rk.shared.pool.allocations() == 0 {
            bad.push(format!(
                "rank {r}: all_gather should be direct, all_reduce staged ({staged_after_gather} / {})",
                rk.shared.pool.allocations()
            ));
        }
        for i in 0..COUNT {
            let want: f64 = inputs.iter().map(|v| f64::from(v[i])).sum();
            if !close(recv[i], want) && bad.len() < 5 {
                bad.push(format!("rank {r} all_reduce [{i}]: {} vs {want}", recv[i]));
            }
            for q in 0..N {
                let got = grecv[q * COUNT + i];
                if got.to_bits() != inputs[q][i].to_bits() && bad.len() < 5 {
                    bad.push(format!("rank {r} all_gather [{q}][{i}]: {got}"));
                }
            }
        }
        bad
    });
    assert_no_errors(errors);
}

#[test]
fn bad_arguments_fail_before_anything_is_enqueued() {
    let errs = on_ranks_with(2, Path::Direct(1 << 12), |rk| {
        let send = random(10);
        let small = vec![0f32; 9];
        let short = rk
            .call(separate(
                Collective::AllReduce,
                ReduceOp::Sum,
                &send,
                &small,
            ))
            .unwrap_err()
            .to_string();
        let root = rk
            .call(separate(
                Collective::Broadcast { root: 2 },
                ReduceOp::Sum,
                &send,
                &small,
            ))
            .unwrap_err()
            .to_string();
        // Nothing was enqueued: a barrier still lines up on both ranks.
        rk.call(DeviceCall::barrier()).unwrap();
        rk.stream.synchronize().unwrap();
        (short, root, rk.comm.async_error())
    });
    for (short, root, kept) in errs {
        assert!(
            short.contains("recv holds 9 elements, the call needs 10"),
            "{short}"
        );
        assert!(root.contains("root 2 is not a rank of 2"), "{root}");
        assert!(kept.is_none(), "{kept:?}");
    }
}

#[test]
fn one_rank_without_a_window_sends_every_rank_down_the_staged_path() {
    use crate::bootstrap::UniqueId;
    use crate::device::direct::window::Windows;
    use crate::device::emulated::EmulatedWindows;
    use crate::{Backend, Communicator};

    const N: usize = 3;
    let id = UniqueId::new().unwrap();
    let ranks: Vec<_> = (0..N)
        .map(|r| {
            std::thread::spawn(move || {
                let comm = Communicator::init(&id, r, N, Backend::Host).unwrap();
                // Rank 1 has no reduce kernels (say): it still votes.
                let source = (r != 1).then_some(&EmulatedWindows as _);
                let windows = Windows::establish(&comm, source, 1 << 12).unwrap();
                let small = Windows::establish(&comm, Some(&EmulatedWindows), 100);
                (windows.is_none(), small.map(|_| ()))
            })
        })
        .collect();
    for (r, t) in ranks.into_iter().enumerate() {
        let (none, small) = t.join().unwrap();
        assert!(none, "rank {r} set up windows although rank 1 could not");
        let e = small.unwrap_err().to_string();
        assert!(e.contains("at least 1024"), "rank {r}: {e}");
    }
}
