//! The command line of `streamcomm-run`, parsed by hand.
//!
//! The grammar is small (`-n N [node options] [--] PROGRAM ARGS...`) and must
//! pass the program's own arguments through untouched, including ones that
//! look like our options, so a hand-written parser is simpler than a
//! dependency. It is here rather than in the binary so that it is unit-tested
//! and documented. Multi-node options follow torchrun's names (its
//! `--node_rank` spellings with underscores are accepted too); this module
//! only checks that they fit together, and [`nodes`](super::nodes) turns them
//! into a running node.

use std::ffi::OsString;

use crate::bootstrap::MAX_RANKS;
use crate::{Error, Result};

/// Most ranks `streamcomm-run` starts on one host.
pub const MAX_NPROC: usize = 4096;

/// `--master-port` when it is not given (torchrun's default).
pub const DEFAULT_MASTER_PORT: u16 = 29500;

/// The help text of `streamcomm-run`.
pub const USAGE: &str = "\
usage: streamcomm-run -n N [--] PROGRAM [ARGS...]
       streamcomm-run --nnodes M --node-rank K --master-addr ADDR [--master-port PORT]
                      -n N [--] PROGRAM [ARGS...]
       streamcomm-run --hosts H0,H1,... [--node-rank K] [--master-port PORT]
                      -n N [--] PROGRAM [ARGS...]

Starts N ranks of PROGRAM on this host, like torchrun --nproc-per-node=N.
Each rank gets STREAMCOMM_UNIQUE_ID, RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT; the launcher hosts the
bootstrap root. Output lines are prefixed with [rank i]. When a rank fails,
the others are stopped (SIGTERM, then SIGKILL after 2 s) and the launcher
exits with the failed rank's status.

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
}

/// The multi-node options, checked against each other and with defaults
/// filled in.
///
/// Guaranteed by [`parse_args`]: `nnodes >= 1`; `node_rank < nnodes` when
/// known; `node_rank` is `None` only when `hosts` is not empty (it is then
/// found from the host's addresses); `hosts` is empty or has `nnodes`
/// entries, the first being `master_addr`; `nnodes * nproc` ranks fit a
/// bootstrap ([`MAX_RANKS`]).
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

/// Options as they appear, before they are checked against each other.
#[derive(Default)]
struct Raw {
    nproc: Option<usize>,
    nnodes: Option<usize>,
    node_rank: Option<usize>,
    master_addr: Option<String>,
    master_port: Option<u16>,
    hosts: Option<Vec<String>>,
}

/// Parses `streamcomm-run`'s arguments (without the program name).
///
/// Options come first; the first word that is not an option (or the word
/// after `--`) is the program, and everything after it belongs to the program.
///
/// # Examples
///
/// ```
/// use streamcomm::launch::cli::{parse_args, Parsed};
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
    let mut args = args.into_iter();
    let mut raw = Raw::default();
    let program = loop {
        let Some(word) = args.next() else {
            break None;
        };
        let Some(text) = word.to_str() else {
            // Not UTF-8, so not one of our options: the program.
            break Some(word);
        };
        match text {
            "--" => break args.next(),
            "-h" | "--help" => return Ok(Parsed::Help),
            "-n" => raw.nproc = Some(parse_nproc("-n", &value_of(text, &mut args)?)?),
            _ if text.starts_with("-n") && !text.starts_with("--") => {
                raw.nproc = Some(parse_nproc("-n", &text[2..])?);
            }
            _ if text.starts_with("--") => {
                let (name, inline) = match text.split_once('=') {
                    Some((name, value)) => (name, Some(value.to_string())),
                    None => (text, None),
                };
                let name = name.replace('_', "-");
                if !is_value_option(&name) {
                    return Err(Error::invalid(format!("unknown option {text:?}")));
                }
                let value = match inline {
                    Some(v) => v,
                    None => value_of(&name, &mut args)?,
                };
                raw.set(&name, &value)?;
            }
            _ if text.starts_with('-') && text.len() > 1 => {
                return Err(Error::invalid(format!("unknown option {text:?}")));
            }
            _ => break Some(word),
        }
    };
    let program = program.ok_or_else(|| Error::invalid("no program to run"))?;
    let nproc = raw
        .nproc
        .ok_or_else(|| Error::invalid("missing -n N (the number of ranks)"))?;
    let nodes = raw.nodes(nproc)?;
    Ok(Parsed::Run(RunArgs {
        nproc,
        nodes,
        program,
        args: args.collect(),
    }))
}

fn is_value_option(name: &str) -> bool {
    matches!(
        name,
        "--nproc"
            | "--nproc-per-node"
            | "--nnodes"
            | "--node-rank"
            | "--master-addr"
            | "--master-port"
            | "--hosts"
    )
}

/// The next word, as the value of `option`.
fn value_of(option: &str, args: &mut impl Iterator<Item = OsString>) -> Result<String> {
    args.next()
        .map(|v| v.to_string_lossy().into_owned())
        .ok_or_else(|| Error::invalid(format!("{option} needs a value")))
}

impl Raw {
    /// Records `--name value` (`name` with dashes).
    fn set(&mut self, name: &str, value: &str) -> Result<()> {
        match name {
            "--nproc" | "--nproc-per-node" => self.nproc = Some(parse_nproc(name, value)?),
            "--nnodes" => self.nnodes = Some(parse_count(name, value, "a number of nodes", 1)?),
            "--node-rank" => self.node_rank = Some(parse_count(name, value, "a node index", 0)?),
            "--master-addr" => {
                let addr = value.trim();
                if addr.is_empty() {
                    return Err(Error::invalid("--master-addr needs an address, got \"\""));
                }
                self.master_addr = Some(addr.to_string());
            }
            "--master-port" => match value.trim().parse::<u16>() {
                Ok(port) if port > 0 => self.master_port = Some(port),
                _ => {
                    return Err(Error::invalid(format!(
                        "--master-port needs a port number between 1 and 65535, got {value:?}"
                    )))
                }
            },
            _ => self.hosts = Some(parse_hosts(value)?),
        }
        Ok(())
    }

    /// Checks the multi-node options against each other and fills in defaults.
    fn nodes(self, nproc: usize) -> Result<Option<NodeArgs>> {
        let given = self.nnodes.is_some()
            || self.node_rank.is_some()
            || self.master_addr.is_some()
            || self.master_port.is_some()
            || self.hosts.is_some();
        if !given {
            return Ok(None);
        }
        let hosts = self.hosts.unwrap_or_default();
        let nnodes = match (self.nnodes, hosts.len()) {
            (Some(n), 0) => n,
            (Some(n), h) if n != h => {
                return Err(Error::invalid(format!(
                    "--hosts lists {h} hosts but --nnodes is {n}"
                )))
            }
            (_, 0) => 1,
            (_, h) => h,
        };
        if let Some(k) = self.node_rank {
            if k >= nnodes {
                return Err(Error::invalid(format!(
                    "--node-rank {k} is out of range for {nnodes} nodes (0..={})",
                    nnodes - 1
                )));
            }
        }
        let master_addr = match (self.master_addr, hosts.first()) {
            (Some(m), Some(first)) if m != *first => {
                return Err(Error::invalid(format!(
                    "--master-addr {m} is not the first of --hosts ({first}), which is the master"
                )))
            }
            (Some(m), _) => m,
            (None, Some(first)) => first.clone(),
            (None, None) if nnodes == 1 => "127.0.0.1".to_string(),
            (None, None) => {
                return Err(Error::invalid(format!(
                    "--nnodes {nnodes} needs --master-addr (the address of node 0), or --hosts"
                )))
            }
        };
        let node_rank = match self.node_rank {
            None if nnodes == 1 => Some(0),
            None if hosts.is_empty() => {
                return Err(Error::invalid(format!(
                    "--nnodes {nnodes} needs --node-rank K (0..={}) on each node, or --hosts",
                    nnodes - 1
                )))
            }
            k => k,
        };
        if nnodes.checked_mul(nproc).is_none_or(|w| w > MAX_RANKS) {
            return Err(Error::invalid(format!(
                "{nnodes} nodes of {nproc} ranks is more than {MAX_RANKS} ranks"
            )));
        }
        Ok(Some(NodeArgs {
            nnodes,
            node_rank,
            master_addr,
            master_port: self.master_port.unwrap_or(DEFAULT_MASTER_PORT),
            hosts,
        }))
    }
}

fn parse_nproc(option: &str, value: &str) -> Result<usize> {
    match value.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_NPROC).contains(&n) => Ok(n),
        _ => Err(Error::invalid(format!(
            "{option} needs a number of ranks between 1 and {MAX_NPROC}, got {value:?}"
        ))),
    }
}

fn parse_count(option: &str, value: &str, what: &str, min: usize) -> Result<usize> {
    match value.trim().parse::<usize>() {
        Ok(n) if n >= min && n <= MAX_RANKS => Ok(n),
        _ => Err(Error::invalid(format!(
            "{option} needs {what} between {min} and {MAX_RANKS}, got {value:?}"
        ))),
    }
}

fn parse_hosts(value: &str) -> Result<Vec<String>> {
    let hosts: Vec<String> = value.split(',').map(|h| h.trim().to_string()).collect();
    if hosts.iter().any(String::is_empty) {
        return Err(Error::invalid(format!(
            "--hosts needs a comma-separated list of host names or addresses, got {value:?}"
        )));
    }
    if hosts.len() > MAX_RANKS {
        return Err(Error::invalid(format!(
            "--hosts lists more than {MAX_RANKS} hosts"
        )));
    }
    Ok(hosts)
}

#[cfg(test)]
#[path = "cli_tests.rs"]
mod tests;
