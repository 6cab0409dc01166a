//! Driver entry points whose cudarc binding depends on the CUDA version the
//! program's cudarc was built for: looked up by their version-1 name in the
//! loaded driver, so that this crate compiles against any of cudarc's CUDA
//! versions (the program chooses it; see the CUDA guide).
//!
//! CUDA 13's headers map `cuStreamGetCaptureInfo` to `_v3` and
//! `cuEventElapsedTime` to `_v2`, and cudarc's CUDA 13 bindings drop the
//! older names; every driver from CUDA 12.0 on still exports them (the ABI
//! older programs use), so they are resolved here with `dlsym` from the
//! library the probe found.

use std::sync::OnceLock;

use super::probe::{DRIVER_LIB_NAMES, first_loadable};
use super::sys::{CUevent, CUgraph, CUgraphNode, CUresult, CUstream, CUstreamCaptureStatus};
use crate::error::{Error, Result};

/// `cuStreamGetCaptureInfo_v2` (CUDA 11.3 on).
type GetCaptureInfo = unsafe extern "C" fn(
    CUstream,
    *mut CUstreamCaptureStatus,
    *mut u64,
    *mut CUgraph,
    *mut *const CUgraphNode,
    *mut usize,
) -> CUresult;
/// `cuEventElapsedTime` (CUDA 2.0 on).
type ElapsedTime = unsafe extern "C" fn(*mut f32, CUevent, CUevent) -> CUresult;

/// The entry points, resolved once (the library stays loaded for the
/// process's life, as cudarc's does).
struct Stable {
    get_capture_info: GetCaptureInfo,
    elapsed_time: ElapsedTime,
}

static STABLE: OnceLock<std::result::Result<Stable, String>> = OnceLock::new();

fn resolve() -> std::result::Result<Stable, String> {
    let name = first_loadable(&DRIVER_LIB_NAMES).ok_or("no CUDA driver library")?;
    // SAFETY: the driver is designed to be dlopen'ed by any process; the
    // probe loaded it already, so this only bumps its reference count.
    let lib = unsafe { libloading::Library::new(name) }.map_err(|e| e.to_string())?;
    // SAFETY: each symbol is the driver's C function of the type named for
    // it above (the CUDA 12 and 13 headers' prototypes of these names).
    let stable = unsafe {
        let get_capture_info = *lib
            .get::<GetCaptureInfo>(b"cuStreamGetCaptureInfo_v2\0")
            .map_err(|e| format!("{name}: {e}"))?;
        let elapsed_time = *lib
            .get::<ElapsedTime>(b"cuEventElapsedTime\0")
            .map_err(|e| format!("{name}: {e}"))?;
        Stable {
            get_capture_info,
            elapsed_time,
        }
    };
    // The function pointers outlive this handle: the library is never
    // unloaded.
    std::mem::forget(lib);
    Ok(stable)
}

fn stable() -> Result<&'static Stable> {
    STABLE
        .get_or_init(resolve)
        .as_ref()
        .map_err(|e| Error::Unavailable(format!("CUDA driver entry points: {e}")))
}

/// `cuStreamGetCaptureInfo_v2`.
///
/// # Safety
/// As the driver's: a live stream, valid out-pointers.
pub(crate) unsafe fn stream_get_capture_info(
    stream: CUstream,
    status: *mut CUstreamCaptureStatus,
    id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    ndeps: *mut usize,
) -> Result<CUresult> {
    let f = stable()?.get_capture_info;
    // SAFETY: the caller's contract is the function's.
    Ok(unsafe { f(stream, status, id, graph, deps, ndeps) })
}

/// `cuEventElapsedTime`.
///
/// # Safety
/// As the driver's: live events, a valid out-pointer.
pub(crate) unsafe fn event_elapsed_time(
    ms: *mut f32,
    start: CUevent,
    end: CUevent,
) -> Result<CUresult> {
    let f = stable()?.elapsed_time;
    // SAFETY: the caller's contract is the function's.
    Ok(unsafe { f(ms, start, end) })
}
