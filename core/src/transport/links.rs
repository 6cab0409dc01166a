//! Opening the links a communicator's creation chose: each transport's
//! connect step, behind one call, so that creation names routes, not
//! transports (and no transport's cargo feature).
//!
//! Creation decides per peer how it is reached ([`Route`]: the rule lives
//! with the endpoints it reads); [`connect_links`] opens every route: the
//! peer's shared-memory segment, the tcp rings (their sockets are made on
//! first use, by the engine's tcp source), the verbs pairs (their queue
//! pairs are made on first use too, by the engine's verbs source), and returns one
//! [`Connection`] per peer and the progress engine's sources.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use crate::config::{Config, Transport, TransportChoice};
use crate::engine::{Kick, Source};
use crate::transport::placement::Placement;
use crate::transport::ring::RingShape;
use crate::transport::shm::ShmLink;
use crate::transport::tcp::connector::{Connector, ConnectorSetup};
use crate::transport::tcp::{TcpLink, TcpPeerSetup, TcpRings, TcpSource};
use crate::transport::{Connection, Link, Segment, ring_offset};
use crate::{Error, Result};

/// How one peer is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// This rank itself.
    Me,
    /// Over shared memory: the peer's segment, by name.
    Shm(String),
    /// Over tcp, to the peer's listener.
    Tcp(SocketAddr),
    /// Over verbs (RDMA): the peer answers handshakes at this address.
    Verbs(SocketAddr),
}

/// Every peer's connection, plus what the progress engine must drive.
pub(crate) struct Links {
    /// `peers[p]` for every rank (`None` for ourselves).
    pub peers: Vec<Option<Connection>>,
    /// The proxied transports' sources (tcp, verbs), for the engine.
    pub sources: Vec<Box<dyn Source>>,
}

/// What [`connect_links`] needs besides the routes.
pub(crate) struct LinkSetup<'a> {
    /// This rank.
    pub rank: usize,
    /// Settings (tcp sockets per peer, the timeout).
    pub config: &'a Config,
    /// This rank's segment (its inbound rings, the barrier area).
    pub segment: &'a Segment,
    /// The segments' layout: room for a ring of this shape per peer, the
    /// same on every rank (`STREAMCOMM_BUFFSIZE` / `NSTEPS`).
    pub layout: RingShape,
    /// The rings' geometry, the same on every rank: `layout`, or smaller
    /// slots where the shared-memory budget asks (see `RingShape::within`).
    pub shape: RingShape,
    /// This rank's tcp listener, where it listens.
    pub listener: Option<(TcpListener, SocketAddr)>,
    /// Where this rank answers its verbs peers' handshakes.
    pub verbs_listener: Option<(TcpListener, SocketAddr)>,
    /// The communicator's secret (the tcp and verbs hellos carry it).
    pub secret: [u8; 16],
    /// The RDMA device, where there is one.
    pub device: &'a RdmaDevice,
    /// Which arriving tcp slots may go straight into a receive buffer.
    pub placement: Placement,
    /// Wakes the progress engine when a proxied connection has work.
    pub kick: &'a Arc<Kick>,
}

/// Opens every route: `routes[p]` for each rank `p`.
///
/// # Errors
/// [`Error::Unavailable`] when a route cannot be taken (tcp peers without a
/// listener, verbs in a build without it); as the bootstrap, sockets, verbs
/// and shared memory.
pub(crate) fn connect_links(routes: &[Route], s: LinkSetup<'_>) -> Result<Links> {
    let size = routes.len();
    // The peers of a transport dialed on first use, with their addresses.
    let dialed = |of: fn(&Route) -> Option<SocketAddr>| -> Vec<(usize, SocketAddr)> {
        let ranked = routes.iter().enumerate();
        ranked.filter_map(|(p, r)| of(r).map(|a| (p, a))).collect()
    };
    let tcp_peers = dialed(|r| match r {
        Route::Tcp(addr) => Some(*addr),
        _ => None,
    });
    // Tcp peers are connected on first use: the listener goes to the
    // engine's tcp source, which dials and accepts.
    let connector = match (s.listener, tcp_peers.is_empty()) {
        (_, true) => None,
        (Some((listener, _)), false) => Some(Connector::new(ConnectorSetup {
            rank: s.rank,
            secret: s.secret,
            nsockets: s.config.nchannels,
            timeout: s.config.timeout.min(Duration::from_secs(120)),
            listener,
            peers: tcp_peers,
        })?),
        (None, false) => {
            return Err(Error::Unavailable(
                "tcp peers but no tcp listener (STREAMCOMM_TRANSPORT=shm?)".into(),
            ));
        }
    };
    let verbs_peers = dialed(|r| match r {
        Route::Verbs(addr) => Some(*addr),
        _ => None,
    });
    let mut sources: Vec<Box<dyn Source>> = Vec::new();
    let mut verbs = s.device.connect(
        (s.rank, size),
        &verbs_peers,
        s.verbs_listener,
        (s.secret, s.config.timeout.min(Duration::from_secs(120))),
        s.shape,
        s.segment,
        s.kick,
        &mut sources,
    )?;
    let reserves_on_use = s.segment.reserves_on_use();
    let mut peers = Vec::with_capacity(size);
    let (mut tcp_io, mut tcp_rings) = (Vec::new(), Vec::new());
    for (p, route) in routes.iter().enumerate() {
        match route {
            Route::Me => peers.push(None),
            Route::Verbs(_) => {
                let link = verbs.remove(&p).ok_or_else(|| {
                    Error::Bootstrap(format!("verbs: no connection formed to rank {p}"))
                })?;
                peers.push(Some(link));
            }
            Route::Tcp(_) => {
                let rings = Arc::new(TcpRings::new(s.shape)?);
                let (send, recv) = rings.stream_ends();
                let io = TcpPeerSetup {
                    peer: p,
                    rings: rings.clone(),
                    placement: s.placement,
                }
                .into_io();
                tcp_io.push(io.clone());
                tcp_rings.push(rings.clone());
                peers.push(Some(Connection::new(
                    p,
                    send,
                    recv,
                    Link::Tcp(TcpLink {
                        io,
                        _rings: rings,
                        kick: s.kick.clone(),
                    }),
                )));
            }
            Route::Shm(name) => {
                let inbound = ring_offset(s.rank, p, size, s.layout);
                let peer_segment = Arc::new(Segment::open(name, size, s.layout)?);
                let (send, recv) = (
                    peer_segment.ring(ring_offset(p, s.rank, size, s.layout), s.shape)?,
                    s.segment.ring(inbound, s.shape)?,
                );
                let conn = Connection::new(p, send, recv, Link::Shm(ShmLink { peer_segment }));
                // The ring neighbours' rings carry most traffic (ring
                // algorithms use nothing else): their memory is allocated
                // and mapped now. Every other ring's header now, its slots
                // by the sender at their first use (where the kernel can
                // say /dev/shm is full instead of raising SIGBUS; else the
                // whole ring now).
                let neighbour = p == (s.rank + 1) % size || p == (s.rank + size - 1) % size;
                peers.push(Some(match (neighbour, reserves_on_use) {
                    (true, true) => {
                        for ring in [&conn.send, &conn.recv] {
                            ring.reserve().map_err(|e| {
                                Error::os(
                                    format!("allocating the shared-memory rings with rank {p} (is /dev/shm large enough?)"),
                                    e,
                                )
                            })?;
                        }
                        conn
                    }
                    (false, true) => {
                        s.segment.reserve_ring_header(inbound)?;
                        conn.reserving_on_first_send()
                    }
                    (_, false) => {
                        s.segment.reserve_ring(inbound, s.shape)?;
                        if neighbour {
                            conn.send.populate();
                            conn.recv.populate();
                        }
                        conn
                    }
                }));
            }
        }
    }
    if let Some(connector) = connector {
        sources.push(Box::new(TcpSource::new(tcp_io, tcp_rings, connector)));
    }
    Ok(Links { peers, sources })
}

/// The RDMA device this rank may use, if any (never one in a build without
/// the `verbs` feature).
#[derive(Clone, Default)]
pub(crate) struct RdmaDevice {
    #[cfg(feature = "verbs")]
    device: Option<Arc<crate::transport::verbs::device::Device>>,
}

impl RdmaDevice {
    /// Opens the device when this rank has peers and may use verbs: under
    /// `STREAMCOMM_TRANSPORT=verbs` failing if there is none, under `auto`
    /// best effort (none: tcp between hosts).
    ///
    /// # Errors
    /// [`Error::Unavailable`] under `STREAMCOMM_TRANSPORT=verbs` without a
    /// device, or in a build without the `verbs` feature.
    pub(crate) fn open(config: &Config, size: usize) -> Result<RdmaDevice> {
        let forced = matches!(config.transport, TransportChoice::Only(Transport::Verbs));
        let wanted = size > 1 && (forced || matches!(config.transport, TransportChoice::Auto));
        #[cfg(feature = "verbs")]
        {
            use crate::transport::verbs::device::Device;
            if !wanted {
                return Ok(RdmaDevice::default());
            }
            match Device::shared(config.ib_hca.as_deref(), config.ib_gid_index) {
                Ok(device) => Ok(RdmaDevice {
                    device: Some(device),
                }),
                Err(e) if forced => Err(e),
                Err(e) => {
                    tracing::debug!(error = %e, "verbs unavailable; tcp between hosts");
                    Ok(RdmaDevice::default())
                }
            }
        }
        #[cfg(not(feature = "verbs"))]
        {
            if wanted && forced {
                return Err(Error::Unavailable(
                    "STREAMCOMM_TRANSPORT=verbs, but this build of streamcomm has no verbs transport (build with the `verbs` feature)".into(),
                ));
            }
            Ok(RdmaDevice::default())
        }
    }

    /// Whether there is a device.
    pub(crate) fn is_open(&self) -> bool {
        #[cfg(feature = "verbs")]
        return self.device.is_some();
        #[cfg(not(feature = "verbs"))]
        false
    }

    /// Whether the device executes RDMA atomics.
    pub(crate) fn atomics(&self) -> bool {
        #[cfg(feature = "verbs")]
        return self.device.as_ref().is_some_and(|d| d.atomics);
        #[cfg(not(feature = "verbs"))]
        false
    }

    /// This rank's UD queue pair in the multicast group `tag` of `size`
    /// ranks (the multicast barrier's datagrams), or why there is none.
    /// `refuse` makes the join fail, for the fault-injection tests.
    pub(crate) fn join_multicast(
        &self,
        size: usize,
        tag: u64,
        refuse: bool,
    ) -> std::result::Result<Box<dyn crate::barrier::multicast::Datagrams>, String> {
        #[cfg(feature = "verbs")]
        {
            let dev = self.device.as_ref().ok_or("no RDMA device")?;
            let group = crate::transport::verbs::multicast::UdGroup::join(dev, size, tag, refuse)?;
            Ok(Box::new(group))
        }
        #[cfg(not(feature = "verbs"))]
        {
            let _ = (size, tag, refuse);
            Err(
                "this build of streamcomm has no verbs transport (build with the `verbs` feature)"
                    .into(),
            )
        }
    }

    /// The verbs links to `peers` (each rank with its handshake address),
    /// by rank: no queue pair is made until a pair's first use; the verbs
    /// source, which answers handshakes on `listener` and dials them,
    /// joins `sources`.
    #[allow(clippy::too_many_arguments)]
    fn connect(
        &self,
        (rank, size): (usize, usize),
        peers: &[(usize, SocketAddr)],
        listener: Option<(TcpListener, SocketAddr)>,
        (secret, timeout): ([u8; 16], Duration),
        shape: RingShape,
        segment: &Segment,
        kick: &Arc<Kick>,
        sources: &mut Vec<Box<dyn Source>>,
    ) -> Result<HashMap<usize, Connection>> {
        if peers.is_empty() {
            return Ok(HashMap::new());
        }
        #[cfg(feature = "verbs")]
        {
            use crate::transport::verbs::handshake::Shaker;
            use crate::transport::verbs::{VerbsLink, connect, share};
            let (listener, _) = listener.ok_or_else(|| {
                Error::Unavailable("verbs peers but no handshake listener".into())
            })?;
            let made = connect(
                self.device.as_ref(),
                peers,
                shape,
                &Arc::new(segment.barrier_area(size)),
            )?;
            let rings: Vec<_> = made.iter().map(|v| (v.peer, v.rings.clone())).collect();
            let shaker = Arc::new(Shaker {
                rank,
                secret,
                timeout,
                kick: kick.clone(),
                answering: Default::default(),
            });
            let (shared, source) = share(made, listener, shaker)?;
            sources.push(Box::new(source));
            Ok(rings
                .into_iter()
                .zip(shared)
                .map(|((p, rings), (_, direct))| {
                    let (send, recv) = rings.stream_ends();
                    let link = Link::Verbs(VerbsLink {
                        _rings: rings,
                        kick: kick.clone(),
                        direct,
                    });
                    (p, Connection::new(p, send, recv, link))
                })
                .collect())
        }
        #[cfg(not(feature = "verbs"))]
        {
            let _ = (
                rank, size, listener, secret, timeout, shape, segment, kick, sources,
            );
            Err(Error::Unavailable(
                "other ranks use the verbs transport, but this build of streamcomm lacks the `verbs` feature".into(),
            ))
        }
    }
}
