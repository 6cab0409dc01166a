//! Test support shared by every streamcomm crate's tests.
//!
//! Four rules hold in every test of the workspace, and each has its one
//! implementation here:
//!
//! - **Replayable randomness** ([`seed`]): a randomized test prints the seed
//!   it drew, and `STREAMCOMM_TEST_SEED=N` replays it.
//! - **Loud skips** ([`skip`]): a test that cannot reach what it tests says
//!   `SKIPPED: <test>: <reason>`, and records it where CI collects skips.
//! - **No vacuous child passes** ([`ChildProof`], [`child_ran`]): a test that
//!   runs copies of its own binary as ranks checks that each child's body
//!   ran, so a renamed or filtered-out child fails its parent.
//! - **Repetition knobs** ([`reps`]): long loops run a count that covers
//!   every path by default and the full count with `STREAMCOMM_TEST_FULL=1`.
//!
//! It also finds the `streamcomm-run` binary for tests outside the
//! launcher's crate ([`launcher_binary`]), and reads what a built binary
//! needs from the system ([`needed_libraries`], [`link_flags_of`]), and
//! finds NVRTC for the kernel tests ([`nvrtc_library`]).
//!
//! ```
//! let seed = streamcomm_testkit::seed();
//! let rounds = streamcomm_testkit::reps(10, 1_000);
//! assert!(rounds == 10 || rounds == 1_000);
//! # let _ = seed;
//! ```
#![deny(unreachable_pub)]

mod child;
mod knobs;
mod launcher;
mod linked;
mod nvrtc;
mod process;

pub use child::{ChildProof, PROOF_DIR_VAR, child_args, child_ran, test_path};
pub use knobs::{SKIP_LOG_VAR, current_test, full, rdma_device, reps, seed, skip};
pub use launcher::launcher_binary;
pub use linked::{C_RUNTIME, is_elf, is_loader, link_flags_of, needed_libraries};
pub use nvrtc::{NVRTC_INSTALL, cuda_include_dir, nvrtc_library};
pub use process::{assert_header_compiles_strictly, output_text, run_limited, within};
