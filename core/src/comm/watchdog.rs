//! Noticing that a rank sharing our memory has died.
//!
//! A process killed by a signal cannot raise the failure word of its peers,
//! and shared memory does not close like a socket does, so each communicator
//! with shared-memory peers has a watchdog thread that looks at their
//! processes every [`PERIOD`]: a peer that is gone (or a zombie) fails the
//! communicator with [`Error::RemoteFailed`] naming it, which releases every
//! wait at once instead of at the timeout. A peer that dropped its
//! communicator cleanly first (its segment's `departed` word) is not a
//! failure: it may exit while this rank finishes its last operation. The thread holds only a `Weak`
//! reference and ends with the communicator.

use std::sync::Weak;
use std::time::Duration;

use crate::comm::inner::CommInner;
use crate::{Error, Result};

/// How often peers' processes are checked.
pub const PERIOD: Duration = Duration::from_millis(100);

/// Starts the watchdog for `peers` (rank, process id); nothing for none.
///
/// # Errors
/// [`Error::Os`] when the thread cannot be started.
pub(crate) fn start(comm: Weak<CommInner>, rank: usize, peers: Vec<(usize, u32)>) -> Result<()> {
    if peers.is_empty() {
        return Ok(());
    }
    std::thread::Builder::new()
        .name(format!("streamcomm-watchdog-{rank}"))
        .spawn(move || loop {
            std::thread::sleep(PERIOD);
            let Some(comm) = comm.upgrade() else { return };
            if comm.error().is_some() {
                return;
            }
            // A peer that dropped its communicator cleanly may exit while
            // this rank finishes its own last operation: not a failure.
            let dead = |&&(peer, pid): &&(usize, u32)| peer_gone(&comm, peer, pid);
            if let Some(&(peer, pid)) = peers.iter().find(dead) {
                comm.fail(&Error::RemoteFailed {
                    peer,
                    op: "communicator".into(),
                    cause: format!("its process {pid} has exited"),
                });
                return;
            }
        })
        .map(drop)
        .map_err(|e| Error::os("spawn watchdog thread", e))
}

/// True when `peer`'s process `pid` (on this host) is gone without having
/// dropped its communicator cleanly first: a failure.
pub(crate) fn peer_gone(comm: &CommInner, peer: usize, pid: u32) -> bool {
    !alive(pid) && !crate::comm::inner::departed(comm, peer)
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
