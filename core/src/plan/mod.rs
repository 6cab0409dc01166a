//! Plans: pure functions from a collective call to one rank's ordered steps.
//!
//! No I/O and no threads live here, so every algorithm can be run for many
//! ranks inside one thread by the simulator and checked against a reference.

pub mod step;

pub use step::{BufId, Collective, Plan, Region, Step};
