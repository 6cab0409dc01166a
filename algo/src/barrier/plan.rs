//! One rank's barrier: a plan of flag steps.
//!
//! The steps are [`FlagStep`]s, a type of their own: a barrier plan cannot
//! hold a data step, nor a data plan a flag step. Values, epochs and rounds
//! are described in `step.rs`; the algorithms that build these plans in
//! `algo/`.

use super::BarrierAlgo;
use super::FlagStep;

/// One rank's barrier: the algorithm it implements and its steps, in order.
///
/// Its steps are flag steps only; a data step does not fit:
///
/// ```compile_fail
/// use streamcomm_types::BarrierAlgo;
/// use streamcomm_algo::barrier::build;
/// use streamcomm_algo::plan::{self, PlanParams};
/// use streamcomm_types::{Collective, DataType, ReduceOp};
///
/// let params = PlanParams { rank: 0, nranks: 2, slot_bytes: 64, nsteps: 1 };
/// let data = plan::build(Collective::Barrier, DataType::U8, ReduceOp::Sum, 0, &params)?;
/// let mut flags = build(BarrierAlgo::Chain, 0, 2, &[0, 0])?;
/// flags.steps.push(data.steps[0]);
/// # Ok::<(), streamcomm_types::Error>(())
/// ```
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
    pub steps: Vec<FlagStep>,
}

impl BarrierPlan {
    /// Whether any step touches the arrival counter (so the plan's epochs
    /// count towards the counter's target).
    #[inline]
    pub fn uses_counter(&self) -> bool {
        self.steps.iter().any(FlagStep::uses_counter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_use_is_seen_in_any_step() {
        let mut plan = BarrierPlan {
            algo: BarrierAlgo::Chain,
            rank: 0,
            nranks: 2,
            steps: vec![FlagStep::Notify { peer: 1, round: 0 }],
        };
        assert!(!plan.uses_counter());
        plan.steps
            .push(FlagStep::WaitCounter { count_per_epoch: 1 });
        assert!(plan.uses_counter());
    }
}
