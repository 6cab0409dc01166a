//! Probing the CUDA driver before the first call into cudarc.
//!
//! cudarc (0.19) either links libcuda (the program's `dynamic-linking`) or,
//! by default (`dynamic-loading`, which this crate's
//! `fallback-dynamic-loading` asks for unless the program chose another
//! mode), loads it at its first call and resolves each entry point at its
//! own first call, panicking where the library or the symbol is missing. So
//! the probe (1) tries the driver's names itself, in cudarc's order, so that
//! it finds the library cudarc will bind, (2) calls `cuInit` inside
//! `catch_unwind` (a library cudarc cannot bind panics there) and checks the
//! driver version.
//! The outcome is computed once and cached.
//!
//! cudarc tries `libcuda.so` before `libcuda.so.1`. A CUDA toolkit's
//! `stubs/` directory on the library path holds a `libcuda.so` (a link-time
//! stub whose every call returns `CUDA_ERROR_STUB_LIBRARY`) and no
//! `libcuda.so.1`, so cudarc binds the stub even where the driver is
//! installed: the probe names the library it found ([`driver_path`]) and
//! says so plainly when it is the stub.

use std::sync::OnceLock;

use crate::error::{Error, Result};
use crate::guard::guarded;

use super::result::check;
use super::sys;

/// Library names of the CUDA driver, in the order they are tried: cudarc's
/// order on Linux (its `get_lib_name_candidates("cuda")` for `cuda-12000`),
/// so that the probe loads the library cudarc will bind.
pub const DRIVER_LIB_NAMES: [&str; 13] = [
    "libcuda.so",
    "libcuda64.so",
    "libcuda64_12.so",
    "libcuda64_120.so",
    "libcuda64_120_0.so",
    "libcuda64_10.so",
    "libcuda64_11.so",
    "libcuda64_9.so",
    "libcuda.so.12",
    "libcuda.so.11",
    "libcuda.so.10",
    "libcuda.so.9",
    "libcuda.so.1",
];

/// `CUDA_ERROR_STUB_LIBRARY`: what every call of the toolkit's stub returns.
const STUB_LIBRARY: u32 = 34;

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
static DRIVER_PATH: OnceLock<String> = OnceLock::new();

/// The file of the driver library the probe loaded (the one cudarc binds),
/// once [`driver`] has found one; `None` before, or where the file could
/// not be told.
pub fn driver_path() -> Option<&'static str> {
    DRIVER_PATH.get().map(String::as_str)
}

/// The file mapped into this process that holds `addr` (from
/// `/proc/self/maps`).
fn mapped_file(addr: usize) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (lo, hi) = fields.next()?.split_once('-')?;
        let (lo, hi) = (
            usize::from_str_radix(lo, 16).ok()?,
            usize::from_str_radix(hi, 16).ok()?,
        );
        let path = fields.nth(4)?;
        (lo <= addr && addr < hi && path.starts_with('/')).then(|| path.to_string())
    })
}

/// Where `name`'s `cuInit` lives, once loaded.
fn library_file(name: &str) -> Option<String> {
    // SAFETY: loading the library again only bumps its reference count (the
    // probe loaded it already); the symbol is looked up, never called.
    unsafe {
        let lib = libloading::Library::new(name).ok()?;
        let init = lib
            .get::<unsafe extern "C" fn(u32) -> u32>(b"cuInit\0")
            .ok()?;
        mapped_file(*init as usize)
    }
}

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
            "no CUDA driver library (tried libcuda.so, libcuda.so.1 and {} other names, \
             in cudarc's order; without a GPU, `streamcomm-run --cuda-stand-in` runs a \
             program on streamcomm's CPU stand-in for the driver)",
            DRIVER_LIB_NAMES.len() - 2
        )));
    };
    let path = library_file(name).unwrap_or_else(|| name.to_string());
    let _ = DRIVER_PATH.set(path.clone());
    // SAFETY: cuInit has no preconditions; a library cudarc cannot bind
    // panics, which `guarded` turns into Unavailable.
    let init = unsafe { sys::cuInit(0) };
    if init as u32 == STUB_LIBRARY {
        return Err(Error::Unavailable(format!(
            "{name} is the CUDA toolkit's stub library ({path}), not the driver: \
             cudarc loads libcuda.so before libcuda.so.1, so take the toolkit's \
             stubs/ directory off the library path"
        )));
    }
    check("cuInit", init).map_err(|e| Error::Unavailable(format!("{e} (driver {path})")))?;
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

#[cfg(test)]
mod tests {
    /// The probe must load the library cudarc binds: the same names, in the
    /// same order (cudarc's list, duplicates dropped, Linux names only).
    #[test]
    fn the_names_are_cudarcs_in_its_order() {
        let mut theirs: Vec<String> = Vec::new();
        for name in cudarc::get_lib_name_candidates("cuda") {
            if !theirs.contains(&name) {
                theirs.push(name);
            }
        }
        assert_eq!(theirs, super::DRIVER_LIB_NAMES.to_vec());
    }
}
