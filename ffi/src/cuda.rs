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
use streamcomm::{DataType, RawSpan};

use crate::args::{CBuf, cleared_out, dtype, index, write_out};
use crate::collectives::NcclArgs;
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
        // SAFETY: forwarded from this function's contract.
        let out = unsafe { cleared_out(cuda_comm, "cuda_comm") }?;
        let c = COMMS.get(comm)?;
        let device = index(device, "device")?;
        let handle = CUDA_COMMS.insert(CudaComm::on_device(&c, device)?)?;
        // SAFETY: checked non-null and aligned by `cleared_out`; writable
        // per the contract.
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
        let code = cc.async_error().map_or(SUCCESS, |e| code_of(&e));
        // SAFETY: forwarded from this function's contract.
        unsafe { write_out(result, "result", code) }
    })
}

/// One collective that is a plan on a CUDA stream: laid out by NCCL's
/// rules ([`NcclArgs::layout`]), then enqueued; nothing where it moves no
/// element.
///
/// # Safety
/// The C caller's contract for a collective's buffers (`streamcomm.h`).
pub(crate) unsafe fn collective(
    args: &NcclArgs,
    (cuda_comm, stream): (*mut c_void, *mut c_void),
) -> FfiResult {
    let cc = CUDA_COMMS.get(cuda_comm)?;
    refuse_in_group(args.call)?;
    let comm = cc.communicator();
    let Some(buffers) = args.layout(comm.rank(), comm.size())? else {
        return Ok(());
    };
    let stream = stream as CUstream;
    // SAFETY: the C caller's contract (header): live stream of the device,
    // device buffers valid until the operation completes; handle values and
    // pointers were checked above.
    Ok(unsafe { cc.collective_raw(args.collective, args.dtype, args.op, buffers, stream) }?)
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

/// One side of a sendrecv (`send`, or the receive): `count` elements at
/// `ptr` with `peer` (its argument and name); nothing for a NULL buffer of 0
/// elements.
fn side(
    send: bool,
    ptr: *const c_void,
    count: usize,
    dt: DataType,
    (peer, peer_name): (c_int, &str),
) -> FfiResult<Option<RawP2p>> {
    if ptr.is_null() && count == 0 {
        return Ok(None);
    }
    let buf = CBuf::new(ptr, dt, count, if send { "sendbuff" } else { "recvbuff" })?;
    Ok(Some(RawP2p {
        send,
        peer: index(peer, peer_name)?,
        dtype: dt,
        buf: RawSpan {
            ptr: buf.ptr as u64,
            len: buf.count,
        },
    }))
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
        let ops: Vec<RawP2p> = [
            side(true, sendbuff, sendcount, dt, (dest, "dest"))?,
            side(false, recvbuff, recvcount, dt, (source, "source"))?,
        ]
        .into_iter()
        .flatten()
        .collect();
        // SAFETY: the caller's contract; pointers and handles checked above.
        Ok(unsafe { cc.group_raw(&ops, cuda_stream as CUstream) }?)
    })
}
