//! Starting the ranks of a test as processes (streamcomm-run's launcher),
//! and checking the tensors they compute.

use std::ffi::OsString;
use std::sync::mpsc;
use std::time::Duration;

use candle_core::{DType, Tensor};
use streamcomm_candle::TensorComm;
use streamcomm_run::local::LocalLauncher;

/// Runs the ignored test `child` of the calling test binary as `n` ranks
/// with `env` added (and the seed), within 120 s; fails unless every rank
/// ran its body to the end. `module` is the caller's `module_path!()`.
pub(crate) fn launch(module: &str, n: usize, seed: u64, env: &[(&str, OsString)], what: &str) {
    let proof = streamcomm_testkit::ChildProof::new(what);
    let (key, dir) = proof.env();
    let mut launcher = LocalLauncher::new(n, std::env::current_exe().unwrap())
        .args(streamcomm_testkit::child_args(module, "child"))
        .env(key, dir)
        .env("STREAMCOMM_TEST_SEED", seed.to_string());
    for (k, v) in env {
        launcher = launcher.env(k, v);
    }
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(launcher.run());
    });
    let outcome = rx
        .recv_timeout(Duration::from_secs(120))
        .unwrap_or_else(|_| panic!("{what}: not done within 120 s"))
        .expect("launch");
    assert_eq!(outcome.exit_code(), 0, "{what}: {outcome:?}");
    proof.assert_ran(n);
}

/// A launched rank's start: the test's seed, and the communicator of the
/// ranks [`launch`] started.
pub(crate) fn join() -> (u64, TensorComm) {
    let seed = streamcomm_testkit::seed();
    (seed, TensorComm::from_env().unwrap())
}

/// `t`'s elements in row-major order, as `f64`.
pub(crate) fn elements(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

/// Every element of `got` against `want` (row-major), within `tol` of each.
pub(crate) fn assert_elements(got: &Tensor, want: &[f64], tol: f64, what: &str) {
    let got = elements(got);
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol,
            "{what}: element {i} is {g}, expected {w}"
        );
    }
}
