//! The simulated call both plan sweeps run: every rank's plan built for one
//! collective (by the default or a named algorithm), simulated, and every
//! rank's output checked element by element against the f64 reference; and
//! the matrices of calls both sweeps run it over.

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
    /// A round-robin call of `collective` by `algo` on `nranks` ranks, on
    /// one 16-byte slot a connection: empty and out of place until the
    /// caller sets its count and `in_place`.
    pub(crate) fn new(
        collective: Collective,
        algo: Option<Algorithm>,
        (dtype, op): (DataType, ReduceOp),
        nranks: usize,
    ) -> Case {
        Case {
            collective,
            algo,
            dtype,
            op,
            nranks,
            count: 0,
            nsteps: 1,
            slot: 16,
            in_place: false,
            schedule: Schedule::RoundRobin,
        }
    }

    /// A call under the random schedule of `schedule_seed`, on 16-byte
    /// slots, one or two a connection as `seed` is even or odd, with the
    /// dtype and operator at `spread` (modulo its length) of `DTYPE_OPS`:
    /// empty and out of place until the caller sets its count and
    /// `in_place`.
    pub(crate) fn random(
        collective: Collective,
        algo: Option<Algorithm>,
        nranks: usize,
        seed: u64,
        schedule_seed: u64,
        spread: usize,
    ) -> Case {
        Case {
            nsteps: 1 + seed as usize % 2,
            schedule: Schedule::Random {
                seed: schedule_seed,
            },
            ..Case::new(
                collective,
                algo,
                DTYPE_OPS[spread % DTYPE_OPS.len()],
                nranks,
            )
        }
    }

    /// Elements one slot holds.
    pub(crate) fn chunk(&self) -> usize {
        self.slot / self.dtype.size()
    }

    /// Every rank's plan.
    pub(crate) fn plans(&self) -> Vec<Plan> {
        rank_plans(self.nranks, self.slot, self.nsteps, |params| {
            build_with(
                self.collective,
                self.dtype,
                self.op,
                self.count,
                params,
                self.algo,
            )
            .unwrap_or_else(|e| panic!("{self:?}: build failed: {e}"))
        })
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

/// The plan `plan` builds for each rank of `nranks` with `nsteps` slots of
/// `slot` bytes a connection.
pub(crate) fn rank_plans(
    nranks: usize,
    slot: usize,
    nsteps: usize,
    plan: impl Fn(&PlanParams) -> Plan,
) -> Vec<Plan> {
    (0..nranks)
        .map(|rank| {
            plan(&PlanParams {
                rank,
                nranks,
                slot_bytes: slot,
                nsteps,
            })
        })
        .collect()
}

/// The collectives of a [`sweep`]: `collective` alone at every size.
pub(crate) fn only(collective: Collective) -> impl Fn(usize) -> Vec<Collective> {
    move |_| vec![collective]
}

/// The collectives of a [`sweep`]: `at(root)` for each of `roots(nranks)`.
pub(crate) fn rooted(
    roots: fn(usize) -> Vec<usize>,
    at: fn(usize) -> Collective,
) -> impl Fn(usize) -> Vec<Collective> {
    move |nranks| roots(nranks).into_iter().map(at).collect()
}

/// Every dtype and operator once for each `(collective, algorithm)` of
/// `calls`: three chunks and five elements on 24-byte slots, on `5 + i %
/// sizes` ranks and in place every other time for the `i`th dtype.
pub(crate) fn every_dtype_and_op_once(calls: &[(Collective, Option<Algorithm>)], sizes: usize) {
    for (i, dtype) in DataType::ALL.into_iter().enumerate() {
        for op in ReduceOp::ALL {
            for &(collective, algo) in calls {
                Case {
                    count: 3 * 24 / dtype.size() + 5,
                    slot: 24,
                    in_place: i % 2 == 0,
                    ..Case::new(collective, algo, (dtype, op), 5 + i % sizes)
                }
                .run();
            }
        }
    }
}

/// Declares one `#[test]` per entry `name: algo, collectives,
/// in_place_ok;`, each a [`sweep`] with those arguments.
macro_rules! sweep_tests {
    ($($name:ident: $algo:expr, $collectives:expr, $in_place_ok:expr;)*) => {
        $(
            #[test]
            fn $name() {
                $crate::case::sweep($algo, $collectives, $in_place_ok);
            }
        )*
    };
}
pub(crate) use sweep_tests;

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
                        count,
                        nsteps,
                        slot,
                        in_place: in_place_ok && (k + ci) % 2 == 1,
                        ..Case::new(collective, algo, (dtype, op), nranks)
                    }
                    .run();
                }
            }
        }
    }
}
