//! What a communicator is made of: its [`Core`] and the parts that hold
//! their own state beside it, each holding the core (barrier,
//! point-to-point) or handed it (recovery), as a runtime composes a handle
//! over a driver. No part reaches into another, and the core knows none of
//! them.

use std::sync::Arc;

use crate::comm::barrier::Barriers;
use crate::comm::core::Core;
use crate::comm::p2p::P2p;
use crate::comm::recovery_point::RecoveryPoint;

/// A communicator's shared state: the handle and the progress engine's
/// sources hold it; stream tasks hold only the part they run on.
pub(crate) struct CommInner {
    /// Barrier algorithm, epochs and flag areas, over the core.
    pub(crate) barrier: Arc<Barriers>,
    /// Point-to-point rendezvous numbering and byte counters, over the core.
    pub(crate) p2p: Arc<P2p>,
    /// Where the survivors meet to shrink this communicator.
    pub(crate) recovery: RecoveryPoint,
    /// Place, connections, turns, failure record, engine, wait policy.
    pub(crate) core: Arc<Core>,
}
