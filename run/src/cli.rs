//! The command line of `streamcomm-run`, parsed with clap.
//!
//! The grammar is small (`-n N [--keep-going] [--cuda-stand-in] [node
//! options] [--] PROGRAM ARGS...`) and must pass the program's own arguments through untouched,
//! including ones that look like our options: the first word that is not an
//! option starts the program's command line. clap (derive) splits the
//! words, accepting every spelling of each option; the values are then
//! checked one by one and against each other (module `checks`), with
//! messages that name the option at fault, and clap's own refusals (an
//! unknown option, a missing value, a value given to a flag) are reworded
//! the same way. Multi-node options follow torchrun's names
//! (its `--node_rank` spellings with underscores are accepted too); this
//! module only checks that they fit together, and [`nodes`](crate::nodes)
//! turns them into a running node.

use std::ffi::OsString;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{ArgAction, Parser};
use streamcomm::{Error, Result};

mod checks;

/// Most ranks `streamcomm-run` starts on one host.
pub const MAX_NPROC: usize = 4096;

/// `--master-port` when it is not given (torchrun's default).
pub const DEFAULT_MASTER_PORT: u16 = 29500;

/// The help text of `streamcomm-run`.
pub const USAGE: &str = "\
usage: streamcomm-run -n N [--keep-going] [--cuda-stand-in] [--nccl] [--] PROGRAM [ARGS...]
       streamcomm-run --nnodes M --node-rank K --master-addr ADDR [--master-port PORT]
                      -n N [--keep-going] [--] PROGRAM [ARGS...]
       streamcomm-run --hosts H0,H1,... [--node-rank K] [--master-port PORT]
                      -n N [--keep-going] [--] PROGRAM [ARGS...]

Starts N ranks of PROGRAM on this host, like torchrun --nproc-per-node=N.
Each rank gets STREAMCOMM_UNIQUE_ID, RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT; the launcher hosts the
bootstrap root. Output lines are prefixed with [rank i]. When a rank fails,
the others are stopped (SIGTERM, then SIGKILL after 2 s) and the launcher
exits with the failed rank's status. With --keep-going they are not: the
survivors run on (e.g. to shrink their communicator and go on without the
failed rank), the launcher waits for every rank, and then exits with the
status of the first rank that failed (0 if none did).

Multi-node jobs: run one streamcomm-run per node, each with the same
options except --node-rank. Node K starts global ranks K*N..K*N+N-1 of M*N
(every node runs N ranks) and also sets GROUP_RANK and NODE_RANK to K and
GROUP_WORLD_SIZE to M. Node 0's launcher serves the bootstrap root on
ADDR:PORT (ADDR must be an address of node 0 that the others can reach);
every rank joins it through STREAMCOMM_UNIQUE_ID. The root admits ranks
that know the job's secret: set the same STREAMCOMM_SECRET (32 hex digits,
e.g. from `openssl rand -hex 16`) on every node. Without it the secret is
derived from ADDR:PORT, which only keeps jobs apart (a warning says so).

options:
  -n, --nproc N          ranks to start on this node (1..=4096);
                         also --nproc-per-node N
  --nnodes M             number of nodes (default 1)
  --node-rank K          this node's index, 0..M-1 (default: the index in
                         --hosts of an address of this host; 0 if M is 1)
  --master-addr ADDR     node 0's address (default: the first of --hosts;
                         127.0.0.1 if M is 1)
  --master-port PORT     the bootstrap root's port on node 0 (default 29500)
  --hosts H0,H1,...      the nodes, node 0 (the master) first: sets M and
                         ADDR, and K unless --node-rank is given
  --keep-going           a failed rank does not stop the others (in a
                         multi-node job, give it to every node)
  --cuda-stand-in        run the ranks on the CPU stand-in for the CUDA
                         driver (crate streamcomm-cuda-standin), not a GPU:
                         a private directory with libcuda.so and
                         libcuda.so.1 linking to the stand-in goes first on
                         the ranks' LD_LIBRARY_PATH. The library is
                         $STREAMCOMM_STANDIN_LIB, else
                         libstreamcomm_cuda_standin.so beside streamcomm-run
                         or in its deps/, else (in a cargo workspace that has
                         it) the result of `cargo build -p
                         streamcomm-cuda-standin`. In a multi-node job it
                         applies to this node's ranks: give it to every node
  --nccl                 the ranks load streamcomm's libnccl.so.2 (crate
                         streamcomm-nccl) in place of NVIDIA's NCCL, the
                         same way: libnccl.so and libnccl.so.2 link to
                         $STREAMCOMM_NCCL_LIB, else libnccl.so beside
                         streamcomm-run or in its deps/, else `cargo build
                         -p streamcomm-nccl`'s. With --cuda-stand-in, a
                         program written for NCCL runs on the CPU
  -h, --help             print this help
  --                     end of options (the next word is PROGRAM)

Options taking a value also accept --option=VALUE, and torchrun's spellings
with underscores (--node_rank, --master_addr, --nproc_per_node, ...).";

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Print [`USAGE`] and exit successfully.
    Help,
    /// Run a job.
    Run(RunArgs),
}

/// A job to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunArgs {
    /// Number of ranks on this node.
    pub nproc: usize,
    /// The multi-node options, when any was given (`None`: a job of
    /// `nproc` ranks on this host alone).
    pub nodes: Option<NodeArgs>,
    /// The program each rank runs.
    pub program: OsString,
    /// Its arguments, passed through untouched.
    pub args: Vec<OsString>,
    /// `--keep-going`: a rank that fails does not stop the others
    /// ([`LocalLauncher::keep_going`](crate::local::LocalLauncher::keep_going)).
    pub keep_going: bool,
    /// `--cuda-stand-in`: the ranks load the CPU stand-in for the CUDA
    /// driver ([`substitute::CUDA_STAND_IN`](crate::substitute::CUDA_STAND_IN)).
    pub cuda_stand_in: bool,
    /// `--nccl`: the ranks load streamcomm's `libnccl.so.2`
    /// ([`substitute::NCCL`](crate::substitute::NCCL)).
    pub nccl: bool,
}

/// The multi-node options, checked against each other and with defaults
/// filled in.
///
/// Guaranteed by [`parse_args`]: `nnodes >= 1`; `node_rank < nnodes` when
/// known; `node_rank` is `None` only when `hosts` is not empty (it is then
/// found from the host's addresses); `hosts` is empty or has `nnodes`
/// entries, the first being `master_addr`; `nnodes * nproc` ranks fit a
/// bootstrap ([`MAX_RANKS`](streamcomm::bootstrap::MAX_RANKS)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeArgs {
    /// Number of nodes.
    pub nnodes: usize,
    /// This node's index, if given or implied.
    pub node_rank: Option<usize>,
    /// Node 0's address (host name or IP), as written.
    pub master_addr: String,
    /// The bootstrap root's port on node 0.
    pub master_port: u16,
    /// `--hosts`, node 0 first (empty when not given).
    pub hosts: Vec<String>,
}

/// The words of the command line as clap splits them: option values not yet
/// checked (so that errors name the option in our words), the program and
/// its arguments untouched. Only `parse_args` builds one.
#[derive(Parser, Debug)]
#[command(
    name = "streamcomm-run",
    override_help = USAGE,
    disable_help_flag = true,
    disable_version_flag = true,
    args_override_self = true
)]
struct Cli {
    /// `-n`, `--nproc`, `--nproc-per-node`: ranks on this node.
    #[arg(
        short = 'n',
        long = "nproc",
        visible_alias = "nproc-per-node",
        alias = "nproc_per_node",
        value_name = "N",
        allow_hyphen_values = true
    )]
    nproc: Option<OsString>,
    /// `--nnodes`: number of nodes.
    #[arg(long, value_name = "M", allow_hyphen_values = true)]
    nnodes: Option<OsString>,
    /// `--node-rank`: this node's index.
    #[arg(
        long = "node-rank",
        alias = "node_rank",
        value_name = "K",
        allow_hyphen_values = true
    )]
    node_rank: Option<OsString>,
    /// `--master-addr`: node 0's address.
    #[arg(
        long = "master-addr",
        alias = "master_addr",
        value_name = "ADDR",
        allow_hyphen_values = true
    )]
    master_addr: Option<OsString>,
    /// `--master-port`: the bootstrap root's port on node 0.
    #[arg(
        long = "master-port",
        alias = "master_port",
        value_name = "PORT",
        allow_hyphen_values = true
    )]
    master_port: Option<OsString>,
    /// `--hosts`: the nodes, node 0 first.
    #[arg(long, value_name = "H0,H1,...", allow_hyphen_values = true)]
    hosts: Option<OsString>,
    /// `--keep-going`: a failed rank does not stop the others.
    #[arg(long = "keep-going", action = ArgAction::SetTrue)]
    keep_going: bool,
    /// `--cuda-stand-in`: the ranks run on the CPU stand-in libcuda.
    #[arg(long = "cuda-stand-in", action = ArgAction::SetTrue)]
    cuda_stand_in: bool,
    /// `--nccl`: the ranks load streamcomm's libnccl.so.2.
    #[arg(long = "nccl", action = ArgAction::SetTrue)]
    nccl: bool,
    /// `-h`, `--help`: [`Parsed::Help`].
    #[arg(short = 'h', long = "help", action = ArgAction::Help)]
    help: Option<bool>,
    /// PROGRAM and its arguments: the first word that is not an option
    /// (or the word after `--`) and every word after it.
    #[arg(value_name = "PROGRAM", trailing_var_arg = true, num_args = 0..)]
    command: Vec<OsString>,
}

/// Parses `streamcomm-run`'s arguments (without the program name).
///
/// Options come first; the first word that is not an option (or the word
/// after `--`) is the program, and everything after it belongs to the program.
///
/// # Examples
///
/// ```
/// use streamcomm_run::cli::{parse_args, Parsed};
///
/// let Parsed::Run(run) = parse_args(["-n", "2", "echo", "-n", "hi"].map(Into::into))? else {
///     unreachable!()
/// };
/// assert_eq!((run.nproc, run.program.to_str(), run.args.len()), (2, Some("echo"), 2));
/// assert_eq!(run.nodes, None);
///
/// let words = ["--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "-n", "4", "prog"];
/// let Parsed::Run(run) = parse_args(words.map(Into::into))? else { unreachable!() };
/// let nodes = run.nodes.expect("multi-node");
/// assert_eq!((nodes.nnodes, nodes.node_rank, nodes.master_port), (2, Some(1), 29500));
/// # Ok::<(), streamcomm::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::InvalidArgument`] describing the problem: an unknown option, a
/// missing or invalid value, options that contradict each other (see
/// [`NodeArgs`]), or no program.
pub fn parse_args(args: impl IntoIterator<Item = OsString>) -> Result<Parsed> {
    let words: Vec<OsString> = args.into_iter().collect();
    let argv = std::iter::once(OsString::from("streamcomm-run")).chain(words.iter().cloned());
    let cli = match Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(e) if e.kind() == ErrorKind::DisplayHelp => return Ok(Parsed::Help),
        Err(e) => return Err(clap_error(&e, &words)),
    };
    let raw = checks::Raw::check(&cli)?;
    let mut command = cli.command.into_iter();
    let program = command
        .next()
        .ok_or_else(|| Error::invalid("no program to run"))?;
    let nproc = raw
        .nproc
        .ok_or_else(|| Error::invalid("missing -n N (the number of ranks)"))?;
    let nodes = raw.nodes(nproc)?;
    Ok(Parsed::Run(RunArgs {
        nproc,
        nodes,
        program,
        args: command.collect(),
        keep_going: cli.keep_going,
        cuda_stand_in: cli.cuda_stand_in,
        nccl: cli.nccl,
    }))
}

/// Our message for what clap refused in `words`.
fn clap_error(e: &clap::Error, words: &[OsString]) -> Error {
    let context = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        _ => None,
    };
    match e.kind() {
        ErrorKind::UnknownArgument => {
            let arg = context(ContextKind::InvalidArg).unwrap_or_default();
            // As typed, with any `=VALUE` clap left out.
            let typed = words
                .iter()
                .filter_map(|w| w.to_str())
                .find(|w| {
                    *w == arg
                        || w.strip_prefix(arg.as_str())
                            .is_some_and(|r| r.starts_with('='))
                })
                .unwrap_or(&arg);
            Error::invalid(format!("unknown option {typed:?}"))
        }
        // A value is missing only at the end: the last word is the option.
        ErrorKind::InvalidValue => {
            let option = words
                .last()
                .map(|w| w.to_string_lossy().replace('_', "-"))
                .unwrap_or_default();
            Error::invalid(format!("{option} needs a value"))
        }
        // A value given to a flag (`--keep-going=yes`).
        ErrorKind::TooManyValues => {
            let flag = context(ContextKind::InvalidArg).unwrap_or_default();
            let value = context(ContextKind::InvalidValue).unwrap_or_default();
            Error::invalid(format!("{flag} takes no value, got {value:?}"))
        }
        _ => {
            let text = e.kind().as_str().unwrap_or("invalid command line");
            Error::invalid(text.to_string())
        }
    }
}

#[cfg(test)]
#[path = "cli_tests.rs"]
mod tests;
