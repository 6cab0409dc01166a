//! The error type of the CUDA layer.
//!
//! Kept separate from `streamcomm::Error` (this crate does not depend on the
//! core crate); [`Error::is_unavailable`] is what a caller checks to fall back
//! to the host backend.

use std::fmt;

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the CUDA layer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// CUDA (driver or NVRTC) is not usable on this machine: library missing,
    /// too old, no device. The library falls back to the host backend.
    Unavailable(String),
    /// An argument was out of range or inconsistent (names the argument).
    InvalidArgument(String),
    /// A driver call failed.
    Driver {
        /// The driver function, e.g. `cuMemAlloc_v2`.
        call: &'static str,
        /// The `CUresult` code.
        code: u32,
        /// The driver's name for the code (`CUDA_ERROR_...`), e.g.
        /// `CUDA_ERROR_OUT_OF_MEMORY`: a `&'static str`, so that a caller
        /// can match on it.
        name: &'static str,
    },
    /// NVRTC failed to compile a kernel source.
    Compile {
        /// The source name (e.g. `reduce.cu`).
        source: String,
        /// The compile options used.
        options: String,
        /// The NVRTC log.
        log: String,
    },
    /// An NVRTC call other than compilation failed.
    Nvrtc {
        /// The NVRTC function.
        call: &'static str,
        /// The `nvrtcResult` code.
        code: i32,
    },
    /// A device-side wait (spin kernel) gave up after its timeout.
    Timeout(String),
    /// Reading or writing the kernel cache failed.
    Io(String),
}

impl Error {
    /// True for [`Error::Unavailable`]: CUDA is not usable here.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Unavailable(_))
    }

    /// Shorthand for [`Error::InvalidArgument`].
    pub fn invalid(msg: impl Into<String>) -> Error {
        Error::InvalidArgument(msg.into())
    }

    /// [`Error::Driver`] for a `CUresult` that `call` returned, e.g. the
    /// code of a cudarc `DriverError` (its field `0`).
    ///
    /// ```
    /// use streamcomm_gpu::driver::sys::cudaError_enum;
    /// use streamcomm_gpu::Error;
    ///
    /// let e = Error::driver("cuMemAlloc_v2", cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY);
    /// assert!(matches!(e, Error::Driver { code: 2, name: "CUDA_ERROR_OUT_OF_MEMORY", .. }));
    /// assert_eq!(e.to_string(), "cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (2)");
    /// ```
    pub fn driver(call: &'static str, code: crate::driver::sys::CUresult) -> Error {
        Error::Driver {
            call,
            code: code as u32,
            name: crate::driver::result::name_of(code),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Unavailable(m) => write!(f, "CUDA unavailable: {m}"),
            Error::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            Error::Driver { call, code, name } => write!(f, "{call} failed: {name} ({code})"),
            Error::Compile {
                source,
                options,
                log,
            } => write!(
                f,
                "NVRTC could not compile {source} with [{options}]:\n{log}"
            ),
            Error::Nvrtc { call, code } => write!(f, "{call} failed with nvrtcResult {code}"),
            Error::Timeout(m) => write!(f, "timed out: {m}"),
            Error::Io(m) => write!(f, "kernel cache: {m}"),
        }
    }
}

impl std::error::Error for Error {}
