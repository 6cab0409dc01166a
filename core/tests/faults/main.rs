//! Ranks that fail on purpose: injected faults (with the `fault-injection`
//! feature) and peers killed mid-collective. The map of all test binaries
//! is in `threads/main.rs`.

mod expect;
mod injected;
mod p2p;
mod peer_death;
