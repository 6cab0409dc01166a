//! The second guard, exercised for real: a fake `libcuda.so.1` that has
//! `cuInit` but lacks the rest makes cudarc panic when the probe calls a
//! missing entry point; the probe must turn that into `Error::Unavailable`
//! in a process that keeps running.
//! Likewise a fake NVRTC without its functions is refused with a clear error.
//! Builds the fakes with the system `cc` (skipped, saying so, without one).

use std::path::{Path, PathBuf};
use std::process::Command;

use streamcomm_gpu::driver::probe;
use streamcomm_gpu::nvrtc::Nvrtc;

/// Compiles `source` into the shared library `dir/name`; `None` without `cc`.
fn build_fake(dir: &Path, name: &str, source: &str) -> Option<PathBuf> {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, source).unwrap();
    let lib = dir.join(name);
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&c)
        .status()
        .ok()?;
    assert!(status.success(), "cc failed building {name}");
    Some(lib)
}

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sc-fake-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_libcuda_missing_symbols_is_unavailable_not_a_crash() {
    if std::env::var_os("SC_FAKE_DRIVER_CHILD").is_some() {
        // In the child, whose LD_LIBRARY_PATH finds only the fake driver.
        let err = probe::driver().expect_err("a fake driver cannot be usable");
        assert!(err.is_unavailable(), "{err}");
        println!("CHILD-OK {err}");
        return;
    }
    if probe::driver().is_ok() {
        streamcomm_testkit::skip(
            &streamcomm_testkit::current_test(),
            "a real CUDA driver is installed, the fake would not be loaded",
        );
        return;
    }
    let dir = scratch("cuda");
    let Some(_) = build_fake(
        &dir,
        "libcuda.so.1",
        "int cuInit(unsigned int flags) { return 0; }\n",
    ) else {
        streamcomm_testkit::skip(
            &streamcomm_testkit::current_test(),
            "no `cc` to build the fake libcuda",
        );
        return;
    };
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_libcuda_missing_symbols_is_unavailable_not_a_crash",
            "--nocapture",
        ])
        .env("SC_FAKE_DRIVER_CHILD", "1")
        .env("LD_LIBRARY_PATH", &dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("CHILD-OK"),
        "child failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // The fake was found by name and rejected: the message is cudarc's panic
    // (caught) or the binding failure, not "no CUDA driver library".
    assert!(!stdout.contains("no CUDA driver library"), "{stdout}");
    // cudarc 0.19 resolves each entry point at its first call: the probe's
    // first call of a missing one panics (caught), naming it.
    assert!(
        stdout.contains("Missing symbol cu") || stdout.contains("undefined symbol: cu"),
        "the caught panic names the symbol: {stdout}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_library_without_nvrtc_functions_is_refused() {
    let dir = scratch("nvrtc");
    let Some(lib) = build_fake(
        &dir,
        "libnvrtc.so.99",
        "int nvrtcVersion(int* a, int* b) { *a = 99; *b = 0; return 0; }\n",
    ) else {
        streamcomm_testkit::skip(
            &streamcomm_testkit::current_test(),
            "no `cc` to build the fake libnvrtc",
        );
        return;
    };
    let name = lib.display().to_string();
    let err = match Nvrtc::load(std::slice::from_ref(&name)) {
        Err(e) => e,
        Ok(_) => panic!("a library lacking nvrtcCompileProgram was accepted"),
    };
    assert!(err.is_unavailable(), "{err}");
    assert!(err.to_string().contains(&name), "{err}");
    assert!(
        err.to_string().contains("nvrtcCreateProgram"),
        "names the missing function: {err}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}
