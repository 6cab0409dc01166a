//! Raw NVRTC: which library names are tried, and the few functions bound.

use std::ffi::{c_char, c_int, c_void};
use std::path::Path;
use std::sync::Mutex;

use crate::config::GpuConfig;
use crate::error::{Error, Result};
use crate::guard::guarded;

/// `nvrtcProgram` (opaque).
pub type NvrtcProgram = *mut c_void;
/// `nvrtcResult` (0 is success, 6 is a compilation error).
pub type NvrtcResult = c_int;

/// NVRTC names tried after `STREAMCOMM_NVRTC_LIB`: CUDA 13 first, then 12, then
/// the unversioned development link; one newer than the driver is passed over
/// ([`choice`](super::choice)).
pub const NVRTC_LIB_NAMES: [&str; 3] = ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"];

/// The candidates in the order they are tried: the configured path, then
/// [`NVRTC_LIB_NAMES`].
pub fn nvrtc_lib_candidates(configured: Option<&Path>) -> Vec<String> {
    configured
        .map(|p| p.display().to_string())
        .into_iter()
        .chain(NVRTC_LIB_NAMES.iter().map(|s| s.to_string()))
        .collect()
}

/// The loaded NVRTC library and the functions this crate uses.
pub struct Nvrtc {
    /// Which candidate was loaded.
    pub loaded_from: String,
    pub(crate) version: unsafe extern "C" fn(*mut c_int, *mut c_int) -> NvrtcResult,
    pub(crate) create_program: unsafe extern "C" fn(
        *mut NvrtcProgram,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> NvrtcResult,
    pub(crate) compile_program:
        unsafe extern "C" fn(NvrtcProgram, c_int, *const *const c_char) -> NvrtcResult,
    pub(crate) get_program_log_size: unsafe extern "C" fn(NvrtcProgram, *mut usize) -> NvrtcResult,
    pub(crate) get_program_log: unsafe extern "C" fn(NvrtcProgram, *mut c_char) -> NvrtcResult,
    pub(crate) get_cubin_size: unsafe extern "C" fn(NvrtcProgram, *mut usize) -> NvrtcResult,
    pub(crate) get_cubin: unsafe extern "C" fn(NvrtcProgram, *mut c_char) -> NvrtcResult,
    pub(crate) destroy_program: unsafe extern "C" fn(*mut NvrtcProgram) -> NvrtcResult,
    // Keeps the function pointers above valid; never unloaded.
    _lib: libloading::Library,
}

/// Every library [`Nvrtc::open`] was asked for, and what came of it.
static OPENED: Mutex<Vec<(String, Result<&'static Nvrtc>)>> = Mutex::new(Vec::new());

impl Nvrtc {
    /// Loads the first of [`nvrtc_lib_candidates`] (from the environment's
    /// `STREAMCOMM_NVRTC_LIB`) that opens, whatever its version; returns
    /// [`Error::Unavailable`] listing what was tried when none loads. A
    /// caller with a driver chooses with [`Nvrtc::choose`] instead.
    pub fn get() -> Result<&'static Nvrtc> {
        let config = GpuConfig::from_env();
        Nvrtc::choose(&nvrtc_lib_candidates(config.nvrtc_lib.as_deref()), i32::MAX)
    }

    /// The NVRTC library `name` (a path or a file name for `dlopen`),
    /// loaded once per process and never unloaded, so that several versions
    /// can be tried in turn.
    pub fn open(name: &str) -> Result<&'static Nvrtc> {
        let mut opened = OPENED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, r)) = opened.iter().find(|(n, _)| n == name) {
            return r.clone();
        }
        let r = guarded("loading NVRTC", || {
            Nvrtc::load_one(name)
                .map(|n| &*Box::leak(Box::new(n)))
                .map_err(Error::Unavailable)
        });
        opened.push((name.to_string(), r.clone()));
        r
    }

    /// Loads the first of `candidates` that opens and has every function.
    pub fn load(candidates: &[String]) -> Result<Nvrtc> {
        let mut tried = Vec::new();
        for name in candidates {
            match Nvrtc::load_one(name) {
                Ok(nvrtc) => return Ok(nvrtc),
                Err(e) => tried.push(e),
            }
        }
        Err(Error::Unavailable(format!(
            "no usable NVRTC library; tried {}",
            tried.join("; ")
        )))
    }

    /// Loads `name`, or says why not (naming it).
    fn load_one(name: &str) -> std::result::Result<Nvrtc, String> {
        // SAFETY: NVRTC is a plain shared library meant to be dlopen'ed; its
        // initialisers have no preconditions.
        match unsafe { libloading::Library::new(name) } {
            Ok(lib) => Nvrtc::bind(lib, name).map_err(|e| format!("{name}: {e}")),
            // dlerror's message names the file already.
            Err(e) if e.to_string().contains(name) => Err(e.to_string()),
            Err(e) => Err(format!("{name}: {e}")),
        }
    }

    fn bind(lib: libloading::Library, name: &str) -> std::result::Result<Nvrtc, libloading::Error> {
        // SAFETY: each symbol is looked up with the exact signature NVRTC's
        // header (nvrtc.h, stable since CUDA 11) declares for it.
        unsafe {
            Ok(Nvrtc {
                loaded_from: name.to_string(),
                version: *lib.get(b"nvrtcVersion\0")?,
                create_program: *lib.get(b"nvrtcCreateProgram\0")?,
                compile_program: *lib.get(b"nvrtcCompileProgram\0")?,
                get_program_log_size: *lib.get(b"nvrtcGetProgramLogSize\0")?,
                get_program_log: *lib.get(b"nvrtcGetProgramLog\0")?,
                get_cubin_size: *lib.get(b"nvrtcGetCUBINSize\0")?,
                get_cubin: *lib.get(b"nvrtcGetCUBIN\0")?,
                destroy_program: *lib.get(b"nvrtcDestroyProgram\0")?,
                _lib: lib,
            })
        }
    }

    /// NVRTC's `(major, minor)` version.
    pub fn version(&self) -> Result<(i32, i32)> {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: both are valid out-pointers.
        let r = unsafe { (self.version)(&mut major, &mut minor) };
        check("nvrtcVersion", r)?;
        Ok((major, minor))
    }
}

/// `Ok` for `NVRTC_SUCCESS`.
pub(crate) fn check(call: &'static str, r: NvrtcResult) -> Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(Error::Nvrtc { call, code: r })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_13_is_tried_before_12_and_the_configured_path_first() {
        let c = nvrtc_lib_candidates(None);
        assert_eq!(c, ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"]);
        let c = nvrtc_lib_candidates(Some(Path::new("/opt/x/libnvrtc.so.12")));
        assert_eq!(c[0], "/opt/x/libnvrtc.so.12");
        assert_eq!(&c[1..], &NVRTC_LIB_NAMES);
    }

    #[test]
    fn a_missing_library_is_unavailable_and_names_what_was_tried() {
        let err = match Nvrtc::load(&["/nonexistent/libnvrtc.so.99".to_string()]) {
            Err(e) => e,
            Ok(_) => panic!("loaded a library that does not exist"),
        };
        assert!(err.is_unavailable(), "{err}");
        assert!(
            err.to_string().contains("/nonexistent/libnvrtc.so.99"),
            "{err}"
        );
    }
}
