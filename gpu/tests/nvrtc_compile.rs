//! NVRTC and the kernel cache, with no GPU needed: every kernel compiled for
//! sm_80 and sm_90 (only libnvrtc), the cache, the choice of NVRTC against
//! the driver's version. NVRTC is found as `streamcomm_testkit::nvrtc_library`
//! says (`STREAMCOMM_NVRTC_LIB`, the wheels `scripts/nvrtc-wheels.sh`
//! installs), else by the usual names. In CI (`CI` set and not `false`/`0`) and under
//! scripts/gpu-check.sh (`STREAMCOMM_REQUIRE_GPU=1`) a missing NVRTC fails
//! the test; elsewhere it is skipped with the reason printed.
//!
//! Three tests run `Kernels::load` in a child process on a driver: the GPU's
//! where this process finds one (the GPU bundle's probe step), else the CPU
//! stand-in when the build made it (`cargo test --workspace` does), else they
//! skip. They check that a filled cache loads with no NVRTC at all, that an
//! NVRTC 13 (a fake built with `cc`) is passed over on a CUDA 12.8 driver,
//! and that the kernels in `STREAMCOMM_KERNEL_CACHE` (the GPU bundle copies
//! the sm_90 kernels it ships there) load with NVRTC off.

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

fn nvrtc() -> Option<Nvrtc> {
    let configured = streamcomm_testkit::nvrtc_library();
    let candidates = nvrtc_lib_candidates(configured.as_deref());
    match Nvrtc::load(&candidates) {
        Ok(n) => Some(n),
        Err(e) if required() => {
            panic!("CI and gpu-check need NVRTC for this test (see .ci/run): {e}")
        }
        Err(e) => {
            streamcomm_testkit::skip(
                &streamcomm_testkit::current_test(),
                &format!("{e}; {}", streamcomm_testkit::NVRTC_INSTALL),
            );
            None
        }
    }
}

fn include_dir() -> Option<PathBuf> {
    streamcomm_testkit::cuda_include_dir()
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

// ---- Kernels::load in a child process, on a driver ----
//
// NVRTC is loaded once per process and the driver is found at process start,
// so these tests run their body in a child: the same test binary, with the
// environment the case needs. The driver is the one this process finds (a
// GPU machine), else the CPU stand-in (gpu/standin) when the build made it.

/// Set in a child to the name of the test whose body it runs.
const CHILD: &str = "SC_NVRTC_CHILD";

/// The library directory a child needs for a driver: `Some(None)` when this
/// process finds one itself, `Some(Some(dir))` for the stand-in linked as
/// libcuda into `dir`, `None` (after saying so) when there is neither.
fn driver_dir(test: &str) -> Option<Option<PathBuf>> {
    if streamcomm_gpu::Device::count().is_ok_and(|n| n > 0) {
        return Some(None);
    }
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let lib = [deps, deps.parent().unwrap_or(deps)]
        .into_iter()
        .map(|d| d.join("libstreamcomm_cuda_standin.so"))
        .filter_map(|l| Some((l.metadata().ok()?.modified().ok()?, l)))
        .max()
        .map(|(_, l)| l);
    let Some(lib) = lib else {
        let why = "no CUDA driver, and the CPU stand-in was not built \
                   (`cargo build -p streamcomm-cuda-standin`)";
        if std::env::var("STREAMCOMM_REQUIRE_GPU").is_ok_and(|v| v == "1") {
            panic!("{test}: STREAMCOMM_REQUIRE_GPU=1 but {why}");
        }
        streamcomm_testkit::skip(test, why);
        return None;
    };
    let dir = std::env::temp_dir().join(format!("sc-nvrtc-standin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["libcuda.so", "libcuda.so.1"] {
        let link = dir.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&lib, &link).unwrap();
    }
    Some(Some(dir))
}

/// Runs `test`'s body in a child with `env` (and `ld_path` first on its
/// library path); panics with its output unless it passed.
fn run_child(test: &str, ld: &Option<PathBuf>, ld_extra: &[PathBuf], env: &[(&str, String)]) {
    let mut path: Vec<PathBuf> = ld.iter().cloned().collect();
    path.extend(ld_extra.iter().cloned());
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
        path.extend(std::env::split_paths(&old));
    }
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, test)
        .env("LD_LIBRARY_PATH", std::env::join_paths(path).unwrap());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("spawn the child");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    eprintln!("--- child {test}\n{stdout}{stderr}");
    assert!(
        out.status.success() && stdout.contains(&format!("CHILD-OK {test}")),
        "child {test} failed"
    );
}

fn is_child(test: &str) -> bool {
    std::env::var(CHILD).is_ok_and(|v| v == test)
}

/// In a child: device 0 and every kernel through `Kernels::load` with the
/// child's environment; each line of where the kernels came from must
/// contain what the parent put in `SC_NVRTC_ORIGIN`.
fn load_kernels_in_child(test: &str) {
    let origin = std::env::var("SC_NVRTC_ORIGIN").unwrap_or_default();
    let device = streamcomm_gpu::Device::open(0).expect("device 0");
    eprintln!("driver: {}", device.name());
    match streamcomm_gpu::Kernels::load(&device, &streamcomm_gpu::GpuConfig::from_env()) {
        Ok(k) => {
            for line in k.origin() {
                eprintln!("kernels: {line}");
                assert!(line.contains(&origin), "{line:?} lacks {origin:?}");
            }
            println!("CHILD-OK {test}");
        }
        Err(e) => panic!("Kernels::load: {e}"),
    }
}

fn scratch_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sc-nvrtc-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A cache that holds every kernel needs no NVRTC: the child's NVRTC path
/// names a missing file and no other NVRTC is on its library path.
#[test]
fn cached_kernels_load_without_nvrtc() {
    let test = "cached_kernels_load_without_nvrtc";
    if is_child(test) {
        for name in ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"] {
            if Nvrtc::load(&[name.to_string()]).is_ok() {
                eprintln!("note: {name} is on the default library path here");
            }
        }
        return load_kernels_in_child(test);
    }
    let Some(nvrtc) = nvrtc() else { return };
    let Some(ld) = driver_dir(test) else { return };
    let dir = scratch_dir("cached");
    let cache = KernelCache::new(Some(dir.clone()));
    // The stand-in is an sm_90 device; a GPU machine's own arch otherwise.
    let arch = match &ld {
        None => streamcomm_gpu::Device::open(0).unwrap().arch(),
        Some(_) => Arch::SM90,
    };
    for (file, _) in cuda::SOURCES {
        cubin_for(&nvrtc, file, arch, &cache, None).unwrap();
    }
    let mut env = [
        ("STREAMCOMM_KERNEL_CACHE", dir.display().to_string()),
        (
            "STREAMCOMM_NVRTC_LIB",
            "/nonexistent/streamcomm/libnvrtc.so.12".to_string(),
        ),
        ("STREAMCOMM_CUDA_INCLUDE", String::new()),
        ("SC_NVRTC_ORIGIN", ": cached ".to_string()),
    ];
    run_child(test, &ld, &[], &env);
    // And with NVRTC turned off, where one might be on the library path.
    env[1].1 = "off".to_string();
    run_child(test, &ld, &[], &env);
    std::fs::remove_dir_all(dir).unwrap();
}

/// A fake `libnvrtc.so.13` in `dir`, built with `cc`: it reports NVRTC 13.0
/// and fails every compilation. `None` (after saying so) without `cc`.
fn fake_nvrtc_13(test: &str, dir: &std::path::Path) -> Option<PathBuf> {
    let c = dir.join("fake_nvrtc.c");
    std::fs::write(
        &c,
        "int nvrtcVersion(int *major, int *minor) { *major = 13; *minor = 0; return 0; }\n\
         int nvrtcCreateProgram(void **p, const char *s, const char *n, int k,\n\
             const char *const *h, const char *const *hn) { return 7; }\n\
         int nvrtcCompileProgram(void *p, int n, const char *const *o) { return 7; }\n\
         int nvrtcGetProgramLogSize(void *p, unsigned long *n) { return 7; }\n\
         int nvrtcGetProgramLog(void *p, char *l) { return 7; }\n\
         int nvrtcGetCUBINSize(void *p, unsigned long *n) { return 7; }\n\
         int nvrtcGetCUBIN(void *p, char *c) { return 7; }\n\
         int nvrtcDestroyProgram(void **p) { return 7; }\n",
    )
    .unwrap();
    let lib = dir.join("libnvrtc.so.13");
    match Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&c)
        .status()
    {
        Ok(s) if s.success() => Some(lib),
        _ => {
            streamcomm_testkit::skip(test, "no `cc` to build a fake NVRTC 13");
            None
        }
    }
}

/// NVRTC 13 first on a CUDA 12.8 driver: the driver could not load what it
/// makes, so it is passed over for the NVRTC 12 after it (and where the
/// driver is CUDA 13, its failure to compile moves on to NVRTC 12 as well).
#[test]
fn nvrtc_newer_than_the_driver_is_passed_over() {
    let test = "nvrtc_newer_than_the_driver_is_passed_over";
    if is_child(test) {
        return load_kernels_in_child(test);
    }
    let Some(nvrtc) = nvrtc() else { return };
    let (major, _) = nvrtc.version().unwrap();
    if major >= 13 {
        let why = "this NVRTC is 13 or newer itself; the case needs an older one";
        streamcomm_testkit::skip(test, why);
        return;
    }
    let dir = scratch_dir("newer");
    let Some(fake) = fake_nvrtc_13(test, &dir) else {
        return;
    };
    // The choice itself, without a driver: the fake NVRTC 13 first, then
    // the real one, for a CUDA 12.8 and a CUDA 13.0 driver.
    let both = [fake.display().to_string(), nvrtc.loaded_from.clone()];
    let chosen = Nvrtc::choose(&both, 12080).unwrap();
    assert_eq!(chosen.loaded_from, nvrtc.loaded_from);
    let chosen = Nvrtc::choose(&both, 13000).unwrap();
    assert_eq!(chosen.loaded_from, both[0]);
    // Passed over by its name, or (under a name that promises nothing) by
    // the version it reports once loaded.
    let unnamed = dir.join("libfake-nvrtc.so");
    std::fs::copy(&fake, &unnamed).unwrap();
    for (lib, why) in [
        (
            &fake,
            "CUDA 13 by its name, newer than the driver (CUDA 12.8)",
        ),
        (&unnamed, "NVRTC 13.0 is newer than the driver (CUDA 12.8)"),
    ] {
        let err = match Nvrtc::choose(&[lib.display().to_string()], 12080) {
            Err(e) => e.to_string(),
            Ok(n) => panic!("chose {}", n.loaded_from),
        };
        assert!(err.contains(why), "{err}");
        assert!(err.contains("STREAMCOMM_NVRTC_LIB"), "{err}");
    }
    let Some(ld) = driver_dir(test) else { return };
    // The NVRTC this process loaded, found by its plain name in its directory.
    let real = PathBuf::from(&nvrtc.loaded_from);
    let Some(real_dir) = real.parent().filter(|d| !d.as_os_str().is_empty()) else {
        streamcomm_testkit::skip(test, "NVRTC was found by name, not by a path");
        return;
    };
    let env = [
        (
            "STREAMCOMM_KERNEL_CACHE",
            dir.join("cache").display().to_string(),
        ),
        ("STREAMCOMM_NVRTC_LIB", fake.display().to_string()),
        ("STREAMCOMM_STANDIN_DRIVER_VERSION", "12080".to_string()),
        ("STREAMCOMM_CUDA_INCLUDE", String::new()),
        ("SC_NVRTC_ORIGIN", format!("compiled by NVRTC {major}.")),
    ];
    run_child(test, &ld, &[real_dir.to_path_buf()], &env);
    std::fs::remove_dir_all(dir).unwrap();
}

/// The kernels in `STREAMCOMM_KERNEL_CACHE` (in the GPU bundle, the sm_90
/// kernels it ships) load on this driver with NVRTC off. Skipped unless the
/// variable names a directory holding every kernel for the device's arch.
#[test]
fn shipped_kernels_load_without_nvrtc() {
    let test = "shipped_kernels_load_without_nvrtc";
    if is_child(test) {
        return load_kernels_in_child(test);
    }
    let Some(dir) = std::env::var_os("STREAMCOMM_KERNEL_CACHE")
        .map(PathBuf::from)
        .filter(|d| d.is_dir())
    else {
        streamcomm_testkit::skip(test, "STREAMCOMM_KERNEL_CACHE names no directory");
        return;
    };
    let Some(ld) = driver_dir(test) else { return };
    let arch = match &ld {
        None => streamcomm_gpu::Device::open(0).unwrap().arch(),
        Some(_) => Arch::SM90,
    };
    let cache = KernelCache::new(Some(dir.clone()));
    let missing: Vec<&str> = cuda::SOURCES
        .iter()
        .filter(|(file, source)| {
            let key = streamcomm_gpu::cache_key(
                file,
                arch,
                &[source, DEVICE_HEADER],
                &compile_options(arch, None),
            );
            cache.images(&key).is_empty()
        })
        .map(|(file, _)| *file)
        .collect();
    if !missing.is_empty() {
        let why = format!("{} holds no {arch} image of {missing:?}", dir.display());
        streamcomm_testkit::skip(test, &why);
        return;
    }
    let env = [
        ("STREAMCOMM_NVRTC_LIB", "off".to_string()),
        ("STREAMCOMM_CUDA_INCLUDE", String::new()),
        ("SC_NVRTC_ORIGIN", ": cached ".to_string()),
    ];
    run_child(test, &ld, &[], &env);
}

/// A cached image the driver refuses (here: damaged, its ELF machine field
/// overwritten) is compiled anew with the same NVRTC and replaced.
#[test]
fn a_refused_cached_image_is_compiled_anew() {
    let test = "a_refused_cached_image_is_compiled_anew";
    if is_child(test) {
        return load_kernels_in_child(test);
    }
    let Some(nvrtc) = nvrtc() else { return };
    let Some(ld) = driver_dir(test) else { return };
    let dir = scratch_dir("refused");
    let cache = KernelCache::new(Some(dir.clone()));
    let arch = match &ld {
        None => streamcomm_gpu::Device::open(0).unwrap().arch(),
        Some(_) => Arch::SM90,
    };
    let (good, _) = cubin_for(&nvrtc, "signal.cu", arch, &cache, None).unwrap();
    let file = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut bad = good.clone();
    bad[18..20].copy_from_slice(&0xffffu16.to_le_bytes()); // e_machine
    std::fs::write(&file, &bad).unwrap();
    let env = [
        ("STREAMCOMM_KERNEL_CACHE", dir.display().to_string()),
        ("STREAMCOMM_NVRTC_LIB", nvrtc.loaded_from.clone()),
        ("STREAMCOMM_CUDA_INCLUDE", String::new()),
        ("SC_NVRTC_ORIGIN", "compiled by NVRTC".to_string()),
    ];
    run_child(test, &ld, &[], &env);
    assert_eq!(
        std::fs::read(&file).unwrap(),
        good,
        "the cached file was not replaced"
    );
    std::fs::remove_dir_all(dir).unwrap();
}
