//! No system library sneaks into the build: every test binary, example,
//! program and shared library that `cargo test --workspace --all-features`
//! builds needs, at load time, only the C runtime, the unwinder, the loader
//! and the project's own libraries. Everything else the project uses
//! (libibverbs, libcuda, NVRTC) is loaded at run time, where present, so
//! the test command runs on a machine with the Rust toolchain, a C compiler
//! and python3 only. No binary links an optional system library on purpose;
//! one that must would be listed here, with why.

use std::path::{Path, PathBuf};

use streamcomm_testkit::{C_RUNTIME, is_elf, is_loader, needed_libraries, skip};

/// Fewer binaries than this means the scan looked in the wrong place (the
/// workspace's test binaries alone number over 40).
const AT_LEAST: usize = 30;

/// The profile's output folders: `deps` (test binaries, shared libraries),
/// `examples`, and the profile folder itself (programs).
fn output_dirs() -> Vec<PathBuf> {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps folder").to_path_buf();
    let profile = deps.parent().expect("profile folder").to_path_buf();
    vec![deps, profile.join("examples"), profile]
}

/// Files of `dir` that are ELF objects, skipping the compiler's own
/// outputs that are not linked (`.rlib`, `.rmeta`, `.a`, `.o`, `.d`).
fn elf_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .filter(|p| {
            !matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("rlib" | "rmeta" | "a" | "o" | "d")
            )
        })
        .filter(|p| is_elf(p))
        .collect()
}

fn allowed(lib: &str) -> bool {
    C_RUNTIME.contains(&lib) || is_loader(lib) || lib.starts_with("libstreamcomm")
}

#[test]
fn every_binary_the_test_command_builds_needs_only_the_c_runtime() {
    let test = "every_binary_the_test_command_builds_needs_only_the_c_runtime";
    let files: Vec<PathBuf> = output_dirs().iter().flat_map(|d| elf_files(d)).collect();
    if let Err(why) = needed_libraries(&std::env::current_exe().unwrap()) {
        skip(test, &why);
        return;
    }
    let mut offenders = Vec::new();
    for file in &files {
        let needed = needed_libraries(file).unwrap_or_else(|e| panic!("{e}"));
        let extra: Vec<&String> = needed.iter().filter(|l| !allowed(l)).collect();
        if !extra.is_empty() {
            offenders.push(format!("{}: {extra:?}", file.display()));
        }
    }
    println!("{} binaries and shared libraries read", files.len());
    assert!(
        files.len() >= AT_LEAST,
        "only {} binaries found under {:?}: the scan missed the build",
        files.len(),
        output_dirs()
    );
    assert!(
        offenders.is_empty(),
        "binaries that need a system library beyond the C runtime (load it at run time \
         instead, or list it in this test with why):\n{}",
        offenders.join("\n")
    );
}

#[test]
fn the_check_reads_needed_entries_and_refuses_system_libraries() {
    // The reading, on a system program that needs libc, and the verdict on
    // the libraries this project must never link.
    let sh = Path::new("/bin/sh");
    let Ok(needed) = needed_libraries(sh) else {
        skip(
            "the_check_reads_needed_entries_and_refuses_system_libraries",
            "readelf cannot read /bin/sh (`apt-get install binutils`)",
        );
        return;
    };
    assert!(
        needed.iter().any(|l| l == "libc.so.6"),
        "/bin/sh needs libc: {needed:?}"
    );
    assert!(!allowed("libibverbs.so.1"));
    assert!(!allowed("librdmacm.so.1"));
    assert!(!allowed("libcuda.so.1"));
    assert!(allowed("ld-linux-x86-64.so.2"));
    assert!(allowed("libstreamcomm_ffi.so"));
}
