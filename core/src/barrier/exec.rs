//! The one interpreter of flag steps.
//!
//! [`apply`] performs a flag step's action or checks its wait; [`run`]
//! walks a plan with it and blocks in [`BarrierMemory::wait`] on a wait
//! that is not met yet. The simulator calls the same [`apply`], so what it
//! proves is what runs. A data step (no [`FlagOp`]) is refused: data steps
//! belong to `plan::apply_step`, which refuses flag steps in turn.

use super::memory::{BarrierMemory, WaitFor, Word};
use super::plan::BarrierPlan;
use crate::plan::flag::{signal_value, MAX_EPOCH, ROUNDS_PER_EPOCH};
use crate::plan::{FlagOp, Step};
use crate::Error;

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

/// Executes one step of `rank`'s plan for barrier `epoch`, without blocking.
///
/// An action is performed and `None` returned; a wait that is already met
/// returns `None`; a wait that is not met returns what it waits for.
///
/// # Errors
///
/// As [`wait_for`].
pub fn apply<M: BarrierMemory + ?Sized>(
    rank: usize,
    step: &Step,
    epoch: u64,
    mem: &M,
) -> Result<Option<WaitFor>, Error> {
    let op = flag_op(step)?;
    if let Some(on) = wait_for(rank, &op, epoch)? {
        return Ok((!on.is_met(mem)).then_some(on));
    }
    match op {
        FlagOp::FetchAdd { root } => mem.fetch_add_counter(root, 1),
        FlagOp::Notify { peer, round } => {
            mem.store_flag(peer, rank, value(epoch, round)?);
        }
        FlagOp::Release { peer } => mem.store_release(peer, value(epoch, 0)?),
        FlagOp::WaitCounter { .. } | FlagOp::WaitFlag { .. } | FlagOp::WaitRelease { .. } => {}
    }
    Ok(None)
}

/// The flag operation of `step`.
///
/// # Errors
///
/// [`Error::InvalidUsage`] naming the step for a data step: an internal
/// error (a barrier plan holds only flag steps).
fn flag_op(step: &Step) -> Result<FlagOp, Error> {
    step.flag.ok_or_else(|| {
        Error::InvalidUsage(format!(
            "internal error: the barrier executor got data step {step:?} \
             (only flag steps run on flag memory)"
        ))
    })
}

/// What a flag wait of `rank`'s plan waits for in barrier `epoch`; `None`
/// for an action. Pure: reads no memory.
///
/// # Errors
///
/// [`Error::InvalidArgument`] when the epoch is 0 or too large, the round
/// is not below [`ROUNDS_PER_EPOCH`], or
/// `epoch * count_per_epoch` overflows.
pub fn wait_for(rank: usize, op: &FlagOp, epoch: u64) -> Result<Option<WaitFor>, Error> {
    check_epoch(epoch)?;
    let on = match *op {
        FlagOp::WaitCounter { count_per_epoch } => WaitFor {
            owner: rank,
            word: Word::Counter,
            target: epoch.checked_mul(count_per_epoch).ok_or_else(|| {
                Error::invalid(format!(
                    "barrier epoch {epoch} x {count_per_epoch} arrivals overflows the counter"
                ))
            })?,
        },
        FlagOp::WaitFlag { from, round } => WaitFor {
            owner: rank,
            word: Word::Flag { src: from },
            target: value(epoch, round)?,
        },
        FlagOp::WaitRelease { at } => WaitFor {
            owner: at,
            word: Word::Release,
            target: value(epoch, 0)?,
        },
        FlagOp::FetchAdd { .. } | FlagOp::Notify { .. } | FlagOp::Release { .. } => {
            return Ok(None);
        }
    };
    Ok(Some(on))
}

/// Checks that `epoch` can be encoded (1..=MAX_EPOCH).
fn check_epoch(epoch: u64) -> Result<(), Error> {
    if epoch == 0 || epoch > MAX_EPOCH {
        return Err(Error::invalid(format!(
            "barrier epoch {epoch} is out of range 1..={MAX_EPOCH}"
        )));
    }
    Ok(())
}

/// [`signal_value`] or an error naming the bad epoch or round.
fn value(epoch: u64, round: u32) -> Result<u64, Error> {
    check_epoch(epoch)?;
    signal_value(epoch, round).ok_or_else(|| {
        Error::invalid(format!(
            "barrier round {round} is out of range (at most {ROUNDS_PER_EPOCH} rounds)"
        ))
    })
}
