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
use crate::plan::Collective;
use crate::{Error, ReduceOp, Result};

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
    /// [`Error::InvalidArgument`] when `recv` is too small, the element types
    /// differ, or `send` and `recv` are the same buffer; the stored error if
    /// the communicator has failed. Execution errors surface from the stream.
    pub fn all_reduce(
        &self,
        send: &impl AsBufView,
        recv: &mut impl AsBufView,
        op: ReduceOp,
        stream: &HostStream,
    ) -> Result<()> {
        let (s, r) = (send.buf_view(), recv.buf_view());
        let binding = Binding::Separate {
            send: Some(s.clone()),
            recv: Some(r),
        };
        stream.enqueue(self.collective_task(
            Collective::AllReduce,
            s.dtype(),
            op,
            s.len(),
            binding,
        )?)
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
        let v = buf.buf_view();
        let (dtype, count) = (v.dtype(), v.len());
        stream.enqueue(self.collective_task(
            Collective::AllReduce,
            dtype,
            op,
            count,
            Binding::InPlace(v),
        )?)
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
        let (s, r) = (send.buf_view(), recv.buf_view());
        let (dtype, count) = (r.dtype(), r.len());
        let send = (self.rank() == root).then_some(s);
        let binding = Binding::Separate {
            send,
            recv: Some(r),
        };
        stream.enqueue(self.collective_task(
            Collective::Broadcast { root },
            dtype,
            ReduceOp::Sum,
            count,
            binding,
        )?)
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
        let v = buf.buf_view();
        let (dtype, count) = (v.dtype(), v.len());
        stream.enqueue(self.collective_task(
            Collective::Broadcast { root },
            dtype,
            ReduceOp::Sum,
            count,
            Binding::InPlace(v),
        )?)
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
        let (s, r) = (send.buf_view(), recv.buf_view());
        let (dtype, count) = (s.dtype(), s.len());
        let recv = (self.rank() == root).then_some(r);
        let binding = Binding::Separate {
            send: Some(s),
            recv,
        };
        stream.enqueue(self.collective_task(
            Collective::Reduce { root },
            dtype,
            op,
            count,
            binding,
        )?)
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
        let v = buf.buf_view();
        let (dtype, count) = (v.dtype(), v.len());
        stream.enqueue(self.collective_task(
            Collective::Reduce { root },
            dtype,
            op,
            count,
            Binding::InPlace(v),
        )?)
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
        let (s, r) = (send.buf_view(), recv.buf_view());
        let (dtype, count) = (s.dtype(), s.len());
        let binding = Binding::Separate {
            send: Some(s),
            recv: Some(r),
        };
        stream.enqueue(self.collective_task(
            Collective::AllGather,
            dtype,
            ReduceOp::Sum,
            count,
            binding,
        )?)
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
        let v = buf.buf_view();
        let count = self.per_rank(v.len(), "all_gather_in_place")?;
        stream.enqueue(self.collective_task(
            Collective::AllGather,
            v.dtype(),
            ReduceOp::Sum,
            count,
            Binding::InPlace(v),
        )?)
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
        let (s, r) = (send.buf_view(), recv.buf_view());
        let (dtype, count) = (r.dtype(), r.len());
        let binding = Binding::Separate {
            send: Some(s),
            recv: Some(r),
        };
        stream.enqueue(self.collective_task(
            Collective::ReduceScatter,
            dtype,
            op,
            count,
            binding,
        )?)
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
        let v = buf.buf_view();
        let count = self.per_rank(v.len(), "reduce_scatter_in_place")?;
        stream.enqueue(self.collective_task(
            Collective::ReduceScatter,
            v.dtype(),
            op,
            count,
            Binding::InPlace(v),
        )?)
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
        let (s, r) = (send.buf_view(), recv.buf_view());
        let (dtype, count) = (s.dtype(), self.per_rank(s.len(), "all_to_all")?);
        let binding = Binding::Separate {
            send: Some(s),
            recv: Some(r),
        };
        stream.enqueue(self.collective_task(
            Collective::AllToAll,
            dtype,
            ReduceOp::Sum,
            count,
            binding,
        )?)
    }

    fn per_rank(&self, len: usize, what: &str) -> Result<usize> {
        let size = self.inner.core.size();
        if !len.is_multiple_of(size) {
            return Err(Error::invalid(format!(
                "{what}: buffer of {len} elements is not divisible by the {size} ranks"
            )));
        }
        Ok(len / size)
    }
}
