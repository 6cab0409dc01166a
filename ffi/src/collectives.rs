//! The C entry points of the collectives that are plans, for both
//! backends, written from one table: `streamcomm_<name>` on a host stream
//! (`streamcomm_stream_t`, host buffers) and `streamcomm_cuda_<name>` on a
//! CUDA stream (`cudaStream_t`, device buffers). Each decodes its data
//! type, reduction and root, and hands NCCL's arguments to its backend's
//! one function (`ops::collective`, `cuda::collective`),
//! which lays the buffers out by NCCL's rules
//! ([`RawBuffers::nccl_layout`](streamcomm::RawBuffers::nccl_layout): in
//! place where NCCL says so, any other overlap refused) and calls the
//! backend's door (`collective_raw`).
//!
//! Adding a collective that is a plan to the C API means a row here and
//! its declarations in `streamcomm.h`.

use std::ffi::{c_int, c_void};

use streamcomm::{Collective, DataType, RawBuffers, ReduceOp};

use crate::args::dtype;
use crate::guard::guard;
use crate::result::FfiResult;

/// Decoders of the arguments beyond the buffers, by the argument's name.
mod decode {
    use std::ffi::c_int;

    use streamcomm::ReduceOp;

    use crate::args::{index, reduce_op};
    use crate::result::FfiResult;

    /// A `streamcomm_reduce_op_t`.
    pub(super) fn op(value: c_int) -> FfiResult<ReduceOp> {
        reduce_op(value)
    }

    /// A root rank (non-negative; its range is the layout's check).
    pub(super) fn root(value: c_int) -> FfiResult<usize> {
        index(value, "root")
    }
}

/// One call of a collective that is a plan, its enums decoded: what an
/// entry point below hands to its backend's `collective`.
pub(crate) struct NcclArgs {
    /// The entry point's name, for errors.
    pub(crate) call: &'static str,
    /// The collective, its root decoded.
    pub(crate) collective: Collective,
    /// The element type.
    pub(crate) dtype: DataType,
    /// The reduction (`Sum` for a collective without one).
    pub(crate) op: ReduceOp,
    /// NCCL's `sendbuff`.
    pub(crate) sendbuff: *const c_void,
    /// NCCL's `recvbuff`.
    pub(crate) recvbuff: *mut c_void,
    /// NCCL's `count`.
    pub(crate) count: usize,
}

impl NcclArgs {
    /// The buffers of rank `rank` of `size`, laid out by NCCL's rules
    /// ([`RawBuffers::nccl_layout`]: NULL, alignment, overlap and the
    /// in-place layouts checked there); `None` where the call moves no
    /// element.
    pub(crate) fn layout(&self, rank: usize, size: usize) -> FfiResult<Option<RawBuffers>> {
        Ok(RawBuffers::nccl_layout(
            self.collective,
            self.dtype,
            self.sendbuff as u64,
            self.recvbuff as u64,
            self.count,
            rank,
            size,
        )?)
    }
}

/// Writes the host and CUDA entry points of every row (`@entry`: one entry
/// point, its handles' names and its backend).
macro_rules! c_collectives {
    ($(
        $(#[$doc:meta])*
        $host:ident, $cuda:ident ($($arg:ident),*) => $collective:expr, $op:expr;
    )*) => {
        $(
            c_collectives! {
                @entry
                $(#[$doc])*
                ///
                /// On a host stream.
                ///
                /// # Safety
                /// Every buffer this rank uses holds the elements the call
                /// names and stays valid, untouched, until the operation
                /// completes on the stream.
                $host(comm, stream) => crate::ops::collective, ($($arg),*) => $collective, $op
            }

            c_collectives! {
                @entry
                $(#[$doc])*
                ///
                /// On a CUDA stream, with device buffers.
                ///
                /// # Safety
                /// Every buffer this rank uses is device memory holding the
                /// elements the call names, valid until the operation
                /// completes on `cuda_stream`, a live stream of the device (or
                /// NULL).
                $cuda(cuda_comm, cuda_stream) => crate::cuda::collective, ($($arg),*) => $collective, $op
            }
        )*
    };
    (
        @entry
        $(#[$doc:meta])*
        $name:ident($comm:ident, $stream:ident) => $backend:path,
        ($($arg:ident),*) => $collective:expr, $op:expr
    ) => {
        $(#[$doc])*
        #[unsafe(no_mangle)]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $name(
            sendbuff: *const c_void,
            recvbuff: *mut c_void,
            count: usize,
            datatype: c_int,
            $($arg: c_int,)*
            $comm: *mut c_void,
            $stream: *mut c_void,
        ) -> c_int {
            let call = stringify!($name);
            guard(call, || {
                let dt = dtype(datatype)?;
                $(let $arg = decode::$arg($arg)?;)*
                let args = NcclArgs {
                    call,
                    collective: $collective,
                    dtype: dt,
                    op: $op,
                    sendbuff,
                    recvbuff,
                    count,
                };
                // SAFETY: forwarded: this entry point's contract.
                unsafe { $backend(&args, ($comm, $stream)) }
            })
        }
    };
}

c_collectives! {
    /// All-reduce of `count` elements (in place when `sendbuff == recvbuff`).
    streamcomm_all_reduce, streamcomm_cuda_all_reduce(op) => Collective::AllReduce, op;

    /// Broadcast of `count` elements from `root` (`sendbuff` is read on the
    /// root only, and may be NULL elsewhere; in place when `sendbuff ==
    /// recvbuff`).
    streamcomm_broadcast, streamcomm_cuda_broadcast(root) =>
        Collective::Broadcast { root }, ReduceOp::Sum;

    /// Reduce of `count` elements into `root`'s `recvbuff` (written on the
    /// root only, and may be NULL elsewhere; in place when `sendbuff ==
    /// recvbuff`).
    streamcomm_reduce, streamcomm_cuda_reduce(op, root) => Collective::Reduce { root }, op;

    /// All-gather: every rank's `count` (`sendcount`) elements, in rank
    /// order, into every rank's `recvbuff` of `nranks * count` elements (in
    /// place when `sendbuff` is block `rank` of `recvbuff`).
    streamcomm_all_gather, streamcomm_cuda_all_gather() => Collective::AllGather, ReduceOp::Sum;

    /// Reduce-scatter: reduces every rank's `nranks * count` elements and
    /// leaves block `rank` (`count`, NCCL's `recvcount`, elements) in
    /// `recvbuff` (in place when `recvbuff` is block `rank` of `sendbuff`).
    streamcomm_reduce_scatter, streamcomm_cuda_reduce_scatter(op) =>
        Collective::ReduceScatter, op;

    /// All-to-all: block `j` (`count` elements) of `sendbuff` goes to rank
    /// `j`, which stores it as block `rank` of its `recvbuff` (both of
    /// `nranks * count` elements). Never in place on a host stream.
    streamcomm_all_to_all, streamcomm_cuda_all_to_all() => Collective::AllToAll, ReduceOp::Sum;
}
