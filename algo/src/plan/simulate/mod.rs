//! The plan simulator: runs every rank's plan in one thread and checks it,
//! interpreting each step with the interpreter the real backends use.
//!
//! Algorithms are where communication libraries hide their subtlest bugs: a
//! block sent to the wrong peer, an element reduced twice, a schedule that
//! deadlocks only when a connection has one free slot, a barrier rank that
//! leaves early or confuses two epochs. The simulator reports each failure
//! with the ranks and steps involved, so a failing algorithm is diagnosed,
//! not just detected. One file per job:
//!
//! - `messages.rs`: plans of data steps (collectives and the message
//!   barrier) over modelled slot rings, with `plan::Interpreter`:
//!   deadlocks on full rings, undelivered slots, wrong outputs.
//!
//! The flag simulator (plans of flag steps: barriers over flag memory, for
//! many consecutive epochs, with `barrier::apply`) lives with the barriers,
//! in `barrier::simulate`, whose [`Schedule`]s (round-robin, random,
//! laggard) this one runs under too.

mod messages;

pub use crate::barrier::simulate::Schedule;
use crate::barrier::simulate::schedule::list;
pub use messages::{
    Leftover, MessageSimConfig, MessageSimError, StuckMessageRank, simulate, simulate_with,
};

#[cfg(test)]
mod messages_tests;
