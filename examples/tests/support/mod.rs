//! What the examples' tests share: where `cargo test` put an example, running
//! a launcher to its end, and reading the losses the ranks print.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `target/<profile>`, above this test's `deps/`.
pub(crate) fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>")
        .to_path_buf()
}

/// `target/<profile>/examples/<name>`, which must exist (`cargo test`
/// builds the examples before it runs tests).
pub(crate) fn example(name: &str) -> PathBuf {
    let path = profile_dir().join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: `cargo test` builds the examples before it runs tests",
        path.display()
    );
    path
}

/// Runs `cmd` to its end (killed after 300 s); its status and output.
pub(crate) fn run(mut cmd: Command, what: &str) -> Output {
    let dir = std::env::temp_dir();
    let name = |s: &str| dir.join(format!("{what}-{}.{s}", std::process::id()));
    let (out_path, err_path) = (name("out"), name("err"));
    let out_file = std::fs::File::create(&out_path).expect("stdout file");
    let err_file = std::fs::File::create(&err_path).expect("stderr file");
    let mut child = cmd
        .stdout(Stdio::from(out_file))
        .stderr(Stdio::from(err_file))
        .spawn()
        .expect("start the launcher");
    let t0 = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the launcher") {
            break status;
        }
        if t0.elapsed() > Duration::from_secs(300) {
            let _ = child.kill();
            panic!("{what}: the job did not finish in 300 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let read = |p: &PathBuf| {
        let v = std::fs::read(p).unwrap_or_default();
        let _ = std::fs::remove_file(p);
        v
    };
    Output {
        status,
        stdout: read(&out_path),
        stderr: read(&err_path),
    }
}

/// The losses the ranks printed, as `[rank R] step S loss L` lines: by
/// rank, each rank's `(step, loss as printed)` in order.
pub(crate) fn losses(stdout: &str) -> BTreeMap<usize, Vec<(usize, String)>> {
    let mut losses: BTreeMap<usize, Vec<(usize, String)>> = BTreeMap::new();
    for line in stdout.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let ["[rank", r, "step", s, "loss", l] = words[..] {
            let rank: usize = r.trim_end_matches(']').parse().expect("rank number");
            let step: usize = s.parse().expect("step number");
            losses.entry(rank).or_default().push((step, l.to_string()));
        }
    }
    losses
}
