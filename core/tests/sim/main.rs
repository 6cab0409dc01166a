//! The plans of N ranks run by the single-threaded simulators: every
//! algorithm of every collective for every size from 1 to 64, and every
//! barrier algorithm with laggards, against an f64 reference. No threads, no
//! I/O. The map of all of `streamcomm`'s test binaries is in
//! `threads/main.rs`.

#[path = "../common/mod.rs"]
mod common;

mod barrier;
mod case;
mod plan_algos;
mod plans;
