//! A communicator made from another: the members a split or a shrink
//! chose, joined through a fresh bootstrap root that one of them serves.
//!
//! A child builds its own connections (shared-memory segment, tcp sockets,
//! verbs queue pairs) rather than borrowing its parent's: it then has its
//! own order of operations, its own failure state and its own lifetime, so
//! parent and children run at once from different threads, a child outlives
//! a dropped or failed parent, and a shrink never reuses a ring a dead rank
//! may still write into. What that costs (creation time, descriptors,
//! shared memory per child) is measured in `docs/guide/groups.md`.

use std::net::{IpAddr, Ipv4Addr};

use super::Communicator;
use super::core::Core;
use super::recovery_point::RecoveryPoint;
use crate::bootstrap::UniqueId;
use crate::config::{Config, HostsOverride};
use crate::{Error, Result};

/// Words of a [`UniqueId`] in an exchange: a status word, then its bytes.
pub(crate) const ID_WORDS: usize = 1 + UniqueId::BYTES.div_ceil(8);

/// Status word of an exchanged id: this rank offers no id. (The top bit
/// says the word was written: an exchange's unwritten words are 0.)
const NO_ID: u64 = 1 << 63;
/// Status word: an id follows.
const ID_FOLLOWS: u64 = 1 << 63 | 1;
/// Status word: this rank should have offered one but could not start a root.
const ID_FAILED: u64 = 1 << 63 | 2;

/// A fresh id whose root this rank serves, on the address its peers
/// already reach it at (its recovery listener's), else on loopback.
pub(crate) fn serve_id(recovery: &RecoveryPoint, rank: usize) -> Result<UniqueId> {
    let ip = recovery
        .addr(rank)
        .map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |a| a.ip());
    UniqueId::new_on(ip)
}

/// `id` (or the failure to make one) as exchange words.
pub(crate) fn id_words(id: Option<&Result<UniqueId>>) -> [u64; ID_WORDS] {
    let mut w = [0u64; ID_WORDS];
    match id {
        None => w[0] = NO_ID,
        Some(Err(_)) => w[0] = ID_FAILED,
        Some(Ok(id)) => {
            w[0] = ID_FOLLOWS;
            let mut bytes = [0u8; (ID_WORDS - 1) * 8];
            bytes[..UniqueId::BYTES].copy_from_slice(&id.to_bytes());
            for (word, chunk) in w[1..].iter_mut().zip(bytes.chunks_exact(8)) {
                *word = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
            }
        }
    }
    w
}

/// The id in `words`, offered by rank `from` of the parent.
///
/// # Errors
/// [`Error::Bootstrap`] when `from` offered none or could not start its root.
pub(crate) fn id_from_words(words: &[u64], from: usize) -> Result<UniqueId> {
    match words.first().copied() {
        Some(ID_FOLLOWS) => {
            let bytes: Vec<u8> = words[1..].iter().flat_map(|w| w.to_le_bytes()).collect();
            UniqueId::from_bytes(&bytes[..UniqueId::BYTES])
        }
        Some(ID_FAILED) => Err(Error::Bootstrap(format!(
            "rank {from} could not start the new communicator's bootstrap root"
        ))),
        _ => Err(Error::Bootstrap(format!(
            "rank {from} offered no id for the new communicator"
        ))),
    }
}

/// The configuration of a child whose ranks are the parent's `members`:
/// the parent's, with a hosts override narrowed to the members and no
/// fault rules (they name the parent's ranks).
pub(crate) fn child_config(parent: &Core, members: &[usize]) -> Config {
    let mut config = parent.config().clone();
    if config.hosts_override.is_some() {
        config.hosts_override = Some(HostsOverride::Labels(
            members
                .iter()
                .map(|&m| parent.topology().hosts[m].clone())
                .collect(),
        ));
    }
    config.faults = Default::default();
    config
}

/// Joins the child of the parent's `members` (in child rank order) named
/// by `id`, as this rank's place among them.
///
/// # Errors
/// [`Error::InvalidUsage`] if this rank is not a member; as
/// [`Communicator::init`].
pub(crate) fn join(parent: &Core, id: &UniqueId, members: &[usize]) -> Result<Communicator> {
    let rank = members
        .iter()
        .position(|&m| m == parent.rank())
        .ok_or_else(|| {
            Error::InvalidUsage(format!(
                "rank {} is not among the new communicator's ranks {members:?}",
                parent.rank()
            ))
        })?;
    let config = child_config(parent, members);
    let inner = super::create::create(id, rank, members.len(), config)?;
    Ok(Communicator::from_inner(inner))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_survives_the_exchange_words() {
        let id = UniqueId::from_parts("10.0.0.7:4242".parse().unwrap(), [0x5a; 16]);
        let w = id_words(Some(&Ok(id)));
        assert_eq!(id_from_words(&w, 3).unwrap(), id);
        let none = id_words(None);
        let e = id_from_words(&none, 3).unwrap_err().to_string();
        assert!(e.contains("rank 3 offered no id"), "{e}");
        let failed = id_words(Some(&Err(Error::Bootstrap("x".into()))));
        let e = id_from_words(&failed, 5).unwrap_err().to_string();
        assert!(e.contains("rank 5 could not start"), "{e}");
    }
}
