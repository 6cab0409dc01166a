//! The bootstrap connections this process holds, so that a root can tell its
//! own process's ranks from the others.
//!
//! A root releases its own process's ranks from a round last: those ranks
//! return from the round only once every other rank's release is in the
//! kernel's hands, so a process that exits right after creating its
//! communicator (a rank that checks something and gives up, as every rank
//! does alike) cannot cut off a peer's release. Released in rank order, the
//! root's rank 0 went first and its process could exit before rank 1 was
//! released: rank 1 then read that the root had closed the connection
//! instead of its own, identical, release.

use std::net::SocketAddr;
use std::sync::Mutex;

/// The local addresses of this process's open bootstrap connections.
static OURS: Mutex<Vec<SocketAddr>> = Mutex::new(Vec::new());

fn ours() -> std::sync::MutexGuard<'static, Vec<SocketAddr>> {
    // A panic while holding this lock leaves a plain list behind: still valid.
    OURS.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Records a connection of this process by its local address; it must be
/// recorded before its hello is sent, so that the root sees it by the time
/// every rank has joined.
pub(super) fn add(addr: SocketAddr) {
    ours().push(addr);
}

/// Forgets a connection recorded by [`add`].
pub(super) fn remove(addr: SocketAddr) {
    let mut ours = ours();
    if let Some(at) = ours.iter().position(|&a| a == addr) {
        ours.swap_remove(at);
    }
}

/// True when `peer`, a connection's remote address as the root sees it, is
/// one of this process's own connections.
pub(super) fn is_ours(peer: SocketAddr) -> bool {
    ours().contains(&peer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_addresses_are_ours_until_removed() {
        let a: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let b: SocketAddr = "127.0.0.2:9".parse().unwrap();
        add(a);
        add(a);
        assert!(is_ours(a) && !is_ours(b));
        remove(a);
        assert!(is_ours(a), "one of two records of the same address remains");
        remove(a);
        remove(b);
        assert!(!is_ours(a));
    }
}
