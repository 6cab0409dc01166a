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
        self.check_capturable(stream, collective.name())?;
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
        self.check_capturable(stream, collective.name())?;
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
    /// # Examples
    /// ```no_run
    /// # use streamcomm::ReduceOp;
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// let send = stream.clone_htod(&[1.0f32; 1024]).expect("copy");
    /// let mut recv = stream.alloc_zeros::<f32>(1024).expect("alloc");
    /// cuda.all_reduce(&send, &mut recv, ReduceOp::Sum, &stream)?; // enqueued, returns at once
    /// let sum = stream.clone_dtoh(&recv).expect("copy"); // waits: every element is comm.size()
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `recv`
    /// is too small, `send` and `recv` are one buffer, or `stream` is of
    /// another context than [`CudaComm::context`]; the stored error if the
    /// communicator has failed; [`Error::Cuda`](crate::Error::Cuda) when a
    /// driver call fails.
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
    /// # Examples
    /// ```no_run
    /// # use streamcomm::ReduceOp;
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// let mut grads = stream.clone_htod(&[0.5f32; 1024]).expect("copy");
    /// cuda.all_reduce_in_place(&mut grads, ReduceOp::Avg, &stream)?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
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
    /// # Examples
    /// ```no_run
    /// # use streamcomm::ReduceOp;
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// let send = stream.clone_htod(&[comm.rank() as u32; 8]).expect("copy"); // read at the root
    /// let mut recv = stream.alloc_zeros::<u32>(8).expect("alloc");
    /// cuda.broadcast(&send, &mut recv, 0, &stream)?; // every rank: [0; 8]
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
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
    /// # Examples
    /// ```no_run
    /// # use streamcomm::ReduceOp;
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// let mut weights = stream.clone_htod(&[comm.rank() as f32; 8]).expect("copy");
    /// cuda.broadcast_in_place(&mut weights, 0, &stream)?; // rank 0's weights everywhere
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
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
    /// # Examples
    /// ```no_run
    /// # use streamcomm::ReduceOp;
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// let send = stream.clone_htod(&[2i32; 16]).expect("copy");
    /// let mut recv = stream.alloc_zeros::<i32>(16).expect("alloc"); // written at the root only
    /// cuda.reduce(&send, &mut recv, ReduceOp::Max, 0, &stream)?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
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
    /// # Examples
    /// ```no_run
    /// # use streamcomm::ReduceOp;
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// let mut buf = stream.clone_htod(&[1.0f64; 16]).expect("copy");
    /// cuda.reduce_in_place(&mut buf, ReduceOp::Sum, 0, &stream)?; // the root's buf: the sums
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
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
    /// # Examples
    /// ```no_run
    /// # use streamcomm::ReduceOp;
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// let send = stream.clone_htod(&[comm.rank() as f32; 4]).expect("copy");
    /// let mut recv = stream.alloc_zeros::<f32>(4 * comm.size()).expect("alloc");
    /// cuda.all_gather(&send, &mut recv, &stream)?; // [0,0,0,0, 1,1,1,1, …]
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
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
    /// # Examples
    /// ```no_run
    /// # use streamcomm::ReduceOp;
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// let mut buf = stream.alloc_zeros::<f32>(4 * comm.size()).expect("alloc");
    /// let mine = [comm.rank() as f32; 4];
    /// let mut slot = buf.slice_mut(4 * comm.rank()..4 * comm.rank() + 4);
    /// stream.memcpy_htod(&mine, &mut slot).expect("copy"); // this rank's input at rank * count
    /// cuda.all_gather_in_place(&mut buf, &stream)?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
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
    /// # Examples
    /// ```no_run
    /// # use streamcomm::ReduceOp;
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// let send = stream.clone_htod(&vec![1.0f32; 4 * comm.size()]).expect("copy");
    /// let mut recv = stream.alloc_zeros::<f32>(4).expect("alloc");
    /// cuda.reduce_scatter(&send, &mut recv, ReduceOp::Sum, &stream)?; // block `rank` of the sums
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
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
    /// # Examples
    /// ```no_run
    /// # use streamcomm::ReduceOp;
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// let mut buf = stream.clone_htod(&vec![1.0f32; 4 * comm.size()]).expect("copy");
    /// cuda.reduce_scatter_in_place(&mut buf, ReduceOp::Sum, &stream)?; // result at 4 * rank
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
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
    /// # Examples
    /// ```no_run
    /// # use streamcomm::ReduceOp;
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// let send = stream.clone_htod(&vec![comm.rank() as f32; 4 * comm.size()]).expect("copy");
    /// let mut recv = stream.alloc_zeros::<f32>(4 * comm.size()).expect("alloc");
    /// cuda.all_to_all(&send, &mut recv, &stream)?; // block j of recv came from rank j
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
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
    /// # Examples
    /// ```no_run
    /// # use streamcomm::ReduceOp;
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// cuda.barrier(&stream)?;
    /// stream.synchronize().expect("sync"); // every rank's stream reached its barrier
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// The stored error if the communicator has failed; a stream of another
    /// context; [`Error::Cuda`](crate::Error::Cuda) when a driver call fails.
    pub fn barrier(&self, stream: &Arc<CudaStream>) -> Result<()> {
        self.enqueue(stream, DeviceCall::barrier())
    }
}
