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
use crate::{DataType, Error, ReduceOp, Result};

/// `len` elements at a device address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawDeviceBuffer {
    /// Device address of the first element (`CUdeviceptr`).
    pub ptr: u64,
    /// Number of elements.
    pub len: usize,
}

/// The buffers of a raw collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawBuffers {
    /// Distinct input and output (either may be unused by this rank, e.g. a
    /// non-root's input of a broadcast; its `ptr` may then be 0).
    Separate {
        /// Input.
        send: RawDeviceBuffer,
        /// Output.
        recv: RawDeviceBuffer,
    },
    /// One buffer at NCCL's in-place offsets.
    InPlace(RawDeviceBuffer),
}

impl RawBuffers {
    /// The buffers of a call made with NCCL's arguments, laid out by
    /// NCCL's rules: `send` and `recv` are device addresses (0 for NULL),
    /// `count` is NCCL's count (per rank for all-gather's input,
    /// reduce-scatter's output and all-to-all's blocks). In place where
    /// NCCL says so: the same buffer (all-reduce, broadcast, reduce,
    /// all-to-all), the input at this rank's block of the output
    /// (all-gather), the output at this rank's block of the input
    /// (reduce-scatter). A buffer this rank does not use (a non-root's
    /// input of a broadcast, output of a reduce) may be NULL. `None` when
    /// the call moves no element: NCCL returns at once.
    ///
    /// The C API, the NCCL-compatible library and callers that hold
    /// pointers (`tensor.data_ptr()`) all lay out their calls here.
    ///
    /// # Examples
    /// ```
    /// use streamcomm::cuda::{RawBuffers, RawDeviceBuffer};
    /// use streamcomm::{Collective, DataType};
    /// // Rank 1 of 4 gathers 8 f32 each; its input is its block of the output.
    /// let recv = 0x10000;
    /// let send = recv + 8 * 4;
    /// let b = RawBuffers::nccl_layout(Collective::AllGather, DataType::F32, send, recv, 8, 1, 4)?;
    /// assert_eq!(b, Some(RawBuffers::InPlace(RawDeviceBuffer { ptr: recv, len: 32 })));
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a barrier (no buffers), a root out of
    /// range, a count whose bytes overflow, or a NULL buffer this rank uses
    /// (named: `sendbuff`, `the root's recvbuff`, ...).
    pub fn nccl_layout(
        collective: Collective,
        dtype: DataType,
        send: u64,
        recv: u64,
        count: usize,
        rank: usize,
        size: usize,
    ) -> Result<Option<RawBuffers>> {
        let blocks = |n: usize| {
            n.checked_mul(size)
                .filter(|all| all.checked_mul(dtype.size()).is_some())
                .ok_or_else(|| Error::invalid(format!("count {count} (x {size}) overflows")))
        };
        let (send_len, recv_len) = match collective {
            Collective::Barrier => {
                return Err(Error::invalid("a barrier has no buffers"));
            }
            Collective::Broadcast { root } | Collective::Reduce { root } if root >= size => {
                return Err(Error::invalid(format!(
                    "root {root} is not a rank of this communicator of {size}"
                )));
            }
            Collective::AllGather => (count, blocks(count)?),
            Collective::ReduceScatter => (blocks(count)?, count),
            Collective::AllToAll => (blocks(count)?, blocks(count)?),
            _ => {
                blocks(count)?;
                (count, count)
            }
        };
        if send_len.max(recv_len) == 0 {
            return Ok(None);
        }
        let reads = !matches!(collective, Collective::Broadcast { root } if root != rank);
        let writes = !matches!(collective, Collective::Reduce { root } if root != rank);
        let needed = |ptr: u64, side: &str| {
            if ptr != 0 {
                return Ok(());
            }
            // The side only the root uses is named so.
            let root_only = matches!(
                (collective, side),
                (Collective::Broadcast { .. }, "sendbuff")
                    | (Collective::Reduce { .. }, "recvbuff")
            );
            let whose = if root_only { "the root's " } else { "" };
            Err(Error::invalid(format!("{whose}{side} is NULL")))
        };
        let buf = |ptr: u64, len: usize| RawDeviceBuffer { ptr, len };
        let at = |base: u64, elems: usize| base.wrapping_add((elems * dtype.size()) as u64);
        let in_place = send != 0
            && match collective {
                Collective::AllGather => send == at(recv, rank * count),
                Collective::ReduceScatter => recv == at(send, rank * count),
                _ => send == recv,
            };
        let esz = dtype.size() as u64;
        let checked = |ptr: u64, len: usize, side: &str| -> Result<std::ops::Range<u64>> {
            needed(ptr, side)?;
            if !ptr.is_multiple_of(esz) {
                return Err(Error::invalid(format!(
                    "{side} {ptr:#x} is not aligned to its element size ({esz} bytes for {dtype})"
                )));
            }
            let end = (len as u64)
                .checked_mul(esz)
                .and_then(|b| ptr.checked_add(b))
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "{side}: {len} elements at {ptr:#x} run past the end of the address space"
                    ))
                })?;
            Ok(ptr..end)
        };
        if in_place {
            let (ptr, len, side) = match collective {
                Collective::ReduceScatter => (send, send_len, "sendbuff"),
                _ => (recv, recv_len, "recvbuff"),
            };
            checked(ptr, len, side)?;
            return Ok(Some(RawBuffers::InPlace(buf(ptr, len))));
        }
        let sends = reads
            .then(|| checked(send, send_len, "sendbuff"))
            .transpose()?;
        let recvs = writes
            .then(|| checked(recv, recv_len, "recvbuff"))
            .transpose()?;
        if let (Some(a), Some(b)) = (sends, recvs)
            && a.start < b.end
            && b.start < a.end
        {
            return Err(Error::invalid(format!(
                "{}: sendbuff and recvbuff overlap without being NCCL's in-place layout",
                collective.name()
            )));
        }
        Ok(Some(RawBuffers::Separate {
            send: if reads {
                buf(send, send_len)
            } else {
                buf(0, 0)
            },
            recv: if writes {
                buf(recv, recv_len)
            } else {
                buf(0, 0)
            },
        }))
    }
}

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
    pub buf: RawDeviceBuffer,
}

fn range(b: RawDeviceBuffer) -> DeviceRange {
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
    unsafe fn raw_queue(&self, raw: CUstream, what: &str) -> Result<CudaQueue<'_>> {
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
            capture: std::cell::Cell::new(None),
        })
    }

    /// Enqueues `collective` (not a barrier: see [`CudaComm::barrier_raw`])
    /// on `stream`, with the semantics of the cudarc entry points.
    ///
    /// # Examples
    /// ```no_run
    /// use streamcomm::cuda::{DevicePtr, DevicePtrMut, RawBuffers, RawDeviceBuffer, RawP2p};
    /// use streamcomm::{Collective, DataType, ReduceOp};
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// let send = stream.clone_htod(&[1.0f32; 1024]).expect("copy");
    /// let mut recv = stream.alloc_zeros::<f32>(1024).expect("alloc");
    /// // What a framework holds: addresses (`tensor.data_ptr()`) and a stream handle.
    /// let (s, _r) = send.device_ptr(&stream);
    /// let (r, _w) = recv.device_ptr_mut(&stream);
    /// let buffers = RawBuffers::Separate {
    ///     send: RawDeviceBuffer { ptr: s, len: 1024 },
    ///     recv: RawDeviceBuffer { ptr: r, len: 1024 },
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
        if collective == Collective::Barrier {
            return Err(Error::invalid(
                "collective_raw: a barrier has no buffers; use barrier_raw",
            ));
        }
        // SAFETY: forwarded contract.
        let queue = unsafe { self.raw_queue(stream, collective.name()) }?;
        let buffers = match buffers {
            RawBuffers::Separate { send, recv } => DeviceBuffers::Separate {
                send: range(send),
                recv: range(recv),
            },
            RawBuffers::InPlace(b) => DeviceBuffers::InPlace(range(b)),
        };
        let call = DeviceCall {
            collective,
            dtype,
            op,
            buffers,
        };
        crate::device::enqueue_device(&self.comm, &queue, &self.shared, &call)
    }

    /// Enqueues a barrier on `stream`.
    ///
    /// # Examples
    /// ```no_run
    /// use streamcomm::cuda::{DevicePtr, DevicePtrMut, RawBuffers, RawDeviceBuffer, RawP2p};
    /// use streamcomm::{Collective, DataType, ReduceOp};
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
        let queue = unsafe { self.raw_queue(stream, "barrier") }?;
        let call = DeviceCall::barrier();
        crate::device::enqueue_device(&self.comm, &queue, &self.shared, &call)
    }

    /// Enqueues `ops` as one group on `stream` (as [`CudaComm::group`]).
    ///
    /// # Examples
    /// ```no_run
    /// use streamcomm::cuda::{DevicePtr, DevicePtrMut, RawBuffers, RawDeviceBuffer, RawP2p};
    /// use streamcomm::{Collective, DataType, ReduceOp};
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// let (r, n) = (comm.rank(), comm.size());
    /// let out = stream.clone_htod(&[r as f32; 256]).expect("copy");
    /// let mut inb = stream.alloc_zeros::<f32>(256).expect("alloc");
    /// let (o, _r) = out.device_ptr(&stream);
    /// let (i, _w) = inb.device_ptr_mut(&stream);
    /// let ring = [
    ///     RawP2p { send: true, peer: (r + 1) % n, dtype: DataType::F32, buf: RawDeviceBuffer { ptr: o, len: 256 } },
    ///     RawP2p { send: false, peer: (r + n - 1) % n, dtype: DataType::F32, buf: RawDeviceBuffer { ptr: i, len: 256 } },
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
        let queue = unsafe { self.raw_queue(stream, "group") }?;
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

#[cfg(test)]
mod tests {
    use super::*;

    const F32: DataType = DataType::F32;

    fn layout(
        c: Collective,
        send: u64,
        recv: u64,
        count: usize,
        rank: usize,
    ) -> Result<Option<RawBuffers>> {
        RawBuffers::nccl_layout(c, F32, send, recv, count, rank, 4)
    }

    fn b(ptr: u64, len: usize) -> RawDeviceBuffer {
        RawDeviceBuffer { ptr, len }
    }

    fn message(r: Result<Option<RawBuffers>>) -> String {
        r.expect_err("refused").to_string()
    }

    #[test]
    fn in_place_where_nccl_says_so() {
        let base = 0x10_000;
        let block = |r: usize| base + (r * 8 * 4) as u64;
        for c in [
            Collective::AllReduce,
            Collective::Broadcast { root: 2 },
            Collective::Reduce { root: 2 },
        ] {
            assert_eq!(
                layout(c, base, base, 8, 1).unwrap(),
                Some(RawBuffers::InPlace(b(base, 8))),
                "{c:?}"
            );
        }
        assert_eq!(
            layout(Collective::AllGather, block(3), base, 8, 3).unwrap(),
            Some(RawBuffers::InPlace(b(base, 32)))
        );
        assert_eq!(
            layout(Collective::ReduceScatter, base, block(2), 8, 2).unwrap(),
            Some(RawBuffers::InPlace(b(base, 32)))
        );
        assert_eq!(
            layout(Collective::AllToAll, base, base, 8, 0).unwrap(),
            Some(RawBuffers::InPlace(b(base, 32)))
        );
        // The input at another rank's block is no in-place layout: it overlaps.
        let e = message(layout(Collective::AllGather, block(2), base, 8, 3));
        assert!(
            e.contains("overlap without being NCCL's in-place layout"),
            "{e}"
        );
    }

    #[test]
    fn separate_buffers_carry_each_side_its_length() {
        let (s, r) = (0x10_000, 0x20_000);
        assert_eq!(
            layout(Collective::AllGather, s, r, 8, 1).unwrap(),
            Some(RawBuffers::Separate {
                send: b(s, 8),
                recv: b(r, 32)
            })
        );
        assert_eq!(
            layout(Collective::ReduceScatter, s, r, 8, 1).unwrap(),
            Some(RawBuffers::Separate {
                send: b(s, 32),
                recv: b(r, 8)
            })
        );
        // What a rank does not use may be NULL, and is passed as nothing.
        assert_eq!(
            layout(Collective::Broadcast { root: 0 }, 0, r, 8, 1).unwrap(),
            Some(RawBuffers::Separate {
                send: b(0, 0),
                recv: b(r, 8)
            })
        );
        assert_eq!(
            layout(Collective::Reduce { root: 0 }, s, 0, 8, 1).unwrap(),
            Some(RawBuffers::Separate {
                send: b(s, 8),
                recv: b(0, 0)
            })
        );
        assert_eq!(
            layout(Collective::AllReduce, 0, 0, 0, 1).unwrap(),
            None,
            "no element"
        );
    }

    #[test]
    fn bad_buffers_are_named() {
        let (s, r) = (0x10_000, 0x20_000);
        assert_eq!(
            message(layout(Collective::AllReduce, 0, r, 8, 0)),
            "invalid argument: sendbuff is NULL"
        );
        assert!(
            message(layout(Collective::Broadcast { root: 1 }, 0, r, 8, 1))
                .contains("the root's sendbuff is NULL")
        );
        assert!(
            message(layout(Collective::Reduce { root: 1 }, s, 0, 8, 1))
                .contains("the root's recvbuff is NULL")
        );
        assert!(
            message(layout(Collective::AllReduce, s + 2, r, 8, 0))
                .contains("not aligned to its element size")
        );
        assert!(message(layout(Collective::AllReduce, s, s + 16, 8, 0)).contains("overlap"));
        assert!(
            message(layout(Collective::Reduce { root: 4 }, s, r, 8, 0))
                .contains("root 4 is not a rank")
        );
        assert!(
            message(layout(Collective::AllGather, s, r, usize::MAX / 2, 0)).contains("overflows")
        );
        assert!(
            message(layout(Collective::AllReduce, u64::MAX - 3, r, 8, 0)).contains("past the end")
        );
        assert!(message(layout(Collective::Barrier, s, r, 8, 0)).contains("barrier"));
    }
}
