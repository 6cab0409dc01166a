//! The verbs transport: proxied slot rings over InfiniBand / RoCE RDMA.
//!
//! Same shape as tcp ([`crate::transport::tcp`]): per peer the stream fills
//! a local staging ring and reads a local inbound ring; the slots move with
//! RDMA WRITE straight into the peer's registered inbound ring and its tail
//! ([`progress`]), so the receiving CPU copies nothing and its stream sees
//! the data without a hand-off. The writes are posted by the stream itself
//! when it can, else by the communicator's progress engine ([`source`]),
//! which also reaps completions and sleeps on a completion channel ([`event`]). Device, port and GID choice is in [`device`]; the rings'
//! registration and the QP in [`qp`]. Creation ([`connect`]) makes no QP:
//! a pair's QPs are made and connected at its first use, by a handshake
//! over tcp ([`handshake`]), and its rings registered at its first slot,
//! their keys told in-band (`progress::rings`).
//!
//! Rendezvous p2p writes straight into the receiver's registered buffer
//! ([`regcache`], and `comm::p2p::rdma`); with the CUDA backend, device
//! buffers are registered for GPUDirect RDMA ([`gpudirect`]: dma-buf or
//! nvidia-peermem), so device p2p moves no byte through host memory. The
//! barrier's flag algorithms write their flags by RDMA (and the central
//! counter fetch-adds where `atomic_cap` allows), see `progress::barrier`.
//! Collectives of the CUDA backend between hosts are still staged through
//! pinned host memory: their reductions run on the host.

/// How often a stream spinning on a verbs ring polls the completion queue
/// (every n-th check): a poll is a userspace read of the CQ (no system call,
/// on Soft-RoCE as on real HCAs), a check a few nanoseconds.
pub(crate) const POLLS_EVERY: u32 = 4;

pub(crate) mod device;
pub(crate) mod dl;
pub(crate) mod event;
pub(crate) mod gpudirect;
pub(crate) mod handshake;
mod ip_membership;
pub(crate) mod multicast;
pub(crate) mod progress;
pub(crate) mod qp;
pub(crate) mod regcache;
mod source;
pub(crate) use streamcomm_verbs_sys as sys;

use std::net::SocketAddr;
use std::sync::Arc;

use device::Device;
use progress::{PeerRdma, SharedPeer};
use qp::{Qp, SharedRegs, VerbsRings};
use source::VerbsSource;

use crate::barrier::area::BarrierArea;
use crate::config::Transport;
use crate::engine::Kick;
use crate::transport::Carrier;
use crate::transport::ring::RingEnd;
use crate::transport::ring::RingShape;
use crate::{Error, Result};

/// One verbs peer, ready for the progress engine (its QP made at the
/// pair's first use).
pub(crate) struct VerbsPeerSetup {
    /// The peer's rank.
    pub peer: usize,
    /// Where the peer answers handshakes.
    addr: SocketAddr,
    /// Its rings (also held by the stream's connection).
    pub rings: Arc<VerbsRings>,
    qp: Qp,
    barrier: Arc<BarrierArea>,
}

/// Each peer's rings and (unmade) QP: nothing is registered but the
/// communicator's barrier area and fetch-add sink, and no QP is made,
/// until a pair is first used ([`handshake`]).
///
/// # Errors
/// [`Error::Unavailable`] when there are peers but no device; as the
/// registrations otherwise.
pub(crate) fn connect(
    dev: Option<&Arc<Device>>,
    peers: &[(usize, SocketAddr)],
    shape: RingShape,
    barrier: &Arc<BarrierArea>,
) -> Result<Vec<VerbsPeerSetup>> {
    let dev = dev.ok_or_else(|| Error::Unavailable("verbs: no RDMA device".into()))?;
    // Room for a full ring of data writes, their tail writes and control.
    let depth = (2 * shape.nsteps as u32 + 16).min(4096);
    let channel = Arc::new(event::CompChannel::new(dev)?);
    // The barrier area and the fetch-add sink, once for every peer.
    let shared = Arc::new(SharedRegs::new(dev, barrier)?);
    peers
        .iter()
        .map(|&(peer, addr)| {
            Ok(VerbsPeerSetup {
                peer,
                addr,
                rings: Arc::new(VerbsRings::new(shape)?),
                qp: Qp::unmade(dev.clone(), &channel, &shared, depth),
                barrier: barrier.clone(),
            })
        })
        .collect()
}

/// A verbs peer's rank and shared state.
pub(crate) type RankedPeer = (usize, Arc<SharedPeer>);

/// Every verbs peer's shared state (for its streams' direct posting,
/// [`SharedPeer::pump`]) and the source that drives them all in the
/// progress engine, answering handshakes on `listener`.
///
/// # Errors
/// As [`VerbsSource::new`].
pub(crate) fn share(
    peers: Vec<VerbsPeerSetup>,
    listener: std::net::TcpListener,
    shaker: Arc<handshake::Shaker>,
) -> Result<(Vec<RankedPeer>, VerbsSource)> {
    // One registration cache for the user buffers of every peer (and of
    // every other communicator of the process on the device).
    let regs = peers
        .first()
        .map(|p| regcache::RegCache::of(p.qp.device().clone()));
    let mut shared = Vec::with_capacity(peers.len());
    let mut listed = Vec::with_capacity(peers.len());
    if let Some(regs) = regs {
        for p in peers {
            let peer = PeerRdma::new(p.peer, p.rings, p.qp, regs.clone(), p.barrier);
            let peer = SharedPeer::new(peer, shaker.clone(), p.addr);
            listed.push((p.peer, peer.clone()));
            shared.push((p.peer, peer));
        }
    }
    let source = VerbsSource::new(listed, listener, shaker)?;
    Ok((shared, source))
}

/// The verbs link to one peer: both rings are local; the stream or the
/// progress engine RDMA-writes the slots, and whoever polls the CQ
/// publishes the tails.
#[derive(Debug)]
pub(crate) struct VerbsLink {
    /// Keeps the rings' memory (registered with the NIC) alive.
    pub _rings: Arc<VerbsRings>,
    /// Wakes the progress engine when the stream cannot post itself.
    pub kick: Arc<Kick>,
    /// This peer's connection state, shared with the progress engine, so
    /// that the stream can post what it staged itself.
    pub direct: Arc<SharedPeer>,
}

impl Carrier for VerbsLink {
    #[inline]
    fn kind(&self) -> Transport {
        Transport::Verbs
    }
    /// Posts the slot (and anything else due) now, or wakes the engine.
    #[inline]
    fn after_send(&self) {
        if !self.direct.pump() {
            self.kick.kick();
        }
    }
    /// Returns the credit at once if the peer ran out of it.
    #[inline]
    fn after_recv(&self, inbound: &RingEnd) {
        if !self.direct.consumed(inbound) {
            self.kick.kick();
        }
    }
    /// Writes the grant into the sender's staging ring header now, or
    /// wakes the engine.
    #[inline]
    fn after_grant(&self) {
        if !self.direct.pump() {
            self.kick.kick();
        }
    }
    #[inline]
    fn poke(&self) {
        self.direct.wait_on()
    }
    #[inline]
    fn poke_period(&self) -> Option<u32> {
        Some(POLLS_EVERY)
    }
    #[inline]
    fn send_unstaged(&self, payload: &[u8], sig: u64) -> bool {
        self.direct.send_inline(payload, sig)
    }
    fn rdma(&self) -> Option<&Arc<SharedPeer>> {
        Some(&self.direct)
    }
    /// True once the pair's rings are registered on both sides (at its
    /// first slot: [`progress`]'s `rings`).
    fn connected(&self) -> bool {
        self.direct.lock().rings_up()
    }
    /// True once the pair's queue pairs are made (at its first use, by a
    /// handshake either side started: [`handshake`]).
    fn made(&self) -> bool {
        self.direct.lock().qp.made()
    }
    fn remote_area(&self) -> Option<Arc<dyn crate::barrier::area::RemoteArea>> {
        Some(self.direct.clone() as Arc<dyn crate::barrier::area::RemoteArea>)
    }
}
