//! A program written for `cudarc::nccl`, unmodified and never told about
//! streamcomm (the example `cudarc_nccl`, built with cudarc's own `nccl`
//! feature, which loads `libnccl.so.2` at run time), run by
//! `streamcomm-run --cuda-stand-in --nccl` as 2 and 3 ranks; and the same
//! source with its `use` line switched to `streamcomm::cuda::nccl` (the
//! example `streamcomm_nccl`), run without `--nccl`. Each rank checks every
//! element of every call against an f64 reference; both faces must give
//! the same results (the digest each rank prints).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// `target/<profile>/examples/<name>`, which `cargo test` builds.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let path = exe
        .parent()
        .and_then(Path::parent)
        .expect("profile directory")
        .join("examples")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: cargo test builds the examples",
        path.display()
    );
    path
}

/// Runs `streamcomm-run --cuda-stand-in <options> -n <n> -- <exe> <args>`,
/// failing the test past five minutes.
fn launch(options: &[&str], n: usize, exe: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(streamcomm_testkit::launcher_binary());
    cmd.args(["--cuda-stand-in", "-n", &n.to_string()])
        .args(options)
        .arg("--")
        .arg(exe)
        .args(args)
        .env_remove("STREAMCOMM_REQUIRE_GPU");
    streamcomm_testkit::run_limited(cmd, Duration::from_secs(300))
}

/// Each rank's `OK` digest, in rank order.
fn digests(out: &Output, n: usize, what: &str) -> Vec<String> {
    let said = String::from_utf8_lossy(&out.stdout);
    let all = format!("{what}: {}", streamcomm_testkit::output_text(out));
    assert!(out.status.success(), "{all}");
    (0..n)
        .map(|r| {
            let prefix = format!("rank {r}: OK ");
            said.lines()
                .find_map(|l| l.split_once(&prefix).map(|(_, d)| d.trim().to_string()))
                .unwrap_or_else(|| panic!("rank {r} printed no OK line\n{all}"))
        })
        .collect()
}

#[test]
fn an_unmodified_cudarc_nccl_program_runs_on_libnccl_and_matches_the_switched_one() {
    let seed = streamcomm_testkit::seed().to_string();
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("streamcomm-nccl-cudarc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    for n in [2, 3] {
        let id = scratch.join(format!("id-cudarc-{n}"));
        let out = launch(
            &["--nccl"],
            n,
            &example("cudarc_nccl"),
            &[id.to_str().unwrap(), &seed],
        );
        let on_libnccl = digests(&out, n, "cudarc::nccl on libnccl.so.2");
        let id = scratch.join(format!("id-streamcomm-{n}"));
        let out = launch(
            &[],
            n,
            &example("streamcomm_nccl"),
            &[id.to_str().unwrap(), &seed],
        );
        let switched = digests(&out, n, "streamcomm::cuda::nccl");
        assert_eq!(on_libnccl, switched, "{n} ranks: the two faces disagree");
        eprintln!("{n} ranks: digests {on_libnccl:?} on both faces");
    }
    let _ = std::fs::remove_dir_all(&scratch);
}
