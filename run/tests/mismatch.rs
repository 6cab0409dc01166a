//! `streamcomm-run -n 4` on a program whose rank 2 calls `all_reduce` with
//! 999 elements where the others pass 1 << 20: every rank fails, and the
//! launcher's summary names rank 2 first, whichever rank exited first.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use streamcomm::host::{HostBuffer, HostStream};
use streamcomm::{Communicator, ReduceOp};

const BIN: &str = env!("CARGO_BIN_EXE_streamcomm-run");
const SCENARIO: &str = "STREAMCOMM_TEST_RUN_MISMATCH";

#[test]
fn the_summary_names_the_odd_rank_first() {
    let exe = std::env::current_exe().expect("this test binary");
    let proof = streamcomm_testkit::ChildProof::new("run mismatch");
    let mut cmd = Command::new(BIN);
    cmd.args(["-n", "4", "--"])
        .arg(exe)
        .args(streamcomm_testkit::child_args!("child"))
        .env(SCENARIO, "1")
        .env("STREAMCOMM_TIMEOUT", "60")
        .envs([proof.env()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t0 = Instant::now();
    let out = cmd.output().expect("run streamcomm-run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(t0.elapsed() < Duration::from_secs(120), "{stderr}");
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let summary = stderr
        .lines()
        .rfind(|l| l.starts_with("streamcomm-run: "))
        .unwrap_or_else(|| panic!("no summary in:\n{stderr}"));
    assert!(
        summary.starts_with("streamcomm-run: rank 2 caused the failure"),
        "{summary}\n{stderr}"
    );
    // At least one rank's own error was forwarded, naming rank 2 and both counts.
    assert!(
        stderr.contains("[culprit: rank 2") && stderr.contains("999") && stderr.contains("1048576"),
        "{stderr}"
    );
    // The children that ran to the end of their bodies left a mark (the
    // first to exit stops the others, so not every child gets there).
    assert!(proof.count() >= 1, "no child ran its body:\n{stderr}");
}

#[test]
#[ignore = "entry point of the ranks streamcomm-run starts"]
fn child() {
    if std::env::var(SCENARIO).is_err() {
        return;
    }
    let comm = Communicator::from_env().expect("from_env");
    let stream = HostStream::new().expect("stream");
    let n = if comm.rank() == 2 { 999 } else { 1 << 20 };
    let send = HostBuffer::from_slice(&vec![1.0f32; n]);
    let mut recv = HostBuffer::<f32>::zeroed(n);
    let e = comm
        .all_reduce(&send, &mut recv, ReduceOp::Sum, &stream)
        .and_then(|()| stream.synchronize())
        .expect_err("a mismatched all_reduce must fail");
    eprintln!("error: {e}");
    streamcomm_testkit::child_ran();
    std::process::exit(3);
}
