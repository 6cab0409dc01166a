//! Reading a launcher's environment into one [`LaunchInfo`] (the rules are
//! in the [`launch`](super) module's docs).

use std::net::{SocketAddr, ToSocketAddrs};

use crate::bootstrap::{UniqueId, parse_secret};
use crate::config::vars::{self, LAUNCHER, ROOT_PORT, SECRET, UNIQUE_ID};
use crate::{Error, Result};

/// Where this process's communicator finds its bootstrap root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootSpec {
    /// A full id from `STREAMCOMM_UNIQUE_ID`: someone (e.g. `streamcomm-run`)
    /// already serves the root.
    UniqueId(UniqueId),
    /// `MASTER_ADDR:MASTER_PORT`: rank 0 is expected to serve the root there
    /// ([`UniqueId::serve_at`]) and the others to join it.
    Address {
        /// `MASTER_ADDR` resolved (IPv4 preferred), with `MASTER_PORT`.
        addr: SocketAddr,
        /// From `STREAMCOMM_SECRET`, or derived from the address (weaker;
        /// see the [module docs](super)).
        secret: [u8; 16],
    },
}

impl RootSpec {
    /// The id ranks join with (for [`RootSpec::Address`], without starting
    /// a server: rank 0 serves it with [`UniqueId::serve_at`]).
    ///
    /// # Examples
    /// ```
    /// use streamcomm::launch::RootSpec;
    ///
    /// let root = RootSpec::Address {
    ///     addr: "10.0.0.1:29500".parse().unwrap(),
    ///     secret: [0x11; 16],
    /// };
    /// let id = root.unique_id();
    /// assert_eq!(id.addr().port(), 29500);
    /// assert_eq!(id.secret()[1], 0x11);
    /// ```
    pub fn unique_id(&self) -> UniqueId {
        match self {
            RootSpec::UniqueId(id) => *id,
            RootSpec::Address { addr, secret } => UniqueId::from_parts(*addr, *secret),
        }
    }
}

/// What a launcher told this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchInfo {
    /// This process's rank, `< size`.
    pub rank: usize,
    /// Number of ranks.
    pub size: usize,
    /// This process's index among the ranks on its host, `< local_size`.
    pub local_rank: usize,
    /// Number of ranks on this host.
    pub local_size: usize,
    /// The bootstrap root.
    pub root: RootSpec,
    /// Which launcher was recognised: `"streamcomm-run"`, `"torchrun"`,
    /// `"slurm"`, `"openmpi"` or `"pmi"`.
    pub launcher: &'static str,
}

/// Reads the launcher environment through `get` (a variable's value, or
/// `None` when unset).
///
/// # Errors
///
/// [`Error::InvalidArgument`] naming the variable that is missing, not a
/// number, or inconsistent, with its value and what it accepts (e.g.
/// `RANK=5 is out of range; expected an integer below WORLD_SIZE=4`), or
/// saying that no launcher environment was found. Secrets
/// (`STREAMCOMM_SECRET`, `STREAMCOMM_UNIQUE_ID`) are never repeated.
pub fn detect(get: &dyn Fn(&str) -> Option<String>) -> Result<LaunchInfo> {
    let get = |name: &str| get(name).filter(|v| !v.trim().is_empty());
    let ranks = detect_ranks(&get)?;
    let root = detect_root(&get)?;
    Ok(LaunchInfo {
        rank: ranks.rank,
        size: ranks.size,
        local_rank: ranks.local_rank,
        local_size: ranks.local_size,
        root,
        launcher: ranks.launcher,
    })
}

/// [`detect`] on this process's environment.
///
/// Like [`Config::from_env`](crate::Config::from_env), it first warns (once
/// per process and name) about any `STREAMCOMM_*` variable no part of
/// streamcomm reads, with the nearest known name.
///
/// # Examples
/// ```no_run
/// let info = streamcomm::launch::detect_from_process_env()?;
/// println!("rank {} of {}, started by {}", info.rank, info.size, info.launcher);
/// # Ok::<(), streamcomm::Error>(())
/// ```
///
/// # Errors
///
/// As for [`detect`].
pub fn detect_from_process_env() -> Result<LaunchInfo> {
    vars::warn_unknown_in_process_env();
    detect(&|name| std::env::var(name).ok())
}

/// The variables that name a launcher's rank or world size, one of which
/// each launcher sets ([`detect`] tries them in this order).
const RANK_VARIABLES: [&str; 7] = [
    "RANK",
    "WORLD_SIZE",
    "SLURM_PROCID",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
];

/// Whether this process was started by a launcher that streamcomm reads:
/// one of the rank or world-size variables of `streamcomm-run`, torchrun,
/// Slurm, Open MPI or PMI is set (and not empty). A program that also runs
/// on its own uses it to choose between
/// [`Communicator::from_env`](crate::Communicator::from_env) and a
/// communicator of one rank.
///
/// # Examples
/// ```
/// if !streamcomm::launch::launched() {
///     println!("started on its own: one rank");
/// }
/// ```
pub fn launched() -> bool {
    RANK_VARIABLES
        .iter()
        .any(|name| std::env::var(name).is_ok_and(|v| !v.trim().is_empty()))
}

/// Rank figures before the root is known.
struct Ranks {
    launcher: &'static str,
    rank: usize,
    size: usize,
    local_rank: usize,
    local_size: usize,
}

type Getter<'a> = dyn Fn(&str) -> Option<String> + 'a;

fn detect_ranks(get: &Getter<'_>) -> Result<Ranks> {
    if get("RANK").is_some() || get("WORLD_SIZE").is_some() {
        let launcher = match get(LAUNCHER.name).as_deref() {
            Some("streamcomm-run") => "streamcomm-run",
            _ => "torchrun",
        };
        let (rank, size) = pair(get, "RANK", "WORLD_SIZE", launcher)?;
        let local_size = optional(get, &["LOCAL_WORLD_SIZE"])?.unwrap_or((size, "WORLD_SIZE"));
        let local_rank =
            optional(get, &["LOCAL_RANK"])?.unwrap_or((rank % local_size.0.max(1), "RANK"));
        return finish(launcher, (rank, size, "WORLD_SIZE"), local_rank, local_size);
    }
    if get("SLURM_PROCID").is_some() {
        let size_var = if get("SLURM_NTASKS").is_some() {
            "SLURM_NTASKS"
        } else {
            "SLURM_NPROCS"
        };
        let (rank, size) = pair(get, "SLURM_PROCID", size_var, "slurm")?;
        let local_size = slurm_local_size(get, size)?;
        let local_rank = optional(get, &["SLURM_LOCALID"])?
            .unwrap_or((rank % local_size.0.max(1), "SLURM_PROCID"));
        return finish("slurm", (rank, size, size_var), local_rank, local_size);
    }
    if get("OMPI_COMM_WORLD_RANK").is_some() || get("OMPI_COMM_WORLD_SIZE").is_some() {
        let (rank, size) = pair(
            get,
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "openmpi",
        )?;
        let local_size = optional(get, &["OMPI_COMM_WORLD_LOCAL_SIZE"])?
            .unwrap_or((size, "OMPI_COMM_WORLD_SIZE"));
        let local_rank = optional(get, &["OMPI_COMM_WORLD_LOCAL_RANK"])?
            .unwrap_or((rank % local_size.0.max(1), "OMPI_COMM_WORLD_RANK"));
        let world = (rank, size, "OMPI_COMM_WORLD_SIZE");
        return finish("openmpi", world, local_rank, local_size);
    }
    if get("PMI_RANK").is_some() || get("PMI_SIZE").is_some() {
        let (rank, size) = pair(get, "PMI_RANK", "PMI_SIZE", "pmi")?;
        let local_rank = optional(get, &["MPI_LOCALRANKID", "PMI_LOCAL_RANK"])?;
        let local_size =
            optional(get, &["MPI_LOCALNRANKS", "PMI_LOCAL_SIZE"])?.unwrap_or(match local_rank {
                Some(_) => (size, "PMI_SIZE"),
                None => (1, "the default local size"),
            });
        let local_rank = local_rank.unwrap_or((0, "the default local rank"));
        return finish("pmi", (rank, size, "PMI_SIZE"), local_rank, local_size);
    }
    Err(Error::invalid(
        "no launcher environment found: set RANK/WORLD_SIZE (torchrun, streamcomm-run), \
         SLURM_PROCID/SLURM_NTASKS (srun), OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE (Open MPI) \
         or PMI_RANK/PMI_SIZE (MPICH, Intel MPI)",
    ))
}

/// Reads a launcher's rank and size variables, both required once one is set.
fn pair(
    get: &Getter<'_>,
    rank_var: &str,
    size_var: &str,
    launcher: &str,
) -> Result<(usize, usize)> {
    let rank = required(get, rank_var, size_var, launcher)?;
    let size = required(get, size_var, rank_var, launcher)?;
    if size == 0 {
        return Err(Error::invalid(format!(
            "{size_var}=0 is not a number of ranks (a communicator needs at least one); \
             expected a positive integer"
        )));
    }
    if rank >= size {
        return Err(Error::invalid(format!(
            "{rank_var}={rank} is out of range; expected an integer below {size_var}={size}"
        )));
    }
    Ok((rank, size))
}

fn required(get: &Getter<'_>, var: &str, other: &str, launcher: &str) -> Result<usize> {
    match get(var) {
        Some(v) => number(var, &v),
        None => Err(Error::invalid(format!(
            "{other} is set but {var} is not ({launcher} launch); expected both, \
             as non-negative integers"
        ))),
    }
}

/// The first of `names` that is set, as a number, with its name.
fn optional<'n>(get: &Getter<'_>, names: &[&'n str]) -> Result<Option<(usize, &'n str)>> {
    for &var in names {
        if let Some(v) = get(var) {
            return number(var, &v).map(|n| Some((n, var)));
        }
    }
    Ok(None)
}

fn number(var: &str, value: &str) -> Result<usize> {
    value.trim().parse().map_err(|_| {
        Error::invalid(format!(
            "{var}={} is not a number; expected a non-negative integer",
            vars::shown(value)
        ))
    })
}

/// `VAR=value`, or for a figure no variable gave, `the default local size 1`.
fn figure(var: &str, value: usize) -> String {
    if var.starts_with("the ") {
        format!("{var} {value}")
    } else {
        format!("{var}={value}")
    }
}

/// Checks the local figures (each with the variable it came from) against
/// each other and the world's (rank, size, size variable).
fn finish(
    launcher: &'static str,
    (rank, size, size_var): (usize, usize, &str),
    (local_rank, local_rank_var): (usize, &str),
    (local_size, local_size_var): (usize, &str),
) -> Result<Ranks> {
    if local_size == 0 || local_size > size {
        return Err(Error::invalid(format!(
            "{} is out of range; expected an integer from 1 to {size_var}={size}",
            figure(local_size_var, local_size)
        )));
    }
    if local_rank >= local_size {
        return Err(Error::invalid(format!(
            "{} is out of range; expected an integer below {}",
            figure(local_rank_var, local_rank),
            figure(local_size_var, local_size)
        )));
    }
    Ok(Ranks {
        launcher,
        rank,
        size,
        local_rank,
        local_size,
    })
}

/// Tasks on this node under Slurm, with the variable they came from.
fn slurm_local_size(get: &Getter<'_>, size: usize) -> Result<(usize, &'static str)> {
    if let Some(v) = get("SLURM_NTASKS_PER_NODE") {
        return Ok((
            number("SLURM_NTASKS_PER_NODE", &v)?,
            "SLURM_NTASKS_PER_NODE",
        ));
    }
    if let (Some(list), Some(node)) = (get("SLURM_TASKS_PER_NODE"), get("SLURM_NODEID")) {
        let node = number("SLURM_NODEID", &node)?;
        let counts = parse_tasks_per_node(&list).ok_or_else(|| {
            Error::invalid(format!(
                "SLURM_TASKS_PER_NODE={} is not a Slurm task list; expected task counts, \
                 comma-separated, each optionally repeated (e.g. 2(x3),1)",
                vars::shown(&list)
            ))
        })?;
        let count = counts.get(node).copied().ok_or_else(|| {
            Error::invalid(format!(
                "SLURM_NODEID={node} is out of range; expected a node index below {}, the \
                 nodes of SLURM_TASKS_PER_NODE={}",
                counts.len(),
                vars::shown(&list)
            ))
        })?;
        return Ok((count, "SLURM_TASKS_PER_NODE"));
    }
    if let Some(nodes) = get("SLURM_NNODES") {
        let nodes = number("SLURM_NNODES", &nodes)?;
        if nodes > 0 && size.is_multiple_of(nodes) {
            return Ok((size / nodes, "the local size from SLURM_NNODES"));
        }
    }
    Err(Error::invalid(
        "cannot tell how many Slurm tasks run on this node: set SLURM_NTASKS_PER_NODE \
         (srun --ntasks-per-node) or SLURM_TASKS_PER_NODE and SLURM_NODEID",
    ))
}

/// Expands Slurm's compressed task list, e.g. `2(x3),1` to `[2, 2, 2, 1]`.
fn parse_tasks_per_node(list: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for item in list.trim().split(',') {
        let (count, times) = match item.split_once("(x") {
            Some((count, rest)) => (count, rest.strip_suffix(')')?.parse::<usize>().ok()?),
            None => (item, 1),
        };
        let count: usize = count.parse().ok()?;
        if times > 1 << 20 {
            return None;
        }
        out.extend(std::iter::repeat_n(count, times));
    }
    Some(out)
}

fn detect_root(get: &Getter<'_>) -> Result<RootSpec> {
    if let Some(id) = get(UNIQUE_ID.name) {
        // The parse error never repeats the value: it holds the secret.
        return id.parse().map(RootSpec::UniqueId).map_err(|e| match e {
            Error::InvalidArgument(why) => vars::invalid_secret(UNIQUE_ID, &why),
            other => other,
        });
    }
    let (host, port) = match (get("MASTER_ADDR"), get("MASTER_PORT")) {
        (Some(host), Some(port)) => (host, port),
        (Some(_), None) => return Err(Error::invalid("MASTER_ADDR is set but MASTER_PORT is not")),
        (None, Some(_)) => return Err(Error::invalid("MASTER_PORT is set but MASTER_ADDR is not")),
        (None, None) => {
            return Err(Error::invalid(
                "no bootstrap root: set STREAMCOMM_UNIQUE_ID, or MASTER_ADDR and MASTER_PORT",
            ));
        }
    };
    let host = host.trim();
    let port: u16 = port.trim().parse().map_err(|_| {
        Error::invalid(format!(
            "MASTER_PORT={} is not a port number; expected an integer from 0 to 65535",
            vars::shown(&port)
        ))
    })?;
    // torchrun's agent already listens on MASTER_PORT (its rendezvous store),
    // so under torchrun the root serves one port above it; STREAMCOMM_ROOT_PORT
    // overrides the choice everywhere.
    let root_port = match get(ROOT_PORT.name) {
        Some(p) => p.trim().parse().map_err(|_| vars::invalid(ROOT_PORT, &p))?,
        None if get("TORCHELASTIC_RUN_ID").is_some() => port.checked_add(1).ok_or_else(|| {
            Error::invalid(
                "MASTER_PORT=65535 leaves no port above it for the bootstrap root under \
                 torchrun; expected a port below 65535, or set STREAMCOMM_ROOT_PORT",
            )
        })?,
        None => port,
    };
    let addr = resolve("MASTER_ADDR", host, root_port)?;
    let secret = job_secret(get, host, port)?.bytes;
    Ok(RootSpec::Address { addr, secret })
}

/// The bootstrap secret of a job whose root is at `master_addr:master_port`,
/// as every rank of it derives it: from `STREAMCOMM_SECRET`, or else from
/// the address (what `streamcomm-run`'s multi-node launchers use).
///
/// # Errors
///
/// [`Error::InvalidArgument`] if `STREAMCOMM_SECRET` is set but is not 32
/// hex digits (the message does not repeat it).
pub fn job_secret(
    get: &dyn Fn(&str) -> Option<String>,
    master_addr: &str,
    master_port: u16,
) -> Result<JobSecret> {
    match get(SECRET.name).filter(|v| !v.trim().is_empty()) {
        Some(hex) => parse_secret(hex.trim())
            .map(|bytes| JobSecret {
                bytes,
                derived: false,
            })
            .map_err(|what| vars::invalid_secret(SECRET, what)),
        None => Ok(JobSecret {
            bytes: derive_secret(master_addr.trim(), master_port),
            derived: true,
        }),
    }
}

/// A job's bootstrap secret and where it came from.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct JobSecret {
    /// The 16 bytes ranks present to the root.
    pub bytes: [u8; 16],
    /// `true` when `STREAMCOMM_SECRET` was unset and the secret was derived
    /// from the root's address: anyone who knows the address can join.
    pub derived: bool,
}

impl std::fmt::Debug for JobSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobSecret")
            .field("bytes", &"<redacted>")
            .field("derived", &self.derived)
            .finish()
    }
}

/// Resolves a launcher's rendezvous host (`MASTER_ADDR`, `--master-addr`)
/// and port to one address, preferring IPv4 so that every rank picks the
/// same family. Bracketed IPv6 literals (`[::1]`) are accepted as well as
/// bare ones. `what` names the setting in error messages.
///
/// # Errors
/// [`Error::InvalidArgument`] naming `what` when the host cannot be
/// resolved or resolves to no address.
pub fn resolve(what: &str, host: &str, port: u16) -> Result<SocketAddr> {
    // Bracketed IPv6 literals are accepted as well as bare ones.
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let expected = "expected a host name or an IP address (IPv6 bracketed or bare)";
    let addrs: Vec<SocketAddr> = (bare, port)
        .to_socket_addrs()
        .map_err(|e| {
            Error::invalid(format!(
                "{what}={} cannot be resolved ({e}); {expected}",
                vars::shown(host)
            ))
        })?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| {
            Error::invalid(format!(
                "{what}={} resolves to no address; {expected}",
                vars::shown(host)
            ))
        })
}

/// The weak, deterministic secret used when `STREAMCOMM_SECRET` is unset:
/// two 64-bit FNV-1a hashes of `MASTER_ADDR:MASTER_PORT` as written (so
/// every rank derives the same bytes whatever its resolver returns).
fn derive_secret(host: &str, port: u16) -> [u8; 16] {
    let text = format!("streamcomm-bootstrap-secret-v1\0{host}:{port}");
    let fnv = |seed: u64| {
        text.bytes().fold(seed, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&fnv(0xcbf2_9ce4_8422_2325).to_le_bytes());
    out[8..].copy_from_slice(&fnv(0x6c62_272e_07bb_0142).to_le_bytes());
    out
}

#[cfg(test)]
#[path = "env_tests.rs"]
mod tests;
