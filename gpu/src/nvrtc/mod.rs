//! NVRTC, loaded by this crate rather than through cudarc.
//!
//! cudarc 0.17 with `cuda-12000` looks for `libnvrtc.so.12` but not `.13`, and
//! binds every NVRTC symbol of CUDA 12.0 eagerly (some were removed in CUDA 13).
//! [`sys`] loads the library from a chosen list of names and binds only the
//! functions used; [`choice`] picks, among those names, an NVRTC whose images
//! the driver can load (not newer than the driver's CUDA major); [`compile`]
//! is the safe layer over it.

pub mod choice;
pub mod compile;
pub mod sys;

pub use choice::Usable;
pub use compile::{Arch, Compiled, compile_cubin};
pub use sys::{Nvrtc, nvrtc_lib_candidates};
