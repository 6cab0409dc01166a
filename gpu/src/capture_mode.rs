//! Allocating and freeing while a stream captures, as NCCL does.
//!
//! The driver refuses potentially unsafe calls (allocation, pinned
//! allocation, free, synchronisation) with
//! `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` from a thread that has its own
//! capture open (global or thread-local mode), and from any thread in
//! global mode while a global capture is open anywhere in the process; the
//! capture is then invalidated. A library that must allocate while its
//! caller captures (a first staged call inside a graph) switches the
//! calling thread to the relaxed mode around the call
//! (`cuThreadExchangeStreamCaptureMode`), which lifts that bar and nothing
//! else, and restores the caller's mode afterwards.

use crate::driver::probe;
use crate::driver::result::check;
use crate::driver::sys::{self, CUstreamCaptureMode};
use crate::error::Result;
use crate::guard::guarded;

/// Swaps the calling thread's capture mode for `mode`, returning the old one.
fn exchange(mode: CUstreamCaptureMode) -> Result<CUstreamCaptureMode> {
    guarded("cuThreadExchangeStreamCaptureMode", || {
        let mut m = mode;
        // SAFETY: `m` is a valid in/out pointer; the call needs no context.
        check("cuThreadExchangeStreamCaptureMode", unsafe {
            sys::cuThreadExchangeStreamCaptureMode(&mut m)
        })?;
        Ok(m)
    })
}

/// Runs `f` with the calling thread in the relaxed capture mode, so that
/// the allocations and frees it makes are not refused because a stream
/// captures (its own or, in global mode, another thread's); the thread's
/// mode is restored afterwards. Synchronising a capturing stream stays
/// refused, so `f` must not wait for one.
///
/// # Errors
/// [`crate::Error::Unavailable`] without a driver; a driver error from the
/// mode exchange (then `f` did not run).
pub fn relaxed_capture<R>(f: impl FnOnce() -> R) -> Result<R> {
    probe::driver()?;
    let old = exchange(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)?;
    let r = f();
    // Restoring cannot fail where the swap succeeded (same thread, valid mode).
    let _ = exchange(old);
    Ok(r)
}
