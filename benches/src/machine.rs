//! The machine's own limits, measured in the same run as the benchmark.
//!
//! Our machines are shared and their two virtual cores move between a near
//! and a far placement every few seconds (DESIGN.md §10), so absolute figures
//! mean little. Every benchmark result is printed next to these two,
//! measured minutes apart at most: single-thread memcpy bandwidth and the
//! core-to-core round trip of a flag between two spinning threads.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_utils::CachePadded;

/// Limits measured on this machine.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct MachineLimits {
    /// Single-thread memcpy bandwidth in GB/s (best of several 64 MiB copies).
    pub memcpy_gbps: f64,
    /// Median round trip of a flag between two threads, in microseconds.
    pub c2c_round_trip_us: f64,
    /// 99th percentile of that round trip, in microseconds.
    pub c2c_round_trip_p99_us: f64,
}

/// Measures both limits (about a second).
pub fn measure() -> MachineLimits {
    let memcpy_gbps = memcpy_bandwidth(64 << 20, 5);
    let (p50, p99) = core_to_core_round_trip(20_000);
    MachineLimits {
        memcpy_gbps,
        c2c_round_trip_us: p50,
        c2c_round_trip_p99_us: p99,
    }
}

/// Best bandwidth of `reps` copies of `bytes` bytes, in GB/s (bytes copied / time).
pub fn memcpy_bandwidth(bytes: usize, reps: usize) -> f64 {
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    dst.copy_from_slice(&src); // fault the pages in
    let mut best = f64::MAX;
    for _ in 0..reps {
        let t = Instant::now();
        dst.copy_from_slice(black_box(&src));
        black_box(&mut dst);
        best = best.min(t.elapsed().as_secs_f64());
    }
    bytes as f64 / best / 1e9
}

/// Median and p99 round trip (µs) of a ping-pong on two cache lines between
/// this thread and a helper thread.
pub fn core_to_core_round_trip(iters: u64) -> (f64, f64) {
    let flags = Arc::new([
        CachePadded::new(AtomicU64::new(0)),
        CachePadded::new(AtomicU64::new(0)),
    ]);
    let f2 = flags.clone();
    let total = iters + 1000;
    let pong = std::thread::spawn(move || {
        for i in 1..=total {
            while f2[0].load(Ordering::Acquire) != i {
                std::hint::spin_loop();
            }
            f2[1].store(i, Ordering::Release);
        }
    });
    let mut samples = Vec::with_capacity(iters as usize);
    for i in 1..=total {
        let t = Instant::now();
        flags[0].store(i, Ordering::Release);
        while flags[1].load(Ordering::Acquire) != i {
            std::hint::spin_loop();
        }
        if i > 1000 {
            samples.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    let _ = pong.join();
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    (at(0.5), at(0.99))
}
