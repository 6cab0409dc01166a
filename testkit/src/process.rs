//! Running a command from a test: its output, bounded in time, and how to
//! show it when an assertion fails.

use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Runs `cmd` (no standard input, its output captured) and returns what it
/// printed; past `limit` the process is killed and the test fails, naming
/// the command.
///
/// # Panics
/// When the command cannot start or runs past `limit`.
///
/// ```
/// use std::process::Command;
/// use std::time::Duration;
/// let out = streamcomm_testkit::run_limited(Command::new("true"), Duration::from_secs(10));
/// assert!(out.status.success());
/// ```
pub fn run_limited(mut cmd: Command, limit: Duration) -> Output {
    let what = format!("{cmd:?}");
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.unwrap_or_else(|e| panic!("wait for {what}: {e}")),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("{what} did not finish within {limit:?}");
        }
    }
}

/// `out`'s status, standard output and standard error, for a failed
/// assertion's message.
///
/// ```
/// use std::process::Command;
/// use std::time::Duration;
/// let out = streamcomm_testkit::run_limited(Command::new("true"), Duration::from_secs(10));
/// assert!(streamcomm_testkit::output_text(&out).contains("--- stdout"));
/// ```
pub fn output_text(out: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
