//! The README's quick start, run as a test: the `quickstart` example that
//! `cargo test` has just built (into `target/<profile>/examples/`) launches
//! its 4 ranks, and its output must end with the line `OK`. CI gets the quick
//! start from the test build instead of a separate release build.

use std::process::Command;

mod support;

use support::{example, run};

#[test]
fn the_readme_quick_start_prints_ok() {
    let path = example("quickstart");
    let out = run(Command::new(&path), "quickstart");
    let (status, stdout) = (out.status, String::from_utf8_lossy(&out.stdout));
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    println!("{stdout}");
    assert!(status.success(), "quick start failed: {status}\n{stdout}");
    assert_eq!(
        stdout.lines().last(),
        Some("OK"),
        "the quick start's last line must be OK:\n{stdout}"
    );
}
