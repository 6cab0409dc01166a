//! Compiles EVERY kernel with NVRTC for sm_80 and sm_90 — no GPU needed, only
//! libnvrtc. It is found through `STREAMCOMM_NVRTC_LIB`, else in the PyPI wheel
//! `nvidia-cuda-nvrtc-cu12` (asked of `python3`), else by the usual names. In CI
//! (`CI` set and not `false`/`0`) and under scripts/gpu-check.sh
//! (`STREAMCOMM_REQUIRE_GPU=1`) a missing NVRTC fails the test; elsewhere it is
//! skipped with the reason printed.

use std::path::PathBuf;
use std::process::Command;

use streamcomm_gpu::nvrtc::compile::compile_options;
use streamcomm_gpu::nvrtc::{Nvrtc, compile_cubin, nvrtc_lib_candidates};
use streamcomm_gpu::{Arch, Error, KernelCache, cubin_for};
use streamcomm_kernels::cuda::{self, DEVICE_HEADER, DEVICE_HEADER_NAME};

/// True in CI and under scripts/gpu-check.sh: there a missing NVRTC fails.
fn required() -> bool {
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    ci || std::env::var("STREAMCOMM_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// A directory of the `nvidia.<package>` wheel, asked of python3.
fn wheel_dir(package: &str, sub: &str) -> Option<PathBuf> {
    let code = format!(
        "import importlib.util as u; s = u.find_spec('nvidia.{package}'); \
         print(list(s.submodule_search_locations)[0] if s else '')"
    );
    let out = Command::new("python3").args(["-c", &code]).output().ok()?;
    let dir = String::from_utf8(out.stdout).ok()?.trim().to_string();
    let path = PathBuf::from(dir).join(sub);
    (out.status.success() && path.is_dir()).then_some(path)
}

fn nvrtc() -> Option<Nvrtc> {
    let configured = std::env::var_os("STREAMCOMM_NVRTC_LIB")
        .map(PathBuf::from)
        .or_else(|| wheel_dir("cuda_nvrtc", "lib").map(|d| d.join("libnvrtc.so.12")));
    let candidates = nvrtc_lib_candidates(configured.as_deref());
    match Nvrtc::load(&candidates) {
        Ok(n) => Some(n),
        Err(e) if required() => {
            panic!("CI and gpu-check need NVRTC for this test (see .ci/run): {e}")
        }
        Err(e) => {
            streamcomm_testkit::skip(
                &streamcomm_testkit::current_test(),
                &format!("{e}; `pip install nvidia-cuda-nvrtc-cu12` or set STREAMCOMM_NVRTC_LIB"),
            );
            None
        }
    }
}

fn include_dir() -> Option<PathBuf> {
    std::env::var_os("STREAMCOMM_CUDA_INCLUDE")
        .map(PathBuf::from)
        .or_else(|| wheel_dir("cuda_runtime", "include"))
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Every kernel source compiled for `arch`, checked to be a clean ELF image.
fn compile_all(nvrtc: &Nvrtc, arch: Arch, include: Option<&std::path::Path>) -> Vec<Vec<u8>> {
    let mut images = Vec::new();
    for (file, source) in cuda::SOURCES {
        let options = compile_options(arch, include);
        let out = compile_cubin(
            nvrtc,
            file,
            source,
            &[(DEVICE_HEADER_NAME, DEVICE_HEADER)],
            &options,
        )
        .unwrap_or_else(|e| panic!("{file} for {arch}: {e}"));
        assert!(
            out.cubin.starts_with(b"\x7fELF"),
            "{file} {arch}: not an ELF image"
        );
        assert!(
            out.log.is_empty(),
            "{file} for {arch} has warnings:\n{}",
            out.log
        );
        eprintln!("{file} {arch}: {} bytes", out.cubin.len());
        images.push(out.cubin);
    }
    images
}

#[test]
fn every_kernel_compiles_for_sm80_and_sm90() {
    let Some(nvrtc) = nvrtc() else { return };
    let (major, minor) = nvrtc.version().unwrap();
    eprintln!("NVRTC {major}.{minor} from {}", nvrtc.loaded_from);
    assert!(major >= 12, "NVRTC {major}.{minor} is older than CUDA 12");
    let include = include_dir();
    let mut names: Vec<String> = cuda::all_reduce_kernel_names();
    names.push(cuda::SPIN_WAIT_KERNEL.into());
    names.push(cuda::SPIN_WRITE_KERNEL.into());
    // The two architectures compile in parallel (NVRTC is thread-safe for
    // separate programs), which halves the test's time on two cores.
    let per_arch: Vec<(Arch, Vec<Vec<u8>>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = [Arch::SM80, Arch::SM90]
            .map(|arch| {
                let (nvrtc, include) = (&nvrtc, include.as_deref());
                scope.spawn(move || (arch, compile_all(nvrtc, arch, include)))
            })
            .into_iter()
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (arch, images) in per_arch {
        for name in &names {
            let symbol = format!("{name}\0");
            assert!(
                images.iter().any(|img| contains(img, symbol.as_bytes())),
                "kernel {name} missing from the {arch} images"
            );
        }
    }
}

#[test]
fn the_cache_returns_what_was_compiled() {
    let Some(nvrtc) = nvrtc() else { return };
    let dir = std::env::temp_dir().join(format!("sc-nvrtc-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache = KernelCache::new(Some(dir.clone()));
    let (first, cached) = cubin_for(&nvrtc, "signal.cu", Arch::SM90, &cache, None).unwrap();
    assert!(!cached, "an empty cache cannot hit");
    let (second, cached) = cubin_for(&nvrtc, "signal.cu", Arch::SM90, &cache, None).unwrap();
    assert!(cached, "the second lookup must come from {}", dir.display());
    assert_eq!(first, second);
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(
        files[0].to_string_lossy().starts_with("signal-sm_90-"),
        "{files:?}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_compile_error_carries_the_log() {
    let Some(nvrtc) = nvrtc() else { return };
    let src = "extern \"C\" __global__ void broken() { undefined_thing(); }\n";
    let err = compile_cubin(
        &nvrtc,
        "broken.cu",
        src,
        &[],
        &compile_options(Arch::SM80, None),
    )
    .unwrap_err();
    match &err {
        Error::Compile { source, log, .. } => {
            assert_eq!(source, "broken.cu");
            assert!(log.contains("undefined_thing"), "{log}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
}
