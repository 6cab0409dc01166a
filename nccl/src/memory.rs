//! Memory, registration and user reduction operators.

use std::ffi::{c_int, c_void};

use streamcomm::Error;
use streamcomm::cuda::nccl::sys::ncclRedOp_t;

use crate::api::{export, ncclComm_t, ncclResult_t};
use crate::comms;
use crate::guard::guard;
use crate::init::put;

export! {
    /// `ncclMemAlloc`: `size` bytes of device memory on the current device.
    ncclMemAlloc, pncclMemAlloc => fn(ptr: *mut *mut c_void, size: usize) -> ncclResult_t {
        guard("ncclMemAlloc", || {
            if ptr.is_null() {
                return Err(Error::invalid("ptr is NULL"));
            }
            let mem = crate::device::alloc(size)?;
            // SAFETY: checked non-NULL; the caller's contract.
            unsafe { put(ptr, mem, "ptr") }?;
            Ok(ncclResult_t::ncclSuccess)
        })
    }
}

export! {
    /// `ncclMemFree`: frees what `ncclMemAlloc` returned (NULL: nothing).
    ncclMemFree, pncclMemFree => fn(ptr: *mut c_void) -> ncclResult_t {
        guard("ncclMemFree", || {
            if !ptr.is_null() {
                crate::device::free(ptr)?;
            }
            Ok(ncclResult_t::ncclSuccess)
        })
    }
}

export! {
    /// `ncclCommRegister`: streamcomm needs no registration; the handle is
    /// the buffer's address, and the buffer is used as any other.
    ncclCommRegister, pncclCommRegister => fn(
        comm: ncclComm_t,
        buff: *mut c_void,
        size: usize,
        handle: *mut *mut c_void,
    ) -> ncclResult_t {
        guard("ncclCommRegister", || {
            let _ = size;
            comms::get(comm)?;
            if buff.is_null() {
                return Err(Error::invalid("buff is NULL"));
            }
            // SAFETY: the caller's contract for `handle`.
            unsafe { put(handle, buff, "handle") }?;
            Ok(ncclResult_t::ncclSuccess)
        })
    }
}

export! {
    /// `ncclCommDeregister`: the counterpart of `ncclCommRegister`.
    ncclCommDeregister, pncclCommDeregister => fn(comm: ncclComm_t, handle: *mut c_void) -> ncclResult_t {
        guard("ncclCommDeregister", || {
            comms::get(comm)?;
            if handle.is_null() {
                return Err(Error::invalid("handle is NULL"));
            }
            Ok(ncclResult_t::ncclSuccess)
        })
    }
}

export! {
    /// `ncclRedOpCreatePreMulSum`: not supported (streamcomm has no
    /// scaled sum yet): `ncclInvalidUsage`, saying so.
    ncclRedOpCreatePreMulSum, pncclRedOpCreatePreMulSum => fn(
        op: *mut c_int,
        scalar: *mut c_void,
        datatype: c_int,
        residence: c_int,
        comm: ncclComm_t,
    ) -> ncclResult_t {
        guard("ncclRedOpCreatePreMulSum", || {
            let _ = (op, scalar, datatype, residence);
            comms::get(comm)?;
            Err(Error::InvalidUsage(
                "streamcomm has no pre-multiplied sum: scale before or after ncclSum".into(),
            ))
        })
    }
}

export! {
    /// `ncclRedOpDestroy`: there are no user operators to destroy.
    ncclRedOpDestroy, pncclRedOpDestroy => fn(op: c_int, comm: ncclComm_t) -> ncclResult_t {
        guard("ncclRedOpDestroy", || {
            comms::get(comm)?;
            let what = if ncclRedOp_t::from_raw(op).is_some() {
                "a built-in operator"
            } else {
                "no operator ncclRedOpCreatePreMulSum made"
            };
            Err(Error::invalid(format!("op {op} is {what}")))
        })
    }
}
