//! Every `STREAMCOMM_*` variable by name, with what it accepts: the one list
//! that the parsers take their names from ([`Config::with_vars`] and
//! `launch::env`), that their error messages quote, and that the check for
//! unknown variables ([`warn_unknown`]) compares against.
//!
//! Three groups: [`CONFIG`] (the fields of [`Config`]), [`LAUNCH`] (read by
//! `launch::env` when a communicator is made from a launcher's environment)
//! and [`ELSEWHERE`] (read by other crates of the workspace, the examples,
//! the tests and the tools). Names that begin `STREAMCOMM_BENCH_` or contain
//! `_TEST_` belong to the benchmark's and the tests' own child processes and
//! are never warned about. `scripts/check-config-doc.sh` checks that the
//! names here are exactly those the configuration guide has rows for, and
//! the unit tests that the parsers read exactly [`CONFIG`] and [`LAUNCH`].
//!
//! [`Config`]: super::Config
//! [`Config::with_vars`]: super::Config::with_vars

use std::collections::BTreeSet;
use std::sync::Mutex;

use crate::Error;

/// A variable and what it accepts, for error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Var {
    /// `STREAMCOMM_...`.
    pub(crate) name: &'static str,
    /// What a value is, after "is not": `a transport`.
    pub(crate) what: &'static str,
    /// What is accepted, after "expected": `one of: ...` or a format.
    pub(crate) expected: &'static str,
}

const fn var(name: &'static str, what: &'static str, expected: &'static str) -> Var {
    Var {
        name,
        what,
        expected,
    }
}

const SWITCH: &str = "one of: 1, true, yes, on, 0, false, no, off";

pub(crate) const BUFFSIZE: Var = var(
    "STREAMCOMM_BUFFSIZE",
    "a ring size",
    "a size in bytes up to 1G, digits with an optional K, M or G suffix (binary multiples), \
     e.g. 4M, leaving slots (BUFFSIZE / NSTEPS) of at least 64 bytes",
);
pub(crate) const SHM_BUDGET: Var = var(
    "STREAMCOMM_SHM_BUDGET",
    "a shared-memory budget",
    "a size in bytes from 64K to 64G, digits with an optional K, M or G suffix (binary \
     multiples), e.g. 64M",
);
pub(crate) const NSTEPS: Var = var(
    "STREAMCOMM_NSTEPS",
    "a slot count",
    "an integer from 1 to 1024",
);
pub(crate) const TIMEOUT: Var = var(
    "STREAMCOMM_TIMEOUT",
    "a timeout",
    "a positive number of seconds, fractions allowed (e.g. 300 or 2.5)",
);
pub(crate) const PROGRESS: Var = var(
    "STREAMCOMM_PROGRESS",
    "a progress mode",
    "one of: inline, proxy",
);
pub(crate) const SPIN: Var = var(
    "STREAMCOMM_SPIN",
    "a spin count",
    "an integer from 0 to 4294967295",
);
pub(crate) const BARRIER_ALGO: Var = var(
    "STREAMCOMM_BARRIER_ALGO",
    "a barrier algorithm",
    "one of: auto, central_counter, central_flags, chain, tree[:K] (K >= 2), dissemination, \
     kway[:K] (K >= 1), hierarchical[:dissemination|:tree[:K]]",
);
pub(crate) const HOSTS_OVERRIDE: Var = var(
    "STREAMCOMM_HOSTS_OVERRIDE",
    "a host placement",
    "a number K >= 1 (K consecutive ranks per host) or one host label per rank, \
     comma-separated (e.g. a,a,b,b)",
);
pub(crate) const TRANSPORT: Var = var(
    "STREAMCOMM_TRANSPORT",
    "a transport",
    "one of: auto, shm, tcp, verbs",
);
pub(crate) const NCHANNELS: Var = var(
    "STREAMCOMM_NCHANNELS",
    "a channel count",
    "an integer from 1 to 64",
);
pub(crate) const SOCKET_IFNAME: Var = var(
    "STREAMCOMM_SOCKET_IFNAME",
    "an interface name",
    "the name of a network interface with an address (e.g. eth0); empty for the default",
);
pub(crate) const IB_HCA: Var = var(
    "STREAMCOMM_IB_HCA",
    "an RDMA device name",
    "letters, digits, `_`, `-` and `.` (e.g. mlx5_0); empty for the first active device",
);
pub(crate) const IB_GID_INDEX: Var = var(
    "STREAMCOMM_IB_GID_INDEX",
    "a GID index",
    "an integer from 0 to 255; empty to choose one automatically",
);
pub(crate) const P2P_EAGER_LIMIT: Var = var(
    "STREAMCOMM_P2P_EAGER_LIMIT",
    "a message size",
    "a size in bytes, digits with an optional K, M or G suffix (binary multiples), e.g. 256K",
);
pub(crate) const P2P_DIRECT: Var = var("STREAMCOMM_P2P_DIRECT", "a switch", SWITCH);
pub(crate) const CUDA_WINDOW: Var = var(
    "STREAMCOMM_CUDA_WINDOW",
    "a window size",
    "0 (no direct path) or a size of at least 1K, digits with an optional K, M or G suffix \
     (binary multiples), e.g. 32M",
);
pub(crate) const GPUDIRECT: Var = var("STREAMCOMM_GPUDIRECT", "a switch", SWITCH);
pub(crate) const BIND: Var = var("STREAMCOMM_BIND", "a switch", SWITCH);
pub(crate) const DEBUG: Var = var(
    "STREAMCOMM_DEBUG",
    "a tracing filter",
    "a `tracing` filter (e.g. info or streamcomm=debug)",
);
pub(crate) const ALGO: Var = var(
    "STREAMCOMM_ALGO",
    "an algorithm override",
    "auto, one algorithm name (e.g. ring), or collective=algorithm pairs, comma-separated, \
     each collective once (e.g. all_reduce=ring,broadcast=binomial)",
);
pub(crate) const TUNING_FILE: Var = var(
    "STREAMCOMM_TUNING_FILE",
    "a tuning file",
    "the path of a readable tuning file written by `streamcomm-bench calibrate`; \
     empty for the built-in parameters",
);
pub(crate) const FAULTS: Var = var(
    "STREAMCOMM_FAULTS",
    "a fault plan",
    "comma-separated rules send|recv[:rank=R]:peer=P:nth=N:ACTION, ACTION one of drop, dup \
     (both send only), error, delay=MSms (up to 60000ms), e.g. send:peer=1:nth=5:drop; and at \
     most one mcast[:rank=R][:seed=N][:drop=P%][:dup=P%][:refuse] for the multicast barrier's \
     datagrams, e.g. mcast:drop=10%",
);

/// The variables of [`Config`](super::Config), one per field.
pub(crate) const CONFIG: &[Var] = &[
    BUFFSIZE,
    NSTEPS,
    SHM_BUDGET,
    TIMEOUT,
    PROGRESS,
    SPIN,
    BARRIER_ALGO,
    HOSTS_OVERRIDE,
    TRANSPORT,
    NCHANNELS,
    SOCKET_IFNAME,
    IB_HCA,
    IB_GID_INDEX,
    P2P_EAGER_LIMIT,
    P2P_DIRECT,
    CUDA_WINDOW,
    GPUDIRECT,
    BIND,
    DEBUG,
    ALGO,
    TUNING_FILE,
    FAULTS,
];

pub(crate) const UNIQUE_ID: Var = var(
    "STREAMCOMM_UNIQUE_ID",
    "a unique id",
    "ADDRESS:PORT/SECRET with SECRET 32 hex digits, as `streamcomm-run` sets it \
     (e.g. 10.0.0.1:29500/00112233445566778899aabbccddeeff)",
);
pub(crate) const SECRET: Var = var(
    "STREAMCOMM_SECRET",
    "a secret",
    "exactly 32 hex digits (e.g. from `openssl rand -hex 16`)",
);
pub(crate) const ROOT_PORT: Var = var(
    "STREAMCOMM_ROOT_PORT",
    "a port",
    "a port number, an integer from 0 to 65535",
);
pub(crate) const LAUNCHER: Var = var(
    "STREAMCOMM_LAUNCHER",
    "a launcher name",
    "`streamcomm-run` (set by that launcher; any other value counts as torchrun)",
);

/// The variables `launch::env` reads besides the launchers' own.
pub(crate) const LAUNCH: &[Var] = &[UNIQUE_ID, SECRET, ROOT_PORT, LAUNCHER];

/// Variables read by the rest of the workspace: the CUDA layer
/// (`streamcomm-gpu`), the examples, the tests and the tools.
pub(crate) const ELSEWHERE: &[&str] = &[
    "STREAMCOMM_NVRTC_LIB",
    "STREAMCOMM_KERNEL_CACHE",
    "STREAMCOMM_CUDA_INCLUDE",
    "STREAMCOMM_FFI_LIBRARY",
    "STREAMCOMM_TEST_SEED",
    "STREAMCOMM_TEST_FULL",
    "STREAMCOMM_SKIP_LOG",
    "STREAMCOMM_REQUIRE_GPU",
    "STREAMCOMM_REQUIRE_RDMA",
    "STREAMCOMM_SOAK_OPS",
    "STREAMCOMM_STANDIN_PROFILE",
    "STREAMCOMM_STANDIN_DEVICES",
    "STREAMCOMM_STANDIN_DRIVER_VERSION",
    "STREAMCOMM_STANDIN_POISON",
    "STREAMCOMM_STANDIN_STRICT",
    "STREAMCOMM_STANDIN_COMPUTE_MODE",
    "STREAMCOMM_STANDIN_MEMORY_POOLS",
    "STREAMCOMM_STANDIN_GDR",
    "STREAMCOMM_STANDIN_GDR_FLUSH",
    "STREAMCOMM_STANDIN_DESTRUCTOR_DELAY_MS",
    "STREAMCOMM_STANDIN_MACHINE_ID",
    "STREAMCOMM_STANDIN_REFUSE",
    "STREAMCOMM_STANDIN_COUNTS",
    "STREAMCOMM_STANDIN_LIB",
    "STREAMCOMM_BENCH_TCP_BYTES",
];

/// How a value is shown in a message: as written when it is one plain
/// token, quoted (escapes and all) when it is empty or has spaces or
/// control characters.
pub(crate) fn shown(value: &str) -> String {
    if !value.is_empty() && value.chars().all(|c| c.is_ascii_graphic()) {
        value.to_string()
    } else {
        format!("{value:?}")
    }
}

/// `NAME=value is not WHAT; expected EXPECTED`.
pub(crate) fn invalid(var: Var, value: &str) -> Error {
    Error::invalid(format!(
        "{}={} is not {}; expected {}",
        var.name,
        shown(value),
        var.what,
        var.expected
    ))
}

/// `NAME=value is not WHAT (WHY); expected EXPECTED`.
pub(crate) fn invalid_because(var: Var, value: &str, why: &str) -> Error {
    Error::invalid(format!(
        "{}={} is not {} ({why}); expected {}",
        var.name,
        shown(value),
        var.what,
        var.expected
    ))
}

/// As [`invalid_because`] without repeating the value (a secret).
pub(crate) fn invalid_secret(var: Var, why: &str) -> Error {
    Error::invalid(format!(
        "{} (value not shown) is not {} ({why}); expected {}",
        var.name, var.what, var.expected
    ))
}

/// The prefix of every variable of streamcomm's.
const PREFIX: &str = "STREAMCOMM_";

/// Every name in the lists (not the internal ones).
fn known() -> impl Iterator<Item = &'static str> {
    CONFIG
        .iter()
        .chain(LAUNCH)
        .map(|v| v.name)
        .chain(ELSEWHERE.iter().copied())
}

/// Whether some part of streamcomm reads `name`.
pub(crate) fn is_known(name: &str) -> bool {
    name.starts_with("STREAMCOMM_BENCH_") || name.contains("_TEST_") || known().any(|k| k == name)
}

/// The known name `name` is most likely a misspelling of: the nearest by
/// edit distance (ignoring case), if within a third of the length of what
/// follows `STREAMCOMM_` (at least 1); ties go to the earlier name.
pub(crate) fn did_you_mean(name: &str) -> Option<&'static str> {
    let upper = name.to_ascii_uppercase();
    known()
        .map(|k| (edit_distance(&upper, k), k))
        .filter(|&(d, k)| d <= ((k.len() - PREFIX.len()) / 3).max(1))
        .min_by_key(|&(d, _)| d)
        .map(|(_, k)| k)
}

/// Levenshtein distance between two ASCII-ish strings, by bytes.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, &ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// The warning for a variable named `name`, if it looks like one of
/// streamcomm's (`STREAMCOMM_` in any case) but none of streamcomm reads it.
pub(crate) fn unknown_warning(name: &str) -> Option<String> {
    if !name.to_ascii_uppercase().starts_with(PREFIX) || is_known(name) {
        return None;
    }
    let hint = match did_you_mean(name) {
        Some(k) if k.eq_ignore_ascii_case(name) => {
            format!("did you mean {k}? (variable names are case-sensitive)")
        }
        Some(k) => format!("did you mean {k}?"),
        None => "the variables are listed in docs/guide/configuration.md".to_string(),
    };
    Some(format!(
        "{name} is set, but streamcomm reads no such variable (ignored); {hint}"
    ))
}

/// Names already warned about by this process.
static WARNED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Warns about each name in `names` that [`unknown_warning`] has a warning
/// for, once per process and name: through `tracing` at warn level, and on
/// stderr as well while no `tracing` subscriber is installed (the library
/// never installs one, so without this a typo would pass unseen). Returns
/// the warnings given by this call.
pub(crate) fn warn_unknown(names: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut given = Vec::new();
    for name in names {
        let Some(warning) = unknown_warning(&name) else {
            continue;
        };
        let first = WARNED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name);
        if first {
            tracing::warn!(target: "streamcomm::config", "{warning}");
            if !tracing::dispatcher::has_been_set() {
                eprintln!("streamcomm: warning: {warning}");
            }
            given.push(warning);
        }
    }
    given
}

/// [`warn_unknown`] over the names in this process's environment.
pub(crate) fn warn_unknown_in_process_env() {
    warn_unknown(std::env::vars_os().map(|(k, _)| k.to_string_lossy().into_owned()));
}

#[cfg(test)]
#[path = "vars_tests.rs"]
mod tests;
