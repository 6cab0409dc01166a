//! streamcomm: stream-ordered collectives, point-to-point and barriers.

pub mod bootstrap;
pub mod error;
pub mod launch;
pub mod plan;

pub use error::{Error, Result};
pub use streamcomm_kernels::{DataType, ReduceOp};
