//! The values of `streamcomm-run`'s options, checked one by one and then
//! against each other, with defaults filled in: what clap leaves to us so
//! that every message names the option at fault in our words.

use std::ffi::OsString;

use streamcomm::bootstrap::MAX_RANKS;
use streamcomm::{Error, Result};

use super::{Cli, DEFAULT_MASTER_PORT, MAX_NPROC, NodeArgs};

/// Options as they appear, each value checked alone, before they are
/// checked against each other.
#[derive(Default)]
pub(super) struct Raw {
    pub(super) nproc: Option<usize>,
    nnodes: Option<usize>,
    node_rank: Option<usize>,
    master_addr: Option<String>,
    master_port: Option<u16>,
    hosts: Option<Vec<String>>,
}

impl Raw {
    /// Checks each value given on its own.
    pub(super) fn check(cli: &Cli) -> Result<Raw> {
        let text = |v: &Option<OsString>| v.as_ref().map(|v| v.to_string_lossy().into_owned());
        let mut raw = Raw::default();
        if let Some(v) = text(&cli.nproc) {
            raw.nproc = Some(parse_nproc("-n", &v)?);
        }
        if let Some(v) = text(&cli.nnodes) {
            raw.nnodes = Some(parse_count("--nnodes", &v, "a number of nodes", 1)?);
        }
        if let Some(v) = text(&cli.node_rank) {
            raw.node_rank = Some(parse_count("--node-rank", &v, "a node index", 0)?);
        }
        if let Some(v) = text(&cli.master_addr) {
            let addr = v.trim();
            if addr.is_empty() {
                return Err(Error::invalid("--master-addr needs an address, got \"\""));
            }
            raw.master_addr = Some(addr.to_string());
        }
        if let Some(v) = text(&cli.master_port) {
            match v.trim().parse::<u16>() {
                Ok(port) if port > 0 => raw.master_port = Some(port),
                _ => {
                    return Err(Error::invalid(format!(
                        "--master-port needs a port number between 1 and 65535, got {v:?}"
                    )));
                }
            }
        }
        if let Some(v) = text(&cli.hosts) {
            raw.hosts = Some(parse_hosts(&v)?);
        }
        Ok(raw)
    }

    /// Checks the multi-node options against each other and fills in defaults.
    pub(super) fn nodes(self, nproc: usize) -> Result<Option<NodeArgs>> {
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
                )));
            }
            (_, 0) => 1,
            (_, h) => h,
        };
        if let Some(k) = self.node_rank
            && k >= nnodes
        {
            return Err(Error::invalid(format!(
                "--node-rank {k} is out of range for {nnodes} nodes (0..={})",
                nnodes - 1
            )));
        }
        let master_addr = match (self.master_addr, hosts.first()) {
            (Some(m), Some(first)) if m != *first => {
                return Err(Error::invalid(format!(
                    "--master-addr {m} is not the first of --hosts ({first}), which is the master"
                )));
            }
            (Some(m), _) => m,
            (None, Some(first)) => first.clone(),
            (None, None) if nnodes == 1 => "127.0.0.1".to_string(),
            (None, None) => {
                return Err(Error::invalid(format!(
                    "--nnodes {nnodes} needs --master-addr (the address of node 0), or --hosts"
                )));
            }
        };
        let node_rank = match self.node_rank {
            None if nnodes == 1 => Some(0),
            None if hosts.is_empty() => {
                return Err(Error::invalid(format!(
                    "--nnodes {nnodes} needs --node-rank K (0..={}) on each node, or --hosts",
                    nnodes - 1
                )));
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
