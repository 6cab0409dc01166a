//! The collectives of [`CudaComm`] that are groups of sends and receives:
//! `gather`, `scatter`, `all_to_allv` and `all_gatherv`, with the semantics
//! of [`Communicator`](crate::Communicator)'s methods of the same names.
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
use crate::device::{
    DevAddr, DeviceP2p, DeviceRange, DirectExchange, GathervLayout, ScatterLayout,
};
use crate::host::Element;

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
        self.check_capturable(stream, call)?;
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
        let queue = self.queue(stream, call)?;
        crate::device::enqueue_device_exchange(&self.comm, &queue, &self.shared, &ops, direct_form)
    }

    /// Gathers `send` from every rank into `recv` at `root`, block `j` from
    /// rank `j` (`count = send.len()`; `recv` at the root holds at least
    /// `size * count`, and is neither read nor written on other ranks, where
    /// any buffer will do).
    ///
    /// # Examples
    /// ```no_run
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// let (rank, size) = (comm.rank(), comm.size());
    /// let send = stream.clone_htod(&[rank as f32; 4]).expect("copy");
    /// let mut recv = stream.alloc_zeros::<f32>(4 * size).expect("alloc"); // used at the root only
    /// cuda.gather(&send, &mut recv, 0, &stream)?;
    /// let all = stream.clone_dtoh(&recv).expect("copy"); // rank 0: [0,0,0,0, 1,1,1,1, …]
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a root out of range, a root `recv`
    /// shorter than `size * count`, or a stream of another context; the
    /// stored error if the communicator has failed.
    pub fn gather<T: Element>(
        &self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        root: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        let x = Exchange::Gather {
            root,
            count: send.len(),
        };
        // A non-root's `recv` is not touched at all.
        let recv = (self.comm.rank() == root).then_some(recv);
        self.post_exchange(x, Some(send), recv, stream)
    }

    /// Scatters block `j` of `send` at `root` to rank `j`'s `recv` (`count
    /// = recv.len()`; `send` at the root holds at least `size * count`, and
    /// is not read on other ranks, where any buffer will do).
    ///
    /// # Examples
    /// ```no_run
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// let blocks: Vec<f32> = (0..4 * comm.size()).map(|i| i as f32).collect();
    /// let send = stream.clone_htod(&blocks).expect("copy"); // read at the root only
    /// let mut recv = stream.alloc_zeros::<f32>(4).expect("alloc");
    /// cuda.scatter(&send, &mut recv, 0, &stream)?;
    /// let mine = stream.clone_dtoh(&recv).expect("copy"); // blocks[4 * rank..][..4]
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`CudaComm::gather`], with the root's `send` too short.
    pub fn scatter<T: Element>(
        &self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        root: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        let x = Exchange::Scatter {
            root,
            count: recv.len(),
        };
        // A non-root's `send` is not read at all.
        let send = (self.comm.rank() == root).then_some(send);
        self.post_exchange(x, send, Some(recv), stream)
    }

    /// All-to-all with per-peer counts and displacements (MPI_Alltoallv):
    /// elements `send_displs[j]..+send_counts[j]` of `send` go to rank `j`,
    /// which stores them at `recv_displs[rank]..+recv_counts[rank]` of its
    /// `recv`. Counts may be zero; `recv_counts[j]` must be at least what
    /// rank `j` sends here (elements past a shorter message keep their
    /// contents).
    ///
    /// # Examples
    /// ```no_run
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// // Rank r sends r + 1 elements to every rank.
    /// let (r, n) = (comm.rank(), comm.size());
    /// let send_counts = vec![r + 1; n];
    /// let send_displs: Vec<usize> = (0..n).map(|j| j * (r + 1)).collect();
    /// let recv_counts: Vec<usize> = (0..n).map(|j| j + 1).collect();
    /// let recv_displs: Vec<usize> = (0..n).map(|j| j * (j + 1) / 2).collect();
    /// let send = stream.clone_htod(&vec![r as f32; n * (r + 1)]).expect("copy");
    /// let mut recv = stream.alloc_zeros::<f32>(n * (n + 1) / 2).expect("alloc");
    /// cuda.all_to_allv(
    ///     &send, &send_counts, &send_displs, &mut recv, &recv_counts, &recv_displs, &stream,
    /// )?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when a count or displacement list is not
    /// one per rank, a region lies outside its buffer, receive regions
    /// overlap, or the stream is of another context; the stored error if the
    /// communicator has failed.
    #[allow(clippy::too_many_arguments)]
    pub fn all_to_allv<T: Element>(
        &self,
        send: &impl DevicePtr<T>,
        send_counts: &[usize],
        send_displs: &[usize],
        recv: &mut impl DevicePtrMut<T>,
        recv_counts: &[usize],
        recv_displs: &[usize],
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        let x = Exchange::AllToAllv {
            send_counts,
            send_displs,
            recv_counts,
            recv_displs,
        };
        self.post_exchange(x, Some(send), Some(recv), stream)
    }

    /// Every rank's `send` into every rank's `recv`, rank `j`'s elements at
    /// `displs[j]..+counts[j]` (`MPI_Allgatherv`; this rank's `send` holds
    /// `counts[rank]` elements; counts may be zero, regions must not
    /// overlap), as [`Communicator::all_gatherv`](crate::Communicator::all_gatherv).
    ///
    /// # Examples
    /// ```no_run
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// // Rank r contributes r + 1 elements.
    /// let (r, n) = (comm.rank(), comm.size());
    /// let counts: Vec<usize> = (0..n).map(|j| j + 1).collect();
    /// let displs: Vec<usize> = (0..n).map(|j| j * (j + 1) / 2).collect();
    /// let send = stream.clone_htod(&vec![r as f32; r + 1]).expect("copy");
    /// let mut recv = stream.alloc_zeros::<f32>(n * (n + 1) / 2).expect("alloc");
    /// cuda.all_gatherv(&send, &mut recv, &counts, &displs, &stream)?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when
    /// `counts` or `displs` is not one entry per rank, `send` does not hold
    /// `counts[rank]` elements, a region lies outside `recv`, regions
    /// overlap, or the stream is of another context; the stored error if
    /// the communicator has failed.
    pub fn all_gatherv<T: Element>(
        &self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        counts: &[usize],
        displs: &[usize],
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        let x = Exchange::AllGatherv { counts, displs };
        self.post_exchange(x, Some(send), Some(recv), stream)
    }
}
