//! How much the raw TCP measurement sends, and how long it may wait.
//!
//! The defaults follow the issue that asked for the measurement: 8-byte
//! round trips (as many as the sendrecv latency test, `--latency-iters`,
//! after as many warm-up ones), and 256 MiB written in 1 MiB writes, best of
//! two runs, on one socket and then on as many sockets as the communicator
//! stripes a tcp peer over. `STREAMCOMM_BENCH_TCP_BYTES` shrinks (or grows)
//! the transfer, e.g. for tests.

use std::time::Duration;

use crate::cli::parse_size;
use crate::error::Fallible;
use crate::latency;

/// Environment variable: bytes of each raw TCP bandwidth run (suffixes K, M,
/// G; default 256M).
pub(super) const ENV_TCP_BYTES: &str = "STREAMCOMM_BENCH_TCP_BYTES";
/// Bytes of each bandwidth run by default: 256 MiB.
pub(super) const DEFAULT_BYTES: u64 = 256 << 20;
/// Bytes per `write` call of the bandwidth runs: 1 MiB.
pub(super) const WRITE_BYTES: usize = 1 << 20;
/// Bandwidth runs per socket count; the best one is reported.
pub(super) const RUNS: u32 = 2;

/// What the raw TCP measurement does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    /// Timed 8-byte round trips.
    pub round_trips: u64,
    /// Untimed round trips before them.
    pub warmup: u64,
    /// Bytes of each bandwidth run (split evenly over the sockets).
    pub bytes: u64,
    /// Bytes per `write` call.
    pub write_bytes: usize,
    /// Bandwidth runs per socket count.
    pub runs: u32,
    /// Sockets of the parallel bandwidth runs (the communicator's channels).
    pub sockets: usize,
    /// Longest any connect, accept, read or write may wait.
    pub timeout: Duration,
}

impl Settings {
    /// The settings for `round_trips` round trips and `sockets` parallel
    /// sockets, with `STREAMCOMM_BENCH_TCP_BYTES` applied.
    ///
    /// # Errors
    /// When the variable is set but is not a positive size.
    pub(crate) fn new(round_trips: u64, sockets: usize, timeout: Duration) -> Fallible<Settings> {
        let bytes = match std::env::var(ENV_TCP_BYTES) {
            Ok(v) => match parse_size(&v) {
                Ok(0) => return Err(format!("{ENV_TCP_BYTES}={v:?}: must be at least 1 byte")),
                Ok(n) => n,
                Err(e) => return Err(format!("{ENV_TCP_BYTES}: {e}")),
            },
            Err(_) => DEFAULT_BYTES,
        };
        Ok(Settings {
            round_trips,
            warmup: latency::WARMUP,
            bytes,
            write_bytes: WRITE_BYTES,
            runs: RUNS,
            sockets: sockets.max(1),
            // A zero timeout would be refused by the socket options.
            timeout: timeout.max(Duration::from_millis(1)),
        })
    }

    /// Bytes each of `sockets` sockets carries in one run (at least one).
    pub(crate) fn bytes_per_socket(&self, sockets: usize) -> u64 {
        (self.bytes / sockets.max(1) as u64).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_split_over_sockets() {
        let s = Settings {
            round_trips: 1,
            warmup: 0,
            bytes: 256 << 20,
            write_bytes: WRITE_BYTES,
            runs: RUNS,
            sockets: 2,
            timeout: Duration::from_secs(1),
        };
        assert_eq!(s.bytes_per_socket(1), 256 << 20);
        assert_eq!(s.bytes_per_socket(2), 128 << 20);
        assert_eq!(Settings { bytes: 1, ..s }.bytes_per_socket(2), 1);
    }

    #[test]
    fn help_documents_the_variable() {
        use clap::CommandFactory;
        let help = crate::cli::Cli::command().render_help().to_string();
        assert!(help.contains(ENV_TCP_BYTES), "{help}");
    }
}
