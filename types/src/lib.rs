//! streamcomm's vocabulary: the one error type ([`Error`]), what a
//! collective is ([`Collective`]) and the algorithms that can run it
//! ([`Algorithm`], [`BarrierAlgo`]), beside the element types and reduction
//! operators of `streamcomm-kernels` ([`DataType`], [`ReduceOp`]).
//!
//! A leaf crate of values with no behaviour beyond naming, parsing and
//! printing themselves, so that the library's plans (the internal crate
//! `streamcomm-algo`) and its runtime (`streamcomm`) speak one language
//! without one depending on the other. Programs use these types through
//! `streamcomm`, which re-exports each of them where the user looks for it
//! (`streamcomm::Error`, `streamcomm_types::BarrierAlgo`).
//!
//! # Examples
//! ```
//! use streamcomm_types::{Algorithm, Collective};
//!
//! assert!(Algorithm::Ring.supports(Collective::AllReduce));
//! assert_eq!(Collective::Broadcast { root: 0 }.name(), "broadcast");
//! ```
#![deny(unreachable_pub)]

mod algorithm;
mod barrier_algo;
mod collective;
mod error;

pub use algorithm::Algorithm;
pub use barrier_algo::{BarrierAlgo, Inter};
pub use collective::Collective;
pub use error::{CallDesc, Error, Mismatch, MismatchNote, Result};
pub use streamcomm_kernels::{DataType, ReduceOp};
