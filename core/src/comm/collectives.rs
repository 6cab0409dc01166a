//! The operations users enqueue: collectives, point-to-point and barriers.
//!
//! Every call validates its arguments, builds the plan (a pure function, see
//! [`crate::plan`]) and enqueues one task on the stream, then returns.
//!
//! What "enqueued" and "capturable" promise is said once, on
//! [`Communicator`](super::Communicator) (*Stream semantics*, *Graph capture*).

use crate::comm::Communicator;
use crate::comm::buffer::{AsBufView, Binding};
use crate::comm::submit::Submit;
use crate::host::HostStream;
use crate::plan::{Collective, CountFrom, Lens, count_from};
use crate::{ReduceOp, Result};

impl Communicator {
    /// Element-wise reduction of every rank's `send` into every rank's `recv`
    /// (`count = send.len()`; `recv` must hold at least as many).
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
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// let send = HostBuffer::from_slice(&[comm.rank() as f32 + 1.0; 4]);
    /// let mut recv = HostBuffer::<f32>::zeroed(4);
    /// comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &stream)?; // returns at once
    /// stream.synchronize()?;
    /// assert_eq!(recv.to_vec(), vec![3.0; 4]); // 1 + 2
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `recv` is too small, the element types
    /// differ, or `send` and `recv` are the same buffer; the stored error if
    /// the communicator has failed. Execution errors surface from the stream.
    pub fn all_reduce(
        &self,
        send: &impl AsBufView,
        recv: &mut impl AsBufView,
        op: ReduceOp,
        stream: &HostStream,
    ) -> Result<()> {
        self.separate(Collective::AllReduce, op, send, recv, stream)
    }

    /// [`Communicator::all_reduce`] with one buffer as input and output.
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
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// let mut buf = HostBuffer::from_slice(&[comm.rank() as i64; 3]);
    /// comm.all_reduce_in_place(&mut buf, ReduceOp::Max, &stream)?;
    /// stream.synchronize()?;
    /// assert_eq!(buf.to_vec(), vec![1; 3]);
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Communicator::all_reduce`].
    pub fn all_reduce_in_place(
        &self,
        buf: &mut impl AsBufView,
        op: ReduceOp,
        stream: &HostStream,
    ) -> Result<()> {
        self.in_place(Collective::AllReduce, op, buf, stream)
    }

    /// Copies `root`'s `send` into every rank's `recv` (`count = recv.len()`;
    /// `send` is read on the root only, and may be any buffer elsewhere).
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
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// let send = HostBuffer::from_slice(&[7u8, 8, 9]); // read on the root only
    /// let mut recv = HostBuffer::<u8>::zeroed(3);
    /// comm.broadcast(&send, &mut recv, 0, &stream)?;
    /// stream.synchronize()?;
    /// assert_eq!(recv.to_vec(), vec![7, 8, 9]);
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Communicator::all_reduce`], plus a root out of range.
    pub fn broadcast(
        &self,
        send: &impl AsBufView,
        recv: &mut impl AsBufView,
        root: usize,
        stream: &HostStream,
    ) -> Result<()> {
        let broadcast = Collective::Broadcast { root };
        self.separate(broadcast, ReduceOp::Sum, send, recv, stream)
    }

    /// [`Communicator::broadcast`] in one buffer (the root's is the source).
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
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// let mut weights = HostBuffer::<f64>::zeroed(4);
    /// if comm.rank() == 0 {
    ///     weights.copy_from(&[0.5; 4])?;
    /// }
    /// comm.broadcast_in_place(&mut weights, 0, &stream)?;
    /// stream.synchronize()?;
    /// assert_eq!(weights.to_vec(), vec![0.5; 4]);
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Communicator::broadcast`].
    pub fn broadcast_in_place(
        &self,
        buf: &mut impl AsBufView,
        root: usize,
        stream: &HostStream,
    ) -> Result<()> {
        self.in_place(Collective::Broadcast { root }, ReduceOp::Sum, buf, stream)
    }

    /// Reduces every rank's `send` into `root`'s `recv` (`count = send.len()`;
    /// `recv` is written on the root only).
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
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// let send = HostBuffer::from_slice(&[comm.rank() as f32 + 1.0; 2]);
    /// let mut recv = HostBuffer::<f32>::zeroed(2); // written on the root only
    /// comm.reduce(&send, &mut recv, ReduceOp::Prod, 1, &stream)?;
    /// stream.synchronize()?;
    /// if comm.rank() == 1 {
    ///     assert_eq!(recv.to_vec(), vec![2.0; 2]);
    /// }
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Communicator::broadcast`].
    pub fn reduce(
        &self,
        send: &impl AsBufView,
        recv: &mut impl AsBufView,
        op: ReduceOp,
        root: usize,
        stream: &HostStream,
    ) -> Result<()> {
        self.separate(Collective::Reduce { root }, op, send, recv, stream)
    }

    /// [`Communicator::reduce`] in one buffer.
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
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// let mut buf = HostBuffer::from_slice(&[comm.rank() as u32 + 1; 2]);
    /// comm.reduce_in_place(&mut buf, ReduceOp::Sum, 0, &stream)?;
    /// stream.synchronize()?;
    /// if comm.rank() == 0 {
    ///     assert_eq!(buf.to_vec(), vec![3, 3]);
    /// }
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Communicator::reduce`].
    pub fn reduce_in_place(
        &self,
        buf: &mut impl AsBufView,
        op: ReduceOp,
        root: usize,
        stream: &HostStream,
    ) -> Result<()> {
        self.in_place(Collective::Reduce { root }, op, buf, stream)
    }

    /// Concatenates every rank's `send` (in rank order) into every rank's
    /// `recv` (`count = send.len()`; `recv` holds at least `size * count`).
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
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// let send = HostBuffer::from_slice(&[comm.rank() as i32; 2]);
    /// let mut recv = HostBuffer::<i32>::zeroed(2 * comm.size());
    /// comm.all_gather(&send, &mut recv, &stream)?;
    /// stream.synchronize()?;
    /// assert_eq!(recv.to_vec(), vec![0, 0, 1, 1]);
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Communicator::all_reduce`].
    pub fn all_gather(
        &self,
        send: &impl AsBufView,
        recv: &mut impl AsBufView,
        stream: &HostStream,
    ) -> Result<()> {
        self.separate(Collective::AllGather, ReduceOp::Sum, send, recv, stream)
    }

    /// [`Communicator::all_gather`] in one buffer of `size * count` elements,
    /// this rank's input at `rank * count` (NCCL's in-place layout).
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
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// let mut buf = HostBuffer::<i32>::zeroed(2 * comm.size());
    /// buf.with_mut(|s| s[comm.rank() * 2..][..2].fill(comm.rank() as i32 + 5));
    /// comm.all_gather_in_place(&mut buf, &stream)?;
    /// stream.synchronize()?;
    /// assert_eq!(buf.to_vec(), vec![5, 5, 6, 6]);
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Communicator::all_reduce`], plus a length not divisible by the size.
    pub fn all_gather_in_place(&self, buf: &mut impl AsBufView, stream: &HostStream) -> Result<()> {
        self.in_place(Collective::AllGather, ReduceOp::Sum, buf, stream)
    }

    /// Reduces every rank's `send` (`size * count` elements) and leaves block
    /// `rank` of the result in `recv` (`count = recv.len()`).
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
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// let send = HostBuffer::from_slice(&[1.0f32, 2.0, 3.0, 4.0]); // size * count
    /// let mut recv = HostBuffer::<f32>::zeroed(2); // count
    /// comm.reduce_scatter(&send, &mut recv, ReduceOp::Sum, &stream)?;
    /// stream.synchronize()?;
    /// let want = if comm.rank() == 0 { [2.0, 4.0] } else { [6.0, 8.0] };
    /// assert_eq!(recv.to_vec(), want);
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Communicator::all_reduce`].
    pub fn reduce_scatter(
        &self,
        send: &impl AsBufView,
        recv: &mut impl AsBufView,
        op: ReduceOp,
        stream: &HostStream,
    ) -> Result<()> {
        self.separate(Collective::ReduceScatter, op, send, recv, stream)
    }

    /// [`Communicator::reduce_scatter`] in one buffer of `size * count`
    /// elements; the result lands at `rank * count`.
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
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// let mut buf = HostBuffer::from_slice(&[1.0f32, 2.0, 3.0, 4.0]);
    /// comm.reduce_scatter_in_place(&mut buf, ReduceOp::Sum, &stream)?;
    /// stream.synchronize()?;
    /// let mine = buf.to_vec()[comm.rank() * 2..][..2].to_vec();
    /// assert_eq!(mine, if comm.rank() == 0 { [2.0, 4.0] } else { [6.0, 8.0] });
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Communicator::all_gather_in_place`].
    pub fn reduce_scatter_in_place(
        &self,
        buf: &mut impl AsBufView,
        op: ReduceOp,
        stream: &HostStream,
    ) -> Result<()> {
        self.in_place(Collective::ReduceScatter, op, buf, stream)
    }

    /// Sends block `j` of `send` to rank `j`, which stores it as block `rank`
    /// of its `recv` (`count = send.len() / size` per block).
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
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// let r = comm.rank() as u32;
    /// let send = HostBuffer::from_slice(&[10 * r, 10 * r + 1]); // block j goes to rank j
    /// let mut recv = HostBuffer::<u32>::zeroed(2);
    /// comm.all_to_all(&send, &mut recv, &stream)?;
    /// stream.synchronize()?;
    /// assert_eq!(recv.to_vec(), vec![r, 10 + r]); // block `rank` of every rank
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Communicator::all_gather_in_place`].
    pub fn all_to_all(
        &self,
        send: &impl AsBufView,
        recv: &mut impl AsBufView,
        stream: &HostStream,
    ) -> Result<()> {
        self.separate(Collective::AllToAll, ReduceOp::Sum, send, recv, stream)
    }

    /// The front door of every collective with separate buffers: NCCL's
    /// count and the element type from the buffers by the rule every face
    /// shares ([`crate::plan::count_from`]), a rooted collective's buffer
    /// that this rank does not use left out, then one task on `stream`.
    fn separate(
        &self,
        collective: Collective,
        op: ReduceOp,
        send: &impl AsBufView,
        recv: &mut impl AsBufView,
        stream: &HostStream,
    ) -> Result<()> {
        let (s, r) = (send.buf_view(), recv.buf_view());
        let lens = Lens::Separate {
            send: s.len(),
            recv: r.len(),
        };
        let core = &self.inner.core;
        let (count, from) = count_from(collective, lens, core.size())?;
        let dtype = match from {
            CountFrom::Recv => r.dtype(),
            _ => s.dtype(),
        };
        let rank = core.rank();
        let reads = !matches!(collective, Collective::Broadcast { root } if root != rank);
        let writes = !matches!(collective, Collective::Reduce { root } if root != rank);
        let binding = Binding::Separate {
            send: reads.then_some(s),
            recv: writes.then_some(r),
        };
        stream.enqueue(self.collective_task(collective, dtype, op, count, binding)?)
    }

    /// The front door of every collective in one buffer (NCCL's in-place
    /// layout), as [`Communicator::separate`].
    fn in_place(
        &self,
        collective: Collective,
        op: ReduceOp,
        buf: &mut impl AsBufView,
        stream: &HostStream,
    ) -> Result<()> {
        let v = buf.buf_view();
        let size = self.inner.core.size();
        let (count, _) = count_from(collective, Lens::InPlace(v.len()), size)?;
        let dtype = v.dtype();
        stream.enqueue(self.collective_task(collective, dtype, op, count, Binding::InPlace(v))?)
    }
}
