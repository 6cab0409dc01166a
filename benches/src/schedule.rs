//! Which algorithms run the same schedule: the comparison of predicted
//! and measured times pools the measurements of one program.
//!
//! At a few ranks two algorithms can emit the very same steps (a chain and
//! a binomial tree of two ranks are one edge). Measured apart, the same
//! program shows the machine's noise, not a difference between algorithms,
//! so `benches/scripts/model-vs-measured.py compare` counts them as one
//! candidate: it groups the points whose schedule id is equal.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use streamcomm::{Algorithm, Collective};
use streamcomm::{DataType, ReduceOp};
use streamcomm_algo::plan::{PlanParams, build_with};

/// An id of the plans every rank runs for `collective` by `algo` (f32,
/// sum): equal ids, equal plans on every rank (up to a 64-bit hash
/// collision). `None` when a rank's plan cannot be built.
pub(crate) fn schedule_id(
    collective: Collective,
    algo: Algorithm,
    count: usize,
    ranks: usize,
    slot_bytes: usize,
    nsteps: usize,
) -> Option<u64> {
    let mut h = DefaultHasher::new();
    for rank in 0..ranks {
        let params = PlanParams {
            rank,
            nranks: ranks,
            slot_bytes,
            nsteps,
        };
        let plan = build_with(
            collective,
            DataType::F32,
            ReduceOp::Sum,
            count,
            &params,
            Some(algo),
        )
        .ok()?;
        // The plan names neither its algorithm nor anything else outside
        // its steps and buffers: its `Debug` form is what it does.
        format!("{plan:?}").hash(&mut h);
    }
    Some(h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLOT: usize = 1 << 16;

    #[test]
    fn a_chain_and_a_tree_of_two_ranks_are_one_schedule() {
        for c in [
            Collective::Broadcast { root: 0 },
            Collective::Reduce { root: 0 },
        ] {
            let id = |a| schedule_id(c, a, 1000, 2, SLOT, 8).unwrap();
            assert_eq!(id(Algorithm::Chain), id(Algorithm::Binomial), "{c:?}");
        }
    }

    #[test]
    fn different_steps_are_different_schedules() {
        let c = Collective::Broadcast { root: 0 };
        let id = |a, n| schedule_id(c, a, 1000, n, SLOT, 8).unwrap();
        // From three ranks on the tree's root sends twice, the chain's once.
        assert_ne!(id(Algorithm::Chain, 3), id(Algorithm::Binomial, 3));
        // The same algorithm at another size or rank count is another plan.
        assert_ne!(id(Algorithm::Chain, 3), id(Algorithm::Chain, 4));
        assert_ne!(
            schedule_id(c, Algorithm::Chain, 1000, 3, SLOT, 8),
            schedule_id(c, Algorithm::Chain, 1001, 3, SLOT, 8)
        );
    }

    #[test]
    fn an_algorithm_that_does_not_implement_the_collective_has_no_id() {
        let c = Collective::AllGather;
        assert_eq!(schedule_id(c, Algorithm::Binomial, 10, 2, SLOT, 8), None);
    }
}
