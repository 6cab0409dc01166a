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
use streamcomm::{DataType, ReduceOp};
use streamcomm_algo::plan::Schedule;

use super::case::{Case, counts, sweep};
use crate::common::DTYPE_OPS;

#[test]
fn double_tree_all_reduce() {
    sweep(Some(Algorithm::Tree), |_| vec![Collective::AllReduce], true);
}

#[test]
fn halving_doubling_all_reduce() {
    sweep(
        Some(Algorithm::HalvingDoubling),
        |_| vec![Collective::AllReduce],
        true,
    );
}

#[test]
fn recursive_doubling_all_reduce() {
    sweep(
        Some(Algorithm::RecursiveDoubling),
        |_| vec![Collective::AllReduce],
        true,
    );
}

/// Roots 0, n/2 and n−1 (without repeats).
fn roots(n: usize) -> Vec<usize> {
    let mut roots = vec![0, n / 2, n - 1];
    roots.dedup();
    roots
}

#[test]
fn binomial_broadcast() {
    sweep(
        Some(Algorithm::Binomial),
        |n| {
            roots(n)
                .into_iter()
                .map(|root| Collective::Broadcast { root })
                .collect()
        },
        true,
    );
}

#[test]
fn binomial_reduce() {
    sweep(
        Some(Algorithm::Binomial),
        |n| {
            roots(n)
                .into_iter()
                .map(|root| Collective::Reduce { root })
                .collect()
        },
        true,
    );
}

#[test]
fn recursive_doubling_all_gather() {
    sweep(
        Some(Algorithm::RecursiveDoubling),
        |_| vec![Collective::AllGather],
        true,
    );
}

#[test]
fn bruck_all_gather() {
    sweep(
        Some(Algorithm::Bruck),
        |_| vec![Collective::AllGather],
        true,
    );
}

#[test]
fn every_dtype_and_op() {
    for (i, dtype) in DataType::ALL.into_iter().enumerate() {
        for op in ReduceOp::ALL {
            for (collective, algo) in [
                (Collective::AllReduce, Algorithm::Tree),
                (Collective::AllReduce, Algorithm::HalvingDoubling),
                (Collective::AllReduce, Algorithm::RecursiveDoubling),
                (Collective::Reduce { root: 1 }, Algorithm::Binomial),
            ] {
                Case {
                    collective,
                    algo: Some(algo),
                    dtype,
                    op,
                    nranks: 5 + i % 4,
                    count: 3 * 24 / dtype.size() + 5,
                    nsteps: 1,
                    slot: 24,
                    in_place: i % 2 == 0,
                    schedule: Schedule::RoundRobin,
                }
                .run();
            }
        }
    }
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
                let (dtype, op) = DTYPE_OPS[(nranks + i + seed as usize) % DTYPE_OPS.len()];
                let chunk = 16 / dtype.size();
                Case {
                    collective,
                    algo: Some(algo),
                    dtype,
                    op,
                    nranks,
                    count: *counts(collective, Some(algo), dtype, 16, nranks)
                        .get(1 + seed as usize)
                        .unwrap_or(&(2 * chunk + 1)),
                    nsteps: 1 + seed as usize % 2,
                    slot: 16,
                    in_place: seed % 2 == 1,
                    schedule: Schedule::Random {
                        seed: seed * 7919 + nranks as u64,
                    },
                }
                .run();
            }
        }
    }
}
