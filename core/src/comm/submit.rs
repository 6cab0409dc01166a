//! The one seam through which the device backend submits work to a
//! communicator: the stream task of a collective (the same task the host
//! stream's doors enqueue, [`PlanTask::for_call`], which the device
//! backend runs between its copies) or of a group, checked, and the
//! failure record a device operation fails into. The device backend
//! (`device/`) adds no methods to [`Communicator`]; it asks this trait.

use std::sync::Arc;

use crate::comm::Communicator;
use crate::comm::barrier::barrier_task;
use crate::comm::buffer::Binding;
use crate::comm::failure::FailureState;
use crate::comm::p2p::{Dir, GroupMemory};
use crate::comm::plan_cache::CallKey;
use crate::comm::task::PlanTask;
use crate::host::Task;
use crate::plan::Collective;
use crate::{DataType, ReduceOp, Result};

/// What a device backend asks of a communicator.
pub(crate) trait Submit {
    /// This rank and the communicator's size.
    fn place(&self) -> (usize, usize);

    /// The communicator's one failure record.
    fn failure(&self) -> &Arc<FailureState>;

    /// The stream task of one collective: its plan (algorithm chosen for
    /// the call, kept from the last call of the same shape) bound to
    /// `binding`, checked (a barrier's binds nothing). Host streams enqueue
    /// it; device streams run it on staging buffers.
    ///
    /// # Errors
    /// As the host form of the collective.
    fn collective_task(
        &self,
        collective: Collective,
        dtype: DataType,
        op: ReduceOp,
        count: usize,
        binding: Binding,
    ) -> Result<Arc<dyn Task>>;

    /// The host task of a group of whole-buffer sends and receives (`None`
    /// for an empty group), checked as [`Communicator::group`] checks.
    ///
    /// # Errors
    /// As [`Communicator::group`].
    fn group_task(
        &self,
        ops: &[(Dir, usize, GroupMemory)],
        rdma_rendezvous: bool,
    ) -> Result<Option<Arc<dyn Task>>>;

    /// True when messages with `peer` move by RDMA writes: what a device
    /// operation needs to skip staging.
    fn moves_by_rdma(&self, peer: usize) -> bool;
}

impl Submit for Communicator {
    fn place(&self) -> (usize, usize) {
        self.inner.core.place()
    }

    fn failure(&self) -> &Arc<FailureState> {
        self.inner.core.failure()
    }

    fn collective_task(
        &self,
        collective: Collective,
        dtype: DataType,
        op: ReduceOp,
        count: usize,
        binding: Binding,
    ) -> Result<Arc<dyn Task>> {
        if collective == Collective::Barrier {
            self.inner.core.failure().check()?;
            return Ok(barrier_task(&self.inner.barrier));
        }
        let shape = CallKey {
            collective,
            dtype,
            op,
            count,
        };
        PlanTask::for_call(&self.inner.core, shape, binding)
    }

    fn group_task(
        &self,
        ops: &[(Dir, usize, GroupMemory)],
        rdma_rendezvous: bool,
    ) -> Result<Option<Arc<dyn Task>>> {
        self.p2p_group_task(ops, rdma_rendezvous)
    }

    fn moves_by_rdma(&self, peer: usize) -> bool {
        let core = &self.inner.core;
        peer != core.rank()
            && core.config().p2p_direct
            && core.connection(peer).is_ok_and(|c| c.writes_remotely())
    }
}
