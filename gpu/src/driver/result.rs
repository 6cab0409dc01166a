//! `CUresult` to [`Error`], the result layer over cudarc's raw bindings.

use crate::error::{Error, Result};

use super::sys::{cudaError_enum, CUresult};

/// `Ok` for `CUDA_SUCCESS`, else [`Error::Driver`] naming `call`.
pub(crate) fn check(call: &'static str, r: CUresult) -> Result<()> {
    if r == cudaError_enum::CUDA_SUCCESS {
        return Ok(());
    }
    Err(Error::Driver {
        call,
        code: r as u32,
        name: format!("{r:?}"),
    })
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
                name: "CUDA_ERROR_OUT_OF_MEMORY".into()
            }
        );
    }
}
