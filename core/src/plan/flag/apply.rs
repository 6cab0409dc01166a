//! The one interpreter of flag steps.
//!
//! [`apply`] performs a flag step's action or checks its wait, without
//! blocking; [`wait_for`] says what a wait awaits. The barrier executor
//! (`barrier/exec.rs`) walks a plan with [`apply`] and blocks on what it
//! returns; the simulator (`plan/simulate/`) calls the same [`apply`], so
//! what it proves is what runs. It takes [`FlagStep`]s only; data steps
//! have their own type and interpreter
//! ([`apply_step`](crate::plan::apply_step)).

use super::memory::{BarrierMemory, WaitFor, Word};
use super::{FlagStep, MAX_EPOCH, ROUNDS_PER_EPOCH, signal_value};
use crate::Error;

/// Executes one step of `rank`'s plan for barrier `epoch`, without blocking.
///
/// An action is performed and `None` returned; a wait that is already met
/// returns `None`; a wait that is not met returns what it waits for.
///
/// # Errors
///
/// As [`wait_for`].
pub(crate) fn apply<M: BarrierMemory + ?Sized>(
    rank: usize,
    step: &FlagStep,
    epoch: u64,
    mem: &M,
) -> Result<Option<WaitFor>, Error> {
    if let Some(on) = wait_for(rank, step, epoch)? {
        return Ok((!on.is_met(mem)).then_some(on));
    }
    match *step {
        FlagStep::FetchAdd { root } => mem.fetch_add_counter(root, 1),
        FlagStep::Notify { peer, round } => {
            mem.store_flag(peer, rank, value(epoch, round)?);
        }
        FlagStep::Release { peer } => mem.store_release(peer, value(epoch, 0)?),
        FlagStep::WaitCounter { .. } | FlagStep::WaitFlag { .. } | FlagStep::WaitRelease { .. } => {
        }
    }
    Ok(None)
}

/// What a flag wait of `rank`'s plan waits for in barrier `epoch`; `None`
/// for an action. Pure: reads no memory.
///
/// # Errors
///
/// [`Error::InvalidArgument`] when the epoch is 0 or too large, the round
/// is not below [`ROUNDS_PER_EPOCH`], or
/// `epoch * count_per_epoch` overflows.
pub(crate) fn wait_for(rank: usize, op: &FlagStep, epoch: u64) -> Result<Option<WaitFor>, Error> {
    check_epoch(epoch)?;
    let on = match *op {
        FlagStep::WaitCounter { count_per_epoch } => WaitFor {
            owner: rank,
            word: Word::Counter,
            target: epoch.checked_mul(count_per_epoch).ok_or_else(|| {
                Error::invalid(format!(
                    "barrier epoch {epoch} x {count_per_epoch} arrivals overflows the counter"
                ))
            })?,
        },
        FlagStep::WaitFlag { from, round } => WaitFor {
            owner: rank,
            word: Word::Flag { src: from },
            target: value(epoch, round)?,
        },
        FlagStep::WaitRelease { at } => WaitFor {
            owner: at,
            word: Word::Release,
            target: value(epoch, 0)?,
        },
        FlagStep::FetchAdd { .. } | FlagStep::Notify { .. } | FlagStep::Release { .. } => {
            return Ok(None);
        }
    };
    Ok(Some(on))
}

/// Checks that `epoch` can be encoded (1..=MAX_EPOCH).
pub(crate) fn check_epoch(epoch: u64) -> Result<(), Error> {
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
