//! Reduction arithmetic for streamcomm.
//!
//! Every layer above needs the same element-wise arithmetic: the host backend
//! reduces slots into buffers, the plan simulator checks algorithms, and the
//! CUDA backend (later) compiles the same operations with NVRTC. This crate
//! holds the [`DataType`] / [`ReduceOp`] vocabulary and CPU loops for every pair.

mod types;

pub use types::{DataType, ReduceOp};
