//! Stage 3 of creation: choosing and opening each peer's transport (see
//! [`super`]).
//!
//! Rule (`docs/design/architecture.md`): a peer on the same host (same host identity, which
//! includes the network namespace) is reached over shared memory, any other
//! over tcp; `STREAMCOMM_TRANSPORT=tcp` forces tcp everywhere and `=shm`
//! refuses peers on other hosts. Verbs comes first where both ranks can
//! use it ([`pair_uses_verbs`]): peers on other hosts when both have an
//! active RDMA port, every peer under `STREAMCOMM_TRANSPORT=verbs`.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use super::prepare::Local;
use crate::bootstrap::UniqueId;
use crate::comm::endpoint::{Endpoint, VERBS_FORCED, pair_uses_verbs};
use crate::config::{Config, Transport, TransportChoice};
use crate::engine::Kick;
use crate::transport::ring::RingShape;
use crate::transport::{LinkSetup, Links, RdmaDevice, Route, Segment, connect_links};
use crate::{Error, Result};

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
    let ring = ring_shape(&local.config, local.shape, endpoints);
    let links = connect_peers(
        local.rank,
        &local.config,
        endpoints,
        &local.me,
        &local.segment,
        id,
        (local.listener.take(), local.verbs_shake.take()),
        (local.shape, ring),
        &local.device,
        kick,
    )?;
    local.boot.barrier()?;
    local.segment.unlink();
    // What the communicator runs from here on: plans cut data into these
    // slots, and `comm.config()` shows them.
    local.shape = ring;
    local.config.buffsize = ring.nsteps * ring.slot_bytes;
    Ok(links)
}

/// The rings' shape, alike on every rank: the configured one (`layout`),
/// its slots shrunk where the inbound rings from every peer on the busiest
/// host would not fit `STREAMCOMM_SHM_BUDGET`: the ranks of one host
/// share its memory, whatever carries their rings (shared memory, or tcp
/// and verbs between them, whose rings are each rank's own memory).
fn ring_shape(config: &Config, layout: RingShape, endpoints: &[Endpoint]) -> RingShape {
    let mut per_host: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for e in endpoints {
        *per_host.entry(e.host.as_str()).or_default() += 1;
    }
    let busiest = per_host.values().copied().max().unwrap_or(1);
    layout.within(config.shm_budget, busiest.saturating_sub(1))
}

/// A listener and the address it listens at.
type Listener = (TcpListener, SocketAddr);

/// Opens a connection to every peer.
#[allow(clippy::too_many_arguments)]
fn connect_peers(
    rank: usize,
    config: &Config,
    endpoints: &[Endpoint],
    me: &Endpoint,
    segment: &Segment,
    id: &UniqueId,
    (listener, verbs_listener): (Option<Listener>, Option<Listener>),
    (layout, shape): (RingShape, RingShape),
    device: &RdmaDevice,
    kick: &Arc<Kick>,
) -> Result<Links> {
    let size = endpoints.len();
    let mut use_tcp = vec![false; size];
    let mut use_verbs = vec![false; size];
    for (p, ep) in endpoints.iter().enumerate() {
        if ep.shm_budget != config.shm_budget as u64 {
            return Err(Error::invalid(format!(
                "rank {p} has a shared-memory budget of {} bytes, rank {rank} of {}: set the same STREAMCOMM_SHM_BUDGET everywhere",
                ep.shm_budget, config.shm_budget
            )));
        }
        if ep.shape != layout {
            return Err(Error::invalid(format!(
                "rank {p} uses {} slots of {} bytes, rank {rank} uses {} of {}: set the same STREAMCOMM_BUFFSIZE/NSTEPS everywhere",
                ep.shape.nsteps, ep.shape.slot_bytes, layout.nsteps, layout.slot_bytes
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
    let mut routes = Vec::with_capacity(size);
    for (p, ep) in endpoints.iter().enumerate() {
        routes.push(match (p == rank, use_verbs[p], use_tcp[p], ep.tcp) {
            (true, ..) => Route::Me,
            (_, true, ..) => Route::Verbs(ep.verbs_shake.ok_or_else(|| {
                Error::Bootstrap(format!(
                    "rank {p} has an RDMA device but no address for verbs handshakes"
                ))
            })?),
            (_, _, true, Some(addr)) => Route::Tcp(addr),
            _ => Route::Shm(ep.shm_name.clone()),
        });
    }
    connect_links(
        &routes,
        LinkSetup {
            rank,
            config,
            segment,
            layout,
            shape,
            listener,
            verbs_listener,
            secret: *id.secret(),
            device,
            placement: crate::comm::p2p::PLACEMENT,
            kick,
        },
    )
}
