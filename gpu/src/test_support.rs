//! Checks shared by this crate's unit tests.

use crate::error::Error;

/// Asserts that `err` is [`Error::Unavailable`] and that its message says
/// each of `needles`.
#[track_caller]
pub(crate) fn assert_unavailable_saying(err: &Error, needles: &[&str]) {
    let msg = err.to_string();
    assert!(err.is_unavailable(), "{msg}");
    for needle in needles {
        assert!(msg.contains(needle), "{needle:?} not in {msg}");
    }
}
