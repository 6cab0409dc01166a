//! Which algorithm a plan uses, and building a plan with a given one.
//!
//! [`build`] picks the historical default of each collective
//! (ring for all-reduce, all-gather and reduce-scatter, chain for broadcast
//! and reduce, pairwise for all-to-all). [`build_with`] takes the algorithm
//! explicitly; the communicator chooses it with the cost model
//! (the runtime's `tuning`) or `STREAMCOMM_ALGO`. Every algorithm emits the same
//! [`DataStep`](super::DataStep)s, so the backends and the simulator run them all.

use streamcomm_kernels::{DataType, ReduceOp};

use super::step::Plan;
use super::{
    PlanParams, binomial, build, halving_doubling, recursive_doubling, tree, validate,
    verified_plan,
};
use streamcomm_types::{Algorithm, Collective, Error};

/// Builds the plan of one rank for one collective call with `algo`
/// (`None`: the collective's default, as [`build`]).
///
/// Every rank of the call must pass the same algorithm.
///
/// # Errors
///
/// As [`build`], plus [`Error::InvalidArgument`] when `algo` does not
/// implement `collective` (the message lists those that do).
///
/// # Examples
///
/// ```
/// use streamcomm_algo::plan::{build_with, PlanParams};
/// use streamcomm_types::{Algorithm, Collective};
/// use streamcomm_types::{DataType, ReduceOp};
///
/// let params = PlanParams { rank: 0, nranks: 64, slot_bytes: 1 << 20, nsteps: 8 };
/// let plan = build_with(
///     Collective::Broadcast { root: 0 },
///     DataType::F32,
///     ReduceOp::Sum,
///     16,
///     &params,
///     Some(Algorithm::Binomial),
/// )?;
/// // The root sends to 32, 16, 8, 4, 2 and 1.
/// assert_eq!(plan.steps.len(), 6);
/// # Ok::<(), streamcomm_types::Error>(())
/// ```
pub fn build_with(
    collective: Collective,
    dtype: DataType,
    op: ReduceOp,
    count: usize,
    params: &PlanParams,
    algo: Option<Algorithm>,
) -> Result<Plan, Error> {
    let Some(algo) = algo else {
        return build(collective, dtype, op, count, params);
    };
    let candidates = Algorithm::candidates(collective);
    if !candidates.contains(&algo) {
        let names: Vec<&str> = candidates.iter().map(|a| a.name()).collect();
        return Err(Error::invalid(format!(
            "{}: algorithm {algo} does not implement it (use {})",
            collective.name(),
            if names.is_empty() {
                "none: it has a single schedule".to_string()
            } else {
                names.join(", ")
            }
        )));
    }
    if candidates.first() == Some(&algo) {
        return build(collective, dtype, op, count, params);
    }
    let g = validate(collective, dtype, count, params)?;
    let mut work_count = 0;
    let steps = match (collective, algo) {
        (Collective::AllReduce, Algorithm::Tree) => tree::all_reduce(&g),
        (Collective::AllReduce, Algorithm::RecursiveDoubling) => recursive_doubling::all_reduce(&g),
        (Collective::AllReduce, _) => halving_doubling::all_reduce(&g),
        (Collective::AllGather, Algorithm::Bruck) => recursive_doubling::bruck(&g),
        (Collective::AllGather, _) => recursive_doubling::all_gather(&g),
        (Collective::Broadcast { root }, _) => binomial::broadcast(&g, root),
        (Collective::Reduce { root }, _) => {
            let (steps, uses_recv) = binomial::reduce(&g, root);
            if g.rank != root && uses_recv {
                work_count = count;
            }
            steps
        }
        // `candidates` lists no other non-default pair.
        _ => return build(collective, dtype, op, count, params),
    };
    verified_plan(collective, dtype, op, &g, work_count, steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_aliases() {
        for a in Algorithm::ALL {
            assert_eq!(Algorithm::parse(a.name()), Some(a));
            assert_eq!(Algorithm::parse(&a.name().to_uppercase()), Some(a));
        }
        assert_eq!(Algorithm::parse("double-tree"), Some(Algorithm::Tree));
        assert_eq!(
            Algorithm::parse("Rabenseifner"),
            Some(Algorithm::HalvingDoubling)
        );
        assert_eq!(Algorithm::parse("fastest"), None);
    }

    #[test]
    fn unsupported_pairs_are_refused_with_the_alternatives() {
        let p = PlanParams {
            rank: 0,
            nranks: 4,
            slot_bytes: 64,
            nsteps: 2,
        };
        let refusal = |c, count, algo| {
            build_with(c, DataType::F32, ReduceOp::Sum, count, &p, Some(algo))
                .unwrap_err()
                .to_string()
        };
        let err = refusal(Collective::AllGather, 4, Algorithm::Tree);
        assert!(err.contains("algorithm tree") && err.contains("ring, recursive_doubling, bruck"));
        let err = refusal(Collective::Barrier, 0, Algorithm::Ring);
        assert!(err.contains("single schedule"), "{err}");
    }

    #[test]
    fn defaults_equal_build() {
        let p = PlanParams {
            rank: 1,
            nranks: 5,
            slot_bytes: 64,
            nsteps: 1,
        };
        for c in [Collective::AllReduce, Collective::Broadcast { root: 2 }] {
            let a = build(c, DataType::F32, ReduceOp::Sum, 37, &p).unwrap();
            let first = Algorithm::candidates(c)[0];
            let b = build_with(c, DataType::F32, ReduceOp::Sum, 37, &p, Some(first)).unwrap();
            assert_eq!(a, b);
            let c2 = build_with(c, DataType::F32, ReduceOp::Sum, 37, &p, None).unwrap();
            assert_eq!(a, c2);
        }
    }
}
