//! Communicators for C: create, split, shrink, query, abort, destroy; error
//! strings.
//!
//! `streamcomm_comm_t` is a handle into the communicator table (see
//! `handles.rs`). Destroying it drops this process's reference: work
//! already enqueued on streams keeps what it needs and still completes. A
//! communicator made by a split or a shrink gets a handle of its own, as
//! one made by an init: it is independent of its parent (its own
//! connections and lifetime), and each is destroyed on its own.

use std::ffi::{c_char, c_int, c_void};

use streamcomm::Communicator;

use crate::COMMS;
use crate::args::{cleared_out, index, out_ptr, read_ranks, split_color, write_out};
use crate::group::refuse_in_group;
use crate::guard::{guard, last_error_ptr, refuse_in_callback, set_last_error};
use crate::id::{CUniqueId, read_id};
use crate::result::{Failure, FfiResult, SUCCESS, code_of, description};

/// Stores a new communicator's handle in `*comm`.
///
/// # Safety
/// `comm` was checked by [`out_ptr`].
unsafe fn publish(comm: *mut *mut c_void, made: Communicator) -> FfiResult {
    let handle = COMMS.insert(made)?;
    // SAFETY: checked non-null and aligned by the caller; writable per the
    // entry point's contract.
    unsafe { comm.write(handle) };
    Ok(())
}

/// Joins the communicator named by `id` as `rank` of `nranks` (collective:
/// every rank calls it; returns when all have joined).
///
/// # Safety
/// `comm` is NULL or writable; `id` is NULL or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_comm_init_rank(
    comm: *mut *mut c_void,
    nranks: c_int,
    id: *const CUniqueId,
    rank: c_int,
) -> c_int {
    guard("streamcomm_comm_init_rank", || {
        // SAFETY: forwarded from this function's contract.
        let comm = unsafe { cleared_out(comm, "comm") }?;
        // SAFETY: forwarded from this function's contract.
        let id = unsafe { read_id(id, "id") }?;
        let size = index(nranks, "nranks")?;
        let rank = index(rank, "rank")?;
        let made = Communicator::init(&id, rank, size)?;
        // SAFETY: `comm` was checked above.
        unsafe { publish(comm, made) }
    })
}

/// Joins the communicator a launcher describes in the environment
/// (`streamcomm-run`, torchrun, Slurm, Open MPI, PMI).
///
/// # Safety
/// `comm` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_comm_init_from_env(comm: *mut *mut c_void) -> c_int {
    guard("streamcomm_comm_init_from_env", || {
        // SAFETY: forwarded from this function's contract.
        let comm = unsafe { cleared_out(comm, "comm") }?;
        let made = Communicator::from_env()?;
        // SAFETY: `comm` was checked above.
        unsafe { publish(comm, made) }
    })
}

/// What split and shrink share: `*newcomm` holds NULL until the
/// communicator `make` derives from `comm` is published there (it stays
/// NULL where `make` gives none); `decode` checks the call's own arguments,
/// then a call inside a group or a callback is refused.
///
/// # Safety
/// `newcomm` is NULL or writable.
unsafe fn derive<A>(
    call: &str,
    comm: *mut c_void,
    newcomm: *mut *mut c_void,
    decode: impl FnOnce() -> FfiResult<A>,
    make: impl FnOnce(&Communicator, A) -> streamcomm::Result<Option<Communicator>>,
) -> c_int {
    guard(call, || {
        // SAFETY: forwarded from this function's contract.
        let newcomm = unsafe { cleared_out(newcomm, "newcomm") }?;
        let c = COMMS.get(comm)?;
        let args = decode()?;
        refuse_in_group(call)?;
        refuse_in_callback(call)?;
        match make(&c, args)? {
            // SAFETY: `newcomm` was checked above.
            Some(made) => unsafe { publish(newcomm, made) },
            None => Ok(()),
        }
    })
}

/// Splits `comm` into groups (`MPI_Comm_split`'s rules): the ranks passing
/// the same `color` form one new communicator, stored in `*newcomm`, ranked
/// by `key` then by rank in `comm`; `STREAMCOMM_SPLIT_NOCOLOR` (-1) joins
/// none and stores NULL. Collective over `comm`.
///
/// # Safety
/// `newcomm` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_comm_split(
    comm: *mut c_void,
    color: c_int,
    key: c_int,
    newcomm: *mut *mut c_void,
) -> c_int {
    let decode = || split_color(color);
    // SAFETY: forwarded from this function's contract.
    unsafe {
        derive(
            "streamcomm_comm_split",
            comm,
            newcomm,
            decode,
            |c, color| c.split(color, key),
        )
    }
}

/// The live ranks of `comm`, less the `nexclude` ranks of `exclude` (which
/// do not call it), as a new communicator in `*newcomm`, ranked in `comm`'s
/// order (`MPIX_Comm_shrink`, `ncclCommShrink`). Called by every survivor
/// that is not excluded, with the same list.
///
/// # Safety
/// `exclude` is NULL or points to `nexclude` readable `int`s; `newcomm` is
/// NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_comm_shrink(
    comm: *mut c_void,
    exclude: *const c_int,
    nexclude: usize,
    newcomm: *mut *mut c_void,
) -> c_int {
    // SAFETY: forwarded from this function's contract.
    let decode = || unsafe { read_ranks(exclude, nexclude, "exclude") };
    // SAFETY: forwarded from this function's contract.
    unsafe {
        derive(
            "streamcomm_comm_shrink",
            comm,
            newcomm,
            decode,
            |c, exclude| c.shrink_excluding(&exclude).map(Some),
        )
    }
}

/// Releases the handle; enqueued work still completes.
///
/// # Safety
/// None beyond passing a handle value (any value is checked).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_comm_destroy(comm: *mut c_void) -> c_int {
    guard("streamcomm_comm_destroy", || {
        COMMS.remove(comm)?;
        Ok(())
    })
}

/// Fails the communicator (pending and later operations end with
/// `STREAMCOMM_ABORTED` here, peers see `STREAMCOMM_REMOTE_FAILED`), then
/// releases the handle.
///
/// # Safety
/// None beyond passing a handle value (any value is checked).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_comm_abort(comm: *mut c_void) -> c_int {
    guard("streamcomm_comm_abort", || {
        COMMS.remove(comm)?.abort();
        Ok(())
    })
}

/// Stores in `*result` the code of the error that failed the communicator
/// (`STREAMCOMM_SUCCESS` when none; its message becomes the last error).
///
/// # Safety
/// `result` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_comm_get_async_error(
    comm: *mut c_void,
    result: *mut c_int,
) -> c_int {
    guard("streamcomm_comm_get_async_error", || {
        let c = COMMS.get(comm)?;
        let code = match c.async_error() {
            Some(e) => {
                set_last_error(&format!("communicator failed: {e}"));
                code_of(&e)
            }
            None => SUCCESS,
        };
        // SAFETY: forwarded from this function's contract.
        unsafe { write_out(result, "result", code) }
    })
}

/// Writes `value` through a checked `int` out-parameter.
fn write_int(ptr: *mut c_int, what: &str, value: usize) -> FfiResult {
    let ptr = out_ptr(ptr, what)?;
    let value = c_int::try_from(value)
        .map_err(|_| Failure::invalid(format!("{what} {value} does not fit in an int")))?;
    // SAFETY: checked non-null and aligned; the entry points' contracts say
    // it is writable.
    unsafe { ptr.write(value) };
    Ok(())
}

/// Stores this process's rank in `*rank`.
///
/// # Safety
/// `rank` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_comm_rank(comm: *mut c_void, rank: *mut c_int) -> c_int {
    guard("streamcomm_comm_rank", || {
        let c = COMMS.get(comm)?;
        write_int(rank, "rank", c.rank())
    })
}

/// Stores the number of ranks in `*size`.
///
/// # Safety
/// `size` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_comm_size(comm: *mut c_void, size: *mut c_int) -> c_int {
    guard("streamcomm_comm_size", || {
        let c = COMMS.get(comm)?;
        write_int(size, "size", c.size())
    })
}

/// A static, NUL-terminated description of a result code (never NULL).
#[unsafe(no_mangle)]
pub extern "C" fn streamcomm_error_string(result: c_int) -> *const c_char {
    std::panic::catch_unwind(|| description(result).as_ptr().cast::<c_char>())
        .unwrap_or(c"internal error".as_ptr())
}

/// This thread's last failure message (never NULL; `""` before any failure);
/// valid until this thread's next failing streamcomm call.
#[unsafe(no_mangle)]
pub extern "C" fn streamcomm_last_error() -> *const c_char {
    std::panic::catch_unwind(last_error_ptr).unwrap_or(c"internal error".as_ptr())
}
