//! The one interpreter of barrier steps.
//!
//! [`apply`] performs an action step or checks a wait step; [`run`] walks a
//! plan with it and blocks in [`BarrierMemory::wait`] on a wait that is not
//! met yet. The simulator calls the same [`apply`], so what it proves is
//! what runs.

use super::memory::{BarrierMemory, WaitFor, Word};
use super::step::{signal_value, BarrierPlan, BarrierStep, MAX_EPOCH};
use crate::Error;

/// Runs `plan` for barrier number `epoch` (1, 2, 3, ..., the same on every
/// rank, consecutive on one memory) against `mem`, blocking until the
/// barrier completes.
///
/// # Errors
///
/// [`Error::InvalidArgument`] for epoch 0 or above
/// `MAX_EPOCH`, or a step whose round or counter target
/// does not fit; whatever [`BarrierMemory::wait`] returns (timeout, abort).
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
    step: &BarrierStep,
    epoch: u64,
    mem: &M,
) -> Result<Option<WaitFor>, Error> {
    if let Some(on) = wait_for(rank, step, epoch)? {
        return Ok((!on.is_met(mem)).then_some(on));
    }
    match *step {
        BarrierStep::FetchAdd { root } => mem.fetch_add_counter(root, 1),
        BarrierStep::Notify { peer, round } => {
            mem.store_flag(peer, rank, value(epoch, round)?);
        }
        BarrierStep::Release { peer } => mem.store_release(peer, value(epoch, 0)?),
        BarrierStep::WaitCounter { .. }
        | BarrierStep::WaitFlag { .. }
        | BarrierStep::WaitRelease { .. } => {}
    }
    Ok(None)
}

/// What a wait step of `rank`'s plan waits for in barrier `epoch`; `None`
/// for an action. Pure: reads no memory.
///
/// # Errors
///
/// [`Error::InvalidArgument`] when the epoch is 0 or too large, the round
/// is not below [`ROUNDS_PER_EPOCH`](super::ROUNDS_PER_EPOCH), or
/// `epoch * count_per_epoch` overflows.
pub fn wait_for(rank: usize, step: &BarrierStep, epoch: u64) -> Result<Option<WaitFor>, Error> {
    check_epoch(epoch)?;
    let on = match *step {
        BarrierStep::WaitCounter { count_per_epoch } => WaitFor {
            owner: rank,
            word: Word::Counter,
            target: epoch.checked_mul(count_per_epoch).ok_or_else(|| {
                Error::invalid(format!(
                    "barrier epoch {epoch} x {count_per_epoch} arrivals overflows the counter"
                ))
            })?,
        },
        BarrierStep::WaitFlag { from, round } => WaitFor {
            owner: rank,
            word: Word::Flag { src: from },
            target: value(epoch, round)?,
        },
        BarrierStep::WaitRelease { at } => WaitFor {
            owner: at,
            word: Word::Release,
            target: value(epoch, 0)?,
        },
        BarrierStep::FetchAdd { .. } | BarrierStep::Notify { .. } | BarrierStep::Release { .. } => {
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
            "barrier round {round} is out of range (at most {} rounds)",
            super::ROUNDS_PER_EPOCH
        ))
    })
}
