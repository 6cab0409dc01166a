//! The collectives of a host stream that are groups of sends and
//! receives: `gather`, `scatter`, `all_to_allv` and `all_gatherv`. Each
//! describes itself as an [`Exchange`], whose lowering (shared with the
//! CUDA backend and the C API) checks it and gives this rank's transfers;
//! they are posted as one group.

use super::exchange::Exchange;
use super::{BufView, Dir};
use crate::comm::Communicator;
use crate::comm::buffer::AsBufView;
use crate::host::HostStream;
use crate::{Error, Result};

impl Communicator {
    /// Checks `x` against `send` and `recv`, then posts this rank's
    /// transfers as one group on `stream`.
    fn post_exchange(
        &self,
        x: Exchange<'_>,
        send: &BufView,
        recv: &BufView,
        stream: &HostStream,
    ) -> Result<()> {
        let core = &self.inner.core;
        let transfers = x.lower(core.rank(), core.size(), send.len(), recv.len())?;
        let uses = |dir| transfers.iter().any(|t| t.dir == dir);
        if uses(Dir::Send) && uses(Dir::Recv) {
            check_pair(x.call(), send, recv)?;
        }
        self.group_named(&x.name(), stream, |g| {
            for t in &transfers {
                match t.dir {
                    Dir::Send => g.send_region(send, t.offset, t.count, t.peer)?,
                    Dir::Recv => g.recv_region(recv, t.offset, t.count, t.peer)?,
                }
            }
            Ok(())
        })
    }

    /// All-to-all with per-peer counts and displacements (MPI_Alltoallv):
    /// elements `send_displs[j]..+send_counts[j]` of `send` go to rank `j`,
    /// which stores them at `recv_displs[rank]..+recv_counts[rank]` of its
    /// `recv`. Counts may be zero; `recv_counts[j]` must be at least what
    /// rank `j` sends here.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// // Rank 0 sends 1 element to itself and 2 to rank 1; rank 1 sends 3 and 1.
    /// let r = comm.rank();
    /// let (send_counts, recv_counts) = if r == 0 { ([1, 2], [1, 3]) } else { ([3, 1], [2, 1]) };
    /// let send_displs = [0, send_counts[0]];
    /// let recv_displs = [0, recv_counts[0]];
    /// let send = HostBuffer::from_slice(&vec![r as f32; 3 + r]);
    /// let mut recv = HostBuffer::<f32>::zeroed(recv_counts.iter().sum());
    /// comm.all_to_allv(&send, &send_counts, &send_displs, &mut recv, &recv_counts, &recv_displs, &stream)?;
    /// stream.synchronize()?;
    /// let want = if r == 0 { vec![0.0, 1.0, 1.0, 1.0] } else { vec![0.0, 0.0, 1.0] };
    /// assert_eq!(recv.to_vec(), want);
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when a count or displacement list is not
    /// one per rank, a region lies outside its buffer, receive regions
    /// overlap, or the buffers are the same or of different types.
    #[allow(clippy::too_many_arguments)]
    pub fn all_to_allv(
        &self,
        send: &impl AsBufView,
        send_counts: &[usize],
        send_displs: &[usize],
        recv: &mut impl AsBufView,
        recv_counts: &[usize],
        recv_displs: &[usize],
        stream: &HostStream,
    ) -> Result<()> {
        let x = Exchange::AllToAllv {
            send_counts,
            send_displs,
            recv_counts,
            recv_displs,
        };
        self.post_exchange(x, &send.buf_view(), &recv.buf_view(), stream)
    }

    /// Gathers `send` from every rank into `recv` at `root`, block `j` from
    /// rank `j` (`count = send.len()`, `recv` at the root holds `size *
    /// count`; other ranks' `recv` is not used and may be empty).
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// let send = HostBuffer::from_slice(&[comm.rank() as u32 * 10; 2]);
    /// let mut recv = HostBuffer::<u32>::zeroed(if comm.rank() == 0 { 4 } else { 0 });
    /// comm.gather(&send, &mut recv, 0, &stream)?;
    /// stream.synchronize()?;
    /// if comm.rank() == 0 {
    ///     assert_eq!(recv.to_vec(), vec![0, 0, 10, 10]);
    /// }
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a root out of range, a root `recv` too
    /// small, or mismatched element types.
    pub fn gather(
        &self,
        send: &impl AsBufView,
        recv: &mut impl AsBufView,
        root: usize,
        stream: &HostStream,
    ) -> Result<()> {
        let s = send.buf_view();
        let count = s.len();
        self.post_exchange(
            Exchange::Gather { root, count },
            &s,
            &recv.buf_view(),
            stream,
        )
    }

    /// Scatters block `j` of `send` at `root` to rank `j`'s `recv` (`count =
    /// recv.len()`, `send` at the root holds `size * count`; other ranks'
    /// `send` is not used and may be empty).
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// let send = HostBuffer::from_slice(&[1u32, 2, 3, 4]); // read on the root only
    /// let mut recv = HostBuffer::<u32>::zeroed(2);
    /// comm.scatter(&send, &mut recv, 0, &stream)?;
    /// stream.synchronize()?;
    /// assert_eq!(recv.to_vec(), if comm.rank() == 0 { [1, 2] } else { [3, 4] });
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Communicator::gather`].
    pub fn scatter(
        &self,
        send: &impl AsBufView,
        recv: &mut impl AsBufView,
        root: usize,
        stream: &HostStream,
    ) -> Result<()> {
        let r = recv.buf_view();
        let count = r.len();
        self.post_exchange(
            Exchange::Scatter { root, count },
            &send.buf_view(),
            &r,
            stream,
        )
    }

    /// Every rank's `send` into every rank's `recv`, rank `j`'s elements at
    /// `displs[j]..+counts[j]` (`MPI_Allgatherv`): all-gather with a count
    /// of its own for each rank, such as uneven shares of a tensor. This
    /// rank's `send` holds `counts[rank]` elements; counts may be zero, and
    /// the regions of `recv` must not overlap. Posted as one group of sends
    /// and receives (each rank sends its block to every other rank).
    ///
    /// # Stream semantics
    /// Enqueued on `stream`, not complete, on return
    /// ([what that means](Communicator#stream-semantics)).
    ///
    /// # Graph capture
    /// Capturable ([what replays](Communicator#graph-capture)).
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // On each of two ranks: rank 0 gives one element, rank 1 three.
    /// let (counts, displs) = ([1, 3], [0, 1]);
    /// let r = comm.rank();
    /// let send = HostBuffer::from_slice(&vec![r as i32 + 7; counts[r]]);
    /// let mut recv = HostBuffer::<i32>::zeroed(4);
    /// comm.all_gatherv(&send, &mut recv, &counts, &displs, &stream)?;
    /// stream.synchronize()?;
    /// assert_eq!(recv.to_vec(), vec![7, 8, 8, 8]);
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `counts` or `displs` is not one entry
    /// per rank, `send` does not hold `counts[rank]` elements, a region lies
    /// outside `recv`, regions overlap, or the buffers are the same or of
    /// different types; the stored error if the communicator has failed.
    /// Execution errors surface from the stream.
    pub fn all_gatherv(
        &self,
        send: &impl AsBufView,
        recv: &mut impl AsBufView,
        counts: &[usize],
        displs: &[usize],
        stream: &HostStream,
    ) -> Result<()> {
        let x = Exchange::AllGatherv { counts, displs };
        self.post_exchange(x, &send.buf_view(), &recv.buf_view(), stream)
    }
}

/// Fails when one buffer is passed as both, or their element types differ.
fn check_pair(what: &str, s: &BufView, r: &BufView) -> Result<()> {
    if s.raw().same_as(r.raw()) {
        return Err(Error::invalid(format!(
            "{what}: send and recv are the same buffer"
        )));
    }
    if s.dtype() != r.dtype() {
        return Err(Error::invalid(format!(
            "{what}: dtype mismatch: send buffer holds {}, recv buffer holds {}",
            s.dtype(),
            r.dtype()
        )));
    }
    Ok(())
}
