//! Proof that a child test's body ran.
//!
//! Tests that start ranks as copies of their own binary name one ignored
//! test with `--exact`. If that name is wrong (a rename, a module move),
//! libtest runs nothing, prints `0 passed` and exits 0, and a parent that
//! checks only the exit status passes without testing anything. So the
//! parent makes a [`ChildProof`], hands its directory to the children in
//! the environment, and after they exit asserts that each one called
//! [`child_ran`] at the end of its body.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The environment variable that carries the proof directory to children.
pub const PROOF_DIR_VAR: &str = "STREAMCOMM_TEST_PROOF_DIR";

/// The libtest name of test `name` in the module `module` (pass
/// `module_path!()`): the module path without the crate's name.
///
/// ```
/// assert_eq!(streamcomm_testkit::test_path("processes::launch_env", "child"), "launch_env::child");
/// assert_eq!(streamcomm_testkit::test_path("tcp", "child"), "child");
/// ```
pub fn test_path(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, rest)) => format!("{rest}::{name}"),
        None => name.to_string(),
    }
}

/// A directory in which each child test that ran to its end leaves a mark.
///
/// ```
/// let proof = streamcomm_testkit::ChildProof::new("doc");
/// let (key, dir) = proof.env();
/// assert_eq!(key, streamcomm_testkit::PROOF_DIR_VAR);
/// assert!(std::path::Path::new(&dir).is_dir());
/// assert_eq!(proof.count(), 0);
/// ```
#[derive(Debug)]
pub struct ChildProof {
    dir: PathBuf,
    what: String,
}

impl ChildProof {
    /// A fresh, empty proof directory for the children of `what`.
    pub fn new(what: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "streamcomm-proof-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the child-proof directory");
        ChildProof {
            dir,
            what: what.to_string(),
        }
    }

    /// The variable and value to set in each child's environment (for a
    /// `Command`: `.envs([proof.env()])`).
    pub fn env(&self) -> (&'static str, String) {
        (PROOF_DIR_VAR, self.dir.to_string_lossy().into_owned())
    }

    /// How many children have called [`child_ran`] so far.
    pub fn count(&self) -> usize {
        std::fs::read_dir(&self.dir).map_or(0, |d| d.count())
    }

    /// Panics unless exactly `n` children ran their bodies to the end.
    pub fn assert_ran(&self, n: usize) {
        let ran = self.count();
        assert_eq!(
            ran, n,
            "{}: {ran} of {n} child processes ran their test body to its end \
             (a child that matched no test, or returned early, passes vacuously)",
            self.what
        );
    }
}

impl Drop for ChildProof {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Called by a child test at the end of its body: leaves this process's
/// mark in the parent's proof directory (nothing when run by hand).
///
/// ```
/// streamcomm_testkit::child_ran();
/// ```
pub fn child_ran() {
    if let Some(dir) = std::env::var_os(PROOF_DIR_VAR) {
        let mark = PathBuf::from(dir).join(std::process::id().to_string());
        std::fs::write(&mark, b"ran\n").expect("leave the child-proof mark");
    }
}

/// The libtest arguments that make this test binary run only the ignored
/// test `name` of the module `module` (pass `module_path!()`, or use
/// [`child_args!`](crate::child_args!)), printing its output.
///
/// ```
/// let args = streamcomm_testkit::child_args("processes::launch_env", "child");
/// assert_eq!(args, ["--exact", "launch_env::child", "--ignored", "--nocapture", "-q"]);
/// ```
pub fn child_args(module: &str, name: &str) -> Vec<String> {
    [
        "--exact".to_string(),
        test_path(module, name),
        "--ignored".to_string(),
        "--nocapture".to_string(),
        "-q".to_string(),
    ]
    .to_vec()
}

/// [`child_args`] for the ignored test `name` of the calling module.
///
/// ```
/// let args = streamcomm_testkit::child_args!("child");
/// assert_eq!(args[1], streamcomm_testkit::test_path(module_path!(), "child"));
/// ```
#[macro_export]
macro_rules! child_args {
    ($name:expr) => {
        $crate::child_args(module_path!(), $name)
    };
}
