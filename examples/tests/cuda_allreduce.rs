//! The `cuda_allreduce` example, run on the CPU stand-in libcuda
//! (`gpu/standin`): the example that `cargo test` has just built launches
//! its 4 ranks with the stand-in first on `LD_LIBRARY_PATH` (as
//! `libcuda.so` and `libcuda.so.1`), every rank must print its checked sum,
//! and the output must end with `OK`. On a GPU machine
//! `scripts/gpu-check.sh` runs the same example against NVIDIA's driver.
//!
//! The stand-in is a workspace member, built by `cargo test --workspace`
//! (what CI runs); where it was not built (e.g. `cargo test -p
//! streamcomm-examples` alone) the test says `SKIPPED` and why.

use std::path::{Path, PathBuf};
use std::process::Command;

mod support;

use support::{example, profile_dir, run};

const STANDIN_FILE: &str = "libstreamcomm_cuda_standin.so";
const RANKS: usize = 4;

/// The newest built stand-in: `deps/` (a `cargo test` build) or the one
/// `cargo build` puts in `target/<profile>/`.
fn standin(profile: &Path) -> Option<PathBuf> {
    [profile.join("deps"), profile.to_path_buf()]
        .into_iter()
        .map(|d| d.join(STANDIN_FILE))
        .filter_map(|lib| Some((lib.metadata().ok()?.modified().ok()?, lib)))
        .max()
        .map(|(_, lib)| lib)
}

/// A fresh directory with `libcuda.so` and `libcuda.so.1` linking to `lib`.
fn libcuda_dir(lib: &Path) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cuda-allreduce-standin-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the library directory");
    for name in ["libcuda.so", "libcuda.so.1"] {
        std::os::unix::fs::symlink(lib, dir.join(name)).expect("link the stand-in");
    }
    dir
}

#[test]
fn the_cuda_allreduce_example_checks_its_sums_on_the_stand_in() {
    let profile = profile_dir();
    let example = example("cuda_allreduce");
    let Some(lib) = standin(&profile) else {
        streamcomm_testkit::skip(
            "the_cuda_allreduce_example_checks_its_sums_on_the_stand_in",
            &format!(
                "the CUDA stand-in ({STANDIN_FILE}) was not built: run `cargo test --workspace`"
            ),
        );
        return;
    };
    let dir = libcuda_dir(&lib);
    let path = match std::env::var("LD_LIBRARY_PATH") {
        Ok(p) if !p.is_empty() => format!("{}:{p}", dir.display()),
        _ => dir.display().to_string(),
    };
    let mut command = Command::new(&example);
    command.arg(RANKS.to_string()).env("LD_LIBRARY_PATH", &path);
    let out = run(command, "cuda_allreduce");
    let (status, stdout) = (out.status, String::from_utf8_lossy(&out.stdout));
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_dir_all(&dir);
    println!("{stdout}");
    assert!(status.success(), "the example failed: {status}\n{stdout}");
    assert!(
        !stdout.contains("SKIPPED"),
        "the stand-in at {} did not load:\n{stdout}",
        lib.display()
    );
    assert!(
        stdout.contains("streamcomm CPU stand-in"),
        "the stand-in, not another driver, must answer:\n{stdout}"
    );
    // Each rank's sum: size (size + 1) / 2 times the sum over one rank's
    // pattern 1..=13, repeated.
    let count = 1usize << 20;
    let pattern: usize = (0..count).map(|i| i % 13 + 1).sum();
    let total = RANKS * (RANKS + 1) / 2 * pattern;
    for r in 0..RANKS {
        let line = format!(
            "rank {r}/{RANKS}: all_reduce of {count} f32 checked, sum of all elements {total} (want {total})"
        );
        assert!(stdout.contains(&line), "missing {line:?} in:\n{stdout}");
    }
    assert_eq!(
        stdout.lines().last(),
        Some("OK"),
        "the last line must be OK:\n{stdout}"
    );
}
