//! Counters of how point-to-point bytes travelled, per communicator.
//!
//! They make the protocol observable: a test (or a curious user) can check
//! that a rendezvous message was written straight into the receiver's buffer
//! (`sent_direct_bytes` on the sender, `recv_direct_bytes` on the receiver)
//! and never copied through a slot.

use std::sync::atomic::{AtomicU64, Ordering};

/// How this rank's point-to-point bytes travelled since the communicator was
/// created ([`crate::Communicator::p2p_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct P2pStats {
    /// Messages sent eagerly (through the slot ring).
    pub sent_eager_messages: u64,
    /// Messages sent by rendezvous.
    pub sent_rendezvous_messages: u64,
    /// Bytes this rank copied into slots for eager messages.
    pub sent_eager_bytes: u64,
    /// Bytes this rank wrote straight into receivers' buffers (one copy).
    pub sent_direct_bytes: u64,
    /// Rendezvous bytes this rank streamed through slots (direct write refused).
    pub sent_streamed_bytes: u64,
    /// Bytes this rank copied out of slots for eager messages.
    pub recv_eager_bytes: u64,
    /// Bytes peers wrote straight into this rank's buffers.
    pub recv_direct_bytes: u64,
    /// Rendezvous bytes this rank copied out of slots.
    pub recv_streamed_bytes: u64,
}

/// The live counters behind [`P2pStats`].
#[derive(Debug, Default)]
pub(crate) struct StatCounters {
    sent_eager_messages: AtomicU64,
    sent_rendezvous_messages: AtomicU64,
    sent_eager_bytes: AtomicU64,
    sent_direct_bytes: AtomicU64,
    sent_streamed_bytes: AtomicU64,
    recv_eager_bytes: AtomicU64,
    recv_direct_bytes: AtomicU64,
    recv_streamed_bytes: AtomicU64,
}

/// Which counter to add to.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Stat {
    SentEagerMessages,
    SentRendezvousMessages,
    SentEagerBytes,
    SentDirectBytes,
    SentStreamedBytes,
    RecvEagerBytes,
    RecvDirectBytes,
    RecvStreamedBytes,
}

impl StatCounters {
    /// Adds `n` to one counter.
    pub(crate) fn add(&self, stat: Stat, n: usize) {
        let c = match stat {
            Stat::SentEagerMessages => &self.sent_eager_messages,
            Stat::SentRendezvousMessages => &self.sent_rendezvous_messages,
            Stat::SentEagerBytes => &self.sent_eager_bytes,
            Stat::SentDirectBytes => &self.sent_direct_bytes,
            Stat::SentStreamedBytes => &self.sent_streamed_bytes,
            Stat::RecvEagerBytes => &self.recv_eager_bytes,
            Stat::RecvDirectBytes => &self.recv_direct_bytes,
            Stat::RecvStreamedBytes => &self.recv_streamed_bytes,
        };
        c.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// A snapshot.
    pub(crate) fn snapshot(&self) -> P2pStats {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        P2pStats {
            sent_eager_messages: r(&self.sent_eager_messages),
            sent_rendezvous_messages: r(&self.sent_rendezvous_messages),
            sent_eager_bytes: r(&self.sent_eager_bytes),
            sent_direct_bytes: r(&self.sent_direct_bytes),
            sent_streamed_bytes: r(&self.sent_streamed_bytes),
            recv_eager_bytes: r(&self.recv_eager_bytes),
            recv_direct_bytes: r(&self.recv_direct_bytes),
            recv_streamed_bytes: r(&self.recv_streamed_bytes),
        }
    }
}
