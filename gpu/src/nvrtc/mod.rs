//! NVRTC, loaded by this crate rather than through cudarc.
//!
//! cudarc with `cuda-12000` looks for `libnvrtc.so.12` but not `.13`, and
//! knows nothing of which NVRTC a driver can load the images of.
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
