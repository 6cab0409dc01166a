//! The CUDA device and memory calls the library makes itself, through the
//! driver API (as cudarc binds it): the calling thread's device, and
//! `ncclMemAlloc`'s memory.

use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use streamcomm::Error;
use streamcomm::cuda::cudarc::driver::{CudaContext, sys};

fn check(what: &str, r: sys::CUresult) -> Result<(), Error> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::InvalidUsage(format!("{what} failed: {r:?}")))
    }
}

/// The device NCCL would use: the calling thread's current context's
/// device (the runtime's `cudaGetDevice`), else device 0.
///
/// # Errors
/// `Error::Unavailable` without a usable driver; a failed driver call.
pub(crate) fn current() -> Result<usize, Error> {
    streamcomm::cuda::device_count()?;
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the driver is initialised (above).
    check("cuCtxGetCurrent", unsafe { sys::cuCtxGetCurrent(&mut ctx) })?;
    if ctx.is_null() {
        return Ok(0);
    }
    let mut dev: sys::CUdevice = 0;
    // SAFETY: a valid out-pointer; a context is current.
    check("cuCtxGetDevice", unsafe { sys::cuCtxGetDevice(&mut dev) })?;
    usize::try_from(dev).map_err(|_| Error::InvalidUsage(format!("device {dev}")))
}

/// Makes device `ordinal`'s primary context current on this thread, for a
/// memory call. The context is kept for the process's life: memory this
/// library allocated must not go when a caller's last handle on the
/// context does.
fn bind(ordinal: usize) -> Result<(), Error> {
    static KEPT: Mutex<Vec<Arc<CudaContext>>> = Mutex::new(Vec::new());
    let mut kept = KEPT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let ctx = match kept.iter().find(|c| c.ordinal() == ordinal) {
        Some(c) => c.clone(),
        None => {
            let c = CudaContext::new(ordinal)
                .map_err(|e| Error::InvalidUsage(format!("device {ordinal}: {e}")))?;
            kept.push(c.clone());
            c
        }
    };
    ctx.bind_to_thread()
        .map_err(|e| Error::InvalidUsage(format!("device {ordinal}: {e}")))
}

/// `size` bytes of device memory on the current device.
///
/// # Errors
/// As [`current`]; the driver's refusal.
pub(crate) fn alloc(size: usize) -> Result<*mut c_void, Error> {
    bind(current()?)?;
    let mut ptr: sys::CUdeviceptr = 0;
    // SAFETY: a valid out-pointer; a context is current (bind).
    check("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut ptr, size) })?;
    Ok(ptr as *mut c_void)
}

/// Frees what [`alloc`] returned.
///
/// # Errors
/// The driver's refusal (a pointer it did not allocate).
pub(crate) fn free(ptr: *mut c_void) -> Result<(), Error> {
    bind(current()?)?;
    // SAFETY: the driver checks the address; a context is current.
    check("cuMemFree", unsafe {
        sys::cuMemFree_v2(ptr as sys::CUdeviceptr)
    })
}
