//! The collectives of [`CudaComm`] that are groups of sends and receives:
//! `gather`, `scatter` and `all_to_allv`, with the semantics of
//! [`Communicator`](crate::Communicator)'s methods of the same names. Each
//! is one device group on the caller's stream (the staged path, as every
//! group), its blocks regions of the caller's buffers.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut};

use super::CudaComm;
use crate::comm::p2p::{Dir, check_one_per_rank};
use crate::device::{DevAddr, DeviceP2p, DeviceRange};
use crate::host::Element;
use crate::{Error, Result};

/// `count` elements of `T` at element `offset` of a buffer of `len`
/// elements at `base`, or an error naming the call and the buffer.
fn region<T: Element>(
    what: &str,
    buffer: &str,
    (base, len): (DevAddr, usize),
    offset: usize,
    count: usize,
) -> Result<DeviceRange> {
    match offset.checked_add(count) {
        Some(end) if end <= len => Ok(DeviceRange {
            addr: base + (offset * T::DTYPE.size()) as u64,
            len: count,
        }),
        _ => Err(Error::invalid(format!(
            "{what}: {buffer} region {offset}..{offset}+{count} lies outside its {len} elements"
        ))),
    }
}

fn op<T: Element>(dir: Dir, peer: usize, range: DeviceRange) -> DeviceP2p {
    DeviceP2p {
        dir,
        peer,
        dtype: T::DTYPE,
        range,
    }
}

fn check_root(what: &str, root: usize, size: usize) -> Result<()> {
    if root >= size {
        return Err(Error::invalid(format!(
            "{what}: root {root} is out of range for {size} ranks"
        )));
    }
    Ok(())
}

impl CudaComm {
    /// Enqueues `ops` as one group on `stream`.
    fn enqueue_group(&self, what: &str, ops: &[DeviceP2p], stream: &Arc<CudaStream>) -> Result<()> {
        let queue = self.queue(stream, what)?;
        crate::device::enqueue_device_group(&self.comm, &queue, &self.shared, ops)
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
    /// [`Error::InvalidArgument`] for a root out of range, a root `recv`
    /// shorter than `size * count`, or a stream of another context; the
    /// stored error if the communicator has failed.
    pub fn gather<T: Element>(
        &self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        root: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        self.check_capturable(stream, "gather")?;
        let (n, me) = (self.comm.size(), self.comm.rank());
        check_root("gather", root, n)?;
        let count = send.len();
        let recv_len = recv.len();
        if me == root && recv_len < n * count {
            return Err(Error::invalid(format!(
                "gather: recv holds {recv_len} elements, the root needs size x count = \
                 {n} x {count} = {}",
                n * count
            )));
        }
        // cudarc's tracking: the guards record this call's uses on drop,
        // after the enqueue; a non-root's `recv` is not touched at all.
        let (s, _read) = send.device_ptr(stream);
        let mut ops = vec![op::<T>(
            Dir::Send,
            root,
            region::<T>("gather", "send", (s, count), 0, count)?,
        )];
        let _write = if me == root {
            let (r, guard) = recv.device_ptr_mut(stream);
            for j in 0..n {
                let range = region::<T>("gather", "recv", (r, recv_len), j * count, count)?;
                ops.push(op::<T>(Dir::Recv, j, range));
            }
            Some(guard)
        } else {
            None
        };
        self.enqueue_group("gather", &ops, stream)
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
        self.check_capturable(stream, "scatter")?;
        let (n, me) = (self.comm.size(), self.comm.rank());
        check_root("scatter", root, n)?;
        let count = recv.len();
        let send_len = send.len();
        if me == root && send_len < n * count {
            return Err(Error::invalid(format!(
                "scatter: send holds {send_len} elements, the root needs size x count = \
                 {n} x {count} = {}",
                n * count
            )));
        }
        let mut ops = Vec::with_capacity(n + 1);
        let _read = if me == root {
            let (s, guard) = send.device_ptr(stream);
            for j in 0..n {
                let range = region::<T>("scatter", "send", (s, send_len), j * count, count)?;
                ops.push(op::<T>(Dir::Send, j, range));
            }
            Some(guard)
        } else {
            None
        };
        let (r, _write) = recv.device_ptr_mut(stream);
        let range = region::<T>("scatter", "recv", (r, count), 0, count)?;
        ops.push(op::<T>(Dir::Recv, root, range));
        self.enqueue_group("scatter", &ops, stream)
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
    /// [`Error::InvalidArgument`] when a count or displacement list is not
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
        self.check_capturable(stream, "all_to_allv")?;
        let (n, me) = (self.comm.size(), self.comm.rank());
        check_one_per_rank(n, [send_counts, send_displs, recv_counts, recv_displs])?;
        let (send_len, recv_len) = (send.len(), recv.len());
        let (s, _read) = send.device_ptr(stream);
        let (r, _write) = recv.device_ptr_mut(stream);
        let mut ops = Vec::with_capacity(2 * n);
        // Pairwise order, as the host backend posts them (round k: send to
        // me+k, receive from me-k); a group progresses as a whole anyway.
        for k in 0..n {
            let (to, from) = ((me + k) % n, (me + n - k) % n);
            let out = region::<T>(
                "all_to_allv",
                "send",
                (s, send_len),
                send_displs[to],
                send_counts[to],
            )?;
            let inb = region::<T>(
                "all_to_allv",
                "recv",
                (r, recv_len),
                recv_displs[from],
                recv_counts[from],
            )?;
            ops.push(op::<T>(Dir::Send, to, out));
            ops.push(op::<T>(Dir::Recv, from, inb));
        }
        self.enqueue_group("all_to_allv", &ops, stream)
    }
}
