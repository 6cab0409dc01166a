//! Who this process is: the launcher of local ranks, or one rank of a job.
//!
//! Run by hand, the benchmark starts `--ranks` copies of itself through the
//! launcher crate's [`LocalLauncher`] (what `streamcomm-run` runs), after measuring
//! the machine's limits itself, while no rank is running to disturb the
//! measurement; the figures reach rank 0 through environment variables. Run
//! under a launcher (ours, torchrun, Slurm, Open MPI), it is that rank, and
//! rank 0 measures the limits before joining the communicator.

use std::ffi::OsString;

use streamcomm::launch::{LaunchInfo, detect_from_process_env};
use streamcomm_run::local::{LocalLauncher, Outcome, install_termination_handler};

use crate::error::{Context, Fallible};
use crate::machine::MachineLimits;

/// Memcpy bandwidth measured by the launcher, GB/s.
pub(crate) const ENV_MEMCPY_GBPS: &str = "STREAMCOMM_BENCH_MEMCPY_GBPS";
/// Core-to-core round trip p50 measured by the launcher, µs.
pub(crate) const ENV_C2C_US: &str = "STREAMCOMM_BENCH_C2C_US";
/// Core-to-core round trip p99 measured by the launcher, µs.
pub(crate) const ENV_C2C_P99_US: &str = "STREAMCOMM_BENCH_C2C_P99_US";

/// Variables that mean "started by a launcher" even when incomplete.
const RANK_VARS: [&str; 5] = [
    "RANK",
    "WORLD_SIZE",
    "SLURM_PROCID",
    "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",
];

/// What this process does.
#[derive(Debug)]
pub(crate) enum Role {
    /// No launcher environment: start the ranks.
    Launcher,
    /// One rank of a job.
    Rank(LaunchInfo),
}

/// Reads the launcher environment.
///
/// # Errors
/// When a launcher's variables are present but malformed (rather than
/// silently starting a local job of our own).
pub(crate) fn role() -> Fallible<Role> {
    match detect_from_process_env() {
        Ok(info) => Ok(Role::Rank(info)),
        Err(e) if RANK_VARS.iter().any(|v| std::env::var_os(v).is_some()) => {
            Err(format!("a launcher environment is set but unusable: {e}"))
        }
        Err(_) => Ok(Role::Launcher),
    }
}

/// Starts `nranks` copies of this program with the same arguments, passes
/// `limits` to them, and waits; returns the exit code for the launcher.
///
/// # Errors
/// When the ranks cannot be started.
pub(crate) fn run_ranks(nranks: usize, limits: &MachineLimits) -> Fallible<i32> {
    let exe = std::env::current_exe().context("find this program's path")?;
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    install_termination_handler().context("install the signal handlers")?;
    let outcome = LocalLauncher::new(nranks, exe)
        .args(args)
        .env(ENV_MEMCPY_GBPS, limits.memcpy_gbps.to_string())
        .env(ENV_C2C_US, limits.c2c_round_trip_us.to_string())
        .env(ENV_C2C_P99_US, limits.c2c_round_trip_p99_us.to_string())
        .prefix_output(false)
        .run()
        .context("start the ranks")?;
    if outcome != Outcome::Success {
        eprintln!("streamcomm-bench: {outcome}");
    }
    Ok(outcome.exit_code())
}

/// The limits the launcher measured, if it passed them.
///
/// # Errors
/// When a variable is set but is not a number.
pub(crate) fn limits_from_env() -> Fallible<Option<MachineLimits>> {
    let read = |name: &str| -> Fallible<Option<f64>> {
        match std::env::var(name) {
            Ok(v) => v
                .trim()
                .parse::<f64>()
                .map(Some)
                .map_err(|_| format!("{name}={v:?} is not a number")),
            Err(_) => Ok(None),
        }
    };
    match (
        read(ENV_MEMCPY_GBPS)?,
        read(ENV_C2C_US)?,
        read(ENV_C2C_P99_US)?,
    ) {
        (Some(memcpy_gbps), Some(c2c_round_trip_us), p99) => Ok(Some(MachineLimits {
            memcpy_gbps,
            c2c_round_trip_us,
            c2c_round_trip_p99_us: p99.unwrap_or(f64::NAN),
        })),
        _ => Ok(None),
    }
}
