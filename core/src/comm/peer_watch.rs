//! Noticing that a rank sharing our memory has died.
//!
//! A process killed by a signal cannot raise the failure word of its peers,
//! and shared memory does not close like a socket does, so a communicator
//! with shared-memory peers in other processes has its progress engine look
//! at their processes every [`PERIOD`] ([`peer_watch`], one of the engine's
//! sources, a [`Periodic`] timer): a peer that is gone (or a zombie) fails the communicator with
//! [`Error::RemoteFailed`] naming it, which releases every wait at once
//! instead of at the timeout. A peer that dropped its communicator cleanly
//! first (its segment's `departed` word) is not a failure: it may exit
//! while this rank finishes its last operation. The watch holds only a
//! `Weak` reference to the communicator.

use std::sync::Weak;
use std::time::Duration;

use crate::Error;
use crate::comm::core::Core;
use crate::comm::failure::Learned;
use crate::engine::{Periodic, Source};

/// How often peers' processes are checked.
pub(crate) const PERIOD: Duration = Duration::from_millis(100);

/// The engine's timer that watches `peers` (rank, process id) of `comm`;
/// `None` for no peers.
pub(crate) fn peer_watch(comm: Weak<Core>, peers: Vec<(usize, u32)>) -> Option<Box<dyn Source>> {
    if peers.is_empty() {
        return None;
    }
    Some(Box::new(Periodic::new(PERIOD, move || look(&comm, &peers))))
}

/// Looks at the peers once; false when there is nothing left to watch (the
/// communicator is gone or failed).
fn look(comm: &Weak<Core>, peers: &[(usize, u32)]) -> bool {
    let Some(comm) = comm.upgrade() else {
        return false;
    };
    if comm.failure().error().is_some() {
        return false;
    }
    // A peer that dropped its communicator cleanly may exit while this rank
    // finishes its own last operation: not a failure.
    let dead = |&&(peer, pid): &&(usize, u32)| peer_gone(&comm, peer, pid);
    if let Some(&(peer, pid)) = peers.iter().find(dead) {
        comm.failure().fail(
            &Error::RemoteFailed {
                peer,
                op: "communicator".into(),
                cause: format!("its process {pid} has exited"),
            },
            Learned::PeerWatch,
        );
        return false;
    }
    true
}

/// True when `peer`'s process `pid` (on this host) is gone without having
/// dropped its communicator cleanly first: a failure.
pub(crate) fn peer_gone(comm: &Core, peer: usize, pid: u32) -> bool {
    !alive(pid) && !crate::comm::core::departed(comm, peer)
}

/// True while process `pid` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_none_or(|state| state != "Z" && state != "X"),
        Err(_) => {
            // No /proc: fall back to signal 0.
            // SAFETY: kill with signal 0 only checks for existence.
            let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
            r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sees_itself_alive_and_a_reaped_child_gone() {
        assert!(alive(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!alive(pid));
    }
}
