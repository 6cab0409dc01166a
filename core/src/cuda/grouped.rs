//! The collectives of [`CudaComm`] that are groups of sends and receives:
//! `gather`, `scatter`, `all_to_allv` and `all_gatherv`, with the semantics
//! of [`Communicator`](crate::Communicator)'s methods of the same names,
//! written from the one table of them ([`crate::comm::p2p::exchange_table`]).
//! Each describes itself as an [`Exchange`], whose lowering (shared with the
//! host backend and the C API) checks it and gives this rank's transfers;
//! they are one device group on the caller's stream (the staged path, as
//! every group), their regions parts of the caller's buffers.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut};

use super::CudaComm;
use crate::Result;
use crate::comm::p2p::Dir;
use crate::comm::p2p::exchange::Exchange;
use crate::comm::p2p::exchange_table::for_each_exchange;
use crate::comm::table::method_doc;
use crate::device::{
    DevAddr, DeviceP2p, DeviceRange, DirectExchange, GathervLayout, ScatterLayout,
};
use crate::host::Element;

/// Writes the CUDA face's method from an entry of the table.
macro_rules! cuda_exchange {
    ([$(#[$doc:meta])*] $name:ident [$($sa:ident: $st:ty),*] [$($ra:ident: $rt:ty),*]
        ($($arg:ident: $ty:ty),*) = $x:expr; $errors:literal, $_host:literal, $example:literal) => {
        $(#[$doc])*
        #[doc = method_doc!(
            cuda,
            errors: "[`Error::InvalidArgument`](crate::Error::InvalidArgument) when the call \
                does not fit the buffers or the communicator, or `stream` is of another \
                context than [`CudaComm::context`]; the stored error if the communicator has \
                failed; [`Error::Cuda`](crate::Error::Cuda) when a driver call fails.",
            $example, $errors
        )]
        #[allow(clippy::too_many_arguments)]
        pub fn $name<T: Element>(
            &self,
            send: &impl DevicePtr<T>,
            $($sa: $st,)*
            recv: &mut impl DevicePtrMut<T>,
            $($ra: $rt,)*
            $($arg: $ty,)*
            stream: &Arc<CudaStream>,
        ) -> Result<()> {
            let x = ($x)(send.len(), recv.len());
            let (reads, writes) = x.uses(self.comm.rank());
            self.post_exchange(x, reads.then_some(send), writes.then_some(recv), stream)
        }
    };
}

impl CudaComm {
    /// Checks `x` against the buffers (`None` where this rank does not
    /// use one: cudarc's tracking then records no use of it) and enqueues
    /// this rank's transfers as one group on `stream`.
    fn post_exchange<T: Element>(
        &self,
        x: Exchange<'_>,
        send: Option<&impl DevicePtr<T>>,
        recv: Option<&mut impl DevicePtrMut<T>>,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        let call = x.call();
        let capturing = self.check_capturable(stream, call)?;
        let (send_len, recv_len) = (
            send.map_or(0, |b| b.len()),
            recv.as_ref().map_or(0, |b| b.len()),
        );
        let transfers = x.lower(self.comm.rank(), self.comm.size(), send_len, recv_len)?;
        // cudarc's tracking: the guards record this call's uses on drop,
        // after the enqueue.
        let (s, _read) = match send {
            Some(b) => {
                let (addr, guard) = b.device_ptr(stream);
                (addr, Some(guard))
            }
            None => (0, None),
        };
        let (r, _write) = match recv {
            Some(b) => {
                let (addr, guard) = b.device_ptr_mut(stream);
                (addr, Some(guard))
            }
            None => (0, None),
        };
        let at = |base: DevAddr, offset: usize| base + (offset * T::DTYPE.size()) as u64;
        let ops: Vec<DeviceP2p> = transfers
            .iter()
            .map(|t| DeviceP2p {
                dir: t.dir,
                peer: t.peer,
                dtype: T::DTYPE,
                range: DeviceRange {
                    addr: at(if t.dir == Dir::Send { s } else { r }, t.offset),
                    len: t.count,
                },
            })
            .collect();
        // Its form on the direct path, where it has one: the blocks' layout.
        let (size, esz) = (self.comm.size(), T::DTYPE.size());
        let uniform: (Vec<usize>, Vec<usize>);
        let gather = |counts, displs, only_to| {
            DirectExchange::Gather(GathervLayout {
                send: s,
                recv: r,
                counts,
                displs,
                esz,
                only_to,
            })
        };
        let direct_form = match x {
            Exchange::AllGatherv { counts, displs } => Some(gather(counts, displs, None)),
            Exchange::Gather { root, count } => {
                uniform = (vec![count; size], (0..size).map(|p| p * count).collect());
                Some(gather(&uniform.0, &uniform.1, Some(root)))
            }
            Exchange::Scatter { root, count } => Some(DirectExchange::Scatter(ScatterLayout {
                send: s,
                recv: r,
                count,
                root,
                esz,
            })),
            Exchange::AllToAllv { .. } => None,
        };
        let direct_form = direct_form.map(|x| (T::DTYPE, x));
        let queue = self.queue(stream, call, capturing)?;
        crate::device::enqueue_device_exchange(&self.comm, &queue, &self.shared, &ops, direct_form)
    }

    for_each_exchange!(cuda_exchange);
}
