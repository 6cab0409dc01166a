//! Stage 3 of creation: choosing and opening each peer's transport (see
//! [`super`]).
//!
//! Rule (`docs/design/architecture.md`): a peer on the same host (same host identity, which
//! includes the network namespace) is reached over shared memory, any other
//! over tcp; `STREAMCOMM_TRANSPORT=tcp` forces tcp everywhere and `=shm`
//! refuses peers on other hosts. Verbs comes first where both ranks can
//! use it ([`pair_uses_verbs`]): peers on other hosts when both have an
//! active RDMA port, every peer under `STREAMCOMM_TRANSPORT=verbs`.

use std::collections::HashMap;
use std::net::TcpListener;
use std::sync::Arc;

use super::prepare::Local;
use crate::bootstrap::{Bootstrap, UniqueId};
use crate::comm::endpoint::{Endpoint, VERBS_FORCED, pair_uses_verbs};
use crate::config::{Config, Transport, TransportChoice};
use crate::engine::{Kick, Source};
use crate::transport::ring::RingShape;
use crate::transport::shm::ShmLink;
use crate::transport::tcp::setup::{ConnectPlan, connect_all};
use crate::transport::tcp::{TcpLink, TcpPeerSetup, TcpRings, TcpSource};
#[cfg(feature = "verbs")]
use crate::transport::verbs::VerbsLink;
use crate::transport::{Connection, Link, Segment, ring_offset};
use crate::{Error, Result};

/// Every peer's connection, plus what the progress engine must drive.
pub(crate) struct Links {
    /// `peers[p]` for every rank (`None` for ourselves).
    pub peers: Vec<Option<Connection>>,
    /// The proxied transports' sources (tcp, verbs), for the engine.
    pub sources: Vec<Box<dyn Source>>,
}

/// The RDMA device this rank may use, if any.
#[cfg(feature = "verbs")]
pub(crate) type VerbsDevice = Option<Arc<crate::transport::verbs::device::Device>>;
/// Without the `verbs` feature there is never a device.
#[cfg(not(feature = "verbs"))]
pub(crate) type VerbsDevice = Option<()>;

/// Opens a connection to every peer (proxied connections wake the progress
/// engine through `kick`), then, once every peer has mapped this rank's
/// segment, removes its name so nothing is left behind, whatever happens
/// to this process later.
///
/// # Errors
/// [`Error::InvalidArgument`] when ranks disagree on the ring geometry;
/// [`Error::Unavailable`] when a peer cannot be reached with the chosen
/// transports; as the bootstrap, sockets, verbs and shared memory.
pub(crate) fn connect(
    local: &mut Local,
    endpoints: &[Endpoint],
    id: &UniqueId,
    kick: &Arc<Kick>,
) -> Result<Links> {
    let links = connect_peers(
        local.rank,
        &local.config,
        endpoints,
        &local.me,
        &local.segment,
        id,
        local.listener.take(),
        local.shape,
        &mut local.boot,
        &local.device,
        kick,
    )?;
    local.boot.barrier()?;
    local.segment.unlink();
    Ok(links)
}

/// Opens a connection to every peer.
#[allow(clippy::too_many_arguments)]
fn connect_peers(
    rank: usize,
    config: &Config,
    endpoints: &[Endpoint],
    me: &Endpoint,
    segment: &Segment,
    id: &UniqueId,
    listener: Option<(TcpListener, std::net::SocketAddr)>,
    shape: RingShape,
    boot: &mut Bootstrap,
    device: &VerbsDevice,
    kick: &Arc<Kick>,
) -> Result<Links> {
    let size = endpoints.len();
    let mut use_tcp = vec![false; size];
    let mut use_verbs = vec![false; size];
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
        use_verbs[p] = pair_uses_verbs(me, ep);
        if !use_verbs[p] && (me.verbs == VERBS_FORCED || ep.verbs == VERBS_FORCED) {
            let (who, other) = if me.verbs == VERBS_FORCED {
                (p, rank)
            } else {
                (rank, p)
            };
            return Err(Error::Unavailable(format!(
                "STREAMCOMM_TRANSPORT=verbs on rank {other}, but rank {who} has no active RDMA device (or another transport forced)"
            )));
        }
        if use_verbs[p] {
            continue;
        }
        use_tcp[p] = match config.transport {
            TransportChoice::Only(Transport::Tcp) => true,
            TransportChoice::Auto | TransportChoice::Only(Transport::Verbs) => !same_host,
            TransportChoice::Only(Transport::Shm) if same_host => false,
            TransportChoice::Only(Transport::Shm) => {
                return Err(Error::Unavailable(format!(
                    "rank {p} runs on another host ({}) and STREAMCOMM_TRANSPORT=shm",
                    ep.host
                )));
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
            ));
        }
    };
    // Collective: every rank exchanges verbs addresses when any pair uses verbs.
    let any_verbs = endpoints
        .iter()
        .enumerate()
        .any(|(a, ea)| endpoints[a + 1..].iter().any(|eb| pair_uses_verbs(ea, eb)));
    let verbs_peers: Vec<usize> = (0..size).filter(|&p| use_verbs[p]).collect();
    let mut sources: Vec<Box<dyn Source>> = Vec::new();
    #[cfg(feature = "verbs")]
    let verbs = match any_verbs {
        true => crate::transport::verbs::connect(
            boot,
            rank,
            device.as_ref(),
            &verbs_peers,
            shape,
            &std::sync::Arc::new(segment.barrier_area(size)),
        )?,
        false => Vec::new(),
    };
    #[cfg(feature = "verbs")]
    let verbs = {
        let rings: Vec<_> = verbs.iter().map(|v| (v.peer, v.rings.clone())).collect();
        let (shared, source) = crate::transport::verbs::share(verbs);
        if !shared.is_empty() {
            sources.push(Box::new(source));
        }
        rings
            .into_iter()
            .zip(shared)
            .map(|((p, rings), (_, peer))| (p, rings, peer))
            .collect::<Vec<_>>()
    };
    #[cfg(not(feature = "verbs"))]
    {
        let _ = (boot, device, &verbs_peers);
        if any_verbs {
            return Err(Error::Unavailable(
                "other ranks use the verbs transport, but this build of streamcomm lacks the `verbs` feature".into(),
            ));
        }
    }
    let mut peers = Vec::with_capacity(size);
    let (mut tcp_io, mut tcp_rings) = (Vec::new(), Vec::new());
    for (p, ep) in endpoints.iter().enumerate() {
        if p == rank {
            peers.push(None);
        } else if use_verbs[p] {
            #[cfg(feature = "verbs")]
            {
                let (_, rings, direct) = verbs.iter().find(|v| v.0 == p).ok_or_else(|| {
                    Error::Bootstrap(format!("verbs: no connection formed to rank {p}"))
                })?;
                let (send, recv) = rings.stream_ends();
                peers.push(Some(Connection::new(
                    p,
                    send,
                    recv,
                    Link::Verbs(VerbsLink {
                        _rings: rings.clone(),
                        kick: kick.clone(),
                        direct: direct.clone(),
                    }),
                )));
            }
        } else if use_tcp[p] {
            let rings = Arc::new(TcpRings::new(shape));
            let (send, recv) = rings.stream_ends();
            let io = TcpPeerSetup {
                peer: p,
                rings: rings.clone(),
                sockets: sockets.remove(&p).unwrap_or_default(),
                placement: crate::comm::p2p::PLACEMENT,
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
                    kick: kick.clone(),
                }),
            )));
        } else {
            let peer_segment = Arc::new(Segment::open(&ep.shm_name, size, shape)?);
            peers.push(Some(Connection::new(
                p,
                peer_segment.ring(ring_offset(p, rank, size, shape), shape)?,
                segment.ring(ring_offset(rank, p, size, shape), shape)?,
                Link::Shm(ShmLink { peer_segment }),
            )));
        }
    }
    if !tcp_io.is_empty() {
        sources.push(Box::new(TcpSource::new(tcp_io, tcp_rings)));
    }
    Ok(Links { peers, sources })
}
