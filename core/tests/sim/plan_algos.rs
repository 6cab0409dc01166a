//! The algorithms beside the defaults (double binary tree,
//! halving-doubling and recursive-doubling all-reduce, binomial broadcast and reduce, recursive-doubling and
//! Bruck all-gather) for every communicator size from 1 to 64, run by the
//! simulator and checked element by element against an independent
//! reference, as `plans.rs` does for the defaults.
//!
//! Tiny slots (16 or 24 bytes) force multi-chunk paths; 1, 2 or 8 slots per
//! connection; dtypes and operators spread over the matrix; every dtype and
//! operator once per reducing algorithm; random interleavings with one slot.

use streamcomm::{Algorithm, Collective};

use super::case::{Case, counts, every_dtype_and_op_once, only, rooted, sweep_tests};

/// Roots 0, n/2 and n−1 (without repeats).
fn roots(n: usize) -> Vec<usize> {
    let mut roots = vec![0, n / 2, n - 1];
    roots.dedup();
    roots
}

sweep_tests! {
    double_tree_all_reduce: Some(Algorithm::Tree), only(Collective::AllReduce), true;
    halving_doubling_all_reduce:
        Some(Algorithm::HalvingDoubling), only(Collective::AllReduce), true;
    recursive_doubling_all_reduce:
        Some(Algorithm::RecursiveDoubling), only(Collective::AllReduce), true;
    binomial_broadcast:
        Some(Algorithm::Binomial), rooted(roots, |root| Collective::Broadcast { root }), true;
    binomial_reduce:
        Some(Algorithm::Binomial), rooted(roots, |root| Collective::Reduce { root }), true;
    recursive_doubling_all_gather:
        Some(Algorithm::RecursiveDoubling), only(Collective::AllGather), true;
    bruck_all_gather: Some(Algorithm::Bruck), only(Collective::AllGather), true;
}

#[test]
fn every_dtype_and_op() {
    every_dtype_and_op_once(
        &[
            (Collective::AllReduce, Some(Algorithm::Tree)),
            (Collective::AllReduce, Some(Algorithm::HalvingDoubling)),
            (Collective::AllReduce, Some(Algorithm::RecursiveDoubling)),
            (Collective::Reduce { root: 1 }, Some(Algorithm::Binomial)),
        ],
        4,
    );
}

/// Random interleavings with one slot per connection.
#[test]
fn random_schedules() {
    let cases = |n: usize| {
        [
            (Collective::AllReduce, Algorithm::Tree),
            (Collective::AllReduce, Algorithm::HalvingDoubling),
            (Collective::AllReduce, Algorithm::RecursiveDoubling),
            (Collective::Broadcast { root: n / 3 }, Algorithm::Binomial),
            (Collective::Reduce { root: n / 2 }, Algorithm::Binomial),
            (Collective::AllGather, Algorithm::RecursiveDoubling),
            (Collective::AllGather, Algorithm::Bruck),
        ]
    };
    for nranks in [2, 3, 4, 5, 6, 7, 8, 11, 16, 24, 33, 64] {
        for (i, (collective, algo)) in cases(nranks).into_iter().enumerate() {
            for seed in 0..4u64 {
                let spread = nranks + i + seed as usize;
                let schedule_seed = seed * 7919 + nranks as u64;
                let case =
                    Case::random(collective, Some(algo), nranks, seed, schedule_seed, spread);
                let counts = counts(collective, Some(algo), case.dtype, 16, nranks);
                Case {
                    count: *counts
                        .get(1 + seed as usize)
                        .unwrap_or(&(2 * case.chunk() + 1)),
                    in_place: seed % 2 == 1,
                    ..case
                }
                .run();
            }
        }
    }
}
