//! The immediate paths of small host-blocking sends and receives (MPI's
//! "sendi", UCX's inline eager send). A send whose message fits one slot,
//! when the communicator is serving its turn at once and the ring has
//! credit, writes the slot and publishes it; a receive whose turn comes at
//! once and whose message already waits, whole, in one slot of the right
//! signature, copies it out and returns the slot. Neither builds a group,
//! an operation object or a buffer handle. Anything else falls back to the
//! full path with the ticket already taken, so issue order holds either
//! way, and every error (a mismatch, a message too large) is the full
//! path's.
//!
//! A single send or receive enqueued on a stream takes the same path when
//! its turn comes ([`P2p::send_eager_in_turn`] and
//! [`P2p::recv_eager_in_turn`], from the full path's one-operation
//! case), before building its operation.

use std::sync::atomic::Ordering;

use crate::DataType;
use crate::comm::Communicator;
use crate::comm::failure::Learned;
use crate::comm::p2p::P2p;
use crate::comm::p2p::stats::Stat;
use crate::plan::signature::{self, P2pSlot};
use crate::transport::Connection;
use crate::transport::ring::RingError;

/// What [`Communicator::send_now`] or [`Communicator::recv_now`] did.
pub(crate) enum Now {
    /// Completed: the message is in the peer's ring, or in the caller's slice.
    Completed,
    /// Not completed; the full path must run under this ticket (taken in
    /// issue order, not yet served, or served without credit or message).
    FallBackWithTicket(u64),
    /// Not tried (too large, a bad peer, a failed communicator): the full
    /// path takes its own ticket and reports any error.
    FallBack,
}

impl Now {
    /// The ticket the full path runs under: taken here, or (`None`) to be
    /// taken by the full path itself.
    pub(crate) fn ticket(self) -> Option<u64> {
        match self {
            Now::FallBackWithTicket(t) => Some(t),
            Now::Completed | Now::FallBack => None,
        }
    }
}

impl Communicator {
    /// The connection to `peer` and a ticket being served now; otherwise
    /// what the caller returns: `FallBack` for this rank itself, a rank
    /// out of range or a failed communicator (nothing taken), `FallBackWithTicket`
    /// when the turn is not yet this call's (the ticket is taken).
    fn turn_now(&self, peer: usize) -> Result<(&Connection, u64), Now> {
        let inner = &*self.inner;
        // A failed communicator (this rank's failure, a peer's, an abort)
        // has its failure word raised: the full path reports the error.
        if peer == inner.core.rank() || inner.core.failure().raised() {
            return Err(Now::FallBack);
        }
        let conn = inner.core.connection(peer).map_err(|_| Now::FallBack)?;
        let ticket = inner.core.turns().take();
        if !inner.core.turns().serving(ticket) {
            return Err(Now::FallBackWithTicket(ticket));
        }
        Ok((conn, ticket))
    }

    /// Sends `bytes` (`count` elements of `dtype`) to `peer` on the calling
    /// thread if that can finish now; see the module docs.
    pub(crate) fn send_now(&self, bytes: &[u8], dtype: DataType, count: usize, peer: usize) -> Now {
        if bytes.len() > self.inner.core.config().p2p_eager_limit {
            return Now::FallBack;
        }
        let (conn, ticket) = match self.turn_now(peer) {
            Ok(turn) => turn,
            Err(not_now) => return not_now,
        };
        if !self.inner.p2p.send_eager_in_turn(conn, bytes, dtype, count) {
            return Now::FallBackWithTicket(ticket);
        }
        self.inner.core.turns().done(ticket);
        Now::Completed
    }

    /// Receives from `peer` into `bytes` (room for elements of `dtype`) on
    /// the calling thread if the whole message is already there; see the
    /// module docs.
    ///
    /// Over shared memory a message not there yet is waited for here first,
    /// spinning for the communicator's spin budget (none when ranks
    /// outnumber cores): in a ping-pong the reply is usually a fraction of
    /// a microsecond away, less than the full path takes to set up its
    /// operation, so waiting there made the receive late by the setup.
    pub(crate) fn recv_now(&self, bytes: &mut [u8], dtype: DataType, peer: usize) -> Now {
        let (conn, ticket) = match self.turn_now(peer) {
            Ok(turn) => turn,
            Err(not_now) => return not_now,
        };
        if self.inner.p2p.recv_eager_in_turn(conn, bytes, dtype)
            || (!conn.proxied() && self.spin_then_recv(conn, bytes, dtype))
        {
            self.inner.core.turns().done(ticket);
            return Now::Completed;
        }
        Now::FallBackWithTicket(ticket)
    }

    /// Spins for the next slot of `conn` (one whose data lands with
    /// nobody's help: shared memory), then takes it by the immediate path;
    /// false when nothing came within the spin budget or the slot is not
    /// one the immediate path takes (the full path then waits, or reports
    /// it).
    #[inline(never)]
    fn spin_then_recv(&self, conn: &Connection, bytes: &mut [u8], dtype: DataType) -> bool {
        for _ in 0..self.inner.core.spin() {
            std::hint::spin_loop();
            if conn.recv.has_data() {
                return self.inner.p2p.recv_eager_in_turn(conn, bytes, dtype);
            }
        }
        false
    }
}

impl P2p {
    /// In this call's turn: writes `bytes` (`count` elements of `dtype`, at
    /// most the eager limit) into one slot of `conn` and publishes it, if
    /// the ring has credit; false otherwise. False too when the slot
    /// failed to publish ([`Connection::commit_send`]: a fault rule): the
    /// error is then the communicator's, which the full path reports.
    #[inline]
    pub(crate) fn send_eager_in_turn(
        &self,
        conn: &Connection,
        bytes: &[u8],
        dtype: DataType,
        count: usize,
    ) -> bool {
        let sig = signature::p2p(P2pSlot::Eager, dtype, count);
        if !conn.send_unstaged(bytes, sig) {
            if !conn.send.has_credit() {
                // Over verbs returned credit is a completion still to reap
                // (and over tcp a frame still in the socket): look once.
                conn.poke();
            }
            // A ring whose memory cannot be had (reserved at its first
            // use) is the full path's to report.
            let Ok(Some(slot)) = conn.try_acquire_send() else {
                return false;
            };
            if slot.len() < bytes.len() {
                return false;
            }
            copy_small(&mut slot[..bytes.len()], bytes);
            if let Err(e) = conn.commit_send(bytes.len(), sig) {
                self.immediate_failed(conn, e);
                return false;
            }
        }
        self.state.stats.add(Stat::SentEagerMessages, 1);
        self.state.stats.add(Stat::SentEagerBytes, bytes.len());
        self.state.immediate_calls.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Records the failure of an immediate send as the communicator's, as
    /// the full path records a failed operation's: the full path, which
    /// runs next in this call's turn, reports it.
    #[cold]
    #[inline(never)]
    fn immediate_failed(&self, conn: &Connection, e: RingError) {
        let e = self
            .core
            .ring_error(e, "send", conn, "a free slot (credit)", None);
        self.core.failure().fail(&e, Learned::Call);
    }

    /// In this call's turn: copies the message from `conn` into the front
    /// of `bytes` if it is there whole, in one eager slot of `dtype`, and
    /// fits; false (nothing consumed) otherwise, and for a slot the seam
    /// refuses ([`Connection::try_acquire_recv`]), which the full path
    /// then finds and reports.
    #[inline]
    pub(crate) fn recv_eager_in_turn(
        &self,
        conn: &Connection,
        bytes: &mut [u8],
        dtype: DataType,
    ) -> bool {
        if !conn.recv.has_data() {
            // Over tcp the message may be in the socket still, over verbs
            // its tail in the completion queue: look on this thread once
            // (nothing to do over shared memory).
            conn.poke();
        }
        let Ok(Some((slot, sig))) = conn.try_acquire_recv() else {
            return false;
        };
        let whole = match signature::parse_p2p(sig) {
            Some((P2pSlot::Eager, Some(d), count)) if d == dtype => {
                usize::try_from(count).is_ok_and(|c| c * d.size() == slot.len())
            }
            _ => false,
        };
        if !whole || slot.len() > bytes.len() {
            return false;
        }
        let n = slot.len();
        copy_small(&mut bytes[..n], slot);
        conn.release_recv();
        self.state.stats.add(Stat::RecvEagerBytes, n);
        self.state.immediate_calls.fetch_add(1, Ordering::Relaxed);
        true
    }
}

/// `dst.copy_from_slice(src)`, with the lengths of a word or two done by two
/// overlapping word moves: for an 8-byte message, a call to `memcpy` cost
/// more instructions than the copy itself.
#[inline(always)]
fn copy_small(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    match n {
        8..=16 => {
            let head: [u8; 8] = src[..8].try_into().unwrap_or_default();
            let tail: [u8; 8] = src[n - 8..].try_into().unwrap_or_default();
            dst[..8].copy_from_slice(&head);
            dst[n - 8..].copy_from_slice(&tail);
        }
        4..=7 => {
            let head: [u8; 4] = src[..4].try_into().unwrap_or_default();
            let tail: [u8; 4] = src[n - 4..].try_into().unwrap_or_default();
            dst[..4].copy_from_slice(&head);
            dst[n - 4..].copy_from_slice(&tail);
        }
        _ => dst.copy_from_slice(src),
    }
}

#[cfg(test)]
mod tests {
    use super::copy_small;

    #[test]
    fn small_copies_move_every_byte_and_nothing_else() {
        for n in 0..=40usize {
            let src: Vec<u8> = (0..n as u8).map(|b| b.wrapping_mul(37) ^ 0x5a).collect();
            let mut dst = vec![0xEEu8; n + 8];
            copy_small(&mut dst[..n], &src);
            assert_eq!(&dst[..n], &src[..], "{n} bytes");
            assert!(
                dst[n..].iter().all(|&b| b == 0xEE),
                "{n} bytes: wrote past the end"
            );
        }
    }
}
