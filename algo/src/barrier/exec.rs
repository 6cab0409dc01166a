//! The one interpreter of flag steps, and the executor that runs a plan
//! with it.
//!
//! [`apply`] performs a flag step's action or checks its wait, without
//! blocking; [`wait_for`] says what a wait awaits. [`run`] walks a plan
//! with [`apply`] and blocks in [`BarrierMemory::wait`] on a wait that is
//! not met yet; the flag simulator (`barrier/simulate/`) calls the same [`apply`],
//! so what it proves is what runs. It takes [`FlagStep`]s only; data steps
//! have their own type and interpreter (`plan::Interpreter`).

use super::memory::{BarrierMemory, WaitFor, Word};
use super::plan::BarrierPlan;
use super::step::{FlagStep, MAX_EPOCH, ROUNDS_PER_EPOCH, signal_value};
use crate::Error;

/// Which barrier a plan runs for: its number, and its number among the
/// barriers that used the arrival counter (see `step.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Epoch {
    /// The barrier's sequence number on its memory (`1, 2, 3, ...`, the
    /// same on every rank): flag and release values carry it.
    pub number: u64,
    /// How many barriers on this memory so far, this one included, used
    /// the arrival counter: the counter's target is this times the
    /// arrivals per barrier. At most `number`.
    pub counter: u64,
}

impl Epoch {
    /// Barrier `number` of a sequence whose every barrier runs the same
    /// plan (so the counter, if the plan uses it, counted each of them).
    ///
    /// # Examples
    ///
    /// ```
    /// use streamcomm_algo::barrier::Epoch;
    ///
    /// assert_eq!(Epoch::uniform(3), Epoch { number: 3, counter: 3 });
    /// ```
    #[inline]
    pub const fn uniform(number: u64) -> Epoch {
        Epoch {
            number,
            counter: number,
        }
    }
}

/// Runs `plan` for barrier `epoch` (consecutive on one memory) against
/// `mem`, blocking until the barrier completes.
///
/// # Errors
///
/// [`Error::InvalidArgument`] for an epoch number of 0 or above
/// `MAX_EPOCH`, a counter epoch above it, or a step whose round or counter
/// target does not fit; whatever [`BarrierMemory::wait`] returns (timeout,
/// abort).
pub fn run<M: BarrierMemory + ?Sized>(
    plan: &BarrierPlan,
    epoch: Epoch,
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
#[inline]
pub fn apply<M: BarrierMemory + ?Sized>(
    rank: usize,
    step: &FlagStep,
    epoch: Epoch,
    mem: &M,
) -> Result<Option<WaitFor>, Error> {
    if let Some(on) = wait_for(rank, step, epoch)? {
        return Ok((!on.is_met(mem)).then_some(on));
    }
    match *step {
        FlagStep::FetchAdd { root } => mem.fetch_add_counter(root, 1),
        FlagStep::Notify { peer, round } => {
            mem.store_flag(peer, rank, value(epoch.number, round)?);
        }
        FlagStep::Release { peer } => mem.store_release(peer, value(epoch.number, 0)?),
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
/// `epoch.counter * count_per_epoch` overflows; for a counter wait in a
/// barrier whose counter epoch is 0.
#[inline]
pub fn wait_for(rank: usize, step: &FlagStep, epoch: Epoch) -> Result<Option<WaitFor>, Error> {
    check_epoch(epoch)?;
    let on = match *step {
        FlagStep::WaitCounter { .. } if epoch.counter == 0 => {
            return Err(Error::invalid(format!(
                "barrier {}: a counter wait with counter epoch 0 (this barrier uses the counter)",
                epoch.number
            )));
        }
        FlagStep::WaitCounter { count_per_epoch } => WaitFor {
            owner: rank,
            word: Word::Counter,
            target: epoch.counter.checked_mul(count_per_epoch).ok_or_else(|| {
                Error::invalid(format!(
                    "barrier counter epoch {} x {count_per_epoch} arrivals overflows the counter",
                    epoch.counter
                ))
            })?,
        },
        FlagStep::WaitFlag { from, round } => WaitFor {
            owner: rank,
            word: Word::Flag { src: from },
            target: value(epoch.number, round)?,
        },
        FlagStep::WaitRelease { at } => WaitFor {
            owner: at,
            word: Word::Release,
            target: value(epoch.number, 0)?,
        },
        FlagStep::FetchAdd { .. } | FlagStep::Notify { .. } | FlagStep::Release { .. } => {
            return Ok(None);
        }
    };
    Ok(Some(on))
}

/// Checks that `epoch` can be encoded (number in 1..=MAX_EPOCH, counter
/// epoch at most the number).
#[inline]
pub fn check_epoch(epoch: Epoch) -> Result<(), Error> {
    let Epoch { number, counter } = epoch;
    if number == 0 || number > MAX_EPOCH {
        return Err(Error::invalid(format!(
            "barrier epoch {number} is out of range 1..={MAX_EPOCH}"
        )));
    }
    if counter > number {
        return Err(Error::invalid(format!(
            "barrier counter epoch {counter} is above the barrier's epoch {number}"
        )));
    }
    Ok(())
}

/// [`signal_value`] or an error naming the bad epoch or round.
fn value(epoch: u64, round: u32) -> Result<u64, Error> {
    signal_value(epoch, round).ok_or_else(|| {
        Error::invalid(format!(
            "barrier round {round} is out of range (at most {ROUNDS_PER_EPOCH} rounds)"
        ))
    })
}
