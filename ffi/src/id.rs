//! Unique ids for C: `streamcomm_unique_id_t` and its text form.
//!
//! The C struct is the id's fixed binary form ([`UniqueId::to_bytes`]), so a
//! program can pass it around as plain bytes (an MPI broadcast, a file)
//! exactly as NCCL programs pass `ncclUniqueId`; it is validated when used.
//! The text form (`ADDR:PORT/SECRET`) is what `STREAMCOMM_UNIQUE_ID` holds.

use std::ffi::{CStr, c_char, c_int};

use streamcomm::bootstrap::UniqueId;

use crate::args::non_null;
use crate::guard::guard;
use crate::result::{Failure, FfiResult};

/// `streamcomm_unique_id_t`: the id's binary form.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUniqueId {
    /// [`UniqueId::to_bytes`].
    pub internal: [u8; UniqueId::BYTES],
}

/// `STREAMCOMM_UNIQUE_ID_BYTES` in the header.
const _: () = assert!(UniqueId::BYTES == 44 && std::mem::size_of::<CUniqueId>() == 44);

/// `STREAMCOMM_UNIQUE_ID_STRING_BYTES` in the header: room for the longest
/// text form (an IPv6 address with scope, port and secret) and its NUL.
pub const UNIQUE_ID_STRING_BYTES: usize = 128;

/// Decodes a C id (`what` names the argument).
///
/// # Safety
/// `id` is NULL or points to a readable `streamcomm_unique_id_t`.
pub(crate) unsafe fn read_id(id: *const CUniqueId, what: &str) -> FfiResult<UniqueId> {
    non_null(id, what)?;
    // SAFETY: non-null, and the caller's contract says it points to an id;
    // the struct has alignment 1.
    let bytes = unsafe { (*id).internal };
    UniqueId::from_bytes(&bytes)
        .map_err(|e| Failure::invalid(format!("{what} is not a valid unique id: {e}")))
}

/// Creates a unique id and starts its bootstrap root in this process (in a
/// background thread); give it to every rank, then call
/// `streamcomm_comm_init_rank`.
///
/// # Safety
/// `out` is NULL or points to writable memory for one id.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_get_unique_id(out: *mut CUniqueId) -> c_int {
    guard("streamcomm_get_unique_id", || {
        non_null(out, "out")?;
        let id = UniqueId::new()?;
        // SAFETY: non-null and writable per the contract; alignment 1.
        unsafe {
            out.write(CUniqueId {
                internal: id.to_bytes(),
            })
        };
        Ok(())
    })
}

/// Writes the id's text form, NUL-terminated, into `buf` of `len` bytes.
///
/// # Safety
/// `id` is NULL or readable; `buf` is NULL or writable for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_unique_id_to_string(
    id: *const CUniqueId,
    buf: *mut c_char,
    len: usize,
) -> c_int {
    guard("streamcomm_unique_id_to_string", || {
        // SAFETY: forwarded from this function's contract.
        let id = unsafe { read_id(id, "id") }?;
        non_null(buf, "buf")?;
        let text = id.to_string();
        if text.len() >= len {
            return Err(Failure::invalid(format!(
                "buf of {len} bytes is too small: the id needs {} (STREAMCOMM_UNIQUE_ID_STRING_BYTES is always enough)",
                text.len() + 1
            )));
        }
        // SAFETY: `buf` is writable for `len > text.len()` bytes per the
        // contract; the text (ASCII, no NUL) and its terminator fit.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
            buf.add(text.len()).write(0);
        }
        Ok(())
    })
}

/// Parses the text form (as written by `streamcomm_unique_id_to_string` or
/// held in `STREAMCOMM_UNIQUE_ID`) into `out`.
///
/// # Safety
/// `text` is NULL or a NUL-terminated string; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_unique_id_from_string(
    text: *const c_char,
    out: *mut CUniqueId,
) -> c_int {
    guard("streamcomm_unique_id_from_string", || {
        non_null(text, "text")?;
        non_null(out, "out")?;
        // SAFETY: non-null and NUL-terminated per the contract.
        let text = unsafe { CStr::from_ptr(text) };
        let text = text
            .to_str()
            .map_err(|_| Failure::invalid("text is not UTF-8"))?;
        let id: UniqueId = text.parse()?;
        // SAFETY: non-null and writable per the contract; alignment 1.
        unsafe {
            out.write(CUniqueId {
                internal: id.to_bytes(),
            })
        };
        Ok(())
    })
}

/// Checks a C-provided size constant against the Rust one.
const _: () = assert!(UNIQUE_ID_STRING_BYTES > 45 + 2 + 6 + 11 + 1 + 32);
