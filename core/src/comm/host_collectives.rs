//! The host-blocking slice forms of the collectives beyond all-reduce and
//! broadcast (`comm::blocking` has those, and the rules every form keeps:
//! the caller's slices are used in place, in its turn on the communicator,
//! and nothing touches them after the call returns). Each has the element
//! counts of its stream form; lengths are checked before anything runs.
//! Gather and scatter are sends and receives to and from the root
//! ([`Communicator::send_host`], [`Communicator::recv_host`]), as their
//! stream forms are a group of them; so is `all_gatherv`, around the ring.

use crate::comm::Communicator;
use crate::comm::p2p::exchange::Exchange;
use crate::host::Element;
use crate::plan::{Buffers, Collective};
use crate::{Error, ReduceOp, Result};

impl Communicator {
    // The helpers below are `#[inline]`: they then add no code of their own
    // to the crate's codegen units, whose partition decides what the hot
    // `send_host`/`recv_host` paths inline (benches/scripts/icount.sh saw
    // those paths grow when these were plain functions).

    /// `len` as `size` equal blocks: the block length, or the error.
    #[inline]
    fn blocks_of(&self, call: &str, what: &str, len: usize) -> Result<usize> {
        let n = self.size();
        if !len.is_multiple_of(n) {
            return Err(Error::invalid(format!(
                "{call}: {what} holds {len} elements, not a multiple of the {n} ranks"
            )));
        }
        Ok(len / n)
    }

    /// Fails unless `have` is `want`.
    #[inline]
    fn need_len(call: &str, what: &str, have: usize, want: usize) -> Result<()> {
        if have != want {
            return Err(Error::invalid(format!(
                "{call}: {what} holds {have} elements, the call needs {want}"
            )));
        }
        Ok(())
    }

    /// Fails unless `root` is a rank.
    #[inline]
    fn need_root(&self, call: &str, root: usize) -> Result<()> {
        if root >= self.size() {
            return Err(Error::invalid(format!(
                "{call}: root {root} is not a rank of {}",
                self.size()
            )));
        }
        Ok(())
    }

    /// Reduces every rank's `send` into `root`'s `recv`, from the calling
    /// thread (`MPI_Reduce`). `recv` is only the root's: other ranks may
    /// pass an empty slice, and theirs is never touched.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::ReduceOp;
    /// # streamcomm::testing::on_two_ranks(|comm, _stream| {
    /// let send = [comm.rank() as i64 + 1; 3];
    /// let mut recv = [0i64; 3];
    /// comm.reduce_host(&send, &mut recv, ReduceOp::Sum, 0)?;
    /// if comm.rank() == 0 {
    ///     assert_eq!(recv, [3; 3]);
    /// }
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// A root out of range, or a root `recv` of another length than `send`;
    /// as [`Communicator::all_reduce_host`].
    pub fn reduce_host<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        const CALL: &str = "reduce_host";
        self.need_root(CALL, root)?;
        let recv: &mut [T] = if self.rank() == root {
            Self::need_len(CALL, "the root's recv", recv.len(), send.len())?;
            recv
        } else {
            &mut []
        };
        let shape = (T::DTYPE, send.len(), op);
        self.run_collective_host(CALL, Collective::Reduce { root }, shape, move |_| {
            Ok(Buffers::Separate {
                send: bytemuck::cast_slice(send),
                recv: bytemuck::cast_slice_mut(recv),
            })
        })
    }

    /// [`Communicator::reduce_host`] with one slice as input and, on the
    /// root, output.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::ReduceOp;
    /// # streamcomm::testing::on_two_ranks(|comm, _stream| {
    /// let mut buf = [comm.rank() as f32; 2];
    /// comm.reduce_in_place_host(&mut buf, ReduceOp::Max, 1)?;
    /// if comm.rank() == 1 {
    ///     assert_eq!(buf, [1.0; 2]);
    /// }
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Communicator::reduce_host`].
    pub fn reduce_in_place_host<T: Element>(
        &self,
        data: &mut [T],
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        const CALL: &str = "reduce_in_place_host";
        self.need_root(CALL, root)?;
        let shape = (T::DTYPE, data.len(), op);
        self.run_collective_host(CALL, Collective::Reduce { root }, shape, move |plan| {
            Buffers::in_place(plan, bytemuck::cast_slice_mut(data))
        })
    }

    /// Every rank's `send`, in rank order, into every rank's `recv`
    /// (`MPI_Allgather`): `recv` holds size × `send.len()` elements.
    ///
    /// # Examples
    /// ```
    /// # streamcomm::testing::on_two_ranks(|comm, _stream| {
    /// let mut all = [0u32; 4];
    /// comm.all_gather_host(&[comm.rank() as u32; 2], &mut all)?;
    /// assert_eq!(all, [0, 0, 1, 1]);
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// `recv` of another length; as [`Communicator::all_reduce_host`].
    pub fn all_gather_host<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        const CALL: &str = "all_gather_host";
        Self::need_len(CALL, "recv", recv.len(), send.len() * self.size())?;
        let shape = (T::DTYPE, send.len(), ReduceOp::Sum);
        self.run_collective_host(CALL, Collective::AllGather, shape, move |_| {
            Ok(Buffers::Separate {
                send: bytemuck::cast_slice(send),
                recv: bytemuck::cast_slice_mut(recv),
            })
        })
    }

    /// [`Communicator::all_gather_host`] in place: rank `r`'s block of
    /// `data` (block `r` of size equal blocks) is its input.
    ///
    /// # Examples
    /// ```
    /// # streamcomm::testing::on_two_ranks(|comm, _stream| {
    /// let mut all = [0i32; 2];
    /// all[comm.rank()] = 10 + comm.rank() as i32;
    /// comm.all_gather_in_place_host(&mut all)?;
    /// assert_eq!(all, [10, 11]);
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// A length that is no multiple of the rank count; as
    /// [`Communicator::all_reduce_host`].
    pub fn all_gather_in_place_host<T: Element>(&self, data: &mut [T]) -> Result<()> {
        const CALL: &str = "all_gather_in_place_host";
        let count = self.blocks_of(CALL, "data", data.len())?;
        let shape = (T::DTYPE, count, ReduceOp::Sum);
        self.run_collective_host(CALL, Collective::AllGather, shape, move |plan| {
            Buffers::in_place(plan, bytemuck::cast_slice_mut(data))
        })
    }

    /// Reduces every rank's `send` (size equal blocks) and gives rank `r`
    /// block `r` of the result in `recv` (`MPI_Reduce_scatter_block`).
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::ReduceOp;
    /// # streamcomm::testing::on_two_ranks(|comm, _stream| {
    /// let send = [1.0f64, 2.0];
    /// let mut mine = [0.0f64; 1];
    /// comm.reduce_scatter_host(&send, &mut mine, ReduceOp::Sum)?;
    /// assert_eq!(mine, [2.0 * send[comm.rank()]]);
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// `send` of another length than size × `recv.len()`; as
    /// [`Communicator::all_reduce_host`].
    pub fn reduce_scatter_host<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        const CALL: &str = "reduce_scatter_host";
        Self::need_len(CALL, "send", send.len(), recv.len() * self.size())?;
        let shape = (T::DTYPE, recv.len(), op);
        self.run_collective_host(CALL, Collective::ReduceScatter, shape, move |_| {
            Ok(Buffers::Separate {
                send: bytemuck::cast_slice(send),
                recv: bytemuck::cast_slice_mut(recv),
            })
        })
    }

    /// [`Communicator::reduce_scatter_host`] in place: rank `r` gets its
    /// block in block `r` of `data`.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::ReduceOp;
    /// # streamcomm::testing::on_two_ranks(|comm, _stream| {
    /// let mut data = [1u8, 2];
    /// comm.reduce_scatter_in_place_host(&mut data, ReduceOp::Sum)?;
    /// assert_eq!(data[comm.rank()], 2 * (comm.rank() as u8 + 1));
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Communicator::all_gather_in_place_host`].
    pub fn reduce_scatter_in_place_host<T: Element>(
        &self,
        data: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        const CALL: &str = "reduce_scatter_in_place_host";
        let count = self.blocks_of(CALL, "data", data.len())?;
        let shape = (T::DTYPE, count, op);
        self.run_collective_host(CALL, Collective::ReduceScatter, shape, move |plan| {
            Buffers::in_place(plan, bytemuck::cast_slice_mut(data))
        })
    }

    /// Block `p` of every rank's `send` into block `r` of rank `p`'s
    /// `recv` (`MPI_Alltoall`); both hold size equal blocks.
    ///
    /// # Examples
    /// ```
    /// # streamcomm::testing::on_two_ranks(|comm, _stream| {
    /// let r = comm.rank() as i32;
    /// let mut recv = [0i32; 2];
    /// comm.all_to_all_host(&[10 * r, 10 * r + 1], &mut recv)?;
    /// assert_eq!(recv, [r, 10 + r]);
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// Lengths that differ or are no multiple of the rank count; as
    /// [`Communicator::all_reduce_host`].
    pub fn all_to_all_host<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        const CALL: &str = "all_to_all_host";
        Self::need_len(CALL, "recv", recv.len(), send.len())?;
        let count = self.blocks_of(CALL, "send", send.len())?;
        let shape = (T::DTYPE, count, ReduceOp::Sum);
        self.run_collective_host(CALL, Collective::AllToAll, shape, move |_| {
            Ok(Buffers::Separate {
                send: bytemuck::cast_slice(send),
                recv: bytemuck::cast_slice_mut(recv),
            })
        })
    }

    /// Every rank's `send` into every rank's `recv`, rank `j`'s elements at
    /// `displs[j]..+counts[j]` (`MPI_Allgatherv`), from the calling thread:
    /// this rank's `send` holds `counts[rank]` elements; counts may be zero,
    /// and regions must not overlap. The blocks travel around the ring
    /// (`n - 1` steps, each a send to the next rank and a receive from the
    /// previous one, even ranks sending first so that blocking sends never
    /// wait for each other in a circle).
    ///
    /// # Examples
    /// ```
    /// # streamcomm::testing::on_two_ranks(|comm, _stream| {
    /// let (counts, displs) = ([2, 1], [1, 0]);
    /// let mine = vec![comm.rank() as u8 + 1; counts[comm.rank()]];
    /// let mut all = [0u8; 3];
    /// comm.all_gatherv_host(&mine, &mut all, &counts, &displs)?;
    /// assert_eq!(all, [2, 1, 1]);
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Communicator::all_gatherv`]; as [`Communicator::send_host`] and
    /// [`Communicator::recv_host`].
    pub fn all_gatherv_host<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<()> {
        let (r, n) = (self.rank(), self.size());
        // The shared rules of the call (lists, regions, overlap).
        Exchange::AllGatherv { counts, displs }.lower(r, n, send.len(), recv.len())?;
        recv[displs[r]..][..counts[r]].copy_from_slice(send);
        let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
        // Step k: forward block r - k, receive block r - k - 1.
        for k in 0..n.saturating_sub(1) {
            let (out, inb) = ((r + n - k) % n, (r + 2 * n - k - 1) % n);
            let forward =
                |c: &Self, recv: &[T]| c.send_host(&recv[displs[out]..][..counts[out]], next);
            if r % 2 == 0 {
                forward(self, recv)?;
                self.recv_host(&mut recv[displs[inb]..][..counts[inb]], prev)?;
            } else {
                self.recv_host(&mut recv[displs[inb]..][..counts[inb]], prev)?;
                forward(self, recv)?;
            }
        }
        Ok(())
    }

    /// Every rank's `send`, in rank order, into `root`'s `recv`
    /// (`MPI_Gather`): the root's `recv` holds size × `send.len()`
    /// elements; other ranks may pass an empty slice.
    ///
    /// # Examples
    /// ```
    /// # streamcomm::testing::on_two_ranks(|comm, _stream| {
    /// let mut all = [0u64; 4];
    /// comm.gather_host(&[comm.rank() as u64; 2], &mut all, 1)?;
    /// if comm.rank() == 1 {
    ///     assert_eq!(all, [0, 0, 1, 1]);
    /// }
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// A root out of range or a root `recv` of another length; as
    /// [`Communicator::send_host`] and [`Communicator::recv_host`].
    pub fn gather_host<T: Element>(&self, send: &[T], recv: &mut [T], root: usize) -> Result<()> {
        const CALL: &str = "gather_host";
        self.need_root(CALL, root)?;
        if self.rank() != root {
            return self.send_host(send, root);
        }
        let count = send.len();
        Self::need_len(CALL, "the root's recv", recv.len(), count * self.size())?;
        for p in 0..self.size() {
            let block = &mut recv[p * count..(p + 1) * count];
            if p == root {
                block.copy_from_slice(send);
            } else {
                self.recv_host(block, p)?;
            }
        }
        Ok(())
    }

    /// Block `p` of `root`'s `send` into rank `p`'s `recv`
    /// (`MPI_Scatter`): the root's `send` holds size × `recv.len()`
    /// elements; other ranks may pass an empty slice.
    ///
    /// # Examples
    /// ```
    /// # streamcomm::testing::on_two_ranks(|comm, _stream| {
    /// let mut mine = [0i32; 2];
    /// comm.scatter_host(&[5, 5, 7, 7], &mut mine, 0)?;
    /// assert_eq!(mine, if comm.rank() == 0 { [5, 5] } else { [7, 7] });
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Communicator::gather_host`], for the root's `send`.
    pub fn scatter_host<T: Element>(&self, send: &[T], recv: &mut [T], root: usize) -> Result<()> {
        const CALL: &str = "scatter_host";
        self.need_root(CALL, root)?;
        if self.rank() != root {
            return self.recv_host(recv, root);
        }
        let count = recv.len();
        Self::need_len(CALL, "the root's send", send.len(), count * self.size())?;
        for p in 0..self.size() {
            let block = &send[p * count..(p + 1) * count];
            if p == root {
                recv.copy_from_slice(block);
            } else {
                self.send_host(block, p)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "host_collectives_tests.rs"]
mod tests;
