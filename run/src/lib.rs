//! `streamcomm-run`: starts and supervises the ranks of a job on one host,
//! alone or as one node of a multi-node job, torchrun-style.
//!
//! The binary is a thin `main` over this library, which benchmarks and
//! tests use to start ranks the same way:
//!
//! - [`cli`]: the command line (`-n N [--keep-going] [node options] [--]
//!   PROGRAM ARGS...`), parsed with clap and checked, with the messages the
//!   binary prints;
//! - [`local`]: [`LocalLauncher`](local::LocalLauncher) starts one host's
//!   ranks as one unit, hosting the bootstrap root itself;
//! - [`nodes`]: for jobs across hosts, one `streamcomm-run` runs per node and
//!   [`NodeJob`](nodes::NodeJob) works out each node's share: its ranks, the
//!   root (served by node 0's launcher) and the secret;
//! - [`substitute`]: `--cuda-stand-in`, ranks on the CPU stand-in for the
//!   CUDA driver instead of a GPU, and `--nccl`, ranks on streamcomm's
//!   `libnccl.so.2` instead of NVIDIA's NCCL.
//!
//! A rank learns who it is from the variables the launcher sets, through
//! `streamcomm::Communicator::from_env` (which reads them with
//! [`streamcomm::launch`]), whichever launcher started it.
//!
//! # Examples
//!
//! ```no_run
//! use streamcomm_run::local::{LocalLauncher, Outcome};
//!
//! // What `streamcomm-run -n 4 -- ./train --epochs 3` does.
//! let outcome = LocalLauncher::new(4, "./train").args(["--epochs", "3"]).run()?;
//! assert_eq!(outcome, Outcome::Success);
//! # Ok::<(), streamcomm::Error>(())
//! ```
#![deny(unreachable_pub)]

pub mod cli;
pub mod local;
pub mod nodes;
pub mod substitute;
