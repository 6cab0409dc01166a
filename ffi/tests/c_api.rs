//! The C API from outside: the header against the library's exports, C
//! programs built with the system `cc` against the shared and the static
//! library, 4 C ranks (twice: the collectives, then split and shrink) and 2
//! Python ranks launched by `streamcomm-run`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const MANIFEST: &str = env!("CARGO_MANIFEST_DIR");

/// Where cargo put this test and the library's `.so` / `.a` (`target/<profile>/deps`).
fn deps_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent().expect("deps directory").to_path_buf()
}

fn library(ext: &str) -> PathBuf {
    let path = deps_dir().join(format!("libstreamcomm_ffi.{ext}"));
    assert!(
        path.exists(),
        "{} is missing: cargo builds it with the crate's lib target",
        path.display()
    );
    path
}

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("streamcomm-ffi-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch directory");
    dir
}

/// Runs `cmd`, failing the test if it takes longer than `limit`. The
/// library beside this test comes first in the loader's path: cargo's
/// `LD_LIBRARY_PATH` also lists `target/<profile>`, where a `cargo build`
/// may have left an older `libstreamcomm_ffi.so` that would win over the
/// programs' rpath.
fn run(mut cmd: Command, limit: Duration) -> Output {
    let mut path = std::ffi::OsString::from(deps_dir());
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
        path.push(":");
        path.push(old);
    }
    cmd.env("LD_LIBRARY_PATH", path);
    streamcomm_testkit::run_limited(cmd, limit)
}

fn text(out: &Output) -> String {
    streamcomm_testkit::output_text(out)
}

/// Compiles `ffi/<source>` with the system C compiler into `dir`, linked
/// with the shared library (with an rpath) or the static one.
fn compile(source: &str, dir: &Path, shared: bool) -> PathBuf {
    let src = Path::new(MANIFEST).join(source);
    let stem = src.file_stem().unwrap().to_string_lossy().into_owned();
    let exe = dir.join(format!(
        "{stem}-{}",
        if shared { "shared" } else { "static" }
    ));
    let mut cmd = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
    cmd.args(["-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(Path::new(MANIFEST).join("include"))
        .arg("-o")
        .arg(&exe)
        .arg(&src);
    if shared {
        let lib = library("so");
        let libdir = lib.parent().unwrap();
        cmd.arg("-L")
            .arg(libdir)
            .arg(format!("-Wl,-rpath,{}", libdir.display()))
            .arg("-lstreamcomm_ffi");
    } else {
        // What the static library needs from the system: the libraries
        // rustc linked the shared one, built from the same crates with the
        // same features, against (see `link_flags_of`).
        cmd.arg(library("a"));
        let flags = streamcomm_testkit::link_flags_of(&library("so"))
            .unwrap_or_else(|e| panic!("the static library's link flags: {e}"));
        cmd.args(flags);
    }
    cmd.arg("-lm");
    let out = run(cmd, Duration::from_secs(120));
    assert!(out.status.success(), "compiling {source}:\n{}", text(&out));
    exe
}

#[test]
fn header_declares_exactly_the_exported_symbols() {
    let script = Path::new(MANIFEST).join("../scripts/check-symbols.sh");
    let header = Path::new(MANIFEST).join("include/streamcomm.h");
    let lib = library("so");
    let mut cmd = Command::new("bash");
    cmd.arg(&script).arg(&lib).arg(&header).arg("streamcomm_");
    let out = run(cmd, Duration::from_secs(60));
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("ok: "));

    // The check can fail: a header missing one declaration is caught.
    let header = std::fs::read_to_string(Path::new(MANIFEST).join("include/streamcomm.h"))
        .expect("read header");
    let cut = header.replace(
        "streamcomm_result_t streamcomm_barrier_host(streamcomm_comm_t comm);",
        "",
    );
    assert_ne!(cut, header, "the declaration to remove was not found");
    let dir = scratch("header");
    let broken = dir.join("streamcomm.h");
    std::fs::write(&broken, cut).expect("write header copy");
    let mut cmd = Command::new("bash");
    cmd.arg(&script).arg(&lib).arg(&broken).arg("streamcomm_");
    let out = run(cmd, Duration::from_secs(60));
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("+streamcomm_barrier_host"),
        "{}",
        text(&out)
    );
}

#[test]
fn header_compiles_as_strict_c_and_cpp() {
    let header = Path::new(MANIFEST).join("include/streamcomm.h");
    streamcomm_testkit::assert_header_compiles_strictly(
        &streamcomm_testkit::current_test(),
        &header,
    );
}

#[test]
fn every_entry_point_reports_bad_arguments() {
    let dir = scratch("bad-args");
    for shared in [true, false] {
        let exe = compile("tests/c/bad_args.c", &dir, shared);
        let out = run(Command::new(&exe), Duration::from_secs(60));
        assert!(out.status.success(), "{}: {}", exe.display(), text(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("bad_args: ") && stdout.contains(" checks OK"),
            "{}",
            text(&out)
        );
    }
}

#[test]
fn four_c_ranks_under_streamcomm_run() {
    let dir = scratch("ranks");
    let exe = compile("tests/c/ranks.c", &dir, true);
    // The latency example must keep compiling too (it is run by hand).
    compile("examples/c/latency.c", &dir, true);
    let mut cmd = Command::new(streamcomm_testkit::launcher_binary());
    // The abort check at the end must not wait for a timeout; bound it anyway.
    cmd.args(["-n", "4", "--"])
        .arg(&exe)
        .env("STREAMCOMM_TIMEOUT", "30");
    let out = run(cmd, Duration::from_secs(120));
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let seeds: Vec<&str> = (0..4)
        .map(|r| {
            let tag = format!("rank {r}: OK (seed ");
            let at = stdout
                .find(&tag)
                .unwrap_or_else(|| panic!("no OK line from rank {r}:\n{all}"));
            &stdout[at + tag.len()..at + tag.len() + 16]
        })
        .collect();
    assert!(
        seeds.iter().all(|s| *s == seeds[0]),
        "ranks used different seeds: {seeds:?}"
    );
}

#[test]
fn four_c_ranks_split_and_shrink() {
    let dir = scratch("split-shrink");
    let exe = compile("tests/c/split_shrink.c", &dir, true);
    let seed = streamcomm_testkit::seed();
    let mut cmd = Command::new(streamcomm_testkit::launcher_binary());
    // A rank that does not take part must fail the others, not hang them.
    cmd.args(["-n", "4", "--"])
        .arg(&exe)
        .env("STREAMCOMM_TIMEOUT", "30")
        .env("STREAMCOMM_TEST_SEED", seed.to_string());
    let started = std::time::Instant::now();
    let out = run(cmd, Duration::from_secs(120));
    let took = started.elapsed();
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for r in 0..4 {
        let line = format!("[rank {r}] rank {r}: OK (seed {seed})");
        assert!(stdout.lines().any(|l| l == line), "no {line:?} in:\n{all}");
    }
    eprintln!("split and shrink: 4 C ranks in {took:?}");
}

/// Python with numpy, or why not.
fn python_with_numpy() -> Result<(), String> {
    let out = Command::new("python3")
        .args(["-c", "import numpy"])
        .output()
        .map_err(|e| {
            format!("python3 is not available ({e}; `apt-get install python3 python3-numpy`)")
        })?;
    if !out.status.success() {
        // python's last line says why (`ModuleNotFoundError: ...`); a skip
        // is one line.
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "numpy is not installed for python3 (`python3 -m pip install numpy`): {}",
            stderr.trim().lines().last().unwrap_or("")
        ));
    }
    Ok(())
}

#[test]
fn two_python_ranks_all_reduce_with_ctypes_and_numpy() {
    if let Err(why) = python_with_numpy() {
        streamcomm_testkit::skip(&streamcomm_testkit::current_test(), &why);
        return;
    }
    let script = Path::new(MANIFEST).join("examples/python/all_reduce.py");
    let mut cmd = Command::new(streamcomm_testkit::launcher_binary());
    cmd.args(["-n", "2", "--", "python3"])
        .arg(&script)
        .env("STREAMCOMM_FFI_LIBRARY", library("so"));
    let out = run(cmd, Duration::from_secs(120));
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for r in 0..2 {
        assert!(
            stdout.contains(&format!("rank {r}/2: all_reduce OK")),
            "{all}"
        );
    }
}
