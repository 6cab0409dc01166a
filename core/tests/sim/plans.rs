//! The default algorithm of every collective, for every size from 1 to 64, run by the
//! simulator and checked element by element against an independent reference.
//!
//! The slot is tiny (16 or 24 bytes) so that even short messages take the
//! multi-chunk, pipelined paths, and connections hold 1, 2 or 8 slots, so a
//! schedule that only works with spare buffering fails here. Dtypes and
//! operators are spread over the matrix rather than crossed with it, to keep
//! the run short; random schedules cover interleavings round-robin never
//! produces.

use streamcomm::Collective;
use streamcomm::{DataType, ReduceOp};
use streamcomm_algo::plan::{
    MessageSimConfig, Plan, Schedule, build, data_collectives, simulate, simulate_with,
};

use super::case::{
    Case, MAX_RANKS, NSTEPS, every_dtype_and_op_once, only, rank_plans, rooted, sweep_tests,
};

/// Both ends of the ranks as roots (once when they coincide).
fn roots(nranks: usize) -> Vec<usize> {
    if nranks == 1 {
        vec![0]
    } else {
        vec![0, nranks - 1]
    }
}

sweep_tests! {
    all_reduce: None, only(Collective::AllReduce), true;
    all_gather: None, only(Collective::AllGather), true;
    reduce_scatter: None, only(Collective::ReduceScatter), true;
    broadcast: None, rooted(roots, |root| Collective::Broadcast { root }), true;
    reduce: None, rooted(roots, |root| Collective::Reduce { root }), true;
    all_to_all: None, only(Collective::AllToAll), false;
}

#[test]
fn every_dtype_and_op_on_one_ring() {
    every_dtype_and_op_once(
        &[
            (Collective::AllReduce, None),
            (Collective::ReduceScatter, None),
        ],
        3,
    );
}

/// Random interleavings, one slot per connection: the schedule most likely
/// to expose a deadlock or a race between chunks.
#[test]
fn random_schedules() {
    for nranks in [2, 3, 4, 5, 7, 8, 13, 16, 33, 64] {
        let collectives = data_collectives(nranks / 2, nranks - 1);
        for (i, collective) in collectives.into_iter().enumerate() {
            for seed in 0..3u64 {
                let spread = nranks + i + seed as usize;
                let schedule_seed = seed * 7919 + nranks as u64;
                let case = Case::random(collective, None, nranks, seed, schedule_seed, spread);
                Case {
                    count: 2 * case.chunk() + 3,
                    in_place: collective != Collective::AllToAll && seed == 1,
                    ..case
                }
                .run();
            }
        }
    }
}

/// Consecutive message barriers for every size: each rank's plan is its
/// barrier plan repeated, so slots left by a fast rank's next barrier sit
/// in the rings while slower ranks finish the previous one, as they do
/// between real calls.
#[test]
fn barrier_completes_for_every_size() {
    const BARRIERS: usize = 3;
    for nranks in 1..=MAX_RANKS {
        let plans = rank_plans(nranks, 16, 1, |p| {
            build(Collective::Barrier, DataType::U8, ReduceOp::Sum, 0, p).unwrap()
        });
        let rounds = plans[0].steps.len() / 2;
        // ceil(log2 n) rounds.
        assert!(1 << rounds >= nranks && (rounds == 0 || 1 << (rounds - 1) < nranks));
        let repeated: Vec<Plan> = plans
            .into_iter()
            .map(|mut plan| {
                plan.steps = plan.steps.repeat(BARRIERS);
                plan
            })
            .collect();
        for nsteps in NSTEPS {
            let out = simulate(&repeated, vec![Vec::new(); nranks], false, nsteps, 16)
                .unwrap_or_else(|e| panic!("barrier n={nranks} nsteps={nsteps}: {e}"));
            assert!(out.iter().all(Vec::is_empty));
        }
        for seed in 0..3 {
            let config = MessageSimConfig {
                in_place: false,
                nsteps: 1,
                slot_bytes: 16,
                schedule: Schedule::Random {
                    seed: seed * 7919 + nranks as u64,
                },
            };
            simulate_with(&repeated, vec![Vec::new(); nranks], &config)
                .unwrap_or_else(|e| panic!("barrier n={nranks} seed {seed}: {e}"));
        }
        // The schedules of the flag barriers: a laggard that starts only
        // when every other rank is as far as the rings let it go.
        for laggard in [0, nranks / 2, nranks - 1] {
            let config = MessageSimConfig {
                in_place: false,
                nsteps: 1,
                slot_bytes: 16,
                schedule: Schedule::Laggard {
                    rank: laggard,
                    seed: nranks as u64,
                },
            };
            simulate_with(&repeated, vec![Vec::new(); nranks], &config)
                .unwrap_or_else(|e| panic!("barrier n={nranks} laggard {laggard}: {e}"));
        }
    }
}

/// Builds one plan per rank, rank `odd` with `odd_count` instead of `count`.
fn mismatched(
    collective: Collective,
    nranks: usize,
    count: usize,
    odd: usize,
    odd_count: usize,
) -> Vec<Plan> {
    rank_plans(nranks, 16, 1, |p| {
        let c = if p.rank == odd { odd_count } else { count };
        build(collective, DataType::F32, ReduceOp::Sum, c, p).unwrap()
    })
}

fn inputs_for(plans: &[Plan]) -> Vec<Vec<u8>> {
    plans
        .iter()
        .map(|p| vec![0u8; p.send_count * p.dtype.size()])
        .collect()
}

#[test]
fn mismatched_counts_are_errors_not_panics() {
    // Collectives where one rank called a different count: an error
    // (mismatch, deadlock or undelivered slots), whatever the algorithm.
    for collective in data_collectives(0, 2) {
        for (count, odd_count) in [(13, 14), (13, 0), (1, 9), (40, 13)] {
            for nsteps in [1, 8] {
                let plans = mismatched(collective, 4, count, 1, odd_count);
                let result = simulate(&plans, inputs_for(&plans), false, nsteps, 16);
                assert!(
                    result.is_err(),
                    "{collective:?} {count} vs {odd_count}, nsteps={nsteps}: no error"
                );
            }
        }
    }
}

/// Many more random interleavings (run with `--ignored`; about ten seconds).
#[test]
#[ignore]
fn random_schedules_stress() {
    for nranks in 2..=24 {
        for collective in data_collectives(nranks - 1, 0) {
            for seed in 0..40u64 {
                let case =
                    Case::random(collective, None, nranks, seed, seed, seed as usize + nranks);
                let chunk = case.chunk();
                Case {
                    count: [1, 13, 3 * chunk + 5, 2 * nranks * chunk + 3][seed as usize % 4],
                    in_place: collective != Collective::AllToAll && seed % 3 == 0,
                    ..case
                }
                .run();
            }
        }
    }
}
