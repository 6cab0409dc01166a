//! What a communicator is made of: its [`Core`] and the three parts that
//! hold their own state beside it (barrier, point-to-point, recovery), as a
//! runtime composes a handle over a driver. Each part's operations take the
//! core; none of them reaches into another part, and the core knows none
//! of them.

use crate::comm::barrier::BarrierState;
use crate::comm::core::Core;
use crate::comm::p2p::P2pState;
use crate::comm::recovery::RecoveryPoint;

/// A communicator's shared state: the handle, its stream tasks and its
/// progress engine's sources hold it.
pub(crate) struct CommInner {
    /// Barrier algorithm, epochs and flag areas (declared, so dropped,
    /// before the core, whose segment holds our own flag area).
    pub(crate) barrier: BarrierState,
    /// Point-to-point rendezvous numbering and byte counters.
    pub(crate) p2p: P2pState,
    /// Where the survivors meet to shrink this communicator.
    pub(crate) recovery: RecoveryPoint,
    /// Place, connections, turns, failure record, engine, wait policy.
    pub(crate) core: Core,
}
