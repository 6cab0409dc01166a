//! Errors of the benchmark: messages with the context they happened in.
//!
//! The benchmark only reports errors, it never handles them, so a message
//! naming what was being done ("all_reduce of 64 bytes: timed iterations:
//! timed out after ...") is all it needs; the library's own error is kept
//! whole at the end of the message.

use std::fmt::Display;

/// A result whose error is a message for the user.
pub(crate) type Fallible<T> = Result<T, String>;

/// Adds what was being done to an error.
pub(crate) trait Context<T> {
    /// Prefixes the error with `what`.
    ///
    /// # Errors
    /// The original error, prefixed.
    fn context(self, what: &str) -> Fallible<T>;

    /// Prefixes the error with the message `what()` builds (only on error).
    ///
    /// # Errors
    /// The original error, prefixed.
    fn with_context(self, what: impl FnOnce() -> String) -> Fallible<T>;
}

impl<T, E: Display> Context<T> for Result<T, E> {
    fn context(self, what: &str) -> Fallible<T> {
        self.map_err(|e| format!("{what}: {e}"))
    }

    fn with_context(self, what: impl FnOnce() -> String) -> Fallible<T> {
        self.map_err(|e| format!("{}: {e}", what()))
    }
}
