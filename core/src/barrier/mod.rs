//! Barriers, in one place for the runtime: which algorithm a
//! communicator's barriers run ([`BarrierAlgo`],
//! `STREAMCOMM_BARRIER_ALGO`), where their flags live, and running them.
//! The algorithms, as pure plans of flag steps with their interpreter and
//! simulator, are the internal crate `streamcomm-algo`'s (`barrier`); this
//! module re-exports what the runtime uses of it, so the rest of the
//! library names one barrier module.
//!
//! Inside (not public):
//! - `area.rs`: the flag memory of a communicator, each rank's barrier area
//!   in its shared-memory segment, mapped or written over verbs;
//! - `state.rs`: the default algorithm, where a plan fits (decided once),
//!   the epochs, and running one barrier (`FlagBarriers`);
//! - `multicast/`: the barrier that runs no flag plan: one datagram per
//!   rank to a multicast group, with loss recovery, over a
//!   `multicast::Datagrams` (the verbs UD queue pair is one).
//!
//! The communicator's entry points (`Communicator::barrier`, `barrier_host`,
//! `set_barrier_algo`, in `comm/barrier/`) pick flags or messages and call
//! in here. This module needs nothing above `wait`: `config` and
//! `transport` build on it.

pub(crate) mod area;
pub(crate) mod multicast;
mod state;

pub use streamcomm_types::{BarrierAlgo, Inter};

pub(crate) use state::{FlagBarriers, default_algo};
pub(crate) use streamcomm_algo::barrier::{
    BarrierMemory, BarrierPlan, FlagStep, WaitFor, build, build_for_network, exec,
};
