//! Without a CUDA driver every entry point returns `Error::Unavailable`, never
//! a panic (cudarc panics when libcuda is missing; the probe must stop that).
//! On a machine with a usable driver this test says so and checks nothing.

use streamcomm_gpu::driver::probe;
use streamcomm_gpu::{Device, Error, GpuConfig, Kernels};

#[test]
fn every_entry_point_is_unavailable_without_a_driver() {
    let first = std::panic::catch_unwind(probe::driver).expect("the probe panicked");
    let err = match first {
        Ok(info) => {
            streamcomm_testkit::skip(
                &streamcomm_testkit::current_test(),
                &format!("a CUDA driver is present ({info:?}); scripts/gpu-check.sh tests it"),
            );
            return;
        }
        Err(e) => e,
    };
    assert!(err.is_unavailable(), "{err}");
    assert!(
        err.to_string().contains("libcuda"),
        "the error names the library: {err}"
    );
    // The outcome is cached and stable.
    assert_eq!(probe::driver().unwrap_err(), err);

    let unavailable = |what: &str, r: Result<(), Error>| match r {
        Err(Error::Unavailable(_)) => {}
        other => panic!("{what}: expected Unavailable, got {other:?}"),
    };
    unavailable("Device::count", Device::count().map(|_| ()));
    unavailable("Device::open(0)", Device::open(0).map(|_| ()));
    unavailable("Device::open(7)", Device::open(7).map(|_| ()));
    // Everything else needs a Device, so cannot be reached; cudarc's own entry
    // point (which would panic unprobed) is behind the same probe.
    assert!(std::panic::catch_unwind(|| Device::open(0).is_err()).unwrap());
    let _ = Kernels::load; // needs a Device: unreachable without a driver
    let _ = GpuConfig::from_env();
}
