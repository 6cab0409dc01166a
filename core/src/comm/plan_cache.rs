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

use crate::plan::{Collective, Plan};
use crate::{DataType, ReduceOp, Result};

/// How many shapes are kept: enough for the handful of calls a training
/// step repeats (gradients of a few sizes, a loss, a barrier's neighbours).
const ENTRIES: usize = 8;

/// What a plan is built from, besides the communicator's fixed settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CallKey {
    pub(crate) collective: Collective,
    pub(crate) dtype: DataType,
    pub(crate) op: ReduceOp,
    pub(crate) count: usize,
}

/// Recently built plans, the most recent first.
#[derive(Default)]
pub(crate) struct PlanCache {
    recent: Mutex<Vec<(CallKey, Arc<Plan>)>>,
}

impl PlanCache {
    /// The plan of the call `shape`: the one kept for it (moved to the
    /// front), or the one `build` makes, then kept. The lock is not held
    /// while building.
    ///
    /// # Errors
    /// As `build` (nothing is kept then).
    pub(crate) fn get(
        &self,
        shape: CallKey,
        build: impl FnOnce() -> Result<Plan>,
    ) -> Result<Arc<Plan>> {
        {
            let mut recent = self.lock();
            if let Some(at) = recent.iter().position(|(s, _)| *s == shape) {
                if at > 0 {
                    let hit = recent.remove(at);
                    recent.insert(0, hit);
                }
                return Ok(recent[0].1.clone());
            }
        }
        let plan = Arc::new(build()?);
        let mut recent = self.lock();
        recent.insert(0, (shape, plan.clone()));
        recent.truncate(ENTRIES);
        Ok(plan)
    }

    /// The kept plans (a panic elsewhere while holding them leaves them
    /// usable: each entry is whole).
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(CallKey, Arc<Plan>)>> {
        self.recent.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::config::Config;
    use crate::plan::{self, PlanParams};
    use crate::tuning::Selector;

    const PARAMS: PlanParams = PlanParams {
        rank: 0,
        nranks: 2,
        slot_bytes: 1 << 16,
        nsteps: 4,
    };

    /// A cache and a `get` that builds as the core does, counting builds.
    struct Fixture {
        cache: PlanCache,
        selector: Selector,
        builds: Cell<usize>,
    }

    impl Fixture {
        fn new() -> Fixture {
            Fixture {
                cache: PlanCache::default(),
                selector: Selector::new(&Config::default(), &["h".to_string(), "h".to_string()]),
                builds: Cell::new(0),
            }
        }

        fn build(&self, k: CallKey) -> Result<Plan> {
            let algo = self.selector.choose(k.collective, k.count, k.dtype.size());
            plan::build_with(k.collective, k.dtype, k.op, k.count, &PARAMS, algo)
        }

        fn get(
            &self,
            collective: Collective,
            dtype: DataType,
            op: ReduceOp,
            count: usize,
        ) -> Result<Arc<Plan>> {
            let key = CallKey {
                collective,
                dtype,
                op,
                count,
            };
            self.cache.get(key, || {
                self.builds.set(self.builds.get() + 1);
                self.build(key)
            })
        }

        fn kept(&self) -> usize {
            self.cache.lock().len()
        }
    }

    #[test]
    fn a_repeated_call_gets_the_same_plan_and_another_shape_its_own() {
        let f = Fixture::new();
        let plan = |count, op| {
            f.get(Collective::AllReduce, DataType::F32, op, count)
                .unwrap()
        };
        let a = plan(2, ReduceOp::Sum);
        assert!(Arc::ptr_eq(&a, &plan(2, ReduceOp::Sum)));
        assert_eq!(f.builds.get(), 1, "a hit builds nothing");
        let b = plan(2, ReduceOp::Max);
        assert!(!Arc::ptr_eq(&a, &b));
        assert_eq!(b.op, ReduceOp::Max);
        assert_eq!(plan(3, ReduceOp::Sum).send_count, 3);
        assert_eq!(f.builds.get(), 3);
        // What was built is what building anew gives.
        let key = CallKey {
            collective: Collective::AllReduce,
            dtype: DataType::F32,
            op: ReduceOp::Sum,
            count: 2,
        };
        assert_eq!(*a, f.build(key).unwrap());
    }

    #[test]
    fn it_keeps_the_most_recent_shapes_only() {
        let f = Fixture::new();
        let plan = |count| {
            f.get(Collective::AllGather, DataType::U8, ReduceOp::Sum, count)
                .unwrap()
        };
        let first = plan(1);
        for count in 2..=ENTRIES + 1 {
            plan(count);
        }
        assert_eq!(f.kept(), ENTRIES);
        assert!(!Arc::ptr_eq(&first, &plan(1)), "the oldest was dropped");
        // A hit moves to the front and survives the next new shape.
        let kept = plan(5);
        plan(100);
        assert!(Arc::ptr_eq(&kept, &plan(5)));
    }

    #[test]
    fn a_bad_call_is_an_error_and_keeps_nothing() {
        let f = Fixture::new();
        let root = Collective::Broadcast { root: 7 };
        let e = f.get(root, DataType::F32, ReduceOp::Sum, 4).unwrap_err();
        assert!(e.to_string().contains("root"), "{e}");
        assert_eq!(f.kept(), 0);
    }
}
