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
use streamcomm::{Communicator, DataType, UntypedBuffer};

use crate::COMMS;
use crate::args::{CBuf, disjoint, dtype, index, non_null};
use crate::collectives::NcclArgs;
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

/// One collective that is a plan on a host stream: laid out by NCCL's
/// rules ([`NcclArgs::layout`]), then enqueued through the host backend's
/// door; nothing where it moves no element.
///
/// # Safety
/// The C caller's contract for a collective's buffers (`streamcomm.h`).
pub(crate) unsafe fn collective(
    args: &NcclArgs,
    (comm, stream): (*mut c_void, *mut c_void),
) -> FfiResult {
    let (c, s) = resolve(args.call, comm, stream)?;
    let Some(buffers) = args.layout(c.rank(), c.size())? else {
        return Ok(());
    };
    // SAFETY: forwarded: every buffer the layout names holds its elements
    // and stays valid until the operation completes on the stream.
    Ok(unsafe { c.collective_raw(args.collective, args.dtype, args.op, buffers, &s) }?)
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

/// Gather (`to_root`) or scatter: this rank's own `count` elements
/// (gather's `sendbuff`, scatter's `recvbuff`), and on the root its
/// `nranks * count` blocks (gather's `recvbuff`, scatter's `sendbuff`),
/// which must not overlap them.
///
/// # Safety
/// The buffer contract of `streamcomm_gather` / `streamcomm_scatter`.
unsafe fn rooted(
    (call, to_root): (&str, bool),
    (sendbuff, recvbuff): (*const c_void, *mut c_void),
    count: usize,
    datatype: c_int,
    root: c_int,
    (comm, stream): (*mut c_void, *mut c_void),
) -> FfiResult {
    let dt = dtype(datatype)?;
    let root = index(root, "root")?;
    let (c, s) = resolve(call, comm, stream)?;
    let recvbuff = recvbuff.cast_const();
    let ((own, own_name), (blocks, blocks_name)) = if to_root {
        ((sendbuff, "sendbuff"), (recvbuff, "recvbuff"))
    } else {
        ((recvbuff, "recvbuff"), (sendbuff, "sendbuff"))
    };
    let own = CBuf::new(own, dt, count, own_name)?;
    // SAFETY: the buffer contract of this entry point (checked by CBuf::new).
    let mut own_buf = unsafe { own.wrap() }?;
    let mut blocks_buf = if c.rank() != root {
        unused(dt)
    } else {
        let total = times_size(count, c.size(), "count")?;
        let blocks = CBuf::new(blocks, dt, total, blocks_name)?;
        if to_root {
            disjoint("gather", &own, &blocks)?;
        } else {
            disjoint("scatter", &blocks, &own)?;
        }
        // SAFETY: the buffer contract of this entry point (checked by CBuf::new).
        unsafe { blocks.wrap() }?
    };
    if to_root {
        Ok(c.gather(&own_buf, &mut blocks_buf, root, &s)?)
    } else {
        Ok(c.scatter(&blocks_buf, &mut own_buf, root, &s)?)
    }
}

/// Writes the entry points of gather and scatter, each a [`rooted`] call.
macro_rules! rooted_entry_points {
    ($($(#[$doc:meta])* $name:ident => $to_root:expr;)*) => {$(
        $(#[$doc])*
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            sendbuff: *const c_void,
            recvbuff: *mut c_void,
            count: usize,
            datatype: c_int,
            root: c_int,
            comm: *mut c_void,
            stream: *mut c_void,
        ) -> c_int {
            let call = stringify!($name);
            guard(call, || {
                let buffers = (sendbuff, recvbuff);
                // SAFETY: forwarded from this function's contract.
                unsafe { rooted((call, $to_root), buffers, count, datatype, root, (comm, stream)) }
            })
        }
    )*};
}

rooted_entry_points! {
    /// Gather: every rank's `count` elements into `root`'s `recvbuff`
    /// (`nranks * count` elements, block `j` from rank `j`; not used elsewhere,
    /// where it may be NULL). The buffers must not overlap.
    ///
    /// # Safety
    /// As [`streamcomm_all_reduce`](crate::collectives::streamcomm_all_reduce), with the root's `recvbuff` holding
    /// `nranks * count`.
    streamcomm_gather => true;

    /// Scatter: block `j` (`count` elements) of `root`'s `sendbuff` (`nranks *
    /// count` elements; not used elsewhere, where it may be NULL) to rank `j`'s
    /// `recvbuff`. The buffers must not overlap.
    ///
    /// # Safety
    /// As [`streamcomm_all_reduce`](crate::collectives::streamcomm_all_reduce), with the root's `sendbuff` holding
    /// `nranks * count`.
    streamcomm_scatter => false;
}

/// Reads `N` arrays of `n` counts or displacements each, in order (each
/// with its name, for errors).
///
/// # Safety
/// Each pointer is NULL or points to `n` readable `size_t`.
unsafe fn read_sizes<const N: usize>(
    arrays: [(*const usize, &str); N],
    n: usize,
) -> FfiResult<[Vec<usize>; N]> {
    let mut read = arrays.map(|_| Vec::new());
    for ((ptr, what), out) in arrays.into_iter().zip(&mut read) {
        non_null(ptr, what)?;
        if !ptr.is_aligned() {
            return Err(Failure::invalid(format!(
                "{what} {ptr:p} is not aligned for size_t"
            )));
        }
        // SAFETY: non-null, aligned, and `n` entries long per the contract.
        *out = unsafe { std::slice::from_raw_parts(ptr, n) }.to_vec();
    }
    Ok(read)
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
        let arrays = [
            (sendcounts, "sendcounts"),
            (sdispls, "sdispls"),
            (recvcounts, "recvcounts"),
            (rdispls, "rdispls"),
        ];
        // SAFETY: the arrays' contract of this entry point.
        let [sc, sd, rc, rd] = unsafe { read_sizes(arrays, c.size()) }?;
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
        let arrays = [(recvcounts, "recvcounts"), (rdispls, "rdispls")];
        // SAFETY: the arrays' contract of this entry point.
        let [rc, rd] = unsafe { read_sizes(arrays, c.size()) }?;
        let send = CBuf::new(sendbuff, dt, sendcount, "sendbuff")?;
        let recv = CBuf::new(recvbuff, dt, extent(&rc, &rd, "recvbuff")?, "recvbuff")?;
        disjoint("all_gatherv", &send, &recv)?;
        // SAFETY: the buffer contract of this entry point (checked by CBuf::new).
        let (sb, mut rb) = unsafe { (send.wrap()?, recv.wrap()?) };
        Ok(c.all_gatherv(&sb, &mut rb, &rc, &rd, &s)?)
    })
}
