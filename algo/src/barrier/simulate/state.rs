//! The simulator's state: every rank's progress, the memory, and which ranks
//! can act.
//!
//! Readiness is tracked incrementally so that one action costs O(1) plus the
//! ranks it wakes, not a scan of all ranks: a blocked rank is filed under the
//! word it waits for, and re-checked only when that word is written.

use super::memory::SimMemory;
use super::schedule::Acting;
use super::{FlagSimError, SimStats, StuckFlagRank};
use crate::barrier::{BarrierPlan, Epoch, apply, wait_for};

/// Not in the ready set.
const NOT_READY: usize = usize::MAX;

/// An epoch as a vector index (epochs that do not fit were never reached:
/// each one takes at least one action).
fn index(epoch: u64) -> usize {
    usize::try_from(epoch).unwrap_or(usize::MAX)
}

/// One rank's progress.
#[derive(Clone, Copy, Debug, Default)]
struct RankState {
    /// The last barrier entered (0 before the first).
    epoch: u64,
    /// Inside barrier `epoch` (entered, not yet left).
    inside: bool,
    /// Index of the next step while inside.
    pc: usize,
}

/// What a rank can do now.
enum Status {
    /// Finished every barrier.
    Done,
    /// Can take its next action.
    Ready,
    /// Waits for the word at this index.
    Blocked(usize),
}

/// The state of one simulation.
pub(super) struct Sim<'p> {
    plans: &'p [BarrierPlan],
    epochs: u64,
    mem: SimMemory,
    ranks: Vec<RankState>,
    stats: SimStats,
    /// `left[e]`: ranks that have left barrier `e` (grown as barriers end).
    left: Vec<usize>,
    /// Ranks that can act, in no particular order.
    ready: Vec<usize>,
    /// Position of each rank in `ready`, or `NOT_READY`.
    slot: Vec<usize>,
    /// Ranks blocked on each word (may hold stale entries; re-checked).
    waiters: Vec<Vec<usize>>,
}

impl<'p> Sim<'p> {
    /// Every rank before its first barrier (all ready unless `epochs == 0`).
    pub(super) fn new(plans: &'p [BarrierPlan], epochs: u64) -> Sim<'p> {
        let n = plans.len();
        let mem = SimMemory::new(n);
        let waiters = vec![Vec::new(); mem.len()];
        let mut sim = Sim {
            plans,
            epochs,
            mem,
            ranks: vec![RankState::default(); n],
            stats: SimStats::default(),
            left: Vec::new(),
            ready: Vec::with_capacity(n),
            slot: vec![NOT_READY; n],
            waiters,
        };
        for r in 0..n {
            sim.refresh(r);
        }
        sim
    }

    /// The ranks that can act now.
    pub(super) fn ready(&self) -> &[usize] {
        &self.ready
    }

    /// `r`'s position in [`Sim::ready`] when its next action is to enter a
    /// barrier.
    pub(super) fn entering_slot(&self, r: usize) -> Option<usize> {
        let slot = self.slot[r];
        (slot != NOT_READY && !self.ranks[r].inside).then_some(slot)
    }

    fn status(&self, r: usize) -> Status {
        let s = self.ranks[r];
        if !s.inside {
            return if s.epoch < self.epochs {
                Status::Ready
            } else {
                Status::Done
            };
        }
        let step = self.plans[r].steps[s.pc];
        match wait_for(r, &step, Epoch::uniform(s.epoch)) {
            Ok(Some(on)) if !on.is_met(&self.mem) => {
                Status::Blocked(self.mem.index(on.owner, on.word))
            }
            // Met, an action, or an error that `act` will report.
            _ => Status::Ready,
        }
    }

    /// Recomputes whether `r` can act and files it accordingly.
    fn refresh(&mut self, r: usize) {
        let ready = match self.status(r) {
            Status::Ready => true,
            Status::Done => false,
            Status::Blocked(word) => {
                self.waiters[word].push(r);
                false
            }
        };
        let slot = self.slot[r];
        if ready && slot == NOT_READY {
            self.slot[r] = self.ready.len();
            self.ready.push(r);
        } else if !ready && slot != NOT_READY {
            self.ready.swap_remove(slot);
            if let Some(&moved) = self.ready.get(slot) {
                self.slot[moved] = slot;
            }
            self.slot[r] = NOT_READY;
        }
    }

    /// Ranks that have left barrier `epoch`.
    fn left(&self, epoch: u64) -> usize {
        self.left.get(index(epoch)).copied().unwrap_or(0)
    }

    /// Leaves the barrier when rank `r` has run all its steps, checking
    /// that every rank has entered it.
    fn maybe_leave(&mut self, r: usize) -> Result<(), FlagSimError> {
        let s = self.ranks[r];
        if !s.inside || s.pc < self.plans[r].steps.len() {
            return Ok(());
        }
        let missing: Vec<usize> = (0..self.ranks.len())
            .filter(|&q| self.ranks[q].epoch < s.epoch)
            .collect();
        if !missing.is_empty() {
            return Err(FlagSimError::EarlyExit {
                rank: r,
                epoch: s.epoch,
                missing,
            });
        }
        self.ranks[r].inside = false;
        let e = index(s.epoch);
        if self.left.len() <= e {
            self.left.resize(e + 1, 0);
        }
        self.left[e] += 1;
        Ok(())
    }

    /// Nobody can act: either everybody finished, or a deadlock.
    pub(super) fn finish(self) -> Result<SimStats, FlagSimError> {
        let stuck: Vec<StuckFlagRank> = self
            .ranks
            .iter()
            .enumerate()
            .filter(|(_, s)| s.inside)
            .map(|(r, s)| {
                let step = self.plans[r].steps[s.pc];
                StuckFlagRank {
                    rank: r,
                    epoch: s.epoch,
                    index: s.pc,
                    step,
                    waiting_for: wait_for(r, &step, Epoch::uniform(s.epoch)).ok().flatten(),
                }
            })
            .collect();
        if !stuck.is_empty() {
            return Err(FlagSimError::Deadlock { stuck });
        }
        Ok(self.stats)
    }
}

impl Acting for Sim<'_> {
    type Error = FlagSimError;

    /// Rank `r` can take its next action.
    fn can_act(&self, r: usize) -> bool {
        matches!(self.status(r), Status::Ready)
    }

    /// Takes rank `r`'s next action (which it [can](Acting::can_act)), leaves
    /// the barrier if that was its last step, and wakes the ranks waiting
    /// on the word it wrote.
    fn act(&mut self, r: usize) -> Result<(), FlagSimError> {
        self.stats.actions += 1;
        let s = self.ranks[r];
        if s.inside {
            let step = self.plans[r].steps[s.pc];
            let (epoch, index) = (s.epoch, s.pc);
            let blocked = apply(r, &step, Epoch::uniform(epoch), &self.mem).map_err(|source| {
                FlagSimError::Step {
                    rank: r,
                    epoch,
                    index,
                    step: Box::new(step),
                    source,
                }
            })?;
            if let Some(regression) = self.mem.take_regression() {
                return Err(FlagSimError::Regression {
                    writer: r,
                    epoch,
                    index,
                    regression,
                });
            }
            if blocked.is_none() {
                if epoch >= 2 && self.left(epoch - 1) < self.ranks.len() {
                    self.stats.ahead += 1;
                }
                self.ranks[r].pc += 1;
            }
        } else {
            self.ranks[r] = RankState {
                epoch: s.epoch + 1,
                inside: true,
                pc: 0,
            };
        }
        self.maybe_leave(r)?;
        self.refresh(r);
        if let Some(word) = self.mem.take_written() {
            for q in std::mem::take(&mut self.waiters[word]) {
                self.refresh(q);
            }
        }
        Ok(())
    }
}
