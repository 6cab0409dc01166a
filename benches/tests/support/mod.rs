//! Starting the built `streamcomm-bench` from a test.

use std::process::Command;

/// Variables that would change a run, removed from its environment: a
/// launcher's rank variables, a forced transport, algorithm or tuning
/// file, and the size of the raw tcp measurement.
const CLEARED: [&str; 6] = [
    "RANK",
    "WORLD_SIZE",
    "STREAMCOMM_TRANSPORT",
    "STREAMCOMM_ALGO",
    "STREAMCOMM_TUNING_FILE",
    "STREAMCOMM_BENCH_TCP_BYTES",
];

/// `streamcomm-bench` with the words of `command_line` as its arguments
/// and `envs` set, in an environment without [`CLEARED`] and with the
/// library's timeout at 30 s, so that a hang fails fast inside the library
/// too, not after its 300 s default.
pub(crate) fn bench(command_line: &str, envs: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_streamcomm-bench"));
    command
        .args(command_line.split_whitespace())
        .env("STREAMCOMM_TIMEOUT", "30");
    for var in CLEARED {
        command.env_remove(var);
    }
    command.envs(envs.iter().copied());
    command
}
