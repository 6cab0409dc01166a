//! The tcp transport: proxied slot rings over sockets, for ranks on other hosts.
//!
//! Unlike shared memory, the stream cannot write into a remote peer's ring,
//! so each tcp peer has two local rings ([`LocalRing`]): the stream stages
//! outgoing slots in one and reads arriving slots from the other, exactly as
//! it would over shared memory, while a network thread per communicator (the
//! proxy's network half, [`progress`]) moves slots between those rings and
//! the peer's sockets. Several sockets per peer (`STREAMCOMM_NCHANNELS`)
//! carry alternate slots, in order, to use more than one TCP stream's worth
//! of bandwidth. Formation of the connections is in [`setup`], the wire
//! format in [`frame`].

pub mod frame;
pub mod inline;
pub mod kick;
pub mod progress;
pub mod setup;

use std::net::TcpStream;
use std::sync::{Arc, Mutex};

use progress::{FailureSink, PeerIo};

use crate::transport::local_ring::LocalRing;
use crate::transport::net_thread::NetThread;
use crate::transport::ring::{RingEnd, RingShape};
use crate::Result;

/// The local memory of one tcp peer's two rings.
#[derive(Debug)]
pub struct TcpRings {
    /// Outgoing slots (stream writes, network thread reads).
    pub staging: LocalRing,
    /// Arriving slots (network thread writes, stream reads).
    pub inbound: LocalRing,
}

/// The network thread of a communicator; stops and joins on drop.
#[derive(Debug)]
pub struct TcpNet {
    /// The thread (declared first: stopped and joined before the peers'
    /// state goes).
    pub thread: NetThread,
    /// Each peer's transfer state, shared with the streams ([`inline`]).
    peers: Vec<(usize, Arc<Mutex<PeerIo>>)>,
}

/// One tcp peer, ready to start: its rings and sockets.
pub struct TcpPeerSetup {
    /// The peer's rank.
    pub peer: usize,
    /// Its rings (kept alive by the caller's connection).
    pub rings: Arc<TcpRings>,
    /// Its sockets.
    pub sockets: Vec<TcpStream>,
}

impl TcpRings {
    /// Two fresh rings of `shape`.
    pub fn new(shape: RingShape) -> TcpRings {
        TcpRings {
            staging: LocalRing::new(shape),
            inbound: LocalRing::new(shape),
        }
    }

    /// The stream's ends: (send into staging, receive from inbound).
    pub fn stream_ends(&self) -> (RingEnd, RingEnd) {
        (self.staging.end(), self.inbound.end())
    }
}

impl TcpNet {
    /// Starts the network thread for `peers` (nothing to do for none).
    ///
    /// # Errors
    /// [`Error::Os`](crate::Error::Os) when the eventfd or the thread cannot be created.
    pub fn start(rank: usize, peers: Vec<TcpPeerSetup>, sink: impl FailureSink) -> Result<TcpNet> {
        let ranks: Vec<usize> = peers.iter().map(|p| p.peer).collect();
        let io: Vec<Arc<Mutex<PeerIo>>> = peers
            .into_iter()
            .map(|p| {
                let staging = p.rings.staging.end();
                let inbound = p.rings.inbound.end();
                // The rings' memory is owned by the connections, which outlive
                // this thread (TcpNet is dropped, and joined, first) and
                // every stream's use of this state (it runs inside calls on
                // the communicator that owns both).
                Arc::new(Mutex::new(PeerIo::new(p.peer, staging, inbound, p.sockets)))
            })
            .collect();
        let shared = io.clone();
        let thread = NetThread::spawn(format!("streamcomm-net-{rank}"), move |s| {
            progress::run(shared, s.kick, s.stop, s.abort, sink)
        })?;
        Ok(TcpNet {
            thread,
            peers: ranks.into_iter().zip(io).collect(),
        })
    }

    /// The transfer state of the connection to `peer`, for streams that
    /// move their own bytes ([`inline::pump`]); `None` if `peer` is not a
    /// tcp peer.
    pub fn peer_io(&self, peer: usize) -> Option<Arc<Mutex<PeerIo>>> {
        self.peers
            .iter()
            .find(|(p, _)| *p == peer)
            .map(|(_, io)| io.clone())
    }
}
