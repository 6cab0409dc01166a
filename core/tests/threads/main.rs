//! Ranks as threads of this test process, over the real shared-memory and
//! tcp transports and host streams.
//!
//! # The map of `streamcomm`'s integration tests
//!
//! One binary per way ranks run, a module per subject inside it. To add a
//! test, pick the binary by how its ranks run, then the module by subject:
//!
//! | binary | ranks are | modules |
//! |---|---|---|
//! | `sim` | plans run by a simulator in one thread | `plans`, `plan_algos`, `barrier` |
//! | `threads` | threads of the test process | `collectives`, `barrier`, `host_stream`, `api_errors`, `bootstrap`, `algo_selection`, `p2p`, `soak` (ignored) |
//! | `processes` | copies of the test binary, as `streamcomm-run` starts them | `collectives`, `algos`, `barrier`, `launch_env`, `launcher_nodes` (multi-node `streamcomm-run`), `stale_segments`, `footprint`, `many_ranks`, `first_contact`, `shm_space` |
//! | `transports` | threads or processes over one named transport | `tcp`, `verbs` (Soft-RoCE guest), `across_hosts` (network namespaces) |
//! | `faults` | processes or threads that fail on purpose | `injected` (`fault-injection` feature), `peer_death` |
//! | `cuda` | the CUDA backend, ranks as processes (a GPU or the stand-in) | `backend`, `failures` |
//! | `fuzz_decoders` | none: malformed input to every decoder | one module per decoder |
//!
//! Shared support: `common/` (inputs, f64 references, element checks),
//! `harness/` (running ranks as threads or processes with watchdogs),
//! `netns/` (hosts as network namespaces), and the `streamcomm-testkit`
//! crate (seeds, skips, child-process proofs, repetition knobs).

#[path = "../common/mod.rs"]
mod common;
#[path = "../harness/mod.rs"]
mod harness;

mod algo_selection;
mod api_errors;
mod barrier;
mod bootstrap;
mod collectives;
mod host_stream;
mod p2p;
mod soak;
