//! One rank's barrier: a plan of flag steps.
//!
//! The steps are [`crate::plan::Step`]s, the language of every other
//! collective, each carrying one [`FlagOp`](crate::plan::FlagOp); values,
//! epochs and rounds are described in `plan/flag/mod.rs`. The algorithms
//! that build these plans live in `crate::barrier`.

use crate::config::barrier_algo::BarrierAlgo;
use crate::plan::Step;

/// One rank's barrier: the algorithm it implements and its steps, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BarrierPlan {
    /// The algorithm the steps implement (every rank's plan of one barrier
    /// must use the same one).
    pub algo: BarrierAlgo,
    /// The rank the plan is for.
    pub rank: usize,
    /// Number of ranks taking part.
    pub nranks: usize,
    /// The flag steps, in execution order (none for a single rank).
    pub steps: Vec<Step>,
}

impl BarrierPlan {
    /// Whether any step touches the arrival counter (so the plan's epochs
    /// count towards the counter's target).
    pub fn uses_counter(&self) -> bool {
        self.steps
            .iter()
            .any(|s| s.flag.is_some_and(|op| op.uses_counter()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::FlagOp;

    #[test]
    fn counter_use_is_seen_in_any_step() {
        let mut plan = BarrierPlan {
            algo: BarrierAlgo::Chain,
            rank: 0,
            nranks: 2,
            steps: vec![Step::flag(FlagOp::Notify { peer: 1, round: 0 })],
        };
        assert!(!plan.uses_counter());
        plan.steps
            .push(Step::flag(FlagOp::WaitCounter { count_per_epoch: 1 }));
        assert!(plan.uses_counter());
    }
}
