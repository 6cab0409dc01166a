//! The one guard every exported entry point runs inside: no panic crosses the
//! C ABI (it becomes `CUDA_ERROR_UNKNOWN` and a line on stderr), calls from a
//! host function or user-object destructor are refused with
//! `CUDA_ERROR_NOT_PERMITTED` (with `STREAMCOMM_STANDIN_STRICT=1` they abort
//! the process after naming the call, so no test can miss one), and entry
//! points the stand-in does not implement, or that `STREAMCOMM_STANDIN_REFUSE`
//! refuses, say so once on stderr.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

use crate::error::{CUresult, NOT_PERMITTED, NOT_SUPPORTED, Res, SUCCESS, UNKNOWN};

thread_local! {
    /// True while this thread runs a host function or a user-object destructor.
    static IN_HOST_FN: Cell<bool> = const { Cell::new(false) };
}

/// Writes one line to stderr, ignoring failures (stderr may be closed).
pub(crate) fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "streamcomm CPU stand-in: {line}");
}

/// Says `line` once per distinct `key` for the life of the process.
pub(crate) fn say_once(key: String, line: &str) {
    static SEEN: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let first = SEEN.lock().map(|mut s| s.insert(key)).unwrap_or(true);
    if first {
        say(line);
    }
}

/// Runs the body of entry point `name`, mapping its result to a `CUresult`.
pub(crate) fn entry(name: &'static str, body: impl FnOnce() -> Res<()>) -> CUresult {
    crate::counters::call(name);
    if IN_HOST_FN.with(Cell::get) {
        if crate::config::config().strict {
            say(&format!(
                "{name} called from a host function or destructor; STREAMCOMM_STANDIN_STRICT=1: aborting"
            ));
            std::process::abort();
        }
        say_once(
            format!("hostfn:{name}"),
            &format!("{name} called from a host function or destructor: CUDA_ERROR_NOT_PERMITTED"),
        );
        return NOT_PERMITTED;
    }
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(code)) => code,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("panic without a message");
            say(&format!(
                "internal panic in {name}: {msg}; returning CUDA_ERROR_UNKNOWN"
            ));
            UNKNOWN
        }
    }
}

/// What an entry point the stand-in does not implement returns.
pub(crate) fn unsupported(name: &'static str) -> CUresult {
    say_once(
        format!("unsupported:{name}"),
        &format!("{name} is not implemented by the stand-in: CUDA_ERROR_NOT_SUPPORTED"),
    );
    NOT_SUPPORTED
}

/// What an entry point refused by `STREAMCOMM_STANDIN_REFUSE` (naming
/// `word`) returns: `CUDA_ERROR_NOT_SUPPORTED`, said once per entry point.
pub(crate) fn refused(name: &'static str, word: &str) -> CUresult {
    say_once(
        format!("refused:{name}"),
        &format!(
            "{name} refused: STREAMCOMM_STANDIN_REFUSE names {word}: CUDA_ERROR_NOT_SUPPORTED"
        ),
    );
    NOT_SUPPORTED
}

/// Runs `f` marked as a host function: CUDA calls from it are refused.
pub(crate) fn as_host_fn<T>(f: impl FnOnce() -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            IN_HOST_FN.with(|c| c.set(false));
        }
    }
    IN_HOST_FN.with(|c| c.set(true));
    let _reset = Reset;
    f()
}
