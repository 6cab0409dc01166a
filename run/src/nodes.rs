//! One node of a multi-node job: which node this is, where the root is, which secret.
//!
//! `streamcomm-run --nnodes M --node-rank K --master-addr ADDR -n N` is run once
//! per node, torchrun-style, and the launchers must agree on three things
//! without talking to each other first: the global ranks each node owns
//! (node K owns `K*N .. K*N+N`), the address of the bootstrap root, and the
//! secret that admits ranks to it. The root is served by node 0's *launcher*
//! ([`UniqueId::serve_at`] on `ADDR:PORT`), not by a rank, and every launcher
//! hands its ranks the full `STREAMCOMM_UNIQUE_ID`, so no rank races another
//! for the port and a rank that starts before the root simply retries its
//! connection. The secret comes from `STREAMCOMM_SECRET`, identical on every
//! node; without it, it is derived from `ADDR:PORT` exactly as
//! `streamcomm::launch` derives it, which keeps apart jobs that reuse a port but
//! protects against nobody ([`NodeJob::warnings`] says so).
//!
//! With `--hosts H0,H1,...` a node finds its own index: the one host whose
//! address belongs to this machine, decided by trying to bind it (which also
//! respects network namespaces, and counts the whole of `127.0.0.0/8` as
//! local, as the kernel does).

use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};

use streamcomm::bootstrap::UniqueId;
use streamcomm::testing::launch::{JobSecret, job_secret};
use streamcomm::{Error, Result};

use crate::cli::NodeArgs;
use crate::local::LocalLauncher;

/// This node's part of a multi-node job, resolved and ready to launch.
///
/// # Examples
///
/// ```
/// use streamcomm_run::cli::NodeArgs;
/// use streamcomm_run::nodes::NodeJob;
///
/// let args = NodeArgs {
///     nnodes: 2,
///     node_rank: Some(1),
///     master_addr: "127.0.0.1".into(),
///     master_port: 29500,
///     hosts: vec![],
/// };
/// let job = NodeJob::resolve(&args, 4, &|_| None)?;
/// assert_eq!((job.node_rank(), job.first_rank(), job.world_size()), (1, 4, 8));
/// assert!(job.warnings().iter().any(|w| w.contains("STREAMCOMM_SECRET is not set")));
/// # Ok::<(), streamcomm::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct NodeJob {
    nproc: usize,
    nnodes: usize,
    node_rank: usize,
    master_addr: String,
    master_port: u16,
    root: SocketAddr,
    secret: JobSecret,
}

impl NodeJob {
    /// Decides this node's rank (from `--hosts` when not given), resolves
    /// the master address and determines the secret, reading
    /// `STREAMCOMM_SECRET` through `get`.
    ///
    /// A job of one node with no `STREAMCOMM_SECRET` gets a random secret:
    /// no other launcher has to derive it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if the master address cannot be resolved,
    /// `STREAMCOMM_SECRET` is malformed, or the node rank cannot be found
    /// from `--hosts` (none, or several, of them are this host);
    /// [`Error::Unavailable`] if the OS random source fails.
    pub fn resolve(
        args: &NodeArgs,
        nproc: usize,
        get: &dyn Fn(&str) -> Option<String>,
    ) -> Result<NodeJob> {
        let node_rank = match args.node_rank {
            Some(k) => k,
            None => find_node_rank(&args.hosts)?,
        };
        if node_rank >= args.nnodes {
            return Err(Error::invalid(format!(
                "node rank {node_rank} is out of range for {} nodes",
                args.nnodes
            )));
        }
        let root = streamcomm::testing::launch::resolve(
            "--master-addr",
            &args.master_addr,
            args.master_port,
        )?;
        let mut secret = job_secret(get, &args.master_addr, args.master_port)?;
        if secret.derived && args.nnodes == 1 {
            secret = JobSecret {
                bytes: UniqueId::random_secret()?,
                derived: false,
            };
        }
        Ok(NodeJob {
            nproc,
            nnodes: args.nnodes,
            node_rank,
            master_addr: args.master_addr.clone(),
            master_port: args.master_port,
            root,
            secret,
        })
    }

    /// This node's index.
    pub fn node_rank(&self) -> usize {
        self.node_rank
    }

    /// Number of nodes.
    pub fn nnodes(&self) -> usize {
        self.nnodes
    }

    /// Global rank of this node's first rank.
    pub fn first_rank(&self) -> usize {
        self.node_rank * self.nproc
    }

    /// Number of ranks in the job.
    pub fn world_size(&self) -> usize {
        self.nnodes * self.nproc
    }

    /// The bootstrap root's address (the master address resolved).
    pub fn root(&self) -> SocketAddr {
        self.root
    }

    /// The id every rank of the job joins with.
    pub fn unique_id(&self) -> UniqueId {
        UniqueId::from_parts(self.root, self.secret.bytes)
    }

    /// Things the user should know before the job starts: a secret derived
    /// from the address, a master address other hosts cannot reach.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.secret.derived {
            out.push(format!(
                "STREAMCOMM_SECRET is not set: the bootstrap secret is derived from \
                 {}:{}, so anyone who can reach the root can join the job; set the same \
                 STREAMCOMM_SECRET (32 hex digits, e.g. `openssl rand -hex 16`) on every node",
                self.master_addr, self.master_port
            ));
        }
        if self.nnodes > 1 && self.root.ip().is_loopback() {
            out.push(format!(
                "--master-addr {} is a loopback address ({}): only nodes on this host can \
                 reach the bootstrap root",
                self.master_addr,
                self.root.ip()
            ));
        }
        out
    }

    /// A launcher for this node's ranks of `program`; on node 0 this first
    /// starts the job's bootstrap root (which lives as long as this process,
    /// or until the job's ranks have all left it).
    ///
    /// # Errors
    ///
    /// On node 0: [`Error::InvalidArgument`] if the master address is not an
    /// address of this host, [`Error::Os`] if it cannot be bound (e.g. the
    /// port is taken).
    pub fn launcher(
        &self,
        program: impl Into<OsString>,
        args: impl IntoIterator<Item = impl Into<OsString>>,
    ) -> Result<LocalLauncher> {
        if self.node_rank == 0 {
            if !is_local_address(self.root.ip()) {
                return Err(Error::invalid(format!(
                    "this is node 0, but --master-addr {} ({}) is not an address of this host: \
                     run node 0 on the master host, or fix --node-rank / --master-addr",
                    self.master_addr,
                    self.root.ip()
                )));
            }
            UniqueId::serve_at(self.root, self.secret.bytes)?;
        }
        Ok(LocalLauncher::new(self.nproc, program)
            .args(args)
            .unique_id(self.unique_id())
            .node(self.node_rank, self.nnodes)
            .master_addr(self.master_addr.clone()))
    }
}

/// Whether `ip` is an address of this host (in this network namespace):
/// whether a socket can be bound to it. The unspecified address is not.
pub fn is_local_address(ip: IpAddr) -> bool {
    !ip.is_unspecified() && UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// The index in `hosts` of the one entry that names this host (one of its
/// addresses is local, see [`is_local_address`]).
///
/// # Examples
///
/// ```
/// use streamcomm_run::nodes::find_node_rank;
///
/// // 203.0.113.0/24 is reserved for documentation: normally no host's address.
/// let hosts = ["203.0.113.1".to_string(), "127.0.0.1".to_string()];
/// assert_eq!(find_node_rank(&hosts)?, 1);
/// # Ok::<(), streamcomm::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::InvalidArgument`] when no entry, or more than one, is this host
/// (the message lists what each entry resolved to).
pub fn find_node_rank(hosts: &[String]) -> Result<usize> {
    let mut matches = Vec::new();
    let mut seen = Vec::new();
    for (i, host) in hosts.iter().enumerate() {
        match (bare_host(host), 0).to_socket_addrs() {
            Ok(addrs) => {
                let ips: Vec<IpAddr> = addrs.map(|a| a.ip()).collect();
                if ips.iter().any(|&ip| is_local_address(ip)) {
                    matches.push(i);
                }
                let ips: Vec<String> = ips.iter().map(IpAddr::to_string).collect();
                seen.push(format!("{host} = {}", ips.join(" ")));
            }
            Err(e) => seen.push(format!("{host}: {e}")),
        }
    }
    match matches[..] {
        [k] => Ok(k),
        [] => Err(Error::invalid(format!(
            "none of --hosts is an address of this host ({}); give --node-rank",
            seen.join(", ")
        ))),
        _ => Err(Error::invalid(format!(
            "--hosts entries {matches:?} are all addresses of this host; give --node-rank"
        ))),
    }
}

/// `host` without the brackets of an IPv6 literal (`[::1]` is `::1`).
fn bare_host(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

#[cfg(test)]
#[path = "nodes_tests.rs"]
mod tests;
