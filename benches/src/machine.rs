//! The machine's own limits, measured in the same run as the benchmark.
//!
//! Our machines are shared and their two virtual cores move between a near
//! and a far placement every few seconds (`docs/design/architecture.md`), so absolute figures
//! mean little. Every benchmark result is printed next to these two,
//! measured minutes apart at most: single-thread memcpy bandwidth and the
//! core-to-core round trip of a flag between two spinning threads.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

/// Limits measured on this machine.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub(crate) struct MachineLimits {
    /// Single-thread memcpy bandwidth in GB/s (best of several 64 MiB copies).
    pub memcpy_gbps: f64,
    /// Median round trip of a flag between two threads, in microseconds.
    pub c2c_round_trip_us: f64,
    /// 99th percentile of that round trip, in microseconds.
    pub c2c_round_trip_p99_us: f64,
}

/// Measures both limits (about a second).
pub(crate) fn measure() -> MachineLimits {
    let memcpy_gbps = memcpy_bandwidth(64 << 20, 5);
    let (p50, p99) = core_to_core_round_trip(20_000);
    MachineLimits {
        memcpy_gbps,
        c2c_round_trip_us: p50,
        c2c_round_trip_p99_us: p99,
    }
}

/// Best bandwidth of `reps` copies of `bytes` bytes, in GB/s (bytes copied / time).
pub(crate) fn memcpy_bandwidth(bytes: usize, reps: usize) -> f64 {
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

/// Longest the round-trip measurement may take: on an oversubscribed
/// machine each hand-off between spinning threads can wait for a scheduler
/// tick, and 20,000 of them would take minutes.
const ROUND_TRIP_BUDGET: Duration = Duration::from_secs(2);
/// Round trips before the measured ones.
const ROUND_TRIP_WARMUP: u64 = 1000;
/// Samples taken even past the budget (within the hard cap).
const MIN_SAMPLES: u64 = 50;
/// Longest the measurement may take in any case.
const ROUND_TRIP_HARD_CAP: Duration = Duration::from_secs(10);
/// Flag value that tells the helper thread to stop.
const STOP: u64 = u64::MAX;

/// Median and p99 round trip (µs) of a ping-pong on two cache lines between
/// this thread and a helper thread: `iters` round trips, or fewer if they
/// take longer than [`ROUND_TRIP_BUDGET`] (at least [`MIN_SAMPLES`] unless
/// [`ROUND_TRIP_HARD_CAP`] passes first; NaN if none completed).
pub(crate) fn core_to_core_round_trip(iters: u64) -> (f64, f64) {
    let flags = Arc::new([
        CachePadded::new(AtomicU64::new(0)),
        CachePadded::new(AtomicU64::new(0)),
    ]);
    let f2 = flags.clone();
    let pong = std::thread::spawn(move || {
        let mut expected = 1;
        loop {
            match f2[0].load(Ordering::Acquire) {
                STOP => return,
                v if v == expected => {
                    f2[1].store(v, Ordering::Release);
                    expected += 1;
                }
                _ => std::hint::spin_loop(),
            }
        }
    });
    // Warm up for at most a tenth of the budget, then measure until
    // `iters` samples or the budget; on a machine so oversubscribed that
    // every hand-off waits for the scheduler, still take MIN_SAMPLES (each
    // bounded by the hard cap), so the figure is slow rather than missing.
    let start = Instant::now();
    let mut samples = Vec::with_capacity(iters as usize);
    let mut i = 0u64;
    let mut warm = true;
    loop {
        let elapsed = start.elapsed();
        if warm && (i >= ROUND_TRIP_WARMUP || elapsed > ROUND_TRIP_BUDGET / 10) {
            warm = false;
        }
        let have = samples.len() as u64;
        if !warm
            && (have >= iters
                || (elapsed > ROUND_TRIP_BUDGET && have >= MIN_SAMPLES)
                || elapsed > ROUND_TRIP_HARD_CAP)
        {
            break;
        }
        i += 1;
        let t = Instant::now();
        flags[0].store(i, Ordering::Release);
        while flags[1].load(Ordering::Acquire) != i {
            std::hint::spin_loop();
        }
        if !warm {
            samples.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    flags[0].store(STOP, Ordering::Release);
    let _ = pong.join();
    if samples.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    (at(0.5), at(0.99))
}

/// Bytes of this host's last-level cache, all instances together (one
/// per socket, or per core complex): what `/sys/devices/system/cpu` says,
/// 0 where it says nothing readable.
pub(crate) fn last_level_cache_bytes() -> usize {
    let Ok(cpus) = std::fs::read_dir("/sys/devices/system/cpu") else {
        return 0;
    };
    // (level, shared CPU list, bytes) of every data or unified cache.
    let mut caches = Vec::new();
    for cpu in cpus.flatten() {
        let name = cpu.file_name();
        let name = name.to_string_lossy();
        if !name.starts_with("cpu") || !name[3..].bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(indices) = std::fs::read_dir(cpu.path().join("cache")) else {
            continue;
        };
        for index in indices.flatten() {
            let read = |f: &str| std::fs::read_to_string(index.path().join(f)).unwrap_or_default();
            let (level, kind, shared) = (read("level"), read("type"), read("shared_cpu_list"));
            let (Ok(level), Some(bytes)) = (level.trim().parse::<u32>(), cache_size(&read("size")))
            else {
                continue;
            };
            if kind.trim() != "Instruction" {
                caches.push((level, shared.trim().to_string(), bytes));
            }
        }
    }
    let Some(top) = caches.iter().map(|c| c.0).max() else {
        return 0;
    };
    let mut seen = std::collections::BTreeMap::new();
    for (level, shared, bytes) in caches {
        if level == top {
            seen.insert(shared, bytes);
        }
    }
    seen.values().sum()
}

/// A sysfs cache size (`32768K`, `2M`, `512`) in bytes.
fn cache_size(text: &str) -> Option<usize> {
    let t = text.trim();
    let (digits, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => t.split_at(i),
        None => (t, ""),
    };
    let n: usize = digits.parse().ok()?;
    let scale = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(scale)
}

#[cfg(test)]
mod cache_tests {
    use super::*;

    #[test]
    fn sysfs_cache_sizes_parse() {
        assert_eq!(cache_size("32768K\n"), Some(32 << 20));
        assert_eq!(cache_size("2M"), Some(2 << 20));
        assert_eq!(cache_size("512"), Some(512));
        assert_eq!(cache_size("12Q"), None);
        assert_eq!(cache_size(""), None);
    }
}
