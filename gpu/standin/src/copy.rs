//! Copies and memsets, synchronous and stream-ordered.
//!
//! The synchronous forms run on the legacy stream (so they order only with it
//! and the blocking streams, never with NON_BLOCKING streams), with the
//! documented host behaviour: host-to-device from pageable memory returns once
//! the source is staged; from pinned memory, once complete; device-to-host
//! returns when complete; device-to-device and memsets (unless the target is
//! pinned host memory) return at once. The async forms are fully asynchronous
//! with pinned host memory; with pageable memory a host-to-device copy is
//! staged at the call and a device-to-host copy completes before the call
//! returns (what cudarc's copies into a `Vec` rely on).

use std::ffi::c_void;
use std::sync::Arc;

use crate::capture::{self, check_unsafe};
use crate::device::current;
use crate::error::{INVALID_VALUE, Res};
use crate::exec::Work;
use crate::guard::entry;
use crate::memory::{host_ptr, resolve};
use crate::pinned::is_pinned;
use crate::stream::{stream_of, submit, submit_and_wait};

/// Where a copy goes from and to.
enum Route {
    /// Host memory (pageable or pinned) to device memory.
    ToDevice { dst: u64, src: *const c_void },
    /// Device memory to host memory (pageable or pinned).
    ToHost { dst: *mut c_void, src: u64 },
    /// Device memory to device memory.
    OnDevice { dst: u64, src: u64 },
}

/// Copies `n` bytes along `route` on `stream`, or synchronously on the legacy
/// stream when it names none (see the module docs for when each form
/// returns).
fn copy(route: Route, n: usize, stream: Option<usize>, name: &'static str) -> Res<()> {
    let ctx = current()?;
    if stream.is_none() {
        check_unsafe(name)?;
    }
    let s = match stream {
        Some(h) => stream_of(h)?,
        None => ctx.legacy().clone(),
    };
    if n == 0 {
        return Ok(());
    }
    match route {
        Route::ToDevice { dst, src } => {
            resolve(dst, n)?;
            let src = host_ptr(src)?;
            let raw = Work::ToDevice { dst, src, len: n };
            if is_pinned(src, n) {
                return match stream {
                    None => submit_and_wait(&s, raw, name),
                    Some(_) => submit(&s, raw, Vec::new(), name).map(|_| ()),
                };
            }
            if capture::of(&s).is_some() {
                return submit(&s, raw, Vec::new(), name).map(|_| ());
            }
            // SAFETY: the caller guarantees `n` readable bytes at `src`.
            let data = unsafe { std::slice::from_raw_parts(src as *const u8, n) }.to_vec();
            let staged = Work::Staged {
                dst,
                data: Arc::new(data),
            };
            submit(&s, staged, Vec::new(), name).map(|_| ())
        }
        Route::ToHost { dst, src } => {
            resolve(src, n)?;
            let dst = host_ptr(dst)?;
            let work = Work::ToHost { dst, src, len: n };
            if stream.is_some() && (is_pinned(dst, n) || capture::of(&s).is_some()) {
                return submit(&s, work, Vec::new(), name).map(|_| ());
            }
            submit_and_wait(&s, work, name)
        }
        Route::OnDevice { dst, src } => {
            resolve(src, n)?;
            resolve(dst, n)?;
            submit(&s, Work::DeviceCopy { dst, src, len: n }, Vec::new(), name).map(|_| ())
        }
    }
}

fn memset(
    dst: u64,
    value: u32,
    width: usize,
    count: usize,
    stream: Option<usize>,
    name: &'static str,
) -> Res<()> {
    // Handle 0 (NULL) is the legacy stream.
    let s = stream_of(stream.unwrap_or(0))?;
    if !dst.is_multiple_of(width as u64) {
        return Err(INVALID_VALUE);
    }
    if count == 0 {
        return Ok(());
    }
    let bytes = count.checked_mul(width).ok_or(INVALID_VALUE)?;
    resolve(dst, bytes)?;
    let work = Work::Memset {
        dst,
        value,
        width,
        count,
    };
    if stream.is_none() && is_pinned(dst as usize, bytes) {
        return submit_and_wait(&s, work, name);
    }
    submit(&s, work, Vec::new(), name).map(|_| ())
}

/// `cuMemcpyHtoD_v2` (legacy stream; see the module docs).
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemcpyHtoD_v2(dst: u64, src: *const c_void, n: usize) -> u32 {
    entry("cuMemcpyHtoD_v2", || {
        copy(Route::ToDevice { dst, src }, n, None, "cuMemcpyHtoD_v2")
    })
}

/// `cuMemcpyDtoH_v2` (legacy stream; returns when complete).
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: u64, n: usize) -> u32 {
    entry("cuMemcpyDtoH_v2", || {
        copy(Route::ToHost { dst, src }, n, None, "cuMemcpyDtoH_v2")
    })
}

/// `cuMemcpyDtoD_v2` (legacy stream; does not wait).
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemcpyDtoD_v2(dst: u64, src: u64, n: usize) -> u32 {
    entry("cuMemcpyDtoD_v2", || {
        copy(Route::OnDevice { dst, src }, n, None, "cuMemcpyDtoD_v2")
    })
}

/// `cuMemcpyHtoDAsync_v2`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: u64,
    src: *const c_void,
    n: usize,
    stream: usize,
) -> u32 {
    entry("cuMemcpyHtoDAsync_v2", || {
        copy(
            Route::ToDevice { dst, src },
            n,
            Some(stream),
            "cuMemcpyHtoDAsync_v2",
        )
    })
}

/// `cuMemcpyDtoHAsync_v2`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: u64,
    n: usize,
    stream: usize,
) -> u32 {
    entry("cuMemcpyDtoHAsync_v2", || {
        copy(
            Route::ToHost { dst, src },
            n,
            Some(stream),
            "cuMemcpyDtoHAsync_v2",
        )
    })
}

/// `cuMemcpyDtoDAsync_v2`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemcpyDtoDAsync_v2(dst: u64, src: u64, n: usize, stream: usize) -> u32 {
    entry("cuMemcpyDtoDAsync_v2", || {
        copy(
            Route::OnDevice { dst, src },
            n,
            Some(stream),
            "cuMemcpyDtoDAsync_v2",
        )
    })
}

/// `cuMemsetD8_v2`: on the legacy stream, asynchronous unless the target is
/// pinned host memory (so it is not ordered with NON_BLOCKING streams).
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemsetD8_v2(dst: u64, uc: u8, n: usize) -> u32 {
    entry("cuMemsetD8_v2", || {
        memset(dst, uc.into(), 1, n, None, "cuMemsetD8_v2")
    })
}

/// `cuMemsetD16_v2`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemsetD16_v2(dst: u64, us: u16, n: usize) -> u32 {
    entry("cuMemsetD16_v2", || {
        memset(dst, us.into(), 2, n, None, "cuMemsetD16_v2")
    })
}

/// `cuMemsetD32_v2`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemsetD32_v2(dst: u64, ui: u32, n: usize) -> u32 {
    entry("cuMemsetD32_v2", || {
        memset(dst, ui, 4, n, None, "cuMemsetD32_v2")
    })
}

/// `cuMemsetD8Async`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemsetD8Async(dst: u64, uc: u8, n: usize, stream: usize) -> u32 {
    entry("cuMemsetD8Async", || {
        memset(dst, uc.into(), 1, n, Some(stream), "cuMemsetD8Async")
    })
}

/// `cuMemsetD16Async`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemsetD16Async(dst: u64, us: u16, n: usize, stream: usize) -> u32 {
    entry("cuMemsetD16Async", || {
        memset(dst, us.into(), 2, n, Some(stream), "cuMemsetD16Async")
    })
}

/// `cuMemsetD32Async`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemsetD32Async(dst: u64, ui: u32, n: usize, stream: usize) -> u32 {
    entry("cuMemsetD32Async", || {
        memset(dst, ui, 4, n, Some(stream), "cuMemsetD32Async")
    })
}
