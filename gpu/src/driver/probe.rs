//! Probing the CUDA driver before the first call into cudarc.
//!
//! cudarc (0.17, `dynamic-loading`) resolves every symbol of its bindings when it
//! first loads libcuda and panics if the library or one symbol is missing. So the
//! probe (1) tries the driver's names itself, (2) asks cudarc's
//! `is_culib_present()` inside `catch_unwind`, (3) calls `cuInit` and checks the
//! driver version. The outcome is computed once and cached.

use std::sync::OnceLock;

use crate::error::{Error, Result};
use crate::guard::guarded;

use super::result::check;
use super::sys;

/// Library names of the CUDA driver, in the order they are tried.
pub const DRIVER_LIB_NAMES: [&str; 2] = ["libcuda.so.1", "libcuda.so"];

/// Oldest driver API version the bindings need (`cuda-12000`: CUDA 12.0).
pub const MIN_DRIVER_VERSION: i32 = 12000;

/// What the probe found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriverInfo {
    /// `cuDriverGetVersion`, e.g. 13000 for CUDA 13.0.
    pub version: i32,
    /// Number of CUDA devices.
    pub device_count: usize,
}

static DRIVER: OnceLock<Result<DriverInfo>> = OnceLock::new();

/// Checks once that the CUDA driver can be used; every public entry point of this
/// crate calls it first. Returns [`Error::Unavailable`] (never panics) where there
/// is no driver, an older one than CUDA 12.0, or no device.
pub fn driver() -> Result<DriverInfo> {
    DRIVER
        .get_or_init(|| guarded("probing the CUDA driver", probe))
        .clone()
}

/// The first of `names` that `dlopen` accepts.
pub(crate) fn first_loadable<'a>(names: &[&'a str]) -> Option<&'a str> {
    names.iter().copied().find(|name| {
        // SAFETY: loading a shared library runs its initialisers; the CUDA
        // driver and NVRTC are designed to be dlopen'ed this way by any process.
        unsafe { libloading::Library::new(name) }.is_ok()
    })
}

fn probe() -> Result<DriverInfo> {
    let Some(name) = first_loadable(&DRIVER_LIB_NAMES) else {
        return Err(Error::Unavailable(format!(
            "no CUDA driver library (tried {})",
            DRIVER_LIB_NAMES.join(", ")
        )));
    };
    // SAFETY: only loads the library and resolves symbols (may panic, which
    // `guarded` turns into Unavailable).
    if !unsafe { sys::is_culib_present() } {
        return Err(Error::Unavailable(format!(
            "{name} loads but cudarc could not bind it"
        )));
    }
    // SAFETY: cuInit has no preconditions; the library is loaded (checked above).
    let init = unsafe { sys::cuInit(0) };
    check("cuInit", init).map_err(|e| Error::Unavailable(e.to_string()))?;
    let mut version = 0;
    // SAFETY: `version` is a valid out-pointer.
    check("cuDriverGetVersion", unsafe {
        sys::cuDriverGetVersion(&mut version)
    })?;
    if version < MIN_DRIVER_VERSION {
        return Err(Error::Unavailable(format!(
            "CUDA driver API {version} is older than {MIN_DRIVER_VERSION} (CUDA 12.0)"
        )));
    }
    let mut count = 0;
    // SAFETY: `count` is a valid out-pointer; cuInit succeeded.
    check("cuDeviceGetCount", unsafe {
        sys::cuDeviceGetCount(&mut count)
    })?;
    if count <= 0 {
        return Err(Error::Unavailable("the CUDA driver sees no device".into()));
    }
    Ok(DriverInfo {
        version,
        device_count: count as usize,
    })
}
