//! Creating a communicator, in four stages.
//!
//! Each stage is a function in its own module, taking what the stage before
//! produced (prepare → exchange → connect, as rust-ibverbs and mscclpp
//! split connection set-up, with a last stage that
//! settles what every rank must agree on):
//!
//! 1. [`prepare`]: local resources only. Validates the configuration, opens
//!    the RDMA device, joins the bootstrap, creates this rank's shared-memory
//!    segment and tcp listener, and describes them in this rank's
//!    [`Endpoint`](super::Endpoint).
//! 2. [`exchange`]: every rank's endpoint, through the bootstrap's
//!    all-gather, and a check that the tuning agrees everywhere.
//! 3. [`connect`]: a connection to every peer (shared memory, tcp or
//!    verbs), then a bootstrap barrier after which this rank's segment name
//!    is unlinked (every peer has mapped it).
//! 4. [`agree`]: the topology (hosts, core binding) and the barrier state,
//!    decided from the endpoints alike on every rank; then, where the
//!    multicast barrier is asked for or preferred, [`multicast`] joins its
//!    group (collectively) and hands it to the barrier state.
//!
//! Then the communicator's state is assembled and its progress engine
//! started with the sources the stages produced.

mod agree;
pub(crate) mod connect;
mod exchange;
mod multicast;
mod prepare;

use std::sync::Arc;

use super::barrier::Barriers;
use super::barrier::MulticastService;
use super::core::{Core, CoreParts};
use super::failure::FailureState;
use super::inner::CommInner;
use super::p2p::{P2p, P2pState};
use super::peer_watch::peer_watch;
use super::recovery_point::RecoveryPoint;
use crate::Result;
use crate::bootstrap::UniqueId;
use crate::config::Config;
use crate::engine::Engine;
use crate::wait::spin_budget;

/// Creates this rank's share of the communicator named by `id`.
pub(crate) fn create(
    id: &UniqueId,
    rank: usize,
    size: usize,
    config: Config,
) -> Result<Arc<CommInner>> {
    let _span = tracing::info_span!("init", rank, size).entered();
    let mut local = prepare::prepare(id, rank, size, config)?;
    let endpoints = exchange::exchange(&mut local)?;
    let engine = Engine::new()?;
    let links = connect::connect(&mut local, &endpoints, id, engine.handle().kick())?;
    let mut agreed = agree::agree(&local, &endpoints, &links.peers)?;
    let want = multicast::wanted(
        local.config.barrier_algo,
        &endpoints,
        agreed.topology.nhosts,
    );
    let group = match want {
        Some(want) => multicast::settle(&mut local, id, &endpoints, want, &mut agreed.barrier)?,
        None => None,
    };
    let segment = Arc::new(local.segment);
    let failure = Arc::new(FailureState::new(
        rank,
        &segment,
        &links.peers,
        engine.handle().clone(),
    ));
    let mut sources = links.sources;
    if let Some(group) = group {
        sources.push(Box::new(MulticastService::new(group)));
    }
    let spin = spin_budget(local.config.spin, agreed.topology.local_ranks);
    let binding = agreed.topology.core_binding;
    let core = Arc::new(Core::new(CoreParts {
        rank,
        size,
        config: local.config,
        topology: agreed.topology,
        engine,
        peers: links.peers,
        failure: failure.clone(),
        segment,
        spin,
        faults: local.faults,
    }));
    let inner = Arc::new(CommInner {
        barrier: Arc::new(Barriers::new(agreed.barrier, core.clone())),
        p2p: Arc::new(P2p::new(P2pState::new(size), core.clone())),
        recovery: RecoveryPoint::new(
            local.recovery.map(|(l, _)| l),
            endpoints.iter().map(|e| e.recovery).collect(),
            local.secret,
        ),
        core,
    });
    // Shared-memory peers in other processes are watched; threads of this
    // process die with it.
    let watched: Vec<(usize, u32)> = (0..size)
        .filter(|&p| endpoints[p].pid != std::process::id())
        .filter(|&p| {
            inner.core.peers()[p]
                .as_ref()
                .is_some_and(|c| c.peer_segment().is_some())
        })
        .map(|p| (p, endpoints[p].pid))
        .collect();
    if let Some(watch) = peer_watch(Arc::downgrade(&inner.core), watched) {
        sources.push(watch);
    }
    // One thread for everything off the callers' threads, started now if
    // there are sources (proxied transports, the watch), else by the first
    // job (a barrier run off-stream, the CUDA backend's host side).
    inner.core.engine().start(rank, sources, failure)?;
    tracing::debug!(rank, size, cpu = ?binding.cpu(), "communicator ready");
    Ok(inner)
}

#[cfg(test)]
mod tests;
