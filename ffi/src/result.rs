//! Result codes: what every entry point returns, and how library errors map to them.
//!
//! C has no `Result`, so each [`streamcomm::Error`] kind becomes one small
//! integer (`streamcomm_result_t` in the header) and its message is kept for
//! `streamcomm_last_error()`. Codes the C API adds itself (a bad handle, a
//! caught panic) come after the library's kinds. The values are part of the
//! ABI: never renumber, only append.

use std::ffi::c_int;

use streamcomm::Error;

/// The call succeeded.
pub const SUCCESS: c_int = 0;
/// An argument was null, out of range, an unknown enum value, misaligned, or
/// a buffer too small.
pub const INVALID_ARGUMENT: c_int = 1;
/// The call is not allowed in the current state (e.g. a collective inside a
/// group, `group_end` without `group_start`, a blocking call from a stream
/// callback).
pub const INVALID_USAGE: c_int = 2;
/// A needed facility is missing (e.g. a transport to a peer).
pub const UNAVAILABLE: c_int = 3;
/// A wait took longer than the configured timeout.
pub const TIMEOUT: c_int = 4;
/// The communicator or stream was aborted.
pub const ABORTED: c_int = 5;
/// A peer rank failed, disconnected or disagreed about an operation.
pub const REMOTE_FAILED: c_int = 6;
/// A transport (shared memory, tcp) failed.
pub const TRANSPORT_ERROR: c_int = 7;
/// The ranks could not meet (bootstrap).
pub const BOOTSTRAP_ERROR: c_int = 8;
/// An operating-system call failed.
pub const SYSTEM_ERROR: c_int = 9;
/// A callback enqueued on a stream returned non-zero.
pub const USER_CALLBACK_ERROR: c_int = 10;
/// A handle was null, of the wrong kind, or already destroyed.
pub const INVALID_HANDLE: c_int = 11;
/// A bug in streamcomm (a caught panic, or an error kind this build does not
/// know); the message says what happened.
pub const INTERNAL_ERROR: c_int = 12;

/// Every code with its description, in numeric order.
const DESCRIPTIONS: [(c_int, &str); 13] = [
    (SUCCESS, "success\0"),
    (INVALID_ARGUMENT, "invalid argument\0"),
    (INVALID_USAGE, "invalid usage\0"),
    (UNAVAILABLE, "unavailable\0"),
    (TIMEOUT, "timed out\0"),
    (ABORTED, "aborted\0"),
    (REMOTE_FAILED, "a remote rank failed\0"),
    (TRANSPORT_ERROR, "transport error\0"),
    (BOOTSTRAP_ERROR, "bootstrap failed\0"),
    (SYSTEM_ERROR, "system call failed\0"),
    (USER_CALLBACK_ERROR, "a stream callback failed\0"),
    (INVALID_HANDLE, "invalid handle\0"),
    (INTERNAL_ERROR, "internal error\0"),
];

/// The NUL-terminated description of `code` (`"unknown result code"` for a
/// value no build has used).
pub(crate) fn description(code: c_int) -> &'static str {
    DESCRIPTIONS
        .iter()
        .find(|(c, _)| *c == code)
        .map_or("unknown result code\0", |(_, d)| d)
}

/// A failed call: its result code and the message for `streamcomm_last_error()`.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub code: c_int,
    pub message: String,
}

impl Failure {
    /// A failure with `code`.
    pub(crate) fn new(code: c_int, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }

    /// An [`INVALID_ARGUMENT`] failure.
    pub(crate) fn invalid(message: impl Into<String>) -> Failure {
        Failure::new(INVALID_ARGUMENT, message)
    }

    /// An [`INVALID_USAGE`] failure.
    pub(crate) fn usage(message: impl Into<String>) -> Failure {
        Failure::new(INVALID_USAGE, message)
    }
}

/// The result code of a library error.
pub(crate) fn code_of(e: &Error) -> c_int {
    match e {
        Error::InvalidArgument(_) => INVALID_ARGUMENT,
        Error::InvalidUsage(_) => INVALID_USAGE,
        Error::Unavailable(_) => UNAVAILABLE,
        Error::Timeout { .. } => TIMEOUT,
        Error::Aborted(_) => ABORTED,
        Error::RemoteFailed { .. } | Error::Mismatch(_) => REMOTE_FAILED,
        Error::Transport { .. } => TRANSPORT_ERROR,
        Error::Bootstrap(_) => BOOTSTRAP_ERROR,
        Error::Os { .. } => SYSTEM_ERROR,
        Error::UserTask(_) => USER_CALLBACK_ERROR,
        // A failed CUDA driver call: the code it had before Error::Cuda
        // existed (the message names the call and the CUresult).
        Error::Cuda { .. } => UNAVAILABLE,
        _ => INTERNAL_ERROR,
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::new(code_of(&e), e.to_string())
    }
}

/// What entry points compute before the guard turns it into a code.
pub(crate) type FfiResult<T = ()> = Result<T, Failure>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_are_in_order_and_terminated() {
        for (i, (code, text)) in DESCRIPTIONS.iter().enumerate() {
            assert_eq!(*code, i as c_int);
            assert!(text.ends_with('\0') && !text[..text.len() - 1].contains('\0'));
        }
        assert_eq!(description(-1), "unknown result code\0");
        assert_eq!(description(INTERNAL_ERROR + 1), "unknown result code\0");
    }

    #[test]
    fn errors_map_to_their_kind() {
        let cases = [
            (Error::invalid("x"), INVALID_ARGUMENT),
            (Error::InvalidUsage("x".into()), INVALID_USAGE),
            (Error::Unavailable("x".into()), UNAVAILABLE),
            (Error::Aborted("x".into()), ABORTED),
            (Error::Bootstrap("x".into()), BOOTSTRAP_ERROR),
            (Error::UserTask("x".into()), USER_CALLBACK_ERROR),
        ];
        for (e, code) in cases {
            let f = Failure::from(e.clone());
            assert_eq!(f.code, code, "{e}");
            assert_eq!(f.message, e.to_string());
        }
    }
}
