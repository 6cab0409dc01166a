//! The one place this crate reads the environment.
//!
//! | variable | meaning |
//! | --- | --- |
//! | `STREAMCOMM_NVRTC_LIB` | path of `libnvrtc.so` to try before the usual names; `off`: never load NVRTC (kernels only from the cache) |
//! | `STREAMCOMM_CUDA_INCLUDE` | extra `-I` directory for NVRTC (the kernels need none) |
//! | `STREAMCOMM_KERNEL_CACHE` | directory of compiled kernels; `off` disables the cache |
//! | `STREAMCOMM_REQUIRE_GPU` | `1`: a caller that would fall back from the GPU fails instead |

use std::path::PathBuf;

/// Settings of the CUDA layer, read once from the environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuConfig {
    /// `STREAMCOMM_NVRTC_LIB`: an NVRTC library tried before the default names.
    pub nvrtc_lib: Option<PathBuf>,
    /// `STREAMCOMM_NVRTC_LIB=off`: no NVRTC is loaded at all; kernels come
    /// only from the cache (e.g. one filled by the `kernel_cache` example).
    pub nvrtc_off: bool,
    /// `STREAMCOMM_CUDA_INCLUDE`: an extra include directory passed to NVRTC.
    pub cuda_include: Option<PathBuf>,
    /// Kernel cache directory: `STREAMCOMM_KERNEL_CACHE`, else
    /// `$XDG_CACHE_HOME/streamcomm/kernels`, else `$HOME/.cache/streamcomm/kernels`;
    /// `None` when the variable is `off` or no home is known.
    pub kernel_cache: Option<PathBuf>,
    /// `STREAMCOMM_REQUIRE_GPU=1`: what would fall back to the host (no
    /// driver, kernels that do not load) must be an error instead. This crate
    /// only reports it; callers such as the CUDA backend act on it.
    pub require_gpu: bool,
}

impl GpuConfig {
    /// Reads the variables listed in the module docs.
    pub fn from_env() -> GpuConfig {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let kernel_cache = match var("STREAMCOMM_KERNEL_CACHE") {
            Some(v) if v == "off" => None,
            Some(v) => Some(PathBuf::from(v)),
            None => var("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .map(|base| base.join("streamcomm").join("kernels")),
        };
        let nvrtc = var("STREAMCOMM_NVRTC_LIB");
        let nvrtc_off = nvrtc.as_ref().is_some_and(|v| v == "off");
        GpuConfig {
            nvrtc_lib: nvrtc.filter(|_| !nvrtc_off).map(PathBuf::from),
            nvrtc_off,
            cuda_include: var("STREAMCOMM_CUDA_INCLUDE").map(PathBuf::from),
            kernel_cache,
            require_gpu: var("STREAMCOMM_REQUIRE_GPU").is_some_and(|v| v == "1"),
        }
    }
}
