//! The barrier executor: runs one rank's plan of flag steps for one epoch.
//!
//! [`run`] walks the plan with the one interpreter of flag steps
//! ([`apply`], `plan/flag/apply.rs`, which the simulator also calls) and
//! blocks in [`BarrierMemory::wait`] on a wait that is not met yet.

use crate::Error;
use crate::plan::flag::apply::{apply, check_epoch};
use crate::plan::flag::{BarrierMemory, BarrierPlan};

/// Runs `plan` for barrier number `epoch` (1, 2, 3, ..., the same on every
/// rank, consecutive on one memory) against `mem`, blocking until the
/// barrier completes.
///
/// # Errors
///
/// [`Error::InvalidArgument`] for epoch 0 or above
/// `MAX_EPOCH`, or a step whose round or counter target
/// does not fit; [`Error::InvalidUsage`] for a data step; whatever [`BarrierMemory::wait`] returns (timeout, abort).
pub fn run<M: BarrierMemory + ?Sized>(
    plan: &BarrierPlan,
    epoch: u64,
    mem: &M,
) -> Result<(), Error> {
    check_epoch(epoch)?;
    for step in &plan.steps {
        if let Some(on) = apply(plan.rank, step, epoch, mem)? {
            mem.wait(&on, &|| on.is_met(mem))?;
        }
    }
    Ok(())
}
