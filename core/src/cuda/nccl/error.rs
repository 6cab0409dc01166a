//! [`NcclError`]: NCCL's code, in `cudarc::nccl`'s shape, with
//! streamcomm's full reason kept beside it ([`last_error`]).

use std::cell::RefCell;

use super::sys::ncclResult_t;
use crate::Error;

/// The error of every call: NCCL's code, as `cudarc::nccl`'s
/// `NcclError(ncclResult_t)`, so code that matches on the code compiles.
///
/// What went wrong in full (the culprit rank, what timed out) is
/// streamcomm's [`Error`], kept for this thread: [`last_error`] returns
/// it, and this error's `Display` appends its text. A communicator's first
/// failure is also [`Comm::async_error`](super::Comm::async_error).
///
/// # Examples
/// ```
/// use streamcomm::cuda::nccl::{NcclError, sys::ncclResult_t};
/// let e = NcclError::from(streamcomm::Error::invalid("count 0"));
/// assert_eq!(e, NcclError(ncclResult_t::ncclInvalidArgument));
/// assert!(e.to_string().contains("count 0"));
/// assert!(streamcomm::cuda::nccl::last_error().is_some());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct NcclError(pub ncclResult_t);

thread_local! {
    /// The last streamcomm error turned into an [`NcclError`] on this thread.
    static LAST: RefCell<Option<Error>> = const { RefCell::new(None) };
}

/// The full reason of the last [`NcclError`] made on this thread, as
/// streamcomm's [`Error`] (NCCL's `ncclGetLastError`, typed).
///
/// # Examples
/// ```
/// use streamcomm::cuda::nccl::{last_error, NcclError};
/// let _ = NcclError::from(streamcomm::Error::InvalidUsage("the communicator failed".into()));
/// assert!(last_error().unwrap().to_string().contains("the communicator failed"));
/// ```
pub fn last_error() -> Option<Error> {
    LAST.with(|l| l.borrow().clone())
}

/// NCCL's code for a streamcomm error: what NCCL returns for the same
/// trouble.
pub(crate) fn code_of(e: &Error) -> ncclResult_t {
    match e {
        Error::InvalidArgument(_) => ncclResult_t::ncclInvalidArgument,
        Error::InvalidUsage(_) | Error::Mismatch(_) | Error::Aborted(_) => {
            ncclResult_t::ncclInvalidUsage
        }
        Error::Timeout { .. } => ncclResult_t::ncclTimeout,
        Error::RemoteFailed { .. } | Error::Transport { .. } => ncclResult_t::ncclRemoteError,
        Error::Cuda { .. } => ncclResult_t::ncclUnhandledCudaError,
        Error::UserTask(_) => ncclResult_t::ncclInternalError,
        Error::Unavailable(_) | Error::Bootstrap(_) | Error::Os { .. } => {
            ncclResult_t::ncclSystemError
        }
        // `Error` is non-exhaustive: a kind added later is NCCL's
        // internal error until it is given its own code here.
        _ => ncclResult_t::ncclInternalError,
    }
}

impl From<Error> for NcclError {
    /// NCCL's code for `e`; `e` itself is kept as this thread's
    /// [`last_error`].
    fn from(e: Error) -> NcclError {
        let code = code_of(&e);
        LAST.with(|l| *l.borrow_mut() = Some(e));
        NcclError(code)
    }
}

impl From<NcclError> for Error {
    /// The full error this thread's [`last_error`] kept for this code, else
    /// one that names the code: so `?` takes an `NcclError` into a
    /// [`crate::Result`] without losing the reason.
    fn from(e: NcclError) -> Error {
        match last_error() {
            Some(full) if code_of(&full) == e.0 => full,
            _ => Error::InvalidUsage(format!("NCCL error {:?}", e.0)),
        }
    }
}

impl std::fmt::Debug for NcclError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NcclError({:?})", self.0)
    }
}

impl std::fmt::Display for NcclError {
    /// The code's name, then the reason of this thread's [`last_error`]
    /// where that error has this code.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.0)?;
        LAST.with(|l| match &*l.borrow() {
            Some(e) if code_of(e) == self.0 => write!(f, ": {e}"),
            _ => Ok(()),
        })
    }
}

impl std::error::Error for NcclError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_has_the_code_nccl_would_return() {
        let cases = [
            (Error::invalid("x"), ncclResult_t::ncclInvalidArgument),
            (
                Error::InvalidUsage("x".into()),
                ncclResult_t::ncclInvalidUsage,
            ),
            (Error::Aborted("x".into()), ncclResult_t::ncclInvalidUsage),
            (
                Error::Unavailable("x".into()),
                ncclResult_t::ncclSystemError,
            ),
            (Error::Bootstrap("x".into()), ncclResult_t::ncclSystemError),
            (Error::UserTask("x".into()), ncclResult_t::ncclInternalError),
            (
                Error::Timeout {
                    op: "all_reduce #3".into(),
                    what: "rank 2".into(),
                    waited_ms: 10,
                },
                ncclResult_t::ncclTimeout,
            ),
            (
                Error::RemoteFailed {
                    peer: 2,
                    op: "all_reduce".into(),
                    cause: "exited".into(),
                },
                ncclResult_t::ncclRemoteError,
            ),
        ];
        for (e, code) in cases {
            let text = e.to_string();
            let n = NcclError::from(e);
            assert_eq!(n, NcclError(code), "{text}");
            assert_eq!(last_error().map(|e| e.to_string()), Some(text.clone()));
            assert_eq!(n.to_string(), format!("{code:?}: {text}"));
        }
        // A code whose last error is another's shows the code alone.
        assert_eq!(
            NcclError(ncclResult_t::ncclInternalError).to_string(),
            "ncclInternalError"
        );
        // Back to streamcomm's error: the kept one where the codes agree.
        let back = Error::from(NcclError(ncclResult_t::ncclRemoteError));
        assert!(
            matches!(back, Error::RemoteFailed { peer: 2, .. }),
            "{back}"
        );
        let other = Error::from(NcclError(ncclResult_t::ncclInternalError));
        assert!(other.to_string().contains("ncclInternalError"), "{other}");
    }
}
