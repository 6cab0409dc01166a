//! Shared by the tests that need a GPU: open device 0 or skip. With
//! `STREAMCOMM_REQUIRE_GPU=1` (set by scripts/gpu-check.sh) a missing GPU fails.

#![allow(dead_code)]

use streamcomm_gpu::Device;

/// Device 0, or `None` (after printing why) where there is no usable CUDA.
pub(crate) fn device_or_skip(test: &str) -> Option<Device> {
    match Device::open(0) {
        Ok(d) => {
            // Which driver answered: the CPU stand-in says it is no GPU.
            eprintln!("{test}: driver: {}", d.name());
            Some(d)
        }
        Err(e) if std::env::var("STREAMCOMM_REQUIRE_GPU").is_ok_and(|v| v == "1") => {
            panic!("{test}: STREAMCOMM_REQUIRE_GPU=1 but {e}")
        }
        Err(e) => {
            streamcomm_testkit::skip(test, &e.to_string());
            None
        }
    }
}

/// True when the driver that answered is the CPU stand-in (gpu/standin),
/// whose kernels are loops on the host: sizes that exercise a GPU's grid
/// there only cost time.
pub(crate) fn is_stand_in(device: &Device) -> bool {
    device.name().contains("stand-in")
}
