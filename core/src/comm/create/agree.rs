//! Stage 4 of creation: what every rank decides alike from the endpoints
//! (see [`super`]).

use super::prepare::Local;
use crate::Result;
use crate::barrier::{BarrierAlgo, default_algo};
use crate::comm::affinity;
use crate::comm::barrier::BarrierState;
use crate::comm::core::Topology;
use crate::comm::endpoint::Endpoint;
use crate::transport::Connection;

/// The topology and the barrier state.
pub(crate) struct Agreed {
    pub topology: Topology,
    pub barrier: BarrierState,
}

/// Derives the topology (hosts, this rank's core) and the barrier state
/// (algorithm, flag memory) from the endpoints and the connections.
///
/// # Errors
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad
/// hosts override or barrier algorithm.
pub(crate) fn agree(
    local: &Local,
    endpoints: &[Endpoint],
    peers: &[Option<Connection>],
) -> Result<Agreed> {
    let (rank, size, config) = (local.rank, local.size, &local.config);
    let me = &local.me;
    let local_ranks = endpoints.iter().filter(|e| e.host == me.host).count();
    let local_index = endpoints[..rank]
        .iter()
        .filter(|e| e.host == me.host)
        .count();
    let core_binding = affinity::CoreBinding::choose(
        config.bind,
        local_index,
        local_ranks,
        &affinity::allowed_cpus(),
    );
    let hosts = match &config.hosts_override {
        Some(o) => o.labels(size)?,
        None => endpoints.iter().map(|e| e.host.clone()).collect(),
    };
    let host_index: Vec<usize> = hosts
        .iter()
        .map(|h| hosts.iter().position(|x| x == h).unwrap_or(0))
        .collect();
    let nhosts = (0..size).filter(|&r| host_index[r] == r).count();
    let topology = Topology {
        hosts,
        link_hosts: endpoints.iter().map(|e| e.host.clone()).collect(),
        nhosts,
        local_ranks,
        tcp_addrs: endpoints.iter().map(|e| e.tcp).collect(),
        core_binding,
    };
    let barrier = BarrierState::for_peers(
        rank,
        size,
        peers,
        local.segment.barrier_area(size),
        // The multicast barrier is settled after (`super::multicast`): the
        // flags run the default until then.
        config.barrier_algo.filter(|a| *a != BarrierAlgo::Multicast),
        default_algo(size, nhosts, local_ranks),
        local.shape.slot_bytes,
        host_index,
        counter_over_verbs(endpoints),
    )?;
    Ok(Agreed { topology, barrier })
}

/// Whether the central counter may run over verbs: every pair of ranks
/// talks over verbs and every rank's device executes RDMA atomics (decided
/// from the endpoints, so alike on every rank).
fn counter_over_verbs(endpoints: &[Endpoint]) -> bool {
    endpoints.iter().all(|e| e.verbs_atomics) && super::multicast::all_pairs_on_verbs(endpoints)
}
