//! The second guard around foreign calls: a panic inside cudarc (it panics when
//! a library or symbol is missing) becomes [`Error::Unavailable`].

use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::error::{Error, Result};

/// Runs `f`, turning a panic into [`Error::Unavailable`] naming `what`.
pub(crate) fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("panic without a message");
            Err(Error::Unavailable(format!("{what}: {msg}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_unavailable() {
        let err = guarded::<()>("probe", || panic!("no libcuda")).unwrap_err();
        assert_eq!(err, Error::Unavailable("probe: no libcuda".into()));
        assert_eq!(guarded("ok", || Ok(7)).unwrap(), 7);
    }
}
