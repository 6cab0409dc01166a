//! Barriers as plans of flag steps: the language they are written in, its
//! memory model and interpreter, every algorithm of
//! `docs/design/barriers.md`, and the simulator that proves them.
//!
//! Bottom to top:
//! - `step.rs`: [`FlagStep`], the language barriers are written in (a type
//!   apart from the data steps of other collectives), and the epoch values
//!   its words carry;
//! - `memory.rs`: the memory model flag steps run on ([`BarrierMemory`]);
//! - `exec.rs`: their one interpreter and the executor ([`exec::run`]), which
//!   the flag simulator (`simulate/`) also calls;
//! - `algo/`: every algorithm, named by [`BarrierAlgo`]; `build.rs` makes
//!   one rank's [`BarrierPlan`] (`plan.rs`) of one;
//! - `simulate/`: the flag simulator, which runs every rank's plan over one
//!   simulated memory under adversarial schedules.
//!
//! Communicators with tcp peers have no shared flag memory: they run the
//! dissemination barrier's flag steps as data messages (the message
//! barrier, `plan/barrier.rs`), so that algorithm is written once, in
//! `algo/dissemination.rs`. Where the flags live at run time (each rank's
//! segment, or a verbs peer's) and the multicast barrier are the runtime's
//! (`streamcomm`'s `barrier` module).

mod algo;
pub mod build;
pub mod exec;
pub mod memory;
pub mod plan;
pub mod simulate;
pub mod step;

pub use algo::dissemination;
#[cfg(test)]
pub use algo::flag_algos;
pub use build::{build, build_for_network};
pub use exec::{Epoch, apply, run, wait_for};
pub use memory::{BarrierMemory, WaitFor, Word};
pub use plan::BarrierPlan;
pub use simulate::{FlagSimConfig, FlagSimError, Schedule, simulate};
pub use step::{FlagStep, MAX_EPOCH, ROUNDS_PER_EPOCH, signal_value};
pub use streamcomm_types::{BarrierAlgo, Inter};

#[cfg(test)]
mod tests {
    use super::*;
    use streamcomm_types::Error;

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
