//! `CUresult` to [`Error`], the result layer over cudarc's raw bindings.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::error::{Error, Result};

use super::sys::{CUresult, cudaError_enum};

/// `Ok` for `CUDA_SUCCESS`, else [`Error::Driver`] naming `call`.
pub(crate) fn check(call: &'static str, r: CUresult) -> Result<()> {
    if r == cudaError_enum::CUDA_SUCCESS {
        return Ok(());
    }
    Err(Error::Driver {
        call,
        code: r as u32,
        name: name_of(r),
    })
}

/// The driver's name of `r` (`CUDA_ERROR_...`), as a `&'static str` that a
/// caller can match on. Each name is made once per code and kept for the
/// life of the process: at most one per `CUresult` value (about a hundred).
pub(crate) fn name_of(r: CUresult) -> &'static str {
    static NAMES: Mutex<BTreeMap<u32, &'static str>> = Mutex::new(BTreeMap::new());
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    names
        .entry(r as u32)
        .or_insert_with(|| Box::leak(format!("{r:?}").into_boxed_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn success_is_ok_and_failures_name_the_call() {
        assert!(check("cuInit", cudaError_enum::CUDA_SUCCESS).is_ok());
        let err = check("cuMemAlloc_v2", cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY).unwrap_err();
        assert_eq!(
            err,
            Error::Driver {
                call: "cuMemAlloc_v2",
                code: 2,
                name: "CUDA_ERROR_OUT_OF_MEMORY"
            }
        );
        // One name per code, made once.
        let again = check("cuMemAlloc_v2", cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY).unwrap_err();
        match (err, again) {
            (Error::Driver { name: a, .. }, Error::Driver { name: b, .. }) => {
                assert!(std::ptr::eq(a, b), "{a} and {b} are one string")
            }
            other => panic!("{other:?}"),
        }
    }
}
