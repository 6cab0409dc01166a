//! streamcomm's algorithms as pure per-rank plans, and the simulators that
//! prove them: an internal crate (`publish = false`), nothing of it part of
//! streamcomm's public API.
//!
//! - [`plan`]: collectives as lists of data steps (ring, trees, halving and
//!   doubling, binomial, pairwise, Bruck), their signatures (what ranks
//!   compare to catch mismatched calls), the message barrier, and the
//!   simulator of data steps;
//! - [`barrier`]: barriers as plans of flag steps, their memory model and
//!   interpreter, every barrier algorithm, and the flag simulator.
//!
//! It knows nothing of memory, transports, streams or threads: a plan is
//! data that the runtime (`streamcomm`) executes and the simulators run
//! under adversarial schedules, and the compiler keeps it that way (this
//! crate depends on the vocabulary, `streamcomm-types`, and the reduction
//! kernels alone). `docs/design/architecture.md` draws where it sits.
//!
//! # Examples
//! ```
//! use streamcomm_algo::plan::{PlanParams, build};
//! use streamcomm_types::{Collective, DataType, ReduceOp};
//!
//! let params = PlanParams { rank: 0, nranks: 4, slot_bytes: 1 << 16, nsteps: 1 };
//! let plan = build(Collective::AllReduce, DataType::F32, ReduceOp::Sum, 1024, &params)?;
//! assert_eq!(plan.recv_count, 1024);
//! # Ok::<(), streamcomm_types::Error>(())
//! ```
#![deny(unreachable_pub)]

pub mod barrier;
mod check;
pub mod plan;

// The vocabulary, named as `crate::Error` and so on inside this crate.
use streamcomm_types::Error;
