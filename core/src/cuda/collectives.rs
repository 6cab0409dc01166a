//! The operations of [`CudaComm`], as cudarc users call them.
//!
//! Each validates its arguments, enqueues on `stream` and returns at once;
//! see [`crate::Communicator`]'s methods of the same names for the
//! semantics of each collective (identical here), and [`crate::cuda`] for
//! how they run.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut};

use super::CudaComm;
use crate::device::{DeviceBuffers, DeviceCall, DeviceRange};
use crate::host::Element;
use crate::plan::Collective;
use crate::{ReduceOp, Result};

impl CudaComm {
    fn separate<T: Element>(
        &self,
        collective: Collective,
        op: ReduceOp,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        let (send_len, recv_len) = (send.len(), recv.len());
        // cudarc's tracking: wait for earlier writers now, record this
        // call's read and write when the guards drop, after the enqueue.
        let (send_addr, _read) = send.device_ptr(stream);
        let (recv_addr, _write) = recv.device_ptr_mut(stream);
        self.enqueue(
            stream,
            DeviceCall {
                collective,
                dtype: T::DTYPE,
                op,
                buffers: DeviceBuffers::Separate {
                    send: DeviceRange {
                        addr: send_addr,
                        len: send_len,
                    },
                    recv: DeviceRange {
                        addr: recv_addr,
                        len: recv_len,
                    },
                },
            },
        )
    }

    fn in_place<T: Element>(
        &self,
        collective: Collective,
        op: ReduceOp,
        buf: &mut impl DevicePtrMut<T>,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        let len = buf.len();
        let (addr, _write) = buf.device_ptr_mut(stream);
        self.enqueue(
            stream,
            DeviceCall {
                collective,
                dtype: T::DTYPE,
                op,
                buffers: DeviceBuffers::InPlace(DeviceRange { addr, len }),
            },
        )
    }

    /// Element-wise reduction of every rank's `send` into every rank's
    /// `recv` (`count = send.len()`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `recv`
    /// is too small, `send` and `recv` are one buffer, or `stream` is on
    /// another device; the stored error if the communicator has failed.
    pub fn all_reduce<T: Element>(
        &self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        op: ReduceOp,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        self.separate(Collective::AllReduce, op, send, recv, stream)
    }

    /// [`CudaComm::all_reduce`] with one buffer as input and output.
    ///
    /// # Errors
    /// As [`CudaComm::all_reduce`].
    pub fn all_reduce_in_place<T: Element>(
        &self,
        buf: &mut impl DevicePtrMut<T>,
        op: ReduceOp,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        self.in_place(Collective::AllReduce, op, buf, stream)
    }

    /// Copies `root`'s `send` into every rank's `recv` (`count = recv.len()`).
    ///
    /// # Errors
    /// As [`CudaComm::all_reduce`], plus a root out of range.
    pub fn broadcast<T: Element>(
        &self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        root: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        self.separate(
            Collective::Broadcast { root },
            ReduceOp::Sum,
            send,
            recv,
            stream,
        )
    }

    /// [`CudaComm::broadcast`] in one buffer.
    ///
    /// # Errors
    /// As [`CudaComm::broadcast`].
    pub fn broadcast_in_place<T: Element>(
        &self,
        buf: &mut impl DevicePtrMut<T>,
        root: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        self.in_place(Collective::Broadcast { root }, ReduceOp::Sum, buf, stream)
    }

    /// Reduces every rank's `send` into `root`'s `recv`.
    ///
    /// # Errors
    /// As [`CudaComm::broadcast`].
    pub fn reduce<T: Element>(
        &self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        op: ReduceOp,
        root: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        self.separate(Collective::Reduce { root }, op, send, recv, stream)
    }

    /// [`CudaComm::reduce`] in one buffer.
    ///
    /// # Errors
    /// As [`CudaComm::broadcast`].
    pub fn reduce_in_place<T: Element>(
        &self,
        buf: &mut impl DevicePtrMut<T>,
        op: ReduceOp,
        root: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        self.in_place(Collective::Reduce { root }, op, buf, stream)
    }

    /// Concatenates every rank's `send` into every rank's `recv` (which
    /// holds `size * send.len()`).
    ///
    /// # Errors
    /// As [`CudaComm::all_reduce`].
    pub fn all_gather<T: Element>(
        &self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        self.separate(Collective::AllGather, ReduceOp::Sum, send, recv, stream)
    }

    /// [`CudaComm::all_gather`] in one buffer of `size * count` elements,
    /// this rank's input at `rank * count`.
    ///
    /// # Errors
    /// As [`CudaComm::all_reduce`], plus a length not divisible by the size.
    pub fn all_gather_in_place<T: Element>(
        &self,
        buf: &mut impl DevicePtrMut<T>,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        self.in_place(Collective::AllGather, ReduceOp::Sum, buf, stream)
    }

    /// Reduces every rank's `send` (`size * count`) and leaves block `rank`
    /// in `recv` (`count = recv.len()`).
    ///
    /// # Errors
    /// As [`CudaComm::all_reduce`].
    pub fn reduce_scatter<T: Element>(
        &self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        op: ReduceOp,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        self.separate(Collective::ReduceScatter, op, send, recv, stream)
    }

    /// [`CudaComm::reduce_scatter`] in one buffer; the result lands at
    /// `rank * count`.
    ///
    /// # Errors
    /// As [`CudaComm::all_gather_in_place`].
    pub fn reduce_scatter_in_place<T: Element>(
        &self,
        buf: &mut impl DevicePtrMut<T>,
        op: ReduceOp,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        self.in_place(Collective::ReduceScatter, op, buf, stream)
    }

    /// Sends block `j` of `send` to rank `j`, stored as block `rank` of its
    /// `recv`.
    ///
    /// # Errors
    /// As [`CudaComm::all_gather_in_place`].
    pub fn all_to_all<T: Element>(
        &self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        self.separate(Collective::AllToAll, ReduceOp::Sum, send, recv, stream)
    }

    /// A barrier on `stream`: later work of the stream runs only once every
    /// rank's stream has reached its barrier. Capturable; each replay is a
    /// new barrier.
    ///
    /// # Errors
    /// The stored error if the communicator has failed; a stream on another
    /// device.
    pub fn barrier(&self, stream: &Arc<CudaStream>) -> Result<()> {
        self.enqueue(stream, DeviceCall::barrier())
    }
}
