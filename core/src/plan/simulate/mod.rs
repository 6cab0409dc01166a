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
//!   barrier) over modelled slot rings, with `plan::apply_step`:
//!   deadlocks on full rings, undelivered slots, wrong outputs.
//! - `flags.rs`: plans of flag steps (barriers over flag memory) for many
//!   consecutive epochs, with `barrier::apply`: early
//!   exits, deadlocks, words written backwards, under round-robin, random
//!   and laggard schedules (the laggard schedules make the check
//!   exhaustive).
//! - `flag_state.rs`: the flag simulator's ranks, with per-word waiter
//!   lists so that only the ranks a store can wake are re-examined.
//! - `flag_memory.rs`: flag memory as plain cells, with the monotonicity
//!   (regression) check.
//! - `schedule.rs`: the [`Schedule`]s both run under (round-robin, random,
//!   laggard) and the seeded generator behind them.

pub mod flags;
mod messages;

mod flag_memory;
mod flag_state;
mod schedule;

use std::fmt;

pub use messages::{
    Leftover, MessageSimConfig, MessageSimError, StuckMessageRank, simulate, simulate_with,
};
pub use schedule::Schedule;

/// `items` joined by `"; "` (the lists of the simulators' reports).
fn list<T: fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(T::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod flags_tests;
#[cfg(test)]
mod messages_tests;
