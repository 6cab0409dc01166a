//! The algorithms beside the defaults (double binary tree and
//! halving-doubling all-reduce, binomial broadcast and reduce, recursive-doubling and
//! Bruck all-gather) for every communicator size from 1 to 64, run by the
//! simulator and checked element by element against an independent
//! reference, as `plans.rs` does for the defaults.
//!
//! Tiny slots (16 or 24 bytes) force multi-chunk paths; 1, 2 or 8 slots per
//! connection; dtypes and operators spread over the matrix; every dtype and
//! operator once per reducing algorithm; random interleavings with one slot.

use crate::common;

use std::fmt;

use streamcomm::plan::{
    build_with, simulate_with, Algorithm, Collective, Plan, PlanParams, Schedule, SimConfig,
};
use streamcomm::{DataType, ReduceOp};

use common::{check, expected, gen_inputs, DTYPE_OPS};

const NSTEPS: [usize; 3] = [1, 2, 8];
const SLOTS: [usize; 2] = [16, 24];
const MAX_RANKS: usize = 64;

/// One simulated call.
#[derive(Clone, Copy)]
struct Case {
    collective: Collective,
    algo: Algorithm,
    dtype: DataType,
    op: ReduceOp,
    nranks: usize,
    count: usize,
    nsteps: usize,
    slot: usize,
    in_place: bool,
    schedule: Schedule,
}

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} {} {} {} n={} count={} nsteps={} slot={} in_place={} {:?}",
            self.collective,
            self.algo,
            self.dtype,
            self.op,
            self.nranks,
            self.count,
            self.nsteps,
            self.slot,
            self.in_place,
            self.schedule
        )
    }
}

impl Case {
    fn plans(&self) -> Vec<Plan> {
        (0..self.nranks)
            .map(|rank| {
                let params = PlanParams {
                    rank,
                    nranks: self.nranks,
                    slot_bytes: self.slot,
                    nsteps: self.nsteps,
                };
                build_with(
                    self.collective,
                    self.dtype,
                    self.op,
                    self.count,
                    &params,
                    Some(self.algo),
                )
                .unwrap_or_else(|e| panic!("{self:?}: build failed: {e}"))
            })
            .collect()
    }

    /// Simulates the case and checks every rank's output.
    fn run(&self) {
        let seed = (self.nranks * 1_000_003 + self.count * 7 + self.nsteps) as u64;
        let inputs = gen_inputs(
            self.collective,
            self.dtype,
            self.op,
            self.nranks,
            self.count,
            seed,
        );
        let want = expected(
            self.collective,
            self.dtype,
            self.op,
            self.nranks,
            self.count,
            &inputs,
        );
        let config = SimConfig {
            in_place: self.in_place,
            nsteps: self.nsteps,
            slot_bytes: self.slot,
            schedule: self.schedule,
        };
        let plans = self.plans();
        for plan in &plans {
            for s in &plan.steps {
                if s.recv_from.is_some() || s.send_to.is_some() {
                    assert!(s.count * self.dtype.size() <= self.slot, "{self:?}: {s:?}");
                }
            }
        }
        let got =
            simulate_with(&plans, inputs, &config).unwrap_or_else(|e| panic!("{self:?}: {e}"));
        for (rank, (got, want)) in got.iter().zip(&want).enumerate() {
            match want {
                Some(want) => check(self.dtype, self.op, got, want)
                    .unwrap_or_else(|e| panic!("{self:?}: rank {rank}: {e}")),
                None => assert!(got.is_empty(), "{self:?}: rank {rank} got output"),
            }
        }
    }
}

/// Empty, one element, a prime, several chunks, and (when the output is not
/// `nranks` times the count already) several chunks per rank.
fn counts(collective: Collective, dtype: DataType, slot: usize, nranks: usize) -> Vec<usize> {
    let chunk = slot / dtype.size();
    let mut counts = vec![0, 1, 13, 3 * chunk + 5];
    if collective != Collective::AllGather {
        counts.push(2 * nranks * chunk + 3);
    }
    counts
}

/// Every size, depth and count for `collectives(n)` run by `algo`.
fn sweep(algo: Algorithm, collectives: impl Fn(usize) -> Vec<Collective>) {
    let mut k = 0usize;
    for nranks in 1..=MAX_RANKS {
        for collective in collectives(nranks) {
            for nsteps in NSTEPS {
                k += 1;
                let (dtype, op) = DTYPE_OPS[k % DTYPE_OPS.len()];
                let slot = SLOTS[(k / 3) % SLOTS.len()];
                for (ci, count) in counts(collective, dtype, slot, nranks)
                    .into_iter()
                    .enumerate()
                {
                    Case {
                        collective,
                        algo,
                        dtype,
                        op,
                        nranks,
                        count,
                        nsteps,
                        slot,
                        in_place: (k + ci) % 2 == 1,
                        schedule: Schedule::RoundRobin,
                    }
                    .run();
                }
            }
        }
    }
}

#[test]
fn double_tree_all_reduce() {
    sweep(Algorithm::Tree, |_| vec![Collective::AllReduce]);
}

#[test]
fn halving_doubling_all_reduce() {
    sweep(Algorithm::HalvingDoubling, |_| vec![Collective::AllReduce]);
}

/// Roots 0, n/2 and n−1 (without repeats).
fn roots(n: usize) -> Vec<usize> {
    let mut roots = vec![0, n / 2, n - 1];
    roots.dedup();
    roots
}

#[test]
fn binomial_broadcast() {
    sweep(Algorithm::Binomial, |n| {
        roots(n)
            .into_iter()
            .map(|root| Collective::Broadcast { root })
            .collect()
    });
}

#[test]
fn binomial_reduce() {
    sweep(Algorithm::Binomial, |n| {
        roots(n)
            .into_iter()
            .map(|root| Collective::Reduce { root })
            .collect()
    });
}

#[test]
fn recursive_doubling_all_gather() {
    sweep(Algorithm::RecursiveDoubling, |_| {
        vec![Collective::AllGather]
    });
}

#[test]
fn bruck_all_gather() {
    sweep(Algorithm::Bruck, |_| vec![Collective::AllGather]);
}

#[test]
fn every_dtype_and_op() {
    for (i, dtype) in DataType::ALL.into_iter().enumerate() {
        for op in ReduceOp::ALL {
            for (collective, algo) in [
                (Collective::AllReduce, Algorithm::Tree),
                (Collective::AllReduce, Algorithm::HalvingDoubling),
                (Collective::Reduce { root: 1 }, Algorithm::Binomial),
            ] {
                Case {
                    collective,
                    algo,
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
                    algo,
                    dtype,
                    op,
                    nranks,
                    count: *counts(collective, dtype, 16, nranks)
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
