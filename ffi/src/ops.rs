//! Collectives and barriers for C, with NCCL's argument order and in-place rules.
//!
//! Each entry point decodes its enums, resolves its handles, checks its
//! buffers, and calls the matching [`Communicator`] method, choosing the
//! `*_in_place` form exactly where NCCL treats a call as in place:
//! `sendbuff == recvbuff` for all-reduce, broadcast and reduce;
//! `sendbuff == recvbuff + rank * sendcount` for all-gather;
//! `recvbuff == sendbuff + rank * recvcount` for reduce-scatter. Any other
//! overlap of the two buffers is refused. All operations are enqueued on the
//! stream; none is complete on return.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use streamcomm::UntypedBuffer;
use streamcomm::host::HostStream;
use streamcomm::{Communicator, DataType};

use crate::COMMS;
use crate::args::{CBuf, disjoint, dtype, index, non_null, reduce_op};
use crate::group::refuse_in_group;
use crate::guard::{guard, refuse_in_callback};
use crate::result::{Failure, FfiResult};
use crate::stream::stream_of;

/// A communicator and a stream, resolved for one call named `call`.
pub(crate) fn resolve(
    call: &str,
    comm: *mut c_void,
    stream: *mut c_void,
) -> FfiResult<(Arc<Communicator>, Arc<HostStream>)> {
    let c = COMMS.get(comm)?;
    let s = stream_of(stream)?;
    refuse_in_group(call)?;
    Ok((c, s))
}

/// `count * size` elements, or an error naming `what`.
fn times_size(count: usize, size: usize, what: &str) -> FfiResult<usize> {
    count
        .checked_mul(size)
        .ok_or_else(|| Failure::invalid(format!("{what} {count} times {size} ranks overflows")))
}

/// An empty buffer, for the side a rank does not use (NCCL lets it be NULL).
fn unused(dtype: DataType) -> UntypedBuffer {
    UntypedBuffer::zeroed(dtype, 0)
}

/// True when `inner` starts `block` elements into `outer`.
fn starts_at(inner: &CBuf, outer: &CBuf, block: usize) -> bool {
    inner.count > 0 && inner.ptr as usize == outer.ptr as usize + block * outer.dtype.size()
}

/// All-reduce of `count` elements (in place when `sendbuff == recvbuff`).
///
/// # Safety
/// Non-NULL buffers hold `count` elements and stay valid until the
/// operation completes on the stream.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_all_reduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    op: c_int,
    comm: *mut c_void,
    stream: *mut c_void,
) -> c_int {
    guard("streamcomm_all_reduce", || {
        let (dt, op) = (dtype(datatype)?, reduce_op(op)?);
        let (c, s) = resolve("streamcomm_all_reduce", comm, stream)?;
        let send = CBuf::new(sendbuff, dt, count, "sendbuff")?;
        let recv = CBuf::new(recvbuff, dt, count, "recvbuff")?;
        if send.ptr == recv.ptr {
            // SAFETY: the buffer contract of this entry point (checked by CBuf::new).
            let mut buf = unsafe { recv.wrap() }?;
            return Ok(c.all_reduce_in_place(&mut buf, op, &s)?);
        }
        disjoint("all_reduce", &send, &recv)?;
        // SAFETY: the buffer contract of this entry point (checked by CBuf::new).
        let (sb, mut rb) = unsafe { (send.wrap()?, recv.wrap()?) };
        Ok(c.all_reduce(&sb, &mut rb, op, &s)?)
    })
}

/// Broadcast of `count` elements from `root` (`sendbuff` is read on the
/// root only; in place when `sendbuff == recvbuff`).
///
/// # Safety
/// As [`streamcomm_all_reduce`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_broadcast(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    comm: *mut c_void,
    stream: *mut c_void,
) -> c_int {
    guard("streamcomm_broadcast", || {
        let dt = dtype(datatype)?;
        let root = index(root, "root")?;
        let (c, s) = resolve("streamcomm_broadcast", comm, stream)?;
        let recv = CBuf::new(recvbuff, dt, count, "recvbuff")?;
        // SAFETY: the buffer contract of this entry point (checked by CBuf::new).
        let mut rb = unsafe { recv.wrap() }?;
        if c.rank() != root {
            return Ok(c.broadcast(&unused(dt), &mut rb, root, &s)?);
        }
        let send = CBuf::new(sendbuff, dt, count, "sendbuff")?;
        if send.ptr == recv.ptr {
            return Ok(c.broadcast_in_place(&mut rb, root, &s)?);
        }
        disjoint("broadcast", &send, &recv)?;
        // SAFETY: the buffer contract of this entry point (checked by CBuf::new).
        let sb = unsafe { send.wrap() }?;
        Ok(c.broadcast(&sb, &mut rb, root, &s)?)
    })
}

/// Reduce of `count` elements into `root`'s `recvbuff` (written on the root
/// only; in place when `sendbuff == recvbuff`).
///
/// # Safety
/// As [`streamcomm_all_reduce`].
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn streamcomm_reduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    op: c_int,
    root: c_int,
    comm: *mut c_void,
    stream: *mut c_void,
) -> c_int {
    guard("streamcomm_reduce", || {
        let (dt, op) = (dtype(datatype)?, reduce_op(op)?);
        let root = index(root, "root")?;
        let (c, s) = resolve("streamcomm_reduce", comm, stream)?;
        let send = CBuf::new(sendbuff, dt, count, "sendbuff")?;
        // SAFETY: the buffer contract of this entry point (checked by CBuf::new).
        let sb = unsafe { send.wrap() }?;
        if c.rank() != root {
            return Ok(c.reduce(&sb, &mut unused(dt), op, root, &s)?);
        }
        let recv = CBuf::new(recvbuff, dt, count, "recvbuff")?;
        if send.ptr == recv.ptr {
            // SAFETY: the buffer contract of this entry point (checked by CBuf::new).
            let mut buf = unsafe { recv.wrap() }?;
            return Ok(c.reduce_in_place(&mut buf, op, root, &s)?);
        }
        disjoint("reduce", &send, &recv)?;
        // SAFETY: the buffer contract of this entry point (checked by CBuf::new).
        let mut rb = unsafe { recv.wrap() }?;
        Ok(c.reduce(&sb, &mut rb, op, root, &s)?)
    })
}

/// All-gather: every rank's `sendcount` elements, in rank order, into every
/// rank's `recvbuff` of `nranks * sendcount` elements.
///
/// # Safety
/// As [`streamcomm_all_reduce`], with `recvbuff` holding `nranks * sendcount`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_all_gather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    sendcount: usize,
    datatype: c_int,
    comm: *mut c_void,
    stream: *mut c_void,
) -> c_int {
    guard("streamcomm_all_gather", || {
        let dt = dtype(datatype)?;
        let (c, s) = resolve("streamcomm_all_gather", comm, stream)?;
        let total = times_size(sendcount, c.size(), "sendcount")?;
        let send = CBuf::new(sendbuff, dt, sendcount, "sendbuff")?;
        let recv = CBuf::new(recvbuff, dt, total, "recvbuff")?;
        if starts_at(&send, &recv, c.rank() * sendcount) {
            // SAFETY: the buffer contract of this entry point (checked by CBuf::new).
            let mut buf = unsafe { recv.wrap() }?;
            return Ok(c.all_gather_in_place(&mut buf, &s)?);
        }
        disjoint("all_gather", &send, &recv)?;
        // SAFETY: the buffer contract of this entry point (checked by CBuf::new).
        let (sb, mut rb) = unsafe { (send.wrap()?, recv.wrap()?) };
        Ok(c.all_gather(&sb, &mut rb, &s)?)
    })
}

/// Reduce-scatter: reduces every rank's `nranks * recvcount` elements and
/// leaves block `rank` (`recvcount` elements) in `recvbuff`.
///
/// # Safety
/// As [`streamcomm_all_reduce`], with `sendbuff` holding `nranks * recvcount`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_reduce_scatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    recvcount: usize,
    datatype: c_int,
    op: c_int,
    comm: *mut c_void,
    stream: *mut c_void,
) -> c_int {
    guard("streamcomm_reduce_scatter", || {
        let (dt, op) = (dtype(datatype)?, reduce_op(op)?);
        let (c, s) = resolve("streamcomm_reduce_scatter", comm, stream)?;
        let total = times_size(recvcount, c.size(), "recvcount")?;
        let send = CBuf::new(sendbuff, dt, total, "sendbuff")?;
        let recv = CBuf::new(recvbuff, dt, recvcount, "recvbuff")?;
        if starts_at(&recv, &send, c.rank() * recvcount) {
            // SAFETY: the buffer contract of this entry point (checked by CBuf::new).
            let mut buf = unsafe { send.wrap() }?;
            return Ok(c.reduce_scatter_in_place(&mut buf, op, &s)?);
        }
        disjoint("reduce_scatter", &send, &recv)?;
        // SAFETY: the buffer contract of this entry point (checked by CBuf::new).
        let (sb, mut rb) = unsafe { (send.wrap()?, recv.wrap()?) };
        Ok(c.reduce_scatter(&sb, &mut rb, op, &s)?)
    })
}

/// All-to-all: block `j` (`count` elements) of `sendbuff` goes to rank `j`,
/// which stores it as block `rank` of its `recvbuff`. Not in place.
///
/// # Safety
/// As [`streamcomm_all_reduce`], with both buffers holding `nranks * count`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_all_to_all(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    comm: *mut c_void,
    stream: *mut c_void,
) -> c_int {
    guard("streamcomm_all_to_all", || {
        let dt = dtype(datatype)?;
        let (c, s) = resolve("streamcomm_all_to_all", comm, stream)?;
        let total = times_size(count, c.size(), "count")?;
        let send = CBuf::new(sendbuff, dt, total, "sendbuff")?;
        let recv = CBuf::new(recvbuff, dt, total, "recvbuff")?;
        disjoint("all_to_all", &send, &recv)?;
        // SAFETY: the buffer contract of this entry point (checked by CBuf::new).
        let (sb, mut rb) = unsafe { (send.wrap()?, recv.wrap()?) };
        Ok(c.all_to_all(&sb, &mut rb, &s)?)
    })
}

/// Enqueues a barrier on the stream.
///
/// # Safety
/// None beyond passing handle values (any value is checked).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_barrier(comm: *mut c_void, stream: *mut c_void) -> c_int {
    guard("streamcomm_barrier", || {
        let (c, s) = resolve("streamcomm_barrier", comm, stream)?;
        Ok(c.barrier(&s)?)
    })
}

/// Blocks the calling thread until every rank has called it (in issue order
/// with the communicator's stream operations).
///
/// # Safety
/// None beyond passing a handle value (any value is checked).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_barrier_host(comm: *mut c_void) -> c_int {
    guard("streamcomm_barrier_host", || {
        let c = COMMS.get(comm)?;
        refuse_in_group("streamcomm_barrier_host")?;
        refuse_in_callback("streamcomm_barrier_host")?;
        Ok(c.barrier_host()?)
    })
}

/// Gather: every rank's `count` elements into `root`'s `recvbuff`
/// (`nranks * count` elements, block `j` from rank `j`; not used elsewhere,
/// where it may be NULL). The buffers must not overlap.
///
/// # Safety
/// As [`streamcomm_all_reduce`], with the root's `recvbuff` holding
/// `nranks * count`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_gather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    comm: *mut c_void,
    stream: *mut c_void,
) -> c_int {
    guard("streamcomm_gather", || {
        let dt = dtype(datatype)?;
        let root = index(root, "root")?;
        let (c, s) = resolve("streamcomm_gather", comm, stream)?;
        let send = CBuf::new(sendbuff, dt, count, "sendbuff")?;
        // SAFETY: the buffer contract of this entry point (checked by CBuf::new).
        let sb = unsafe { send.wrap() }?;
        if c.rank() != root {
            return Ok(c.gather(&sb, &mut unused(dt), root, &s)?);
        }
        let total = times_size(count, c.size(), "count")?;
        let recv = CBuf::new(recvbuff, dt, total, "recvbuff")?;
        disjoint("gather", &send, &recv)?;
        // SAFETY: the buffer contract of this entry point (checked by CBuf::new).
        let mut rb = unsafe { recv.wrap() }?;
        Ok(c.gather(&sb, &mut rb, root, &s)?)
    })
}

/// Scatter: block `j` (`count` elements) of `root`'s `sendbuff` (`nranks *
/// count` elements; not used elsewhere, where it may be NULL) to rank `j`'s
/// `recvbuff`. The buffers must not overlap.
///
/// # Safety
/// As [`streamcomm_all_reduce`], with the root's `sendbuff` holding
/// `nranks * count`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_scatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    comm: *mut c_void,
    stream: *mut c_void,
) -> c_int {
    guard("streamcomm_scatter", || {
        let dt = dtype(datatype)?;
        let root = index(root, "root")?;
        let (c, s) = resolve("streamcomm_scatter", comm, stream)?;
        let recv = CBuf::new(recvbuff, dt, count, "recvbuff")?;
        // SAFETY: the buffer contract of this entry point (checked by CBuf::new).
        let mut rb = unsafe { recv.wrap() }?;
        if c.rank() != root {
            return Ok(c.scatter(&unused(dt), &mut rb, root, &s)?);
        }
        let total = times_size(count, c.size(), "count")?;
        let send = CBuf::new(sendbuff, dt, total, "sendbuff")?;
        disjoint("scatter", &send, &recv)?;
        // SAFETY: the buffer contract of this entry point (checked by CBuf::new).
        let sb = unsafe { send.wrap() }?;
        Ok(c.scatter(&sb, &mut rb, root, &s)?)
    })
}

/// Reads `n` counts or displacements (`what` names the array).
///
/// # Safety
/// `ptr` is NULL or points to `n` readable `size_t`.
unsafe fn read_sizes(ptr: *const usize, n: usize, what: &str) -> FfiResult<Vec<usize>> {
    non_null(ptr, what)?;
    if !ptr.is_aligned() {
        return Err(Failure::invalid(format!(
            "{what} {ptr:p} is not aligned for size_t"
        )));
    }
    // SAFETY: non-null, aligned, and `n` entries long per the contract.
    Ok(unsafe { std::slice::from_raw_parts(ptr, n) }.to_vec())
}

/// Elements a buffer needs to hold every `(displ, count)` region (an empty
/// region still lies at its displacement, which must be inside the buffer).
fn extent(counts: &[usize], displs: &[usize], what: &str) -> FfiResult<usize> {
    counts.iter().zip(displs).try_fold(0usize, |end, (&c, &d)| {
        let region_end = d.checked_add(c).ok_or_else(|| {
            Failure::invalid(format!("{what}: displacement {d} + count {c} overflows"))
        })?;
        Ok(end.max(region_end))
    })
}

/// All-to-all with per-rank counts and displacements (in elements, one
/// `size_t` per rank each, as MPI_Alltoallv): `sendcounts[j]` elements at
/// `sdispls[j]` go to rank `j`, which stores them at `rdispls[rank]` of its
/// `recvbuff`. The buffers must not overlap.
///
/// # Safety
/// As [`streamcomm_all_reduce`]; the four arrays hold `nranks` entries and
/// the buffers every region they describe.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn streamcomm_all_to_allv(
    sendbuff: *const c_void,
    sendcounts: *const usize,
    sdispls: *const usize,
    recvbuff: *mut c_void,
    recvcounts: *const usize,
    rdispls: *const usize,
    datatype: c_int,
    comm: *mut c_void,
    stream: *mut c_void,
) -> c_int {
    guard("streamcomm_all_to_allv", || {
        let dt = dtype(datatype)?;
        let (c, s) = resolve("streamcomm_all_to_allv", comm, stream)?;
        let n = c.size();
        // SAFETY: the arrays' contract of this entry point.
        let sc = unsafe { read_sizes(sendcounts, n, "sendcounts") }?;
        // SAFETY: as above.
        let sd = unsafe { read_sizes(sdispls, n, "sdispls") }?;
        // SAFETY: as above.
        let rc = unsafe { read_sizes(recvcounts, n, "recvcounts") }?;
        // SAFETY: as above.
        let rd = unsafe { read_sizes(rdispls, n, "rdispls") }?;
        let send = CBuf::new(sendbuff, dt, extent(&sc, &sd, "sendbuff")?, "sendbuff")?;
        let recv = CBuf::new(recvbuff, dt, extent(&rc, &rd, "recvbuff")?, "recvbuff")?;
        disjoint("all_to_allv", &send, &recv)?;
        // SAFETY: the buffer contract of this entry point (checked by CBuf::new).
        let (sb, mut rb) = unsafe { (send.wrap()?, recv.wrap()?) };
        Ok(c.all_to_allv(&sb, &sc, &sd, &mut rb, &rc, &rd, &s)?)
    })
}

/// All-gather with a count per rank (in elements, as MPI_Allgatherv): this
/// rank's `sendcount` elements at `sendbuff` (`sendcount` must be
/// `recvcounts[rank]`) and every other rank's go to `rdispls[j]` of every
/// rank's `recvbuff`. The buffers must not overlap.
///
/// # Safety
/// As [`streamcomm_all_reduce`]; the two arrays hold `nranks` entries and
/// `recvbuff` every region they describe.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn streamcomm_all_gatherv(
    sendbuff: *const c_void,
    sendcount: usize,
    recvbuff: *mut c_void,
    recvcounts: *const usize,
    rdispls: *const usize,
    datatype: c_int,
    comm: *mut c_void,
    stream: *mut c_void,
) -> c_int {
    guard("streamcomm_all_gatherv", || {
        let dt = dtype(datatype)?;
        let (c, s) = resolve("streamcomm_all_gatherv", comm, stream)?;
        let n = c.size();
        // SAFETY: the arrays' contract of this entry point.
        let rc = unsafe { read_sizes(recvcounts, n, "recvcounts") }?;
        // SAFETY: as above.
        let rd = unsafe { read_sizes(rdispls, n, "rdispls") }?;
        let send = CBuf::new(sendbuff, dt, sendcount, "sendbuff")?;
        let recv = CBuf::new(recvbuff, dt, extent(&rc, &rd, "recvbuff")?, "recvbuff")?;
        disjoint("all_gatherv", &send, &recv)?;
        // SAFETY: the buffer contract of this entry point (checked by CBuf::new).
        let (sb, mut rb) = unsafe { (send.wrap()?, recv.wrap()?) };
        Ok(c.all_gatherv(&sb, &mut rb, &rc, &rd, &s)?)
    })
}
