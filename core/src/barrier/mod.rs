//! Barriers, in one place: which algorithm a communicator's barriers run
//! ([`BarrierAlgo`], `STREAMCOMM_BARRIER_ALGO`), and everything that runs
//! them.
//!
//! Inside (not public), bottom to top:
//! - `step.rs`: [`FlagStep`], the language barriers are written in (a type
//!   apart from the data steps of other collectives), and the epoch values
//!   its words carry;
//! - `memory.rs`: the memory model flag steps run on ([`BarrierMemory`]);
//! - `exec.rs`: their one interpreter and the executor ([`exec::run`]), which
//!   the flag simulator (`simulate/`) also calls;
//! - `algo/`: every algorithm of `docs/design/barriers.md`, and
//!   [`BarrierAlgo`] naming them; `build.rs` makes one rank's
//!   [`BarrierPlan`] (`plan.rs`) of one;
//! - `area.rs`: the flag memory of a communicator, each rank's barrier area
//!   in its shared-memory segment, mapped or written over verbs;
//! - `state.rs`: the default algorithm, where a plan fits (decided once),
//!   the epochs, and running one barrier (`FlagBarriers`);
//! - `multicast/`: the barrier that runs no flag plan: one datagram per
//!   rank to a multicast group, with loss recovery, over a
//!   `multicast::Datagrams` (the verbs UD queue pair is one).
//!
//! Communicators with tcp peers have no shared flag memory: they run the
//! dissemination barrier's flag steps as data messages (`plan::build` for
//! `Collective::Barrier`, in `plan/barrier.rs`, runs each notify as a
//! zero-byte message and each flag wait as a wait for one), so that
//! algorithm is written once, in `algo/dissemination.rs`. The
//! communicator's entry points (`Communicator::barrier`, `barrier_host`,
//! `set_barrier_algo`, in `comm/barrier.rs`) pick flags or messages and
//! call in here. This module needs nothing above `wait`: `config`, `plan`
//! and `transport` build on it.

mod algo;
pub(crate) mod area;
pub(crate) mod build;
pub(crate) mod exec;
pub(crate) mod memory;
pub(crate) mod multicast;
pub(crate) mod plan;
pub(crate) mod simulate;
mod state;
pub(crate) mod step;

pub(crate) use algo::dissemination;
#[cfg(test)]
pub(crate) use algo::flag_algos;
pub use algo::{BarrierAlgo, Inter};
pub(crate) use build::{build, build_for_network};
pub(crate) use exec::{Epoch, apply, wait_for};
pub(crate) use memory::{BarrierMemory, WaitFor, Word};
pub(crate) use plan::BarrierPlan;
pub(crate) use state::{FlagBarriers, default_algo};
pub(crate) use step::{FlagStep, MAX_EPOCH, ROUNDS_PER_EPOCH};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    fn err(algo: BarrierAlgo, rank: usize, nranks: usize, hosts: &[usize]) -> String {
        match build(algo, rank, nranks, hosts) {
            Err(Error::InvalidArgument(msg)) => msg,
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn rejects_bad_arguments_naming_the_value() {
        let d = BarrierAlgo::Dissemination;
        assert!(err(d, 0, 0, &[]).contains("nranks is 0"));
        assert!(err(d, 4, 4, &[0; 4]).contains("rank 4"));
        assert!(err(d, 0, 4, &[0; 3]).contains("hosts has 3 entries for 4"));
        let msg = err(BarrierAlgo::Tree { fanout: 1 }, 0, 4, &[0; 4]);
        assert!(msg.contains("fanout 1"), "{msg}");
        let msg = err(BarrierAlgo::KWayDissemination { k: 0 }, 0, 4, &[0; 4]);
        assert!(msg.contains("k 0"), "{msg}");
        let h = BarrierAlgo::Hierarchical {
            inter: Inter::Tree { fanout: 0 },
        };
        assert!(err(h, 0, 2, &[0, 1]).contains("fanout 0"));
    }

    #[test]
    fn one_rank_has_no_steps() {
        for algo in flag_algos() {
            let plan = build(algo, 0, 1, &[5]).unwrap();
            assert!(plan.steps.is_empty(), "{algo}");
            assert_eq!((plan.rank, plan.nranks, plan.algo), (0, 1, algo));
        }
        assert!(build(BarrierAlgo::Multicast, 0, 1, &[5]).is_err());
    }

    #[test]
    fn flat_algorithms_ignore_hosts() {
        for algo in [
            BarrierAlgo::CentralCounter,
            BarrierAlgo::CentralFlags,
            BarrierAlgo::Chain,
            BarrierAlgo::Dissemination,
            BarrierAlgo::KWayDissemination { k: 3 },
        ] {
            for rank in 0..6 {
                let a = build(algo, rank, 6, &[0; 6]).unwrap();
                let b = build(algo, rank, 6, &[0, 1, 2, 0, 1, 2]).unwrap();
                assert_eq!(a, b, "{algo} rank {rank}");
            }
        }
    }

    #[test]
    fn rounds_fit_an_epoch() {
        let hosts: Vec<usize> = (0..64).collect();
        for algo in flag_algos() {
            for rank in 0..64 {
                let plan = build(algo, rank, 64, &hosts).unwrap();
                for s in &plan.steps {
                    assert!(u64::from(s.round().unwrap_or(0)) < ROUNDS_PER_EPOCH);
                }
            }
        }
    }
}
