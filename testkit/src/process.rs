//! Running a command, or a test's own body, bounded in time: its output,
//! and how to show it when an assertion fails.

use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Runs `f` on a thread of its own and returns what it returns; past
/// `limit` the test fails instead of hanging (the thread is left behind).
///
/// # Panics
/// When `f` runs past `limit`, or panics.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(streamcomm_testkit::within(Duration::from_secs(10), || 6 * 7), 42);
/// ```
pub fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("did not finish within {limit:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the test's body panicked"),
    }
}

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

/// Checks that the C header `header` compiles on its own as strict C99 and
/// C++11 (`-Wall -Wextra -pedantic -Werror`, `$CC` and `$CXX` or `cc` and
/// `c++`); a compiler that is not installed is a skip of `test` (for that
/// language), saying so.
///
/// # Panics
/// When a compiler rejects the header (the message names it).
///
/// ```no_run
/// streamcomm_testkit::assert_header_compiles_strictly(
///     "my_header_test",
///     std::path::Path::new("ffi/include/streamcomm.h"),
/// );
/// ```
pub fn assert_header_compiles_strictly(test: &str, header: &std::path::Path) {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    for (compiler, lang, std) in [(cc, "c", "-std=c99"), (cxx, "c++", "-std=c++11")] {
        if Command::new(&compiler).arg("--version").output().is_err() {
            crate::skip(
                &format!("{test} ({lang})"),
                &format!("{compiler} is not available (`apt-get install g++`)"),
            );
            continue;
        }
        let mut cmd = Command::new(&compiler);
        cmd.args([
            "-fsyntax-only",
            "-Wall",
            "-Wextra",
            "-pedantic",
            "-Werror",
            std,
            "-x",
            lang,
        ])
        .arg(header);
        let out = run_limited(cmd, Duration::from_secs(60));
        assert!(
            out.status.success(),
            "{compiler} -x {lang} {}: {}",
            header.display(),
            output_text(&out)
        );
    }
}
