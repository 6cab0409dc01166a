//! CUDA streams for C: collectives, barrier and point-to-point with device
//! buffers on a `cudaStream_t` / `CUstream`, through a
//! `streamcomm_cuda_comm_t` (a communicator bound to one device).
//!
//! Buffers are device pointers (e.g. from `cudaMalloc`, or PyTorch's
//! `tensor.data_ptr()`); they are checked for NULL, alignment and overlap
//! like host buffers, never dereferenced by the host. The collectives that
//! are plans are in `collectives.rs`, through `collective`, with NCCL's
//! in-place rules. The stream must belong to the device's primary
//! context (what the runtime API and PyTorch use); 0 is the legacy default
//! stream. Without a usable GPU, `streamcomm_cuda_comm_create` returns
//! `STREAMCOMM_UNAVAILABLE`.

use std::ffi::{c_int, c_void};

use streamcomm::cuda::cudarc::driver::sys::CUstream;
use streamcomm::cuda::{CudaComm, RawP2p};
use streamcomm::{Collective, DataType, RawBuffers, RawSpan, ReduceOp};

use crate::args::{CBuf, dtype, index, out_ptr};
use crate::group::refuse_in_group;
use crate::guard::guard;
use crate::result::{FfiResult, SUCCESS, code_of};
use crate::{COMMS, CUDA_COMMS};

/// Binds communicator `comm` to CUDA device `device` and stores the handle
/// in `*cuda_comm` (NULL on failure).
///
/// # Safety
/// `cuda_comm` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_cuda_comm_create(
    comm: *mut c_void,
    device: c_int,
    cuda_comm: *mut *mut c_void,
) -> c_int {
    guard("streamcomm_cuda_comm_create", || {
        let out = out_ptr(cuda_comm, "cuda_comm")?;
        // SAFETY: checked non-null and aligned; writable per the contract.
        unsafe { out.write(std::ptr::null_mut()) };
        let c = COMMS.get(comm)?;
        let device = index(device, "device")?;
        let handle = CUDA_COMMS.insert(CudaComm::on_device(&c, device)?)?;
        // SAFETY: as above.
        unsafe { out.write(handle) };
        Ok(())
    })
}

/// Releases a CUDA communicator (synchronize its streams first; see the
/// header).
///
/// # Safety
/// None beyond passing a handle value (any value is checked).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_cuda_comm_destroy(cuda_comm: *mut c_void) -> c_int {
    guard("streamcomm_cuda_comm_destroy", || {
        CUDA_COMMS.remove(cuda_comm)?;
        Ok(())
    })
}

/// Stores in `*result` the first error of the CUDA communicator or of one
/// of its device operations (`STREAMCOMM_SUCCESS` when none).
///
/// # Safety
/// `result` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_cuda_comm_get_async_error(
    cuda_comm: *mut c_void,
    result: *mut c_int,
) -> c_int {
    guard("streamcomm_cuda_comm_get_async_error", || {
        let cc = CUDA_COMMS.get(cuda_comm)?;
        let out = out_ptr(result, "result")?;
        let code = cc.async_error().map_or(SUCCESS, |e| code_of(&e));
        // SAFETY: checked non-null and aligned; writable per the contract.
        unsafe { out.write(code) };
        Ok(())
    })
}

/// A buffer this rank does not use may be anything, NULL included.
fn raw(b: &CBuf) -> RawSpan {
    RawSpan {
        ptr: b.ptr as u64,
        len: b.count,
    }
}

/// One collective with NCCL's arguments: laid out by NCCL's rules
/// ([`RawBuffers::nccl_layout`]: NULL, alignment, overlap and the in-place
/// layouts checked there), then enqueued; nothing where it moves no element.
///
/// # Safety
/// The C caller's contract for a collective's buffers (`streamcomm.h`).
pub(crate) unsafe fn collective(
    call: &str,
    (cuda_comm, stream): (*mut c_void, *mut c_void),
    (coll, dt, op): (Collective, DataType, ReduceOp),
    (sendbuff, recvbuff): (*const c_void, *mut c_void),
    count: usize,
) -> FfiResult {
    let cc = CUDA_COMMS.get(cuda_comm)?;
    refuse_in_group(call)?;
    let (rank, size) = (cc.communicator().rank(), cc.communicator().size());
    let Some(buffers) = RawBuffers::nccl_layout(
        coll,
        dt,
        sendbuff as u64,
        recvbuff as u64,
        count,
        rank,
        size,
    )?
    else {
        return Ok(());
    };
    // SAFETY: the C caller's contract (header): live stream of the device,
    // device buffers valid until the operation completes; handle values and
    // pointers were checked above.
    Ok(unsafe { cc.collective_raw(coll, dt, op, buffers, stream as CUstream) }?)
}

/// A barrier on a CUDA stream.
///
/// # Safety
/// `cuda_stream` is a live stream of the device, or NULL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_cuda_barrier(
    cuda_comm: *mut c_void,
    cuda_stream: *mut c_void,
) -> c_int {
    guard("streamcomm_cuda_barrier", || {
        let cc = CUDA_COMMS.get(cuda_comm)?;
        refuse_in_group("streamcomm_cuda_barrier")?;
        // SAFETY: the caller's contract.
        Ok(unsafe { cc.barrier_raw(cuda_stream as CUstream) }?)
    })
}

/// Sends `sendcount` elements to `dest` and receives up to `recvcount` from
/// `source`, together (one group: any pairing of ranks works), on a CUDA
/// stream. A count of 0 with a NULL buffer skips that side.
///
/// # Safety
/// As [`streamcomm_cuda_all_reduce`](crate::collectives::streamcomm_cuda_all_reduce), for both buffers.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn streamcomm_cuda_sendrecv(
    sendbuff: *const c_void,
    sendcount: usize,
    dest: c_int,
    recvbuff: *mut c_void,
    recvcount: usize,
    source: c_int,
    datatype: c_int,
    cuda_comm: *mut c_void,
    cuda_stream: *mut c_void,
) -> c_int {
    guard("streamcomm_cuda_sendrecv", || {
        let dt = dtype(datatype)?;
        let cc = CUDA_COMMS.get(cuda_comm)?;
        refuse_in_group("streamcomm_cuda_sendrecv")?;
        let mut ops = Vec::with_capacity(2);
        if !(sendbuff.is_null() && sendcount == 0) {
            let send = CBuf::new(sendbuff, dt, sendcount, "sendbuff")?;
            ops.push(RawP2p {
                send: true,
                peer: index(dest, "dest")?,
                dtype: dt,
                buf: raw(&send),
            });
        }
        if !(recvbuff.is_null() && recvcount == 0) {
            let recv = CBuf::new(recvbuff, dt, recvcount, "recvbuff")?;
            ops.push(RawP2p {
                send: false,
                peer: index(source, "source")?,
                dtype: dt,
                buf: raw(&recv),
            });
        }
        // SAFETY: the caller's contract; pointers and handles checked above.
        Ok(unsafe { cc.group_raw(&ops, cuda_stream as CUstream) }?)
    })
}
