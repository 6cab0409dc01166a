//! The flag simulator: proves barrier plans (plans of flag steps) over
//! flag memory, for many consecutive barriers. One file per job: this one
//! (what it checks and reports), `state.rs` (the ranks, with per-word
//! waiter lists so that only the ranks a store can wake are re-examined),
//! `memory.rs` (flag memory as plain cells, with the monotonicity check),
//! `schedule.rs` (the [`Schedule`]s, which the plan simulator of data steps
//! runs under too, and the seeded generator behind them).
//!
//! The property a barrier must give is simple: **no rank leaves barrier `e`
//! before every rank has entered barrier `e`**. The simulator runs the plans
//! of all `n` ranks in one thread over `SimMemory` (`memory.rs`), for `epochs`
//! consecutive barriers per rank, interpreting each step with the same
//! `apply` (`barrier/exec.rs`) the real executor uses. Each rank's next action is either
//! *enter* its next barrier, or its next step; a wait step can only be
//! taken when its condition holds. Ranks that leave a barrier may enter the
//! next one at once and run ahead while slower ranks are still inside the
//! previous one, which is where epoch confusion and reset races hide.
//!
//! It reports, with the rank, epoch and step involved: an early exit (the
//! property above violated), a deadlock (nobody can move while some rank has
//! not finished), a word written backwards (monotonicity violated), and step
//! errors. The [`Schedule`]s are adversarial: random interleavings, and a
//! *laggard* rank that enters each barrier only when nobody else can move,
//! so every other rank goes as far as the plan lets it before the last
//! arrival.
//!
//! # Why laggards make the check exhaustive
//!
//! A rank's next action depends only on its own position in its plan and on
//! words that never decrease, and no action can disable another rank's
//! action: whatever is possible stays possible until it is taken. In such a
//! *persistent* system, the set of actions the other ranks can take before
//! rank `L` enters barrier `e` is the same whatever the interleaving, and
//! [`Schedule::Laggard`] takes all of them before letting `L` in. So a rank
//! can leave barrier `e` before `L` enters it in *some* interleaving if and
//! only if it does under `Laggard { rank: L, .. }`, and running every rank
//! as the laggard checks the barrier property for every interleaving of the
//! simulated epochs. Random schedules add variety for the running-ahead
//! figures ([`SimStats::ahead`]) and the monotonicity check.

mod memory;
pub mod schedule;
mod state;

#[cfg(test)]
mod tests;

use std::fmt;

pub use memory::Regression;
pub use schedule::Schedule;
use schedule::{Acting, SplitMix, list, round_robin};
use state::Sim;

use crate::Error;
use crate::barrier::{BarrierPlan, FlagStep, MAX_EPOCH, ROUNDS_PER_EPOCH, WaitFor};

/// What [`simulate`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlagSimConfig {
    /// Consecutive barriers each rank runs (epochs `1..=epochs`).
    pub epochs: u64,
    /// Which rank acts next.
    pub schedule: Schedule,
}

/// Figures of a successful simulation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Actions taken (enters plus steps).
    pub actions: u64,
    /// Steps a rank ran inside barrier `e` while another rank had not yet
    /// left barrier `e - 1` (how much running ahead the schedule exercised).
    pub ahead: u64,
}

/// Why a simulation failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum FlagSimError {
    /// The plans do not describe one barrier of `plans.len()` ranks, or the
    /// configuration is out of range.
    #[error("invalid barrier simulation setup: {0}")]
    Setup(String),

    /// The barrier property was violated.
    #[error("rank {rank} left barrier {epoch} before rank(s) {missing:?} entered it")]
    EarlyExit {
        /// The rank that left.
        rank: usize,
        /// The barrier it left.
        epoch: u64,
        /// The ranks that had not entered it yet.
        missing: Vec<usize>,
    },

    /// No rank could act while some had not finished.
    #[error("deadlock: {}", list(stuck))]
    Deadlock {
        /// Every unfinished rank, with what it waits for.
        stuck: Vec<StuckFlagRank>,
    },

    /// A store made a word smaller.
    #[error(
        "rank {writer} step {index} of barrier {epoch} lowered {} of rank {}'s area from {} to {}",
        regression.word, regression.owner, regression.old, regression.new
    )]
    Regression {
        /// The rank whose step stored.
        writer: usize,
        /// The barrier.
        epoch: u64,
        /// Index of the step in the writer's plan.
        index: usize,
        /// The word and values.
        regression: Regression,
    },

    /// A step failed when interpreted.
    #[error("rank {rank} step {index} ({step:?}) of barrier {epoch} failed: {source}")]
    Step {
        /// The rank.
        rank: usize,
        /// The barrier.
        epoch: u64,
        /// Index of the step in the rank's plan.
        index: usize,
        /// The step (boxed to keep the error small).
        step: Box<FlagStep>,
        /// What `apply` reported.
        #[source]
        source: Error,
    },
}

/// A rank stuck in a deadlock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StuckFlagRank {
    /// The rank.
    pub rank: usize,
    /// The barrier it is in.
    pub epoch: u64,
    /// Index of the step it cannot take.
    pub index: usize,
    /// The step.
    pub step: FlagStep,
    /// What the step waits for (`None` if it could not be computed).
    pub waiting_for: Option<WaitFor>,
}

impl fmt::Display for StuckFlagRank {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rank {} in barrier {} at step {} ({:?})",
            self.rank, self.epoch, self.index, self.step
        )?;
        match &self.waiting_for {
            Some(on) => write!(f, " waits for {on}"),
            None => Ok(()),
        }
    }
}

/// Runs `config.epochs` consecutive barriers of every rank and checks them.
///
/// `plans[r]` must be rank `r`'s plan, all for `plans.len()` ranks and the
/// same algorithm.
///
/// # Errors
///
/// [`FlagSimError::Setup`] for inconsistent plans or configuration,
/// [`FlagSimError::EarlyExit`] when a rank leaves a barrier before everybody
/// entered it, [`FlagSimError::Deadlock`], [`FlagSimError::Regression`] and
/// [`FlagSimError::Step`].
///
/// # Examples
///
/// ```
/// use streamcomm_types::BarrierAlgo;
/// use streamcomm_algo::barrier::{build, simulate, Schedule, FlagSimConfig};
///
/// let plans: Vec<_> = (0..5)
///     .map(|r| build(BarrierAlgo::Chain, r, 5, &[0; 5]))
///     .collect::<Result<_, _>>()?;
/// let schedule = Schedule::Laggard { rank: 2, seed: 1 };
/// let stats = simulate(&plans, &FlagSimConfig { epochs: 3, schedule }).unwrap();
/// assert!(stats.actions > 0);
/// # Ok::<(), streamcomm_types::Error>(())
/// ```
pub fn simulate(plans: &[BarrierPlan], config: &FlagSimConfig) -> Result<SimStats, FlagSimError> {
    check_setup(plans, config)?;
    let mut sim = Sim::new(plans, config.epochs);
    let n = plans.len();
    match config.schedule.random() {
        None => round_robin(&mut sim, n)?,
        Some((seed, laggard)) => run_random(&mut sim, seed, laggard)?,
    }
    sim.finish()
}

/// Plans describe one barrier of `plans.len()` ranks; the config is usable.
fn check_setup(plans: &[BarrierPlan], config: &FlagSimConfig) -> Result<(), FlagSimError> {
    let n = plans.len();
    let setup = |msg: String| Err(FlagSimError::Setup(msg));
    if n == 0 {
        return setup("no plans".into());
    }
    if config.epochs > MAX_EPOCH {
        return setup(format!("{} epochs exceed {MAX_EPOCH}", config.epochs));
    }
    if let Err(msg) = config.schedule.check(n) {
        return setup(msg);
    }
    let algo = plans[0].algo;
    for (r, plan) in plans.iter().enumerate() {
        if plan.rank != r || plan.nranks != n {
            return setup(format!(
                "plans[{r}] is for rank {} of {}, expected rank {r} of {n}",
                plan.rank, plan.nranks
            ));
        }
        if plan.algo != algo {
            return setup(format!(
                "plans[{r}] runs {}, plans[0] runs {algo}",
                plan.algo
            ));
        }
        for (i, s) in plan.steps.iter().enumerate() {
            if s.peer().is_some_and(|p| p >= n) {
                return setup(format!("rank {r} step {i} ({s:?}) names a rank beyond {n}"));
            }
            if s.round().is_some_and(|k| u64::from(k) >= ROUNDS_PER_EPOCH) {
                return setup(format!(
                    "rank {r} step {i} ({s:?}) uses a round beyond {ROUNDS_PER_EPOCH}"
                ));
            }
        }
    }
    Ok(())
}

/// Lets a random rank among those that can act take one action until none
/// can; the laggard's enter is taken only when it is the only action left.
fn run_random(sim: &mut Sim<'_>, seed: u64, laggard: Option<usize>) -> Result<(), FlagSimError> {
    let mut rng = SplitMix(seed);
    loop {
        let len = sim.ready().len();
        if len == 0 {
            return Ok(());
        }
        let slot = rng.pick(len, laggard.and_then(|l| sim.entering_slot(l)));
        let r = sim.ready()[slot];
        sim.act(r)?;
    }
}
