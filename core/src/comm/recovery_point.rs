//! Where the ranks of a communicator meet to shrink it: each rank's
//! recovery listener, every rank's address, and the secret the frames
//! carry. Made at creation; the shrink (`comm::recovery`) meets there.

use std::net::{SocketAddr, TcpListener};

/// Where the ranks of a communicator meet to shrink it.
pub(crate) struct RecoveryPoint {
    /// This rank's listener (none in a communicator of one rank).
    listener: Option<TcpListener>,
    /// Every rank's listener address.
    addrs: Vec<Option<SocketAddr>>,
    /// The secret of the communicator's id: frames without it are refused.
    secret: [u8; 16],
}

impl RecoveryPoint {
    /// The recovery point of a rank listening on `listener`, whose ranks
    /// listen at `addrs`, and whose id carried `secret`.
    pub(crate) fn new(
        listener: Option<TcpListener>,
        addrs: Vec<Option<SocketAddr>>,
        secret: [u8; 16],
    ) -> RecoveryPoint {
        RecoveryPoint {
            listener,
            addrs,
            secret,
        }
    }

    /// Where `rank` listens.
    pub(crate) fn addr(&self, rank: usize) -> Option<SocketAddr> {
        self.addrs.get(rank).copied().flatten()
    }

    /// This rank's listener (none in a communicator of one rank).
    pub(crate) fn listener(&self) -> Option<&TcpListener> {
        self.listener.as_ref()
    }

    /// The secret every frame must carry.
    pub(crate) fn secret(&self) -> &[u8; 16] {
        &self.secret
    }
}
