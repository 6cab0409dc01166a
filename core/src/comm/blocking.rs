//! Host-blocking calls on plain slices, for code without a stream: the
//! calling thread runs the operation in its turn on the communicator (as
//! [`Communicator::barrier_host`] does) and returns when it is complete.
//!
//! # Borrowed memory
//! The caller's slice is used in place, without a copy in or out, and
//! nothing keeps it afterwards. A collective runs its plan on the slices
//! themselves, on the calling thread (its data travels through the
//! library's slots), so after any return (success, error, timeout)
//! nothing writes into them; the plan of the last call of the same shape
//! is reused, so a call in a loop allocates nothing. A send or receive
//! makes a view of the slice for the operation, its only handle, dropped
//! before the call returns (which also drops any RDMA registration made
//! of it, through the buffers' release hooks).
//!
//! A receive ([`Communicator::recv_host`]) never lets another process
//! write into the slice: over shared memory every receive pulls the
//! message from the sender's memory itself (see `comm::p2p`), over tcp a
//! grant is withdrawn, waiting for any write in progress, before the
//! receive returns, and over verbs the registration the peer's NIC writes
//! through is dropped.

use crate::comm::Communicator;
use crate::comm::buffer::BufView;
use crate::comm::exec;
use crate::comm::p2p::{Dir, Now};
use crate::comm::plan_cache::CallKey;
use crate::host::{Element, JobMode, RawBuffer};
use crate::plan::{Buffers, Collective, Plan};
use crate::{DataType, Error, ReduceOp, Result};

/// A view of a caller's slice, for one blocking call. Dropping it checks
/// that the call kept no handle to the memory.
struct Lent<'a> {
    view: BufView,
    _borrow: std::marker::PhantomData<&'a mut [u8]>,
}

impl<'a> Lent<'a> {
    /// `data`, read only (a send buffer).
    fn shared<T: Element>(data: &'a [T]) -> Result<Lent<'a>> {
        // SAFETY: the memory is `data`'s, valid for reads of its bytes for
        // 'a, which outlives this `Lent`; the view is read-only (refused as
        // a receive buffer), so it is never written through, and its every
        // handle is gone when the `Lent` drops (checked there), before the
        // borrow ends.
        let raw = unsafe {
            RawBuffer::from_raw_parts(
                data.as_ptr().cast::<u8>().cast_mut(),
                std::mem::size_of_val(data),
            )?
        };
        Ok(Lent {
            view: BufView::read_only(raw, T::DTYPE, data.len()),
            _borrow: std::marker::PhantomData,
        })
    }

    /// `data`, read and written.
    fn exclusive<T: Element>(data: &'a mut [T]) -> Result<Lent<'a>> {
        // SAFETY: the memory is `data`'s, valid for reads and writes for
        // 'a and, being mutably borrowed, touched by nothing else while
        // the `Lent` lives; every handle to it is gone when the `Lent`
        // drops (checked there), before the borrow ends.
        let raw = unsafe {
            RawBuffer::from_raw_parts(data.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(data))?
        };
        Ok(Lent {
            view: BufView::new(raw, T::DTYPE, data.len()),
            _borrow: std::marker::PhantomData,
        })
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if self.view.raw().handles() != 1 {
            // Memory safety rests on this: the caller's borrow ends now.
            eprintln!("streamcomm: a blocking call kept a handle to the caller's slice; aborting");
            std::process::abort();
        }
    }
}

/// Fails unless `send` and `recv` hold the same number of elements.
fn same_len(call: &str, send: usize, recv: usize) -> Result<()> {
    if send != recv {
        return Err(Error::invalid(format!(
            "{call}: send has {send} elements and recv has {recv}; they must be the same length"
        )));
    }
    Ok(())
}

impl Communicator {
    /// One collective of `count` elements of `dtype`, run by the calling
    /// thread in its turn on the caller's own memory (`bufs` makes the
    /// call's [`Buffers`] for its plan). The plan of the last call of the
    /// same shape is reused, so a call in a loop builds nothing.
    pub(super) fn run_collective_host<'a>(
        &self,
        name: &'static str,
        collective: Collective,
        (dtype, count, op): (DataType, usize, ReduceOp),
        bufs: impl FnOnce(&Plan) -> Result<Buffers<'a>>,
    ) -> Result<()> {
        self.inner.core.failure().check()?;
        let plan = self.inner.core.plan(CallKey {
            collective,
            dtype,
            op,
            count,
        })?;
        let mut bufs = bufs(&plan)?;
        let ticket = self.inner.core.turns().take();
        self.inner
            .core
            .run_ticketed(ticket, JobMode::Run, name, |c| {
                exec::run_plan_on(c, &plan, &mut bufs, ticket)
            })
    }

    /// Element-wise reduction of every rank's `send` into every rank's
    /// `recv`, from the calling thread, returning when it is complete. It
    /// takes its turn in this communicator's issue order (after earlier
    /// stream operations of this communicator), as
    /// [`Communicator::barrier_host`] does. The slices are used in place, no
    /// copy; nothing touches them after the call returns.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # streamcomm::testing::on_two_ranks(|comm, _stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// let send = vec![comm.rank() as f32 + 1.0; 4];
    /// let mut recv = vec![0.0f32; 4];
    /// comm.all_reduce_host(&send, &mut recv, ReduceOp::Sum)?; // returns when done
    /// assert_eq!(recv, vec![3.0; 4]); // 1 + 2
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `send` and `recv` differ in length;
    /// the stored error if the communicator has failed; execution errors
    /// ([`Error::Timeout`], [`Error::RemoteFailed`], [`Error::Aborted`])
    /// directly.
    pub fn all_reduce_host<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        same_len("all_reduce_host", send.len(), recv.len())?;
        let shape = (T::DTYPE, send.len(), op);
        self.run_collective_host("all_reduce_host", Collective::AllReduce, shape, move |_| {
            Ok(Buffers::Separate {
                send: bytemuck::cast_slice(send),
                recv: bytemuck::cast_slice_mut(recv),
            })
        })
    }

    /// [`Communicator::all_reduce_host`] with one slice as input and output.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # streamcomm::testing::on_two_ranks(|comm, _stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// let mut grads = vec![comm.rank() as f64; 3];
    /// comm.all_reduce_in_place_host(&mut grads, ReduceOp::Max)?;
    /// assert_eq!(grads, vec![1.0; 3]);
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Communicator::all_reduce_host`], without the length check.
    pub fn all_reduce_in_place_host<T: Element>(&self, data: &mut [T], op: ReduceOp) -> Result<()> {
        let shape = (T::DTYPE, data.len(), op);
        self.run_collective_host(
            "all_reduce_in_place_host",
            Collective::AllReduce,
            shape,
            move |plan| Buffers::in_place(plan, bytemuck::cast_slice_mut(data)),
        )
    }

    /// Copies `root`'s `data` into every other rank's `data`, in place,
    /// from the calling thread (ordered and bound as
    /// [`Communicator::all_reduce_host`]). Every rank passes the same length.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # streamcomm::testing::on_two_ranks(|comm, _stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// let mut weights = if comm.rank() == 1 { vec![0.25f32; 4] } else { vec![0.0; 4] };
    /// comm.broadcast_host(&mut weights, 1)?;
    /// assert_eq!(weights, vec![0.25; 4]);
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Communicator::all_reduce_in_place_host`], plus a root out of
    /// range.
    pub fn broadcast_host<T: Element>(&self, data: &mut [T], root: usize) -> Result<()> {
        let shape = (T::DTYPE, data.len(), ReduceOp::Sum);
        self.run_collective_host(
            "broadcast_host",
            Collective::Broadcast { root },
            shape,
            move |plan| Buffers::in_place(plan, bytemuck::cast_slice_mut(data)),
        )
    }

    /// Sends `data` to `peer` from the calling thread, returning when the
    /// message is delivered (eager: in the peer's ring; rendezvous: in the
    /// peer's buffer), like `MPI_Send`. It takes its turn in this
    /// communicator's issue order, as [`Communicator::barrier_host`] does,
    /// so it waits for earlier stream operations of this communicator. The
    /// slice is sent in place (no copy); a [`HostBuffer`](crate::host::HostBuffer) is sent as
    /// `comm.send_host(&buf.read(), peer)`.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::HostBuffer;
    /// # streamcomm::testing::on_two_ranks(|comm, _stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// if comm.rank() == 0 {
    ///     comm.send_host(&[1i32; 4], 1)?; // returns once delivered
    ///     let buf = HostBuffer::from_slice(&[2i32; 4]);
    ///     comm.send_host(&buf.read(), 1)?; // a HostBuffer's elements
    /// } else {
    ///     let mut got = [0i32; 4];
    ///     comm.recv_host(&mut got, 0)?;
    ///     assert_eq!(got, [1; 4]);
    ///     let mut buf = HostBuffer::<i32>::zeroed(4);
    ///     comm.recv_host(&mut buf.write(), 0)?;
    ///     assert_eq!(buf.to_vec(), vec![2; 4]);
    /// }
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Communicator::send`], plus execution errors (timeout, peer
    /// failure) directly.
    pub fn send_host<T: Element>(&self, data: &[T], peer: usize) -> Result<()> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        match self.send_now(bytes, T::DTYPE, data.len(), peer) {
            Now::Completed => Ok(()),
            not_now => self.send_host_full(data, peer, not_now),
        }
    }

    /// [`Communicator::send_host`] when the immediate path did not finish
    /// it. Kept out of line, so that the immediate path's caller stays
    /// small (its prologue alone was a tenth of a verbs host send).
    #[inline(never)]
    fn send_host_full<T: Element>(&self, data: &[T], peer: usize, not_now: Now) -> Result<()> {
        let ticket = not_now.ticket();
        let lent = match Lent::shared(data) {
            Ok(lent) => lent,
            Err(e) => return Err(self.give_up_turn(ticket, "send_host", e)),
        };
        self.run_host_in_turn("send_host", Dir::Send, peer, &lent.view, ticket)
    }

    /// Receives a message from `peer` into the front of `data` on the
    /// calling thread, returning when it has arrived (`MPI_Recv`); ordered
    /// like [`Communicator::send_host`]. A shorter message leaves the rest
    /// of `data` as it was; a longer one fails with [`Error::RemoteFailed`].
    ///
    /// The message lands in `data` without a copy through a buffer of the
    /// library's, and no other process writes into `data`: from a peer
    /// over shared memory a large message is pulled from the sender's
    /// memory by the calling thread, so nothing can reach `data` after a
    /// failed call returns; over tcp a grant is withdrawn (waiting for any
    /// write in progress) and over verbs the registration is dropped before
    /// the call returns.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # streamcomm::testing::on_two_ranks(|comm, _stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// let mut inbox = [0u8; 8]; // may be larger than the message
    /// if comm.rank() == 1 {
    ///     comm.send_host(b"hello", 0)?;
    /// } else {
    ///     comm.recv_host(&mut inbox, 1)?; // returns once arrived
    ///     assert_eq!(&inbox, b"hello\0\0\0");
    /// }
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Communicator::recv`], plus execution errors directly.
    pub fn recv_host<T: Element>(&self, data: &mut [T], peer: usize) -> Result<()> {
        match self.recv_now(bytemuck::cast_slice_mut(data), T::DTYPE, peer) {
            Now::Completed => Ok(()),
            not_now => self.recv_host_full(data, peer, not_now),
        }
    }

    /// [`Communicator::recv_host`] when the immediate path did not finish
    /// it (out of line, as [`Communicator::send_host_full`]).
    #[inline(never)]
    fn recv_host_full<T: Element>(&self, data: &mut [T], peer: usize, not_now: Now) -> Result<()> {
        let ticket = not_now.ticket();
        let lent = match Lent::exclusive(data) {
            Ok(lent) => lent,
            Err(e) => return Err(self.give_up_turn(ticket, "recv_host", e)),
        };
        self.run_host_in_turn("recv_host", Dir::Recv, peer, &lent.view, ticket)
    }

    /// Skips `ticket` (when one was taken), so that later operations run,
    /// and returns `e`.
    fn give_up_turn(&self, ticket: Option<u64>, name: &str, e: crate::Error) -> crate::Error {
        if let Some(t) = ticket
            && let Err(skip) = self
                .inner
                .core
                .run_ticketed(t, JobMode::Skip, name, |_| Ok(()))
        {
            return skip;
        }
        e
    }
}

#[cfg(test)]
#[path = "blocking_tests.rs"]
pub(super) mod tests;
