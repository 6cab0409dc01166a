//! Bootstrap: how the ranks of a communicator find each other.
//!
//! Transports cannot connect before ranks know each other's endpoints, so a
//! communicator starts like NCCL's: one process creates a [`UniqueId`] (the
//! address of a *bootstrap root* plus a random secret) and hands it to every
//! rank by any means (an environment variable, MPI, a file). Each rank then
//! calls [`Bootstrap::connect`] with its rank and the size; once all have
//! joined, the root tells each rank where its all-gather peers listen, and
//! [`Bootstrap::all_gather`] rounds run among the ranks themselves (Bruck's
//! algorithm: `ceil(log2 n)` frames a rank, none through the root), needing
//! nothing but IP connectivity, which is all one can assume before the
//! transports exist. The root stays to make each round all or nothing: a
//! rank that has its records tells the root, and the root releases every
//! rank once all have (or tells every rank which rank failed).
//!
//! The root is a thread of the process that created the id (`RootServer`).
//! It serves exactly one communicator: the first `size` ranks that present the
//! secret. Connections without the secret, with malformed or oversized
//! frames, or that stay silent, are dropped and logged (`tracing::warn!`)
//! without disturbing the real ranks: a stray or hostile connection costs
//! the job nothing. The secret never appears in
//! logs or in `Debug` output; it does appear in the id's text and byte forms,
//! which are meant to be handed to the ranks.
//!
//! Lifetime: a root whose ranks never all join exits after
//! `RootOptions::timeout` (10 minutes by default); once they have joined, it
//! exits when they have all dropped their [`Bootstrap`].

pub(crate) mod client;
mod gather;
mod id;
mod local;
mod rendezvous;
pub(crate) mod root;
mod watch;
pub(crate) mod wire;

pub(crate) use client::Bootstrap;
pub use id::UniqueId;
pub use wire::MAX_RANKS;

pub(crate) use id::parse_secret;
