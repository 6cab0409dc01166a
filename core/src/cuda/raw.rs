//! Raw device pointers and CUDA stream handles, for callers that hold those
//! rather than cudarc types: the C API, and frameworks such as PyTorch
//! (`tensor.data_ptr()`, `torch.cuda.current_stream().cuda_stream`).

use cudarc::driver::sys::CUstream;
use streamcomm_gpu::Stream;

use super::CudaComm;
use crate::comm::p2p::Dir;
use crate::device::cuda::{CudaQueue, gpu_error};
use crate::device::{DeviceBuffers, DeviceCall, DeviceP2p, DeviceRange};
use crate::plan::Collective;
use crate::{DataType, Error, RawBuffers, RawSpan, ReduceOp, Result};

/// One send or receive of a raw group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawP2p {
    /// True for a send, false for a receive.
    pub send: bool,
    /// The other rank.
    pub peer: usize,
    /// Element type.
    pub dtype: DataType,
    /// The buffer.
    pub buf: RawSpan,
}

/// The device call of a collective given by NCCL's arguments (not a
/// barrier: that has no buffers).
///
/// # Errors
/// [`Error::InvalidArgument`] for a barrier.
pub(crate) fn raw_call(
    collective: Collective,
    dtype: DataType,
    op: ReduceOp,
    buffers: RawBuffers,
) -> Result<DeviceCall> {
    if collective == Collective::Barrier {
        return Err(Error::invalid(
            "collective_raw: a barrier has no buffers; use barrier_raw",
        ));
    }
    let buffers = match buffers {
        RawBuffers::Separate { send, recv } => DeviceBuffers::Separate {
            send: range(send),
            recv: range(recv),
        },
        RawBuffers::InPlace(b) => DeviceBuffers::InPlace(range(b)),
    };
    Ok(DeviceCall {
        collective,
        dtype,
        op,
        buffers,
    })
}

fn range(b: RawSpan) -> DeviceRange {
    DeviceRange {
        addr: b.ptr,
        len: b.len,
    }
}

impl CudaComm {
    /// `raw` as the staged path's queue, once it is known to be a stream of
    /// this device's primary context.
    ///
    /// # Safety
    /// `raw` is a live CUDA stream (or 0, the legacy default stream).
    unsafe fn raw_queue(
        &self,
        raw: CUstream,
        what: impl std::fmt::Display,
        capturing: Option<bool>,
    ) -> Result<CudaQueue<'_>> {
        // SAFETY: forwarded: the stream is live for this call.
        let stream = unsafe { Stream::from_raw(&self.device, raw) };
        if !stream.is_on_primary_context().map_err(gpu_error)? {
            return Err(Error::invalid(format!(
                "{what}: the stream is not a stream of CUDA device {}'s primary context",
                self.device.ordinal()
            )));
        }
        Ok(CudaQueue {
            device: &self.device,
            stream,
            signals: &self.signals,
            kernels: self.kernels.as_ref(),
            capture: std::cell::Cell::new(capturing),
        })
    }

    /// Enqueues `collective` (not a barrier: see [`CudaComm::barrier_raw`])
    /// on `stream`, with the semantics of the cudarc entry points.
    ///
    /// # Examples
    /// ```no_run
    /// use streamcomm::cuda::{DevicePtr, DevicePtrMut, RawP2p};
    /// use streamcomm::{Collective, DataType, RawBuffers, RawSpan, ReduceOp};
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// let send = stream.clone_htod(&[1.0f32; 1024]).expect("copy");
    /// let mut recv = stream.alloc_zeros::<f32>(1024).expect("alloc");
    /// // What a framework holds: addresses (`tensor.data_ptr()`) and a stream handle.
    /// let (s, _r) = send.device_ptr(&stream);
    /// let (r, _w) = recv.device_ptr_mut(&stream);
    /// let buffers = RawBuffers::Separate {
    ///     send: RawSpan { ptr: s, len: 1024 },
    ///     recv: RawSpan { ptr: r, len: 1024 },
    /// };
    /// // SAFETY: both buffers hold 1024 f32 and outlive the synchronisation below.
    /// unsafe {
    ///     cuda.collective_raw(Collective::AllReduce, DataType::F32, ReduceOp::Sum, buffers, stream.cu_stream())?;
    /// }
    /// stream.synchronize().expect("sync");
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Safety
    /// `stream` is a live CUDA stream (or 0) of this device. Every buffer
    /// this rank uses is device memory (or memory the device can access)
    /// holding `len` elements of `dtype`, valid, and not touched by other
    /// work, until the operation has completed on the stream (at every
    /// replay, if captured).
    ///
    /// # Errors
    /// As [`CudaComm::all_reduce`]; a stream of another context than the
    /// device's primary context (refused, not undefined).
    pub unsafe fn collective_raw(
        &self,
        collective: Collective,
        dtype: DataType,
        op: ReduceOp,
        buffers: RawBuffers,
        stream: CUstream,
    ) -> Result<()> {
        let call = raw_call(collective, dtype, op, buffers)?;
        // SAFETY: forwarded contract.
        unsafe { self.enqueue_raw(&call, stream, None) }
    }

    /// Enqueues `call` on `stream`; `capturing` is whether the stream
    /// captures, where the face asked already (the `cudarc::nccl`
    /// look-alike's capture check), so that the call's queue does not ask
    /// the driver again.
    ///
    /// # Safety
    /// As [`CudaComm::collective_raw`], for `call`'s buffers.
    pub(crate) unsafe fn enqueue_raw(
        &self,
        call: &DeviceCall,
        stream: CUstream,
        capturing: Option<bool>,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        let queue = unsafe { self.raw_queue(stream, call.collective, capturing) }?;
        crate::device::enqueue_device(&self.comm, &queue, &self.shared, call)
    }

    /// Enqueues a barrier on `stream`.
    ///
    /// # Examples
    /// ```no_run
    /// use streamcomm::cuda::{DevicePtr, DevicePtrMut, RawP2p};
    /// use streamcomm::{Collective, DataType, RawBuffers, RawSpan, ReduceOp};
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// // SAFETY: a live stream of the communicator's context.
    /// unsafe { cuda.barrier_raw(stream.cu_stream())? };
    /// stream.synchronize().expect("sync");
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Safety
    /// `stream` is a live CUDA stream (or 0) of this device.
    ///
    /// # Errors
    /// As [`CudaComm::barrier`].
    pub unsafe fn barrier_raw(&self, stream: CUstream) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.enqueue_raw(&DeviceCall::barrier(), stream, None) }
    }

    /// Enqueues `ops` as one group on `stream` (as [`CudaComm::group`]).
    ///
    /// # Examples
    /// ```no_run
    /// use streamcomm::cuda::{DevicePtr, DevicePtrMut, RawP2p};
    /// use streamcomm::{Collective, DataType, RawBuffers, RawSpan, ReduceOp};
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// let (r, n) = (comm.rank(), comm.size());
    /// let out = stream.clone_htod(&[r as f32; 256]).expect("copy");
    /// let mut inb = stream.alloc_zeros::<f32>(256).expect("alloc");
    /// let (o, _r) = out.device_ptr(&stream);
    /// let (i, _w) = inb.device_ptr_mut(&stream);
    /// let ring = [
    ///     RawP2p { send: true, peer: (r + 1) % n, dtype: DataType::F32, buf: RawSpan { ptr: o, len: 256 } },
    ///     RawP2p { send: false, peer: (r + n - 1) % n, dtype: DataType::F32, buf: RawSpan { ptr: i, len: 256 } },
    /// ];
    /// // SAFETY: both buffers hold 256 f32 and outlive the synchronisation below.
    /// unsafe { cuda.group_raw(&ring, stream.cu_stream())? };
    /// stream.synchronize().expect("sync");
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Safety
    /// As [`CudaComm::collective_raw`], for every buffer of `ops`.
    ///
    /// # Errors
    /// As [`CudaComm::group`].
    pub unsafe fn group_raw(&self, ops: &[RawP2p], stream: CUstream) -> Result<()> {
        // SAFETY: forwarded contract.
        let queue = unsafe { self.raw_queue(stream, "group", None) }?;
        let ops: Vec<DeviceP2p> = ops
            .iter()
            .map(|o| DeviceP2p {
                dir: if o.send { Dir::Send } else { Dir::Recv },
                peer: o.peer,
                dtype: o.dtype,
                range: range(o.buf),
            })
            .collect();
        crate::device::enqueue_device_group(&self.comm, &queue, &self.shared, &ops)
    }
}
