//! The one guard every entry point runs in.
//!
//! A panic must never unwind into C (that is undefined behaviour), and C
//! callers need a code plus a message instead of a `Result`. [`guard`] runs
//! an entry point's body under `catch_unwind`, turns its `Err` (or a caught
//! panic) into a result code, and keeps the message in a thread-local for
//! `streamcomm_last_error()`, as `errno`/`dlerror` do. Success leaves the
//! last message alone, so it always describes this thread's last failure.

use std::cell::{Cell, RefCell};
use std::ffi::{CString, c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::result::{Failure, FfiResult, INTERNAL_ERROR, SUCCESS};

thread_local! {
    /// This thread's last failure message, NUL-terminated.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
    /// True while this thread runs a stream callback for a C caller.
    static IN_CALLBACK: Cell<bool> = const { Cell::new(false) };
}

/// Runs `body` as entry point `name`: `SUCCESS`, or the failure's code with
/// its message (prefixed with `name`) kept for `streamcomm_last_error()`.
pub(crate) fn guard(name: &str, body: impl FnOnce() -> FfiResult) -> c_int {
    let failure = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => return SUCCESS,
        Ok(Err(f)) => f,
        Err(panic) => Failure::new(
            INTERNAL_ERROR,
            format!("internal error (panic): {}", panic_text(&*panic)),
        ),
    };
    set_last_error(&format!("{name}: {}", failure.message));
    failure.code
}

/// Stores `message` as this thread's last error (interior NULs become spaces).
pub(crate) fn set_last_error(message: &str) {
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    // A thread being torn down has no storage left: nothing to keep then.
    let _ = LAST_ERROR.try_with(|slot| *slot.borrow_mut() = text);
}

/// This thread's last error message; valid until this thread's next failing
/// streamcomm call. Never null (an empty string when nothing failed yet).
pub(crate) fn last_error_ptr() -> *const c_char {
    LAST_ERROR
        .try_with(|slot| slot.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s
    } else {
        "no message"
    }
}

/// Runs `f` marked as a stream callback on this thread (blocking calls on
/// streams are refused inside it: they could wait for the callback itself).
pub(crate) fn as_callback<R>(f: impl FnOnce() -> R) -> R {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            let _ = IN_CALLBACK.try_with(|c| c.set(false));
        }
    }
    IN_CALLBACK.with(|c| c.set(true));
    let _reset = Reset;
    f()
}

/// Refuses a blocking call (`what`) from inside a stream callback.
pub(crate) fn refuse_in_callback(what: &str) -> FfiResult {
    if IN_CALLBACK.with(|c| c.get()) {
        return Err(Failure::usage(format!(
            "{what} may not be called from a stream callback (it could wait for the callback itself)"
        )));
    }
    Ok(())
}
