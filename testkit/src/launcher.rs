//! The `streamcomm-run` binary, for tests outside its crate that run it.
//!
//! Cargo tells a test where a binary is (`CARGO_BIN_EXE_<name>`) only for
//! binaries of the test's own package, so the launcher's own tests use that
//! and every other crate's tests use [`launcher_binary`].

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Longest the build of the launcher may take.
const BUILD_LIMIT: Duration = Duration::from_secs(540);

/// The `streamcomm-run` binary of the running test's target directory and
/// profile (`target/debug/streamcomm-run` beside `target/debug/deps/`),
/// built first when it is missing, once per process.
///
/// `cargo test --workspace` builds the binary with the tests. A test run of
/// one crate (`cargo test -p streamcomm`) builds it here with
/// `cargo build -p streamcomm-run` the first time; an existing binary is
/// used as it is, so after changing the launcher rebuild it (or test the
/// whole workspace).
///
/// # Panics
///
/// When the binary is missing and cannot be built (the build's output is
/// in `streamcomm-run.build.log` beside it): tests that need the launcher
/// fail loudly rather than pass without it.
///
/// ```no_run
/// let launcher = streamcomm_testkit::launcher_binary();
/// let out = std::process::Command::new(launcher).arg("--help").output()?;
/// assert!(out.status.success());
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn launcher_binary() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let exe = std::env::current_exe().expect("test binary path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("a test binary lies in <target>/<profile>/deps");
        let path = profile_dir.join("streamcomm-run");
        if !path.exists() {
            build(profile_dir);
        }
        assert!(path.exists(), "{} is missing", path.display());
        path
    })
    .clone()
}

/// Builds the launcher into `profile_dir` with the profile it is named after.
fn build(profile_dir: &Path) {
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        // Tests are built with the test profile, which shares `debug/`.
        Some("debug") | None => "test",
        Some(name) => name,
    };
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml");
    let log_path = profile_dir.join("streamcomm-run.build.log");
    let log = File::create(&log_path).expect("create the build log");
    let mut child = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["build", "-p", "streamcomm-run", "--bin", "streamcomm-run"])
        .args(["--profile", profile, "--manifest-path", manifest])
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("build log"))
        .stderr(log)
        .spawn()
        .expect("start cargo to build streamcomm-run");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for cargo") {
            break status;
        }
        if start.elapsed() > BUILD_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "building streamcomm-run took over {BUILD_LIMIT:?}; see {}",
                log_path.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        status.success(),
        "building streamcomm-run failed ({status}):\n{}",
        std::fs::read_to_string(&log_path).unwrap_or_default()
    );
}
