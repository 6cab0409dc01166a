//! The stand-in's configuration: every environment variable it reads, read
//! once.

use std::sync::OnceLock;

/// Settings read from the environment at first use.
#[derive(Debug)]
pub struct Config {
    /// `CUDA_DEVICE_MAX_CONNECTIONS` (1..=32, default 8): hardware queues per
    /// context; streams are assigned to them round-robin and share them.
    pub max_connections: usize,
    /// `STREAMCOMM_STANDIN_DEVICES` (default 1): number of devices.
    pub devices: usize,
    /// `STREAMCOMM_STANDIN_DRIVER_VERSION` (default 13000, what driver 580
    /// reports for CUDA 13.0): the `cuDriverGetVersion` value.
    pub driver_version: i32,
    /// `STREAMCOMM_STANDIN_POISON` (default on, `0` turns it off): fill new
    /// device and pinned allocations with 0xA5 bytes, since the driver does
    /// not zero them.
    pub poison: bool,
}

/// The configuration, read at first call.
pub fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let num = |name: &str| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse::<i64>().ok())
        };
        Config {
            max_connections: num("CUDA_DEVICE_MAX_CONNECTIONS").unwrap_or(8).clamp(1, 32) as usize,
            devices: num("STREAMCOMM_STANDIN_DEVICES").unwrap_or(1).clamp(0, 16) as usize,
            driver_version: num("STREAMCOMM_STANDIN_DRIVER_VERSION")
                .unwrap_or(13000)
                .clamp(0, i32::MAX as i64) as i32,
            poison: std::env::var("STREAMCOMM_STANDIN_POISON").map_or(true, |v| v != "0"),
        }
    })
}
