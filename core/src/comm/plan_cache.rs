//! The plans of a communicator's recent calls, kept for the next call of
//! the same shape.
//!
//! A plan is a pure function of the call (collective, element type,
//! operator, count) and of what is fixed at creation (rank, size, slots,
//! the algorithm choice), so a call repeated in a loop, the common case
//! of a training step or a benchmark, can run the plan it ran last time.
//! Choosing the algorithm with the cost model and building the steps cost
//! a small all-reduce about 6,000 instructions, several times what the
//! call itself executes; a hit costs a lock and a comparison per entry.

use std::sync::{Arc, Mutex};

use crate::plan::{self, Collective, Plan, PlanParams};
use crate::tuning::Selector;
use crate::{DataType, ReduceOp, Result};

/// How many shapes are kept: enough for the handful of calls a training
/// step repeats (gradients of a few sizes, a loss, a barrier's neighbours).
const ENTRIES: usize = 8;

/// What a plan is built from, besides the communicator's fixed settings.
#[derive(Clone, Copy, PartialEq, Eq)]
struct CallKey {
    collective: Collective,
    dtype: DataType,
    op: ReduceOp,
    count: usize,
}

/// Recently built plans, the most recent first.
#[derive(Default)]
pub(crate) struct PlanCache {
    recent: Mutex<Vec<(CallKey, Arc<Plan>)>>,
}

impl PlanCache {
    /// The plan of one call: the one kept for this shape, or a new one
    /// (algorithm chosen by `selector`), then kept.
    ///
    /// # Errors
    /// As [`plan::build_with`] (a count or root out of range, a forced
    /// algorithm that does not implement the collective).
    pub(crate) fn plan(
        &self,
        selector: &Selector,
        params: &PlanParams,
        collective: Collective,
        dtype: DataType,
        op: ReduceOp,
        count: usize,
    ) -> Result<Arc<Plan>> {
        let shape = CallKey {
            collective,
            dtype,
            op,
            count,
        };
        if let Some(plan) = self.find(&shape) {
            return Ok(plan);
        }
        let algo = selector.choose(collective, count, dtype.size());
        let plan = Arc::new(plan::build_with(
            collective, dtype, op, count, params, algo,
        )?);
        let mut recent = self.lock();
        recent.insert(0, (shape, plan.clone()));
        recent.truncate(ENTRIES);
        Ok(plan)
    }

    /// The kept plan of `shape`, moved to the front.
    fn find(&self, shape: &CallKey) -> Option<Arc<Plan>> {
        let mut recent = self.lock();
        let at = recent.iter().position(|(s, _)| s == shape)?;
        if at > 0 {
            let hit = recent.remove(at);
            recent.insert(0, hit);
        }
        Some(recent[0].1.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(CallKey, Arc<Plan>)>> {
        self.recent.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn selector() -> Selector {
        Selector::new(&Config::default(), &["h".to_string(), "h".to_string()])
    }

    const PARAMS: PlanParams = PlanParams {
        rank: 0,
        nranks: 2,
        slot_bytes: 1 << 16,
        nsteps: 4,
    };

    #[test]
    fn a_repeated_call_gets_the_same_plan_and_another_shape_its_own() {
        let (cache, sel) = (PlanCache::default(), selector());
        let plan = |count, op| {
            cache
                .plan(
                    &sel,
                    &PARAMS,
                    Collective::AllReduce,
                    DataType::F32,
                    op,
                    count,
                )
                .unwrap()
        };
        let a = plan(2, ReduceOp::Sum);
        assert!(Arc::ptr_eq(&a, &plan(2, ReduceOp::Sum)));
        let b = plan(2, ReduceOp::Max);
        assert!(!Arc::ptr_eq(&a, &b));
        assert_eq!(b.op, ReduceOp::Max);
        assert_eq!(plan(3, ReduceOp::Sum).send_count, 3);
        // What was built is what building anew gives.
        let fresh = plan::build_with(
            Collective::AllReduce,
            DataType::F32,
            ReduceOp::Sum,
            2,
            &PARAMS,
            sel.choose(Collective::AllReduce, 2, 4),
        )
        .unwrap();
        assert_eq!(*a, fresh);
    }

    #[test]
    fn it_keeps_the_most_recent_shapes_only() {
        let (cache, sel) = (PlanCache::default(), selector());
        let plan = |count| {
            cache
                .plan(
                    &sel,
                    &PARAMS,
                    Collective::AllGather,
                    DataType::U8,
                    ReduceOp::Sum,
                    count,
                )
                .unwrap()
        };
        let first = plan(1);
        for count in 2..=ENTRIES + 1 {
            plan(count);
        }
        assert_eq!(cache.lock().len(), ENTRIES);
        assert!(!Arc::ptr_eq(&first, &plan(1)), "the oldest was dropped");
        // A hit moves to the front and survives the next new shape.
        let kept = plan(5);
        plan(100);
        assert!(Arc::ptr_eq(&kept, &plan(5)));
    }

    #[test]
    fn a_bad_call_is_an_error_and_keeps_nothing() {
        let (cache, sel) = (PlanCache::default(), selector());
        let root = Collective::Broadcast { root: 7 };
        let e = cache
            .plan(&sel, &PARAMS, root, DataType::F32, ReduceOp::Sum, 4)
            .unwrap_err();
        assert!(e.to_string().contains("root"), "{e}");
        assert!(cache.lock().is_empty());
    }
}
