//! Every entry point's body runs under [`guard`]: a panic is caught, an
//! error becomes NCCL's code, and its text is kept for this thread's
//! `ncclGetLastError` and, with `NCCL_DEBUG=WARN` (or `INFO`, `TRACE`),
//! printed on stderr in NCCL's style (`host:pid:tid NCCL WARN ...`).

use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

use streamcomm::Error;
use streamcomm::cuda::nccl::NcclError;

use crate::api::ncclResult_t;

thread_local! {
    /// This thread's last failure, NUL-terminated.
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// Runs `body` as the entry point `name`: its code, or the code of its
/// error (or `ncclInternalError` for a panic) with the text kept.
pub(crate) fn guard(
    name: &str,
    body: impl FnOnce() -> Result<ncclResult_t, Error>,
) -> ncclResult_t {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(code)) => code,
        Ok(Err(e)) => fail(name, e),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            keep(&format!("{name}: internal error: {what}"));
            ncclResult_t::ncclInternalError
        }
    }
}

/// NCCL's code for `e`, with `name: e` kept as this thread's last error.
pub(crate) fn fail(name: &str, e: Error) -> ncclResult_t {
    let text = format!("{name}: {e}");
    let code = NcclError::from(e).0;
    keep(&text);
    code
}

fn keep(text: &str) {
    say(Level::Warn, text);
    let c = CString::new(text.replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = c);
}

/// This thread's last failure text (`""` before any); valid until this
/// thread's next failure.
pub(crate) fn last_error() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

/// NCCL_DEBUG's levels that print.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
    /// Failures.
    Warn,
    /// Communicators made and destroyed.
    Info,
}

/// The level `NCCL_DEBUG` asks for (`None`: silent, NCCL's default).
fn level() -> Option<Level> {
    static LEVEL: OnceLock<Option<Level>> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        match std::env::var("NCCL_DEBUG")
            .unwrap_or_default()
            .to_ascii_uppercase()
            .as_str()
        {
            "WARN" => Some(Level::Warn),
            "INFO" | "TRACE" => Some(Level::Info),
            _ => None,
        }
    })
}

/// Prints `text` at `at` if `NCCL_DEBUG` asks for it.
pub(crate) fn say(at: Level, text: &str) {
    if level().is_some_and(|l| l >= at) {
        let mut host = [0u8; 256];
        // SAFETY: the buffer and its length are passed together.
        let _ = unsafe { libc::gethostname(host.as_mut_ptr().cast(), host.len()) };
        let host = String::from_utf8_lossy(&host[..host.iter().position(|&b| b == 0).unwrap_or(0)])
            .into_owned();
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        let kind = if at == Level::Warn { "WARN" } else { "INFO" };
        eprintln!(
            "{host}:{}:{tid} NCCL {kind} streamcomm: {text}",
            std::process::id()
        );
    }
}

/// NCCL's description of each code (`ncclGetErrorString`).
pub(crate) fn describe(code: u32) -> *const c_char {
    let text: &'static std::ffi::CStr = match code {
        0 => c"no error",
        1 => c"unhandled CUDA error (ncclGetLastError says which call)",
        2 => c"system error (ncclGetLastError says which)",
        3 => c"internal error (ncclGetLastError says what happened)",
        4 => c"invalid argument (ncclGetLastError says which)",
        5 => c"invalid usage (ncclGetLastError says why)",
        6 => c"remote process failed, exited or could not be reached",
        7 => c"operation in progress",
        8 => c"operation timed out (ncclGetLastError says what it waited for)",
        _ => c"unknown result code",
    };
    text.as_ptr()
}
