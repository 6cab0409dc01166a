//! The simulated call both plan sweeps run: every rank's plan built for one
//! collective (by the default or a named algorithm), simulated, and every
//! rank's output checked element by element against the f64 reference.

use std::fmt;

use streamcomm::{Algorithm, Collective};
use streamcomm::{DataType, ReduceOp};
use streamcomm_algo::plan::{
    MessageSimConfig, Plan, PlanParams, Schedule, build_with, simulate_with,
};

use crate::common::{DTYPE_OPS, check, expected, gen_inputs};

pub(crate) const NSTEPS: [usize; 3] = [1, 2, 8];
pub(crate) const SLOTS: [usize; 2] = [16, 24];
pub(crate) const MAX_RANKS: usize = 64;

/// One simulated call.
#[derive(Clone, Copy)]
pub(crate) struct Case {
    pub collective: Collective,
    /// `None`: the default algorithm (what `plan::build` picks).
    pub algo: Option<Algorithm>,
    pub dtype: DataType,
    pub op: ReduceOp,
    pub nranks: usize,
    pub count: usize,
    pub nsteps: usize,
    pub slot: usize,
    pub in_place: bool,
    pub schedule: Schedule,
}

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} {:?} {} {} n={} count={} nsteps={} slot={} in_place={} {:?}",
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
    /// Every rank's plan.
    pub(crate) fn plans(&self) -> Vec<Plan> {
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
                    self.algo,
                )
                .unwrap_or_else(|e| panic!("{self:?}: build failed: {e}"))
            })
            .collect()
    }

    /// Simulates the case and checks every rank's output, and that no
    /// step moves more than a slot.
    pub(crate) fn run(&self) {
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
        let config = MessageSimConfig {
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

/// Empty, one element, a prime, several chunks, and several chunks per rank
/// for the default all-reduce (its ring loops) and for every named algorithm
/// but all-gather (whose output is `nranks` times the count already).
pub(crate) fn counts(
    collective: Collective,
    algo: Option<Algorithm>,
    dtype: DataType,
    slot: usize,
    nranks: usize,
) -> Vec<usize> {
    let chunk = slot / dtype.size();
    let mut counts = vec![0, 1, 13, 3 * chunk + 5];
    let per_rank = match algo {
        None => collective == Collective::AllReduce,
        Some(_) => collective != Collective::AllGather,
    };
    if per_rank {
        counts.push(2 * nranks * chunk + 3);
    }
    counts
}

/// Every size in `1..=MAX_RANKS`, ring depth and count for `collectives(n)`
/// run by `algo`, spreading dtypes, operators, slot sizes and in-place (where
/// `in_place_ok`) over the matrix.
pub(crate) fn sweep(
    algo: Option<Algorithm>,
    collectives: impl Fn(usize) -> Vec<Collective>,
    in_place_ok: bool,
) {
    let mut k = 0usize;
    for nranks in 1..=MAX_RANKS {
        for collective in collectives(nranks) {
            for nsteps in NSTEPS {
                k += 1;
                let (dtype, op) = DTYPE_OPS[k % DTYPE_OPS.len()];
                let slot = SLOTS[(k / 3) % SLOTS.len()];
                for (ci, count) in counts(collective, algo, dtype, slot, nranks)
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
                        in_place: in_place_ok && (k + ci) % 2 == 1,
                        schedule: Schedule::RoundRobin,
                    }
                    .run();
                }
            }
        }
    }
}
