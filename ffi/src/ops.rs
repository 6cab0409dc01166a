//! Barriers and the collectives made of sends and receives (gather,
//! scatter, `all_to_allv`, `all_gatherv`) for C, on host streams; the
//! collectives that are plans are in `collectives.rs`, through
//! `collective`. Each entry point decodes its enums, resolves its
//! handles, checks its buffers (NULL, alignment, overlap), and calls the
//! matching [`Communicator`] method. All operations are enqueued on the
//! stream; none is complete on return.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use streamcomm::host::HostStream;
use streamcomm::{Collective, Communicator, DataType, RawBuffers, ReduceOp, UntypedBuffer};

use crate::COMMS;
use crate::args::{CBuf, disjoint, dtype, index, non_null};
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

/// One collective that is a plan, with NCCL's arguments, on a host
/// stream: laid out by NCCL's rules ([`RawBuffers::nccl_layout`]: NULL,
/// alignment, overlap and the in-place layouts checked there), then
/// enqueued through the host backend's door; nothing where it moves no
/// element.
///
/// # Safety
/// The C caller's contract for a collective's buffers (`streamcomm.h`).
pub(crate) unsafe fn collective(
    call: &str,
    (comm, stream): (*mut c_void, *mut c_void),
    (coll, dt, op): (Collective, DataType, ReduceOp),
    (sendbuff, recvbuff): (*const c_void, *mut c_void),
    count: usize,
) -> FfiResult {
    let (c, s) = resolve(call, comm, stream)?;
    let (send, recv) = (sendbuff as u64, recvbuff as u64);
    let layout = RawBuffers::nccl_layout(coll, dt, send, recv, count, c.rank(), c.size())?;
    let Some(buffers) = layout else {
        return Ok(());
    };
    // SAFETY: forwarded: every buffer the layout names holds its elements
    // and stays valid until the operation completes on the stream.
    Ok(unsafe { c.collective_raw(coll, dt, op, buffers, &s) }?)
}

/// An empty buffer, for the side a rank does not use (NCCL lets it be NULL).
fn unused(dtype: DataType) -> UntypedBuffer {
    UntypedBuffer::zeroed(dtype, 0)
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
/// As [`streamcomm_all_reduce`](crate::collectives::streamcomm_all_reduce), with the root's `recvbuff` holding
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
/// As [`streamcomm_all_reduce`](crate::collectives::streamcomm_all_reduce), with the root's `sendbuff` holding
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
/// As [`streamcomm_all_reduce`](crate::collectives::streamcomm_all_reduce); the four arrays hold `nranks` entries and
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
/// As [`streamcomm_all_reduce`](crate::collectives::streamcomm_all_reduce); the two arrays hold `nranks` entries and
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
