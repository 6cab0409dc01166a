//! The CUDA backend (`streamcomm::cuda`). The map of all test binaries is
//! in `threads/main.rs`.

#![cfg(feature = "cuda")]

#[path = "../common/mod.rs"]
mod common;
#[path = "../harness/mod.rs"]
mod harness;

mod backend;
mod failures;
mod grouped;
mod nccl;
mod split;
mod traffic;
