//! Cheap timestamps for per-iteration latency samples.
//!
//! A clock read is a system call where the clocksource is not readable from
//! user space (the HPET of the Soft-RoCE guest: ~2 µs each, about 10% of an
//! 8-byte RDMA round trip there). perftest times its iterations with the
//! cycle counter; so do we on x86-64: `rdtsc` stamps, converted to time by
//! the ratio of elapsed clock time to elapsed ticks over the whole run (two
//! clock reads in all). Elsewhere the stamps are clock reads.

use std::time::Instant;

/// One timestamp.
#[inline]
pub(crate) fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `rdtsc` has no preconditions on x86-64.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use std::sync::OnceLock;
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        ORIGIN.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Converts tick differences to microseconds, calibrated over a run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span {
    clock: Instant,
    ticks: u64,
}

impl Span {
    /// Starts a calibration span.
    pub(crate) fn start() -> Span {
        Span {
            clock: Instant::now(),
            ticks: now(),
        }
    }

    /// Microseconds per tick over the span so far (0 for an empty span).
    pub(crate) fn us_per_tick(&self) -> f64 {
        let ticks = now().wrapping_sub(self.ticks);
        let us = self.clock.elapsed().as_secs_f64() * 1e6;
        if ticks == 0 { 0.0 } else { us / ticks as f64 }
    }
}
