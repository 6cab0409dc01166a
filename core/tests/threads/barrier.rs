//! Barriers: nobody leaves barrier k before everyone entered it, for the
//! host barrier, the stream barrier (inline and through the proxy), and a
//! captured barrier replayed many times.

use crate::harness;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use harness::{run_threads, small_config};
use rand::{Rng, SeedableRng};
use streamcomm::config::Progress;
use streamcomm::host::HostStream;

/// Every rank bumps `arrived` before barrier k and then checks that all
/// `n * (k + 1)` arrivals happened, with random delays before arriving.
fn host_barrier(n: usize, iters: usize) {
    let arrived = Arc::new(AtomicUsize::new(0));
    let seed = streamcomm_testkit::seed();
    run_threads(n, small_config(), Duration::from_secs(120), move |comm| {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ (comm.rank() as u64) << 32);
        for k in 0..iters {
            if rng.gen_ratio(1, 50) {
                std::thread::sleep(Duration::from_micros(rng.gen_range(0..300)));
            }
            arrived.fetch_add(1, Ordering::SeqCst);
            comm.barrier_host().unwrap();
            let seen = arrived.load(Ordering::SeqCst);
            assert!(
                seen >= n * (k + 1),
                "rank {} left barrier {k} after {seen} arrivals",
                comm.rank()
            );
        }
    });
}

#[test]
fn host_barrier_holds_for_1_to_9_ranks() {
    for n in 1..=9 {
        host_barrier(n, if n <= 4 { 10_000 } else { 2_000 });
    }
}

/// Stream barriers: a user task before the barrier bumps the counter, one
/// after it checks; both run on the stream, so this checks stream order.
fn stream_barrier(n: usize, iters: usize, progress: Progress, captured: bool) {
    let arrived = Arc::new(AtomicUsize::new(0));
    let config = {
        let mut c = small_config();
        c.progress = progress;
        c
    };
    run_threads(n, config, Duration::from_secs(120), move |comm| {
        let stream = HostStream::new().unwrap();
        let done = Arc::new(AtomicUsize::new(0));
        let enqueue_round = |s: &HostStream| {
            crate::harness::shared::checked_stream_barrier(&comm, s, n, &arrived, &done);
        };
        if captured {
            // Three barriers per graph, replayed iters/3 times.
            stream.begin_capture().unwrap();
            for _ in 0..3 {
                enqueue_round(&stream);
            }
            let graph = stream.end_capture().unwrap();
            for _ in 0..iters / 3 {
                graph.launch(&stream).unwrap();
            }
        } else {
            for _ in 0..iters {
                enqueue_round(&stream);
            }
        }
        stream.synchronize().unwrap();
        assert_eq!(
            done.load(Ordering::SeqCst),
            if captured { iters / 3 * 3 } else { iters }
        );
    });
}

#[test]
fn stream_barrier_orders_work_inline() {
    for n in [1, 2, 3, 5, 8] {
        stream_barrier(n, 3000, Progress::Inline, false);
    }
}

#[test]
fn stream_barrier_orders_work_through_the_proxy() {
    for n in [2, 3, 4] {
        stream_barrier(n, 3000, Progress::Proxy, false);
    }
}

#[test]
fn captured_barriers_replayed_1000_times() {
    for progress in [Progress::Inline, Progress::Proxy] {
        stream_barrier(3, 3000, progress, true);
    }
}
