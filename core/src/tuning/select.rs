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

use super::model::{predict, Shape};
use super::params::CostParams;
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

/// Forced algorithms (`STREAMCOMM_ALGO`); empty: the model chooses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AlgoOverride {
    /// `(collective name, algorithm)`, at most one per collective.
    pairs: Vec<(&'static str, Algorithm)>,
}

impl AlgoOverride {
    /// Parses `NAME` or `collective=NAME,...` (empty or `auto`: nothing forced).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] quoting the value: an unknown collective or
    /// algorithm, a collective named twice, or an algorithm that does not
    /// implement the collective it is given for (or, alone, any collective).
    pub fn parse(text: &str) -> Result<AlgoOverride> {
        let bad = |why: String| Error::invalid(format!("STREAMCOMM_ALGO={text:?}: {why}"));
        let t = text.trim();
        if t.is_empty() || t.eq_ignore_ascii_case("auto") {
            return Ok(AlgoOverride::default());
        }
        let algo_of = |name: &str| {
            Algorithm::parse(name).ok_or_else(|| {
                let all: Vec<&str> = Algorithm::ALL.iter().map(|a| a.name()).collect();
                bad(format!(
                    "unknown algorithm {:?} (one of {})",
                    name.trim(),
                    all.join(", ")
                ))
            })
        };
        if !t.contains('=') {
            let algo = algo_of(t)?;
            let pairs: Vec<_> = NAMED
                .iter()
                .filter(|(_, c)| algo.supports(*c))
                .map(|&(name, _)| (name, algo))
                .collect();
            if pairs.is_empty() {
                return Err(bad(format!("{algo} implements no collective")));
            }
            return Ok(AlgoOverride { pairs });
        }
        let mut pairs: Vec<(&'static str, Algorithm)> = Vec::new();
        for item in t.split(',') {
            let (coll, algo) = item
                .split_once('=')
                .ok_or_else(|| bad(format!("{item:?} is not collective=algorithm")))?;
            let coll = coll.trim().to_ascii_lowercase();
            let &(name, collective) = NAMED.iter().find(|(n, _)| *n == coll).ok_or_else(|| {
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
            if pairs.iter().any(|(n, _)| *n == name) {
                return Err(bad(format!("{name} is given twice")));
            }
            pairs.push((name, algo));
        }
        Ok(AlgoOverride { pairs })
    }

    /// The forced algorithm of `collective`, if any.
    pub fn get(&self, collective: Collective) -> Option<Algorithm> {
        let name = collective.name();
        self.pairs.iter().find(|(n, _)| *n == name).map(|&(_, a)| a)
    }

    /// True when nothing is forced.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }
}

impl fmt::Display for AlgoOverride {
    /// The canonical `collective=algorithm,...` form (`auto` when empty).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.pairs.is_empty() {
            return f.write_str("auto");
        }
        let items: Vec<String> = self.pairs.iter().map(|(n, a)| format!("{n}={a}")).collect();
        f.write_str(&items.join(","))
    }
}

/// The algorithm for one call: forced, else the model's cheapest candidate
/// (the first candidate wins ties: predictions within 1% of the fastest).
/// `None` for collectives with a single schedule (point-to-point, barrier).
pub fn choose(
    forced: &AlgoOverride,
    params: &CostParams,
    collective: Collective,
    count: usize,
    esize: usize,
    shape: &Shape,
) -> Option<Algorithm> {
    if let Some(a) = forced.get(collective) {
        return Some(a);
    }
    let times: Vec<(Algorithm, f64)> = Algorithm::candidates(collective)
        .iter()
        .filter_map(|&a| Some((a, predict(params, collective, a, count, esize, shape)?)))
        .collect();
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

    #[test]
    fn a_near_tie_goes_to_the_earlier_candidate() {
        // Two ranks, 40 bytes: the tree's two hops are predicted a hair
        // under the ring's; the ring, first, is kept.
        let (p, shape) = (CostParams::default(), Shape::new(2, 2, 1 << 20));
        let ar = Collective::AllReduce;
        let t = |a| predict(&p, ar, a, 10, 4, &shape).unwrap();
        let (ring, tree) = (t(Algorithm::Ring), t(Algorithm::Tree));
        assert!(tree < ring && ring < tree * (1.0 + TIE), "{ring} {tree}");
        let none = AlgoOverride::default();
        assert_eq!(choose(&none, &p, ar, 10, 4, &shape), Some(Algorithm::Ring));
        // A clear winner still wins: the tree at 64 ranks, 8 per host.
        let wide = Shape::new(64, 8, 1 << 20);
        assert_eq!(choose(&none, &p, ar, 2, 4, &wide), Some(Algorithm::Tree));
    }

    #[test]
    fn parses_single_names_and_pairs() {
        let o = AlgoOverride::parse("tree").unwrap();
        assert_eq!(o.get(Collective::AllReduce), Some(Algorithm::Tree));
        assert_eq!(o.get(Collective::AllGather), None);
        let o = AlgoOverride::parse(" all_reduce=ring , Broadcast=binomial").unwrap();
        assert_eq!(o.get(Collective::AllReduce), Some(Algorithm::Ring));
        assert_eq!(
            o.get(Collective::Broadcast { root: 3 }),
            Some(Algorithm::Binomial)
        );
        assert_eq!(o.to_string(), "all_reduce=ring,broadcast=binomial");
        assert!(AlgoOverride::parse("auto").unwrap().is_empty());
        assert!(AlgoOverride::parse("").unwrap().is_empty());
        let o = AlgoOverride::parse("ring").unwrap();
        assert_eq!(o.get(Collective::ReduceScatter), Some(Algorithm::Ring));
    }

    #[test]
    fn refuses_bad_values_naming_them() {
        let err = |t: &str| AlgoOverride::parse(t).unwrap_err().to_string();
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
        let forced = AlgoOverride::parse("all_reduce=ring").unwrap();
        assert_eq!(
            choose(&forced, &p, Collective::AllReduce, 2, 4, &shape),
            Some(Algorithm::Ring)
        );
        let auto = AlgoOverride::default();
        let small = choose(&auto, &p, Collective::AllReduce, 2, 4, &shape).unwrap();
        assert_ne!(small, Algorithm::Ring);
        assert_eq!(choose(&auto, &p, Collective::Barrier, 0, 1, &shape), None);
        assert_eq!(
            choose(&auto, &p, Collective::ReduceScatter, 9, 4, &shape),
            Some(Algorithm::Ring)
        );
    }
}
