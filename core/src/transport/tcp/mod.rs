//! The tcp transport: proxied slot rings over sockets, for ranks on other hosts.
//!
//! Unlike shared memory, the stream cannot write into a remote peer's ring,
//! so each tcp peer has two local rings ([`LocalRing`]): the stream stages
//! outgoing slots in one and reads arriving slots from the other, exactly as
//! it would over shared memory, while the communicator's progress engine
//! ([`TcpSource`], each peer's state in [`progress`]) moves slots between
//! those rings and the peer's sockets. Several sockets per peer (`STREAMCOMM_NCHANNELS`)
//! carry alternate slots, in order, to use more than one TCP stream's worth
//! of bandwidth. A peer's sockets are made when it is first used
//! ([`connector`]); the listener in [`setup`], the wire format in [`frame`].

pub(crate) mod connector;
pub(crate) mod frame;
pub(crate) mod inline;
pub(crate) mod progress;
mod read_ahead;
pub(crate) mod setup;
mod source;

use std::sync::{Arc, Mutex};

use progress::PeerIo;
pub(crate) use source::TcpSource;

use crate::config::Transport;
use crate::engine::Kick;
use crate::transport::Carrier;
use crate::transport::local_ring::LocalRing;
use crate::transport::ring::{RingEnd, RingShape};

/// The local memory of one tcp peer's two rings.
#[derive(Debug)]
pub(crate) struct TcpRings {
    /// Outgoing slots (stream writes, the engine reads).
    pub staging: LocalRing,
    /// Arriving slots (the engine writes, stream reads).
    pub inbound: LocalRing,
}

/// One tcp peer, ready to start: its rings (its sockets come on first use).
pub(crate) struct TcpPeerSetup {
    /// The peer's rank.
    pub peer: usize,
    /// Its rings (kept alive by the caller's connection).
    pub rings: Arc<TcpRings>,
    /// Which arriving slots may go straight into a receive buffer.
    pub placement: crate::transport::placement::Placement,
}

impl TcpRings {
    /// Two fresh rings of `shape`.
    ///
    /// # Errors
    /// As [`LocalRing::new`].
    pub(crate) fn new(shape: RingShape) -> crate::Result<TcpRings> {
        Ok(TcpRings {
            staging: LocalRing::new(shape)?,
            inbound: LocalRing::new(shape)?,
        })
    }

    /// The stream's ends: (send into staging, receive from inbound).
    pub(crate) fn stream_ends(&self) -> (RingEnd, RingEnd) {
        (self.staging.end(), self.inbound.end())
    }
}

impl TcpPeerSetup {
    /// The peer's transfer state, shared by its streams ([`inline`]) and
    /// the progress engine ([`TcpSource`]).
    pub(crate) fn into_io(self) -> Arc<Mutex<PeerIo>> {
        let staging = self.rings.staging.end();
        let inbound = self.rings.inbound.end();
        // The rings' memory is kept alive by the connection and by the
        // engine's source, which both outlive every use of this state.
        Arc::new(Mutex::new(PeerIo::new(
            self.peer,
            staging,
            inbound,
            self.placement,
        )))
    }
}

/// The tcp link to one peer: both rings are local; the progress engine
/// moves the slots, and so does a stream that would otherwise wait for it
/// ([`inline`]).
#[derive(Debug)]
pub(crate) struct TcpLink {
    /// The peer's transfer state, shared with the progress engine.
    pub io: Arc<Mutex<PeerIo>>,
    /// Keeps the rings' memory alive.
    pub _rings: Arc<TcpRings>,
    /// Wakes the progress engine after staging a slot or freeing one.
    pub kick: Arc<Kick>,
}

impl Carrier for TcpLink {
    #[inline]
    fn kind(&self) -> Transport {
        Transport::Tcp
    }
    /// Writes the slot out now, without a read (the next wait reads).
    #[inline]
    fn after_send(&self) {
        inline::pump_out(&self.io, &self.kick)
    }
    /// No I/O (the next receive reads): the engine is woken if it stopped
    /// reading for want of room.
    #[inline]
    fn after_recv(&self, _inbound: &RingEnd) {
        inline::settle(&self.io, &self.kick)
    }
    /// Nothing: data frames find the grant in the inbound ring's mailbox
    /// whoever reads them.
    #[inline]
    fn after_grant(&self) {}
    #[inline]
    fn poke(&self) {
        inline::pump(&self.io, &self.kick)
    }
    #[inline]
    fn poke_period(&self) -> Option<u32> {
        Some(inline::SPIN_CHECKS_PER_PUMP)
    }
    fn connected(&self) -> bool {
        self.io.lock().unwrap_or_else(|e| e.into_inner()).link == progress::LinkState::Up
    }
}
