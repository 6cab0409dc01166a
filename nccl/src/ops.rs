//! Collectives and point-to-point, enqueued on the caller's stream through
//! [`streamcomm::cuda::CudaComm`]'s raw entry points, with NCCL's in-place
//! rules (the same buffer, or the receive buffer at this rank's offset).

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use streamcomm::cuda::RawP2p;
use streamcomm::cuda::cudarc::driver::sys::CUstream;
use streamcomm::cuda::nccl::sys::{ncclDataType_t, ncclRedOp_t};
use streamcomm::{Collective, DataType, Error, ReduceOp};
use streamcomm::{RawBuffers, RawSpan};

use crate::api::{cudaStream_t, export, ncclComm_t, ncclResult_t};
use crate::comms::{self, Ready};
use crate::groups;
use crate::guard::guard;

/// A gather (`to_root`) or a scatter, and its root.
struct Rooted {
    to_root: bool,
    root: usize,
}

/// What every operation checks first: the communicator, the type, the
/// operator (if any).
struct Call {
    comm: ncclComm_t,
    ready: Arc<Ready>,
    dtype: DataType,
    op: ReduceOp,
    rank: usize,
    size: usize,
}

impl Call {
    fn new(comm: ncclComm_t, datatype: c_int, op: Option<c_int>) -> Result<Call, Error> {
        let ready = comms::get(comm)?;
        let dtype = ncclDataType_t::from_raw(datatype)
            .ok_or_else(|| Error::invalid(format!("datatype {datatype} is no ncclDataType_t")))?
            .data_type()?;
        let op = match op {
            None => ReduceOp::Sum,
            Some(raw) => ncclRedOp_t::from_raw(raw)
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "op {raw} is no built-in ncclRedOp_t (ncclSum .. ncclAvg)"
                    ))
                })?
                .reduce_op()?,
        };
        let (rank, size) = (
            ready.cuda.communicator().rank(),
            ready.cuda.communicator().size(),
        );
        Ok(Call {
            comm,
            ready,
            dtype,
            op,
            rank,
            size,
        })
    }

    /// `count * by`, refused where it overflows an address.
    fn elems(&self, count: usize, by: usize) -> Result<usize, Error> {
        count
            .checked_mul(by)
            .filter(|n| n.checked_mul(self.dtype.size()).is_some())
            .ok_or_else(|| Error::invalid(format!("count {count} (x {by}) overflows")))
    }

    /// `ptr + elems` elements, as an address.
    fn offset(&self, ptr: *const c_void, elems: usize) -> usize {
        (ptr as usize).wrapping_add(elems * self.dtype.size())
    }

    /// `root` as a rank.
    fn rank_of(&self, root: c_int, what: &str) -> Result<usize, Error> {
        usize::try_from(root)
            .ok()
            .filter(|&r| r < self.size)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "{what} {root} is not a rank of this communicator of {}",
                    self.size
                ))
            })
    }

    /// Enqueues `collective` over NCCL's `sendbuff`, `recvbuff` and
    /// `count` (laid out by [`RawBuffers::nccl_layout`]) on `stream`,
    /// after what this thread's open group holds for the communicator;
    /// nothing for a call that moves no element.
    fn collective(
        &self,
        collective: Collective,
        sendbuff: *const c_void,
        recvbuff: *mut c_void,
        count: usize,
        stream: cudaStream_t,
    ) -> Result<ncclResult_t, Error> {
        let Some(buffers) = RawBuffers::nccl_layout(
            collective,
            self.dtype,
            sendbuff as u64,
            recvbuff as u64,
            count,
            self.rank,
            self.size,
        )?
        else {
            return Ok(ncclResult_t::ncclSuccess);
        };
        groups::flush(self.comm)?;
        // SAFETY: the C caller's contract: every buffer this rank uses is
        // device memory of the communicator's device holding `len`
        // elements of the type, valid until the operation completes on
        // `stream`, a live stream of that device (or 0).
        unsafe {
            self.ready.cuda.collective_raw(
                collective,
                self.dtype,
                self.op,
                buffers,
                stream as CUstream,
            )
        }?;
        Ok(ncclResult_t::ncclSuccess)
    }

    /// Enqueues a gather or a scatter of `count` elements a rank as one
    /// group of sends and receives (as NCCL itself does): this rank's own
    /// block (gather's `sendbuff`, scatter's `recvbuff`) with the root,
    /// and on the root the `nranks` blocks (gather's `recvbuff`, scatter's
    /// `sendbuff`) with every rank, this rank's own block first for a
    /// gather and last for a scatter.
    fn rooted(
        &self,
        Rooted { to_root, root }: Rooted,
        sendbuff: *const c_void,
        recvbuff: *mut c_void,
        count: usize,
        stream: cudaStream_t,
    ) -> Result<ncclResult_t, Error> {
        self.elems(count, self.size)?;
        if count == 0 {
            return Ok(ncclResult_t::ncclSuccess);
        }
        let recvbuff = recvbuff.cast_const();
        let ((own, own_name), (blocks, blocks_name)) = if to_root {
            ((sendbuff, "sendbuff"), (recvbuff, "the root's recvbuff"))
        } else {
            ((recvbuff, "recvbuff"), (sendbuff, "the root's sendbuff"))
        };
        needed(own, own_name)?;
        let own = self.p2p(to_root, root, buf(own, count));
        let mut ops = Vec::with_capacity(self.size + 1);
        if to_root {
            ops.push(own);
        }
        if self.rank == root {
            needed(blocks, blocks_name)?;
            ops.extend((0..self.size).map(|p| {
                let block = self.offset(blocks, p * count) as *const c_void;
                self.p2p(!to_root, p, buf(block, count))
            }));
        }
        if !to_root {
            ops.push(own);
        }
        groups::p2p(self.comm, self.ready.clone(), stream, ops)?;
        Ok(ncclResult_t::ncclSuccess)
    }

    fn p2p(&self, send: bool, peer: usize, buf: RawSpan) -> RawP2p {
        RawP2p {
            send,
            peer,
            dtype: self.dtype,
            buf,
        }
    }
}

fn buf(ptr: *const c_void, len: usize) -> RawSpan {
    RawSpan {
        ptr: ptr as u64,
        len,
    }
}

/// Refuses a NULL buffer that a call needs.
fn needed(ptr: *const c_void, what: &str) -> Result<(), Error> {
    if ptr.is_null() {
        return Err(Error::invalid(format!("{what} is NULL")));
    }
    Ok(())
}

/// Writes NCCL's entry points of the collectives (and their `pncclX`
/// names), each decoding its operator and root and calling its `Call`
/// method: [`Call::collective`] for those that are plans, which lays the
/// buffers out by NCCL's rules, or [`Call::rooted`] for gather and scatter.
macro_rules! nccl_collectives {
    ($(
        $(#[$doc:meta])*
        $name:ident, $pname:ident ($($arg:ident),*) => $method:ident($what:expr);
    )*) => {
        $(
            export! {
                $(#[$doc])*
                $name, $pname => fn(
                    sendbuff: *const c_void,
                    recvbuff: *mut c_void,
                    count: usize,
                    datatype: c_int,
                    $($arg: c_int,)*
                    comm: ncclComm_t,
                    stream: cudaStream_t,
                ) -> ncclResult_t {
                    guard(stringify!($name), || {
                        let c = Call::new(comm, datatype, nccl_collectives!(@op $($arg $arg)*))?;
                        $(nccl_collectives!(@root $arg $arg, c);)*
                        c.$method($what, sendbuff, recvbuff, count, stream)
                    })
                }
            }
        )*
    };
    // The operator is decoded with the type (`Call::new`), the root after.
    (@op op $a:ident $($rest:tt)*) => { Some($a) };
    (@op root $a:ident $($rest:tt)*) => { nccl_collectives!(@op $($rest)*) };
    (@op) => { None };
    (@root root $a:ident, $c:ident) => { let $a = $c.rank_of($a, "root")?; };
    (@root op $a:ident, $c:ident) => {};
}

nccl_collectives! {
    /// `ncclAllReduce`: every rank's `sendbuff` reduced into every rank's
    /// `recvbuff` (in place when they are the same).
    ncclAllReduce, pncclAllReduce(op) => collective(Collective::AllReduce);

    /// `ncclBroadcast`: `root`'s `sendbuff` into every rank's `recvbuff`
    /// (`sendbuff` used on the root only; in place where they are the
    /// same).
    ncclBroadcast, pncclBroadcast(root) => collective(Collective::Broadcast { root });

    /// `ncclReduce`: every rank's `sendbuff` reduced into `root`'s
    /// `recvbuff` (unused, and may be NULL, elsewhere).
    ncclReduce, pncclReduce(op, root) => collective(Collective::Reduce { root });

    /// `ncclAllGather`: every rank's `count` (`sendcount`) elements, in
    /// rank order, into every rank's `recvbuff` (in place when `sendbuff`
    /// is this rank's block of `recvbuff`).
    ncclAllGather, pncclAllGather() => collective(Collective::AllGather);

    /// `ncclReduceScatter`: every rank's `sendbuff` reduced, block `r` of
    /// the result (`count`, NCCL's `recvcount`, elements) into rank `r`'s
    /// `recvbuff` (in place when `recvbuff` is this rank's block of
    /// `sendbuff`).
    ncclReduceScatter, pncclReduceScatter(op) => collective(Collective::ReduceScatter);

    /// `ncclAlltoAll`: block `p` of every rank's `sendbuff` (`count`
    /// elements) into block `r` of rank `p`'s `recvbuff`.
    ncclAlltoAll, pncclAlltoAll() => collective(Collective::AllToAll);

    /// `ncclGather`: every rank's `count` elements, in rank order, into
    /// `root`'s `recvbuff` (sends and receives as one group, as NCCL
    /// itself does).
    ncclGather, pncclGather(root) => rooted(Rooted { to_root: true, root });

    /// `ncclScatter`: block `r` of `root`'s `sendbuff` (`count` elements)
    /// into rank `r`'s `recvbuff`.
    ncclScatter, pncclScatter(root) => rooted(Rooted { to_root: false, root });
}

export! {
    /// `ncclBcast`: `root`'s `buff` into every rank's, in place.
    ncclBcast, pncclBcast => fn(
        buff: *mut c_void,
        count: usize,
        datatype: c_int,
        root: c_int,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> ncclResult_t {
        // SAFETY: the caller's contract, with one buffer as both.
        unsafe { ncclBroadcast(buff, buff, count, datatype, root, comm, stream) }
    }
}

/// Writes `ncclSend` and `ncclRecv` (and their `pncclX` names): `count`
/// elements with `peer`, held by this thread's open group or enqueued now.
macro_rules! nccl_p2p {
    ($($(#[$doc:meta])* $name:ident, $pname:ident($buff:ident: $ty:ty) => $send:expr;)*) => {$(
        export! {
            $(#[$doc])*
            $name, $pname => fn(
                $buff: $ty,
                count: usize,
                datatype: c_int,
                peer: c_int,
                comm: ncclComm_t,
                stream: cudaStream_t,
            ) -> ncclResult_t {
                let send: bool = $send;
                guard(stringify!($name), || {
                    let c = Call::new(comm, datatype, None)?;
                    let peer = c.rank_of(peer, "peer")?;
                    c.elems(count, 1)?;
                    if count == 0 {
                        return Ok(ncclResult_t::ncclSuccess);
                    }
                    needed($buff, stringify!($buff))?;
                    let op = c.p2p(send, peer, buf($buff, count));
                    groups::p2p(c.comm, c.ready.clone(), stream, vec![op])?;
                    Ok(ncclResult_t::ncclSuccess)
                })
            }
        }
    )*};
}

nccl_p2p! {
    /// `ncclSend`: `count` elements to `peer`, which calls `ncclRecv`.
    ncclSend, pncclSend(sendbuff: *const c_void) => true;

    /// `ncclRecv`: `count` elements from `peer`, which calls `ncclSend`.
    ncclRecv, pncclRecv(recvbuff: *mut c_void) => false;
}
