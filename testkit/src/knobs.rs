//! Seeds, skips and repetition counts.

use std::io::Write;

/// Where [`skip`] appends its line, when set (CI sets it to collect skips).
pub const SKIP_LOG_VAR: &str = "STREAMCOMM_SKIP_LOG";

/// A fresh seed, or the one in `STREAMCOMM_TEST_SEED`; printed either way
/// so a failure can be replayed.
///
/// ```
/// let a = streamcomm_testkit::seed();
/// # let _ = a;
/// ```
pub fn seed() -> u64 {
    let seed = std::env::var("STREAMCOMM_TEST_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("STREAMCOMM_TEST_SEED={seed} ({})", current_test());
    seed
}

/// Says that `test` did not run what it tests, and why: prints
/// `SKIPPED: <test>: <reason>` and appends that line to the file named by
/// `STREAMCOMM_SKIP_LOG`, if set (`.ci/run` checks it against its list).
///
/// ```no_run
/// if std::env::var_os("RDMA_DEVICE").is_none() {
///     streamcomm_testkit::skip("verbs::matrix", "no RDMA device here");
/// }
/// ```
pub fn skip(test: &str, reason: &str) {
    let line = format!("SKIPPED: {test}: {reason}");
    println!("{line}");
    eprintln!("{line}");
    if let Some(path) = std::env::var_os(SKIP_LOG_VAR) {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path);
        // One write of one line: appends from parallel tests do not interleave.
        if let Ok(mut f) = file {
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }
}

/// Whether an RDMA device can run a verbs test here: `built_with_verbs`
/// (the test crate's `cfg!(feature = "verbs")`) and an entry under
/// `/sys/class/infiniband`. With `STREAMCOMM_REQUIRE_RDMA=1` (set by
/// `scripts/verbs-check.sh` in the Soft-RoCE guest) a missing one panics,
/// so a skip there fails the test instead of passing unseen.
///
/// ```
/// if !streamcomm_testkit::rdma_device(false) {
///     // skip the test, saying why
/// }
/// ```
pub fn rdma_device(built_with_verbs: bool) -> bool {
    let here = built_with_verbs
        && std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some());
    assert!(
        here || std::env::var("STREAMCOMM_REQUIRE_RDMA").as_deref() != Ok("1"),
        "STREAMCOMM_REQUIRE_RDMA=1, but this build or host has no RDMA device"
    );
    here
}

/// The name of the running test: libtest runs each test on a thread named
/// after it (`module::test`); `"?"` elsewhere.
///
/// ```
/// let name = streamcomm_testkit::current_test();
/// assert!(!name.is_empty());
/// ```
pub fn current_test() -> String {
    std::thread::current().name().unwrap_or("?").to_string()
}

/// True when `STREAMCOMM_TEST_FULL=1` asks for the full repetition counts.
///
/// ```
/// let _ = streamcomm_testkit::full();
/// ```
pub fn full() -> bool {
    std::env::var("STREAMCOMM_TEST_FULL").is_ok_and(|v| v == "1")
}

/// `quick` repetitions by default (enough to cover every path), `full` with
/// `STREAMCOMM_TEST_FULL=1`.
///
/// ```
/// let n = streamcomm_testkit::reps(3, 300);
/// assert!(n == 3 || n == 300);
/// ```
pub fn reps(quick: usize, full: usize) -> usize {
    if self::full() { full } else { quick }
}
