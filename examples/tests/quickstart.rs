//! The README's quick start, run as a test: the `quickstart` example that
//! `cargo test` has just built (into `target/<profile>/examples/`) launches
//! its 4 ranks, and its output must end with the line `OK`. CI gets the quick
//! start from the test build instead of a separate release build.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `target/<profile>/examples/quickstart`, beside this test's `deps/`.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>");
    profile_dir.join("examples").join(name)
}

#[test]
fn the_readme_quick_start_prints_ok() {
    let path = example("quickstart");
    assert!(
        path.exists(),
        "{} is missing: `cargo test` builds the examples before it runs tests",
        path.display()
    );
    let out_path = std::env::temp_dir().join(format!("quickstart-{}.out", std::process::id()));
    let out_file = std::fs::File::create(&out_path).expect("output file");
    let mut child = Command::new(&path)
        .stdout(Stdio::from(out_file))
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the quick start");
    let t0 = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the quick start") {
            break status;
        }
        if t0.elapsed() > Duration::from_secs(300) {
            let _ = child.kill();
            panic!("the quick start did not finish in 300 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = std::fs::read_to_string(&out_path).expect("read the output");
    let _ = std::fs::remove_file(&out_path);
    println!("{stdout}");
    assert!(status.success(), "quick start failed: {status}\n{stdout}");
    assert_eq!(
        stdout.lines().last(),
        Some("OK"),
        "the quick start's last line must be OK:\n{stdout}"
    );
}
