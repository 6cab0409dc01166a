//! Driver result codes: the ones the stand-in returns, by name, and the
//! `cuGetErrorName` / `cuGetErrorString` entry points for every code of
//! `cuda.h`.

use std::ffi::{CStr, c_char};

use crate::error_table::ERRORS;
use crate::guard::entry;

/// A `CUresult` as the C ABI carries it.
pub(crate) type CUresult = u32;

/// Internal result: `Err` holds the driver code to return.
pub(crate) type Res<T> = Result<T, CUresult>;

/// `CUDA_SUCCESS` (0).
pub(crate) const SUCCESS: CUresult = 0;
/// `CUDA_ERROR_INVALID_VALUE` (1).
pub(crate) const INVALID_VALUE: CUresult = 1;
/// `CUDA_ERROR_OUT_OF_MEMORY` (2).
pub(crate) const OUT_OF_MEMORY: CUresult = 2;
/// `CUDA_ERROR_NOT_INITIALIZED` (3).
pub(crate) const NOT_INITIALIZED: CUresult = 3;
/// `CUDA_ERROR_DEVICE_UNAVAILABLE` (46): compute mode PROHIBITED, or
/// EXCLUSIVE_PROCESS with the device held by another process.
pub(crate) const DEVICE_UNAVAILABLE: CUresult = 46;
/// `CUDA_ERROR_INVALID_DEVICE` (101).
pub(crate) const INVALID_DEVICE: CUresult = 101;
/// `CUDA_ERROR_INVALID_IMAGE` (200).
pub(crate) const INVALID_IMAGE: CUresult = 200;
/// `CUDA_ERROR_INVALID_CONTEXT` (201).
pub(crate) const INVALID_CONTEXT: CUresult = 201;
/// `CUDA_ERROR_NO_BINARY_FOR_GPU` (209).
pub(crate) const NO_BINARY_FOR_GPU: CUresult = 209;
/// `CUDA_ERROR_INVALID_PTX` (218).
pub(crate) const INVALID_PTX: CUresult = 218;
/// `CUDA_ERROR_UNSUPPORTED_PTX_VERSION` (222).
pub(crate) const UNSUPPORTED_PTX_VERSION: CUresult = 222;
/// `CUDA_ERROR_OPERATING_SYSTEM` (304): an OS call failed (a descriptor
/// could not be duplicated for a VMM export, for one).
pub(crate) const OPERATING_SYSTEM: CUresult = 304;
/// `CUDA_ERROR_INVALID_HANDLE` (400).
pub(crate) const INVALID_HANDLE: CUresult = 400;
/// `CUDA_ERROR_ILLEGAL_STATE` (401).
pub(crate) const ILLEGAL_STATE: CUresult = 401;
/// `CUDA_ERROR_NOT_FOUND` (500).
pub(crate) const NOT_FOUND: CUresult = 500;
/// `CUDA_ERROR_NOT_READY` (600).
pub(crate) const NOT_READY: CUresult = 600;
/// `CUDA_ERROR_ILLEGAL_ADDRESS` (700).
pub(crate) const ILLEGAL_ADDRESS: CUresult = 700;
/// `CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES` (701).
pub(crate) const LAUNCH_OUT_OF_RESOURCES: CUresult = 701;
/// `CUDA_ERROR_LAUNCH_FAILED` (719).
pub(crate) const LAUNCH_FAILED: CUresult = 719;
/// `CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED` (712).
pub(crate) const HOST_MEMORY_ALREADY_REGISTERED: CUresult = 712;
/// `CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED` (713).
pub(crate) const HOST_MEMORY_NOT_REGISTERED: CUresult = 713;
/// `CUDA_ERROR_NOT_PERMITTED` (800).
pub(crate) const NOT_PERMITTED: CUresult = 800;
/// `CUDA_ERROR_NOT_SUPPORTED` (801).
pub(crate) const NOT_SUPPORTED: CUresult = 801;
/// `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` (900).
pub(crate) const CAPTURE_UNSUPPORTED: CUresult = 900;
/// `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED` (901).
pub(crate) const CAPTURE_INVALIDATED: CUresult = 901;
/// `CUDA_ERROR_STREAM_CAPTURE_MERGE` (902).
pub(crate) const CAPTURE_MERGE: CUresult = 902;
/// `CUDA_ERROR_STREAM_CAPTURE_UNMATCHED` (903).
pub(crate) const CAPTURE_UNMATCHED: CUresult = 903;
/// `CUDA_ERROR_STREAM_CAPTURE_UNJOINED` (904).
pub(crate) const CAPTURE_UNJOINED: CUresult = 904;
/// `CUDA_ERROR_STREAM_CAPTURE_ISOLATION` (905).
pub(crate) const CAPTURE_ISOLATION: CUresult = 905;
/// `CUDA_ERROR_STREAM_CAPTURE_IMPLICIT` (906).
pub(crate) const CAPTURE_IMPLICIT: CUresult = 906;
/// `CUDA_ERROR_CAPTURED_EVENT` (907).
pub(crate) const CAPTURED_EVENT: CUresult = 907;
/// `CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD` (908).
pub(crate) const CAPTURE_WRONG_THREAD: CUresult = 908;
/// `CUDA_ERROR_UNKNOWN` (999): what a panic inside the stand-in becomes.
pub(crate) const UNKNOWN: CUresult = 999;

/// The name and description of `code`, if `cuda.h` defines it.
pub(crate) fn describe(code: CUresult) -> Option<(&'static CStr, &'static CStr)> {
    ERRORS
        .iter()
        .find(|(c, _, _)| *c == code)
        .map(|(_, name, text)| (*name, *text))
}

/// Defines the entry points that describe an error code, each with what it
/// picks of the code's name and description.
macro_rules! error_text_entry_points {
    ($($(#[doc = $doc:literal])* $name:ident => $pick:expr;)*) => {$(
        $(#[doc = $doc])*
        ///
        /// # Safety
        /// `p_str` must be a valid out-pointer.
        #[unsafe(no_mangle)]
        pub(crate) unsafe extern "C" fn $name(
            error: CUresult,
            p_str: *mut *const c_char,
        ) -> CUresult {
            error_text(stringify!($name), error, p_str, $pick)
        }
    )*};
}

error_text_entry_points! {
    /// `cuGetErrorName`: the enum name of `error` (e.g. `CUDA_ERROR_INVALID_VALUE`).
    cuGetErrorName => |(name, _)| name;
    /// `cuGetErrorString`: the description of `error`.
    cuGetErrorString => |(_, text)| text;
}

/// Entry point `name`: writes what `pick` takes of `error`'s name and
/// description to `p_str` (NULL and `CUDA_ERROR_INVALID_VALUE` for a code
/// `cuda.h` does not define).
fn error_text(
    name: &'static str,
    error: CUresult,
    p_str: *mut *const c_char,
    pick: fn((&'static CStr, &'static CStr)) -> &'static CStr,
) -> CUresult {
    entry(name, || {
        if p_str.is_null() {
            return Err(INVALID_VALUE);
        }
        let text = describe(error).map(pick);
        // SAFETY: checked non-null; the caller provides a valid out-pointer.
        unsafe { *p_str = text.map_or(std::ptr::null(), CStr::as_ptr) };
        text.map(|_| ()).ok_or(INVALID_VALUE)
    })
}
