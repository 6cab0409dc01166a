//! Where the tests find NVRTC and the CUDA headers, which compile the CUDA
//! kernels with no GPU: `STREAMCOMM_NVRTC_LIB` / `STREAMCOMM_CUDA_INCLUDE`
//! where set, else NVIDIA's wheels that `scripts/nvrtc-wheels.sh` installs
//! into the build's target folder (`target/nvidia-wheels`), else the same
//! wheels installed for `python3`.

use std::path::PathBuf;
use std::process::Command;

/// How to get NVRTC, for a skip's reason.
pub const NVRTC_INSTALL: &str = "`scripts/nvrtc-wheels.sh` installs it into \
     target/nvidia-wheels, where the tests look (or set STREAMCOMM_NVRTC_LIB)";

/// `nvidia/<package>/<sub>` of the wheels in the target folder that holds
/// this test binary, or of those installed for `python3`.
fn wheel_dir(package: &str, sub: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let local = exe
        .ancestors()
        .map(|d| d.join("nvidia-wheels/nvidia").join(package).join(sub))
        .find(|p| p.is_dir());
    local.or_else(|| {
        let code = format!(
            "import importlib.util as u; s = u.find_spec('nvidia.{package}'); \
             print(list(s.submodule_search_locations)[0] if s else '')"
        );
        let out = Command::new("python3").args(["-c", &code]).output().ok()?;
        let dir = String::from_utf8(out.stdout).ok()?.trim().to_string();
        let path = PathBuf::from(dir).join(sub);
        (out.status.success() && path.is_dir()).then_some(path)
    })
}

/// The NVRTC library to load, where one is found (see the module docs).
///
/// ```
/// if streamcomm_testkit::nvrtc_library().is_none() {
///     println!("no NVRTC: {}", streamcomm_testkit::NVRTC_INSTALL);
/// }
/// ```
pub fn nvrtc_library() -> Option<PathBuf> {
    std::env::var_os("STREAMCOMM_NVRTC_LIB")
        .map(PathBuf::from)
        .or_else(|| wheel_dir("cuda_nvrtc", "lib").map(|d| d.join("libnvrtc.so.12")))
}

/// The folder with `cuda.h` and the CUDA runtime's headers, where one is
/// found (see the module docs).
///
/// ```
/// let include = streamcomm_testkit::cuda_include_dir();
/// assert!(include.is_none_or(|d| d.is_dir()) || std::env::var_os("STREAMCOMM_CUDA_INCLUDE").is_some());
/// ```
pub fn cuda_include_dir() -> Option<PathBuf> {
    std::env::var_os("STREAMCOMM_CUDA_INCLUDE")
        .map(PathBuf::from)
        .or_else(|| wheel_dir("cuda_runtime", "include"))
}
