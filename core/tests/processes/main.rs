//! Ranks as real processes: copies of this test binary, started the way
//! `streamcomm-run` starts them (or by `streamcomm-run` itself, for
//! multi-node jobs), over real shared memory. The launcher's own end-to-end
//! tests are in its crate (`run/tests/`). The map of all test binaries is in
//! `threads/main.rs`.

#[path = "../common/mod.rs"]
mod common;
#[path = "../harness/mod.rs"]
mod harness;
#[path = "../netns/mod.rs"]
mod netns;

mod algos;
mod barrier;
mod bootstrap_kill;
mod collectives;
mod first_contact;
mod footprint;
mod groups;
mod launch_env;
mod launcher_nodes;
mod many_ranks;
mod mismatch;
mod shm_space;
mod shrink;
mod stale_segments;
mod unknown_vars;
