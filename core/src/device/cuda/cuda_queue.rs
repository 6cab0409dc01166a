//! The CUDA implementation of the staged path's [`DeviceQueue`]: pinned
//! host-mapped staging memory, doorbell completion words, `cuMemcpyAsync`,
//! `cuLaunchHostFunc`, `cuStreamWaitValue32`/`WriteValue32` (or the spin
//! kernels), and releases through host functions or graph user objects.

use std::any::Any;
use std::ffi::c_void;
use std::sync::Arc;

use streamcomm_gpu::{
    Device, Doorbells, Kernels, MemOp, PinnedBuffer, ReduceCopy, Signals, Stream, WaitCondition,
    relaxed_capture,
};

use super::gpu_error;
use crate::device::HostCallback;
use crate::device::device_queue::{Reduction, Signal};
use crate::device::{CompletionSignal, DevAddr, DeviceQueue, Graveyard, StagingMemory};
use crate::host::RawBuffer;
use crate::{Error, Result};

/// Pinned, host-mapped staging memory.
pub(crate) struct CudaStaging {
    mem: PinnedBuffer,
}

impl StagingMemory for CudaStaging {
    fn capacity(&self) -> usize {
        self.mem.len()
    }

    fn host_buffer(&self, bytes: usize) -> RawBuffer {
        assert!(bytes <= self.mem.len(), "staging view past the allocation");
        // SAFETY: the pinned allocation lives as long as `self`, which the
        // operation's resources keep until the device can no longer use it;
        // host task and device copies are ordered by the stream and the
        // completion word.
        unsafe { RawBuffer::from_raw_parts(self.mem.as_ptr(), bytes) }
            .expect("a pinned allocation is never null")
    }

    fn dev_addr(&self) -> DevAddr {
        self.mem.device_ptr()
    }
}

/// One doorbell word as a completion signal.
pub(crate) struct CudaSignal {
    bell: Doorbells,
}

impl CompletionSignal for CudaSignal {
    fn raise(&self) {
        // Index 0 always exists (allocated with one word).
        let _ = self.bell.store(0, 1);
    }

    fn reset(&self) {
        let _ = self.bell.store(0, 0);
    }
}

/// A cudarc stream seen through the CUDA layer, for one call.
pub(crate) struct CudaQueue<'a> {
    pub device: &'a Device,
    pub stream: Stream,
    pub signals: &'a Signals,
    /// The reduce kernels (needed by the direct path only).
    pub kernels: Option<&'a Kernels>,
    /// Whether the stream captures, once asked ([`DeviceQueue::capturing`]):
    /// a queue serves one call.
    pub capture: std::cell::Cell<Option<bool>>,
}

/// Calls the `Arc<HostCallback>` that `data` points to.
unsafe extern "C" fn run_callback(data: *mut c_void) {
    // SAFETY: `data` points into the box returned by `enqueue_callback`,
    // which the operation's resources keep until it can no longer run.
    let callback = unsafe { &*(data as *const Arc<HostCallback>) };
    // A panic must not unwind into the driver's thread.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| callback()));
}

impl DeviceQueue for CudaQueue<'_> {
    type Staging = CudaStaging;
    type Signal = CudaSignal;

    fn alloc_staging(&self, bytes: usize) -> Result<CudaStaging> {
        // The first staged call inside a capture allocates: relaxed mode,
        // or the driver refuses it and invalidates the caller's capture.
        let mem = relaxed_capture(|| PinnedBuffer::alloc(self.device, bytes.max(1)))
            .and_then(|r| r)
            .map_err(gpu_error)?;
        Ok(CudaStaging { mem })
    }

    fn alloc_signal(&self) -> Result<CudaSignal> {
        let bell = relaxed_capture(|| Doorbells::new(self.device, 1))
            .and_then(|r| r)
            .map_err(gpu_error)?;
        Ok(CudaSignal { bell })
    }

    fn capturing(&self) -> Result<bool> {
        if let Some(known) = self.capture.get() {
            return Ok(known);
        }
        let now = self.stream.is_capturing().map_err(gpu_error)?;
        self.capture.set(Some(now));
        Ok(now)
    }

    fn batched<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        self.stream.device().bound(f).map_err(gpu_error)?
    }

    fn bury(&self, graveyard: &Graveyard) {
        // Frees may synchronise, which a capturing stream refuses: leave
        // them for a call outside capture (or the communicator's drop).
        // Relaxed mode, so that another thread's global capture does not
        // forbid them either. Nothing to drop: no driver call at all.
        if graveyard.has_dead() && self.capturing().is_ok_and(|c| !c) {
            let _ = relaxed_capture(|| graveyard.bury());
        }
    }

    unsafe fn enqueue_copy(&self, dst: DevAddr, src: DevAddr, bytes: usize) -> Result<()> {
        // SAFETY: forwarded contract (both ranges valid while the copy can run).
        unsafe { self.stream.copy_async(dst, src, bytes) }.map_err(gpu_error)
    }

    unsafe fn enqueue_callback(&self, callback: &Arc<HostCallback>) -> Result<Box<dyn Any + Send>> {
        let keep: Box<Arc<HostCallback>> = Box::new(callback.clone());
        let data = &*keep as *const Arc<HostCallback> as *mut c_void;
        // SAFETY: `data` stays valid while `keep` lives, which the caller
        // guarantees until the callback can no longer run; `run_callback`
        // calls no CUDA and catches panics.
        unsafe { self.stream.launch_host_fn_raw(run_callback, data) }.map_err(gpu_error)?;
        Ok(keep)
    }

    fn enqueue_wait(&self, signal: &CudaSignal) -> Result<()> {
        let word = signal.bell.device_ptr(0).map_err(gpu_error)?;
        // SAFETY: the word is device-visible, aligned, and kept with the
        // operation's resources until the operation can no longer run.
        unsafe { self.enqueue_wait_word(word) }
    }

    unsafe fn enqueue_raise_word(&self, addr: DevAddr) -> Result<()> {
        // SAFETY: forwarded contract; the write is preceded by a memory
        // barrier (no NO_MEMORY_BARRIER flag), so earlier copies and kernels
        // of the stream are visible to whoever sees the flag.
        unsafe { self.signals.write_value32(&self.stream, addr, 1) }.map_err(gpu_error)
    }

    unsafe fn enqueue_write_word(&self, addr: DevAddr, value: u32) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.signals.write_value32(&self.stream, addr, value) }.map_err(gpu_error)
    }

    unsafe fn enqueue_wait_word(&self, addr: DevAddr) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe {
            self.signals
                .wait_value32(&self.stream, addr, 1, WaitCondition::Geq)
                .map_err(gpu_error)?;
            self.signals
                .write_value32(&self.stream, addr, 0)
                .map_err(gpu_error)
        }
    }

    unsafe fn enqueue_signals(&self, signals: &[Signal]) -> Result<()> {
        let mut ops = Vec::with_capacity(2 * signals.len());
        for signal in signals {
            match *signal {
                Signal::Raise(addr) => ops.push(MemOp::Write32 { addr, value: 1 }),
                Signal::Write(addr, value) => ops.push(MemOp::Write32 { addr, value }),
                Signal::WaitFlag(addr) => ops.push(MemOp::Wait64 {
                    addr,
                    value: u64::MAX,
                    cond: WaitCondition::And,
                }),
            }
        }
        // SAFETY: forwarded contract; writes are preceded by a memory
        // barrier (the batch's default), as enqueue_raise_word's are.
        unsafe { self.signals.batch(&self.stream, &ops) }.map_err(gpu_error)
    }

    unsafe fn enqueue_wait_flag(&self, addr: DevAddr) -> Result<()> {
        // SAFETY: forwarded contract; `enqueue_signals` says how a flag
        // wait becomes stream operations.
        unsafe { self.enqueue_signals(&[Signal::WaitFlag(addr)]) }
    }

    unsafe fn enqueue_reduce(&self, r: &Reduction<'_>) -> Result<()> {
        let kernels = self
            .kernels
            .ok_or_else(|| Error::Unavailable("the reduce kernels are not loaded".into()))?;
        let work = ReduceCopy {
            srcs: r.srcs,
            dsts: r.dsts,
            count: r.count,
            avg_divisor: r.avg_divisor,
        };
        // SAFETY: forwarded contract.
        unsafe { kernels.reduce_copy_unless(&self.stream, r.dtype, r.op, &work, r.abort) }
            .map_err(gpu_error)
    }

    fn enqueue_keep(
        &self,
        owner: impl FnOnce() -> Box<dyn Any + Send>,
        graveyard: &Arc<Graveyard>,
    ) -> Result<()> {
        // Outside capture the windows' drop waits until the stream is past
        // the call (its "done" word), so only a graph needs to own `owner`.
        if self.capturing()? {
            self.enqueue_release(owner(), graveyard)
        } else {
            Ok(())
        }
    }

    fn enqueue_release(
        &self,
        owner: Box<dyn Any + Send>,
        graveyard: &Arc<Graveyard>,
    ) -> Result<()> {
        // The driver drops the release on its own thread, which hands the
        // owner over to the graveyard instead of dropping it.
        let release = graveyard.release(owner);
        self.stream
            .release_after(move || drop(release))
            .map_err(gpu_error)
    }
}
