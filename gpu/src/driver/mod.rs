//! The driver API in two layers: [`probe`] (is libcuda usable at all?) and
//! `result` (`CUresult` → [`crate::Error`], crate-internal). The raw bindings are cudarc's
//! `cudarc::driver::sys`, which this crate never calls before [`probe::driver`]
//! has succeeded.

pub mod probe;
pub(crate) mod result;
pub(crate) mod stable;
pub(crate) mod vmm_sys;

pub use cudarc::driver::sys;
