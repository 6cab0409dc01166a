//! Choosing and opening each peer's transport at communicator creation.
//!
//! Rule (DESIGN.md §4): a peer on the same host (same host identity, which
//! includes the network namespace) is reached over shared memory, any other
//! over tcp; `STREAMCOMM_TRANSPORT=tcp` forces tcp everywhere and `=shm`
//! refuses peers on other hosts.

use std::collections::HashMap;
use std::net::TcpListener;
use std::sync::Arc;

use crate::bootstrap::UniqueId;
use crate::comm::endpoint::Endpoint;
use crate::config::{Config, TransportChoice};
use crate::transport::ring::RingShape;
use crate::transport::tcp::setup::{connect_all, ConnectPlan};
use crate::transport::tcp::{TcpNet, TcpPeerSetup, TcpRings};
use crate::transport::{ring_offset, Connection, Link, Segment};
use crate::{Error, Result};

/// Every peer's connection, plus the tcp peers for the network thread.
pub(crate) struct Links {
    /// `peers[p]` for every rank (`None` for ourselves).
    pub peers: Vec<Option<Connection>>,
    /// tcp peers to hand to the network thread.
    pub tcp: Vec<TcpPeerSetup>,
}

/// Opens a connection to every peer.
#[allow(clippy::too_many_arguments)]
pub(crate) fn connect_peers(
    rank: usize,
    config: &Config,
    endpoints: &[Endpoint],
    me: &Endpoint,
    segment: &Segment,
    id: &UniqueId,
    listener: Option<(TcpListener, std::net::SocketAddr)>,
    shape: RingShape,
) -> Result<Links> {
    let size = endpoints.len();
    let mut use_tcp = vec![false; size];
    for (p, ep) in endpoints.iter().enumerate() {
        if ep.shape != shape {
            return Err(Error::invalid(format!(
                "rank {p} uses {} slots of {} bytes, rank {rank} uses {} of {}: set the same STREAMCOMM_BUFFSIZE/NSTEPS everywhere",
                ep.shape.nsteps, ep.shape.slot_bytes, shape.nsteps, shape.slot_bytes
            )));
        }
        if p == rank {
            continue;
        }
        let same_host = ep.host == me.host;
        use_tcp[p] = match config.transport {
            TransportChoice::Tcp => true,
            TransportChoice::Auto => !same_host,
            TransportChoice::Shm if same_host => false,
            TransportChoice::Shm => {
                return Err(Error::Unavailable(format!(
                    "rank {p} runs on another host ({}) and STREAMCOMM_TRANSPORT=shm",
                    ep.host
                )))
            }
        };
        if use_tcp[p] && ep.tcp.is_none() {
            return Err(Error::Unavailable(format!(
                "rank {p} must be reached over tcp but does not listen (STREAMCOMM_TRANSPORT=shm there?)"
            )));
        }
    }
    let tcp_peers: Vec<(usize, std::net::SocketAddr)> = (0..size)
        .filter(|&p| use_tcp[p])
        .filter_map(|p| endpoints[p].tcp.map(|a| (p, a)))
        .collect();
    let mut sockets = match (&listener, tcp_peers.is_empty()) {
        (_, true) => HashMap::new(),
        (Some((l, _)), false) => connect_all(
            &ConnectPlan {
                rank,
                peers: &tcp_peers,
                nsockets: config.nchannels,
                secret: *id.secret(),
                timeout: config.timeout.min(std::time::Duration::from_secs(120)),
            },
            l,
        )?,
        (None, false) => {
            return Err(Error::Unavailable(
                "tcp peers but no tcp listener (STREAMCOMM_TRANSPORT=shm?)".into(),
            ))
        }
    };
    let mut peers = Vec::with_capacity(size);
    let mut tcp = Vec::new();
    for (p, ep) in endpoints.iter().enumerate() {
        if p == rank {
            peers.push(None);
        } else if use_tcp[p] {
            let rings = Arc::new(TcpRings::new(shape));
            let (send, recv) = rings.stream_ends();
            tcp.push(TcpPeerSetup {
                peer: p,
                rings: rings.clone(),
                sockets: sockets.remove(&p).unwrap_or_default(),
            });
            peers.push(Some(Connection {
                send,
                recv,
                link: Link::Tcp {
                    rings,
                    // Replaced by the network thread's kick once it starts.
                    kick: Arc::new(crate::transport::tcp::kick::Kick::new()?),
                },
            }));
        } else {
            let peer_segment = Arc::new(Segment::open(&ep.shm_name, size, shape)?);
            peers.push(Some(Connection {
                send: peer_segment.ring(ring_offset(p, rank, size, shape), shape)?,
                recv: segment.ring(ring_offset(rank, p, size, shape), shape)?,
                link: Link::Shm { peer_segment },
            }));
        }
    }
    Ok(Links { peers, tcp })
}

/// Points a tcp connection's kick at the running network thread.
pub(crate) fn attach_kick(mut c: Connection, net: Option<&TcpNet>) -> Connection {
    if let (Link::Tcp { kick, .. }, Some(net)) = (&mut c.link, net) {
        *kick = net.kick.clone();
    }
    c
}
