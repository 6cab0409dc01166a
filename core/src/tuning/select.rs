//! Choosing the algorithm of a call: the user's override, else the model.
//!
//! `STREAMCOMM_ALGO` is either one algorithm name, used for every
//! collective it implements (`tree`), or a comma-separated list of
//! `collective=algorithm` pairs (`all_reduce=ring,broadcast=binomial`).
//! Collectives it does not name are chosen by the cost model: the
//! candidate with the smallest predicted time for this call, as NCCL's
//! tuner does (within 1% of it, the earlier candidate: ring or chain).
//! The choice depends only on the call and on settings every rank shares
//! (size, hosts, slot size, tuning parameters), so all ranks pick the same
//! plan.

use std::fmt;

use super::model::{Shape, predict};
use crate::config::algo_override::OverrideNames;
use crate::config::{AlgoOverride, CostParams};
use crate::plan::{Algorithm, Collective};
use crate::{Error, Result};

/// The collectives that have more than one algorithm or may be named.
const NAMED: [(&str, Collective); 6] = [
    ("all_reduce", Collective::AllReduce),
    ("all_gather", Collective::AllGather),
    ("reduce_scatter", Collective::ReduceScatter),
    ("broadcast", Collective::Broadcast { root: 0 }),
    ("reduce", Collective::Reduce { root: 0 }),
    ("all_to_all", Collective::AllToAll),
];

/// ForcedAlgorithms algorithms (`STREAMCOMM_ALGO`) resolved to the plans'
/// algorithms; empty: the model chooses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ForcedAlgorithms {
    /// `(collective name, algorithm)`, at most one per collective.
    pairs: Vec<(&'static str, Algorithm)>,
}

impl ForcedAlgorithms {
    /// Resolves the names of `o` (see [`AlgoOverride::parse`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] quoting the value: an unknown collective or
    /// algorithm, or an algorithm that does not implement the collective it
    /// is given for (or, alone, any collective).
    pub(crate) fn resolve(o: &AlgoOverride) -> Result<ForcedAlgorithms> {
        let bad =
            |why: String| Error::invalid(format!("STREAMCOMM_ALGO={:?}: {why}", o.to_string()));
        let algo_of = |name: &str| {
            Algorithm::parse(name).ok_or_else(|| {
                let all: Vec<&str> = Algorithm::ALL.iter().map(|a| a.name()).collect();
                bad(format!(
                    "unknown algorithm {name:?} (one of {})",
                    all.join(", ")
                ))
            })
        };
        let given = match o.forced() {
            OverrideNames::Nothing => return Ok(ForcedAlgorithms::default()),
            OverrideNames::Every(name) => {
                let algo = algo_of(name)?;
                let pairs: Vec<_> = NAMED
                    .iter()
                    .filter(|(_, c)| algo.supports(*c))
                    .map(|&(name, _)| (name, algo))
                    .collect();
                if pairs.is_empty() {
                    return Err(bad(format!("{algo} implements no collective")));
                }
                return Ok(ForcedAlgorithms { pairs });
            }
            OverrideNames::Per(given) => given,
        };
        let mut pairs: Vec<(&'static str, Algorithm)> = Vec::new();
        for (coll, algo) in given {
            let &(name, collective) = NAMED.iter().find(|(n, _)| n == coll).ok_or_else(|| {
                let all: Vec<&str> = NAMED.iter().map(|(n, _)| *n).collect();
                bad(format!(
                    "unknown collective {coll:?} (one of {})",
                    all.join(", ")
                ))
            })?;
            let algo = algo_of(algo)?;
            if !algo.supports(collective) {
                let ok: Vec<&str> = Algorithm::candidates(collective)
                    .iter()
                    .map(|a| a.name())
                    .collect();
                return Err(bad(format!(
                    "{algo} does not implement {name} (use {})",
                    ok.join(", ")
                )));
            }
            pairs.push((name, algo));
        }
        Ok(ForcedAlgorithms { pairs })
    }

    /// The forced algorithm of `collective`, if any.
    pub(crate) fn get(&self, collective: Collective) -> Option<Algorithm> {
        let name = collective.name();
        self.pairs.iter().find(|(n, _)| *n == name).map(|&(_, a)| a)
    }
}

impl fmt::Display for ForcedAlgorithms {
    /// The canonical `collective=algorithm,...` form (`auto` when empty).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.pairs.is_empty() {
            return f.write_str("auto");
        }
        let items: Vec<String> = self.pairs.iter().map(|(n, a)| format!("{n}={a}")).collect();
        f.write_str(&items.join(","))
    }
}

/// The algorithm for one call: forced, else the model's choice
/// ([`choose_by_model`]). `None` for collectives with a single schedule
/// (point-to-point, barrier).
pub(crate) fn choose(
    forced: &ForcedAlgorithms,
    params: &CostParams,
    collective: Collective,
    count: usize,
    esize: usize,
    shape: &Shape,
) -> Option<Algorithm> {
    forced
        .get(collective)
        .or_else(|| choose_by_model(params, collective, count, esize, shape))
}

/// The model's cheapest candidate for one call (the first candidate wins
/// ties: predictions within 1% of the fastest). `None` for collectives with
/// a single schedule.
pub fn choose_by_model(
    params: &CostParams,
    collective: Collective,
    count: usize,
    esize: usize,
    shape: &Shape,
) -> Option<Algorithm> {
    let times: Vec<(Algorithm, f64)> = Algorithm::candidates(collective)
        .iter()
        .filter_map(|&a| Some((a, predict(params, collective, a, count, esize, shape)?)))
        .collect();
    first_of_the_fastest(&times)
}

/// The first of `times` within [`TIE`] of the fastest.
fn first_of_the_fastest(times: &[(Algorithm, f64)]) -> Option<Algorithm> {
    let fastest = times.iter().map(|&(_, t)| t).fold(f64::INFINITY, f64::min);
    times
        .iter()
        .find(|&&(_, t)| t <= fastest * (1.0 + TIE))
        .map(|&(a, _)| a)
}

/// Predictions this close to the fastest (relative) count as a tie, won by
/// the earlier candidate (ring, chain: the default schedules), so that two
/// algorithms the model cannot tell apart do not swap with the last digits
/// of a parameter. (At 2 ranks, ring and tree all-reduces of a few bytes
/// were predicted 0.1% apart.)
const TIE: f64 = 0.01;

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ForcedAlgorithms> {
        ForcedAlgorithms::resolve(&AlgoOverride::parse(text)?)
    }

    #[test]
    fn a_near_tie_goes_to_the_earlier_candidate() {
        // Two ranks, 40 bytes: the tree's two hops are predicted a hair
        // under the ring's; the ring, first, is kept.
        let (p, shape) = (CostParams::default(), Shape::new(2, 2, 1 << 20));
        let ar = Collective::AllReduce;
        let t = |a| predict(&p, ar, a, 10, 4, &shape).unwrap();
        let (ring, tree) = (t(Algorithm::Ring), t(Algorithm::Tree));
        assert!(tree < ring && ring < tree * (1.0 + TIE), "{ring} {tree}");
        let pair = [(Algorithm::Ring, ring), (Algorithm::Tree, tree)];
        assert_eq!(first_of_the_fastest(&pair), Some(Algorithm::Ring));
        // Recursive doubling's one exchange beats both's two hops.
        let none = ForcedAlgorithms::default();
        assert_eq!(
            choose(&none, &p, ar, 10, 4, &shape),
            Some(Algorithm::RecursiveDoubling)
        );
        // And at 64 ranks, 8 per host: 6 rounds against the tree's 12 hops.
        let wide = Shape::new(64, 8, 1 << 20);
        assert_eq!(
            choose(&none, &p, ar, 2, 4, &wide),
            Some(Algorithm::RecursiveDoubling)
        );
    }

    #[test]
    fn parses_single_names_and_pairs() {
        let o = parse("tree").unwrap();
        assert_eq!(o.get(Collective::AllReduce), Some(Algorithm::Tree));
        assert_eq!(o.get(Collective::AllGather), None);
        let o = parse(" all_reduce=ring , Broadcast=binomial").unwrap();
        assert_eq!(o.get(Collective::AllReduce), Some(Algorithm::Ring));
        assert_eq!(
            o.get(Collective::Broadcast { root: 3 }),
            Some(Algorithm::Binomial)
        );
        assert_eq!(o.to_string(), "all_reduce=ring,broadcast=binomial");
        assert_eq!(parse("auto").unwrap(), ForcedAlgorithms::default());
        assert_eq!(parse("").unwrap(), ForcedAlgorithms::default());
        let o = parse("ring").unwrap();
        assert_eq!(o.get(Collective::ReduceScatter), Some(Algorithm::Ring));
    }

    #[test]
    fn refuses_bad_values_naming_them() {
        let err = |t: &str| parse(t).unwrap_err().to_string();
        assert!(err("warp").contains("unknown algorithm \"warp\""));
        assert!(err("all_reduce=binomial").contains("binomial does not implement all_reduce"));
        assert!(err("allreduce=ring").contains("unknown collective \"allreduce\""));
        assert!(err("all_reduce=ring,all_reduce=tree").contains("given twice"));
        assert!(err("all_reduce").contains("unknown algorithm"));
        assert!(err("all_reduce=ring,").contains("is not collective=algorithm"));
        assert!(err("x").contains("STREAMCOMM_ALGO=\"x\""));
    }

    #[test]
    fn forced_wins_and_the_model_picks_otherwise() {
        let p = CostParams::default();
        let shape = Shape::new(512, 8, 512 << 10);
        let forced = parse("all_reduce=ring").unwrap();
        assert_eq!(
            choose(&forced, &p, Collective::AllReduce, 2, 4, &shape),
            Some(Algorithm::Ring)
        );
        let auto = ForcedAlgorithms::default();
        let small = choose(&auto, &p, Collective::AllReduce, 2, 4, &shape).unwrap();
        assert_ne!(small, Algorithm::Ring);
        assert_eq!(choose(&auto, &p, Collective::Barrier, 0, 1, &shape), None);
        assert_eq!(
            choose(&auto, &p, Collective::ReduceScatter, 9, 4, &shape),
            Some(Algorithm::Ring)
        );
    }
}
