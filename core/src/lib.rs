//! streamcomm: stream-ordered collectives, point-to-point and barriers.

pub mod barrier;
pub mod bootstrap;
pub mod comm;
pub mod config;
pub mod error;
pub mod host;
pub mod launch;
pub mod plan;
pub mod transport;
pub mod wait;

pub use comm::{Backend, Communicator};
pub use config::Config;
pub use error::{Error, Result};
pub use streamcomm_kernels::{DataType, ReduceOp};
