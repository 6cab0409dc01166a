//! A host stream playing a device stream, for the GPUDirect RDMA tests only
//! (see `tests.rs`): "device memory" is host memory a NIC can register,
//! copies and callbacks are host-stream functions, waits are doorbell waits.
//! Every other device test runs on a CUDA driver through the real queue.

use std::any::Any;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::device_queue::{
    CompletionSignal, DevAddr, DeviceQueue, HostCallback, Reduction, StagingMemory,
};
use super::graveyard::Graveyard;
use crate::host::{Doorbell, HostStream, RawBuffer, WaitCmp};
use crate::{ReduceOp, Result};

/// How long an emulated flag wait spins before it fails the stream (a real
/// device would wait for ever: the direct path's watchdog releases it).
const FLAG_WAIT_LIMIT: Duration = Duration::from_secs(60);

/// Host memory standing in for staging memory.
pub(crate) struct EmulatedStaging {
    words: Box<[u64]>,
}

impl StagingMemory for EmulatedStaging {
    fn capacity(&self) -> usize {
        self.words.len() * 8
    }

    fn host_buffer(&self, bytes: usize) -> RawBuffer {
        assert!(bytes <= self.capacity());
        // SAFETY: the words live as long as `self`, which the operation's
        // resources keep until the emulated device can no longer touch them;
        // the host task and the copies are ordered by the stream.
        unsafe { RawBuffer::from_raw_parts(self.words.as_ptr() as *mut u8, bytes) }
            .expect("a live allocation is never null")
    }

    fn dev_addr(&self) -> DevAddr {
        self.words.as_ptr() as DevAddr
    }
}

/// A doorbell standing in for a completion word.
pub(crate) struct EmulatedSignal(Doorbell);

impl CompletionSignal for EmulatedSignal {
    fn raise(&self) {
        self.0.store(1);
    }

    fn reset(&self) {
        self.0.store(0);
    }
}

/// The emulated device stream.
pub(crate) struct EmulatedQueue<'s> {
    pub stream: &'s HostStream,
}

impl DeviceQueue for EmulatedQueue<'_> {
    type Staging = EmulatedStaging;
    type Signal = EmulatedSignal;

    fn alloc_staging(&self, bytes: usize) -> Result<EmulatedStaging> {
        Ok(EmulatedStaging {
            words: vec![0xDEAD_BEEF_u64; bytes.div_ceil(8).max(1)].into_boxed_slice(),
        })
    }

    fn alloc_signal(&self) -> Result<EmulatedSignal> {
        Ok(EmulatedSignal(Doorbell::new()))
    }

    unsafe fn enqueue_copy(&self, dst: DevAddr, src: DevAddr, bytes: usize) -> Result<()> {
        self.stream.host_fn(move || {
            // SAFETY: the caller guarantees both ranges for as long as the
            // copy can run; the stream orders it with every other access.
            unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, bytes) }
        })
    }

    unsafe fn enqueue_callback(&self, callback: &Arc<HostCallback>) -> Result<Box<dyn Any + Send>> {
        let callback = callback.clone();
        // The stream (or graph) owns the closure: nothing else to keep.
        self.stream.host_fn(move || callback())?;
        Ok(Box::new(()))
    }

    fn enqueue_wait(&self, signal: &EmulatedSignal) -> Result<()> {
        self.stream.wait_value32(&signal.0, 1, WaitCmp::Geq)?;
        self.stream.write_value32(&signal.0, 0)
    }

    unsafe fn enqueue_raise_word(&self, addr: DevAddr) -> Result<()> {
        self.stream.host_fn(move || {
            // SAFETY: the caller guarantees an aligned, live word.
            unsafe { &*(addr as *const AtomicU32) }.store(1, Ordering::Release);
        })
    }

    unsafe fn enqueue_write_word(&self, addr: DevAddr, value: u32) -> Result<()> {
        self.stream.host_fn(move || {
            // SAFETY: the caller guarantees an aligned, live word.
            unsafe { &*(addr as *const AtomicU32) }.store(value, Ordering::Release);
        })
    }

    unsafe fn enqueue_wait_word(&self, addr: DevAddr) -> Result<()> {
        self.stream.try_host_fn(move || {
            // SAFETY: the caller guarantees an aligned, live word.
            let word = unsafe { &*(addr as *const AtomicU32) };
            let start = Instant::now();
            while word.load(Ordering::Acquire) == 0 {
                if start.elapsed() > FLAG_WAIT_LIMIT {
                    return Err(format!("flag word {addr:#x} never raised"));
                }
                std::thread::yield_now();
            }
            word.store(0, Ordering::Relaxed);
            Ok(())
        })
    }

    unsafe fn enqueue_wait_flag(&self, addr: DevAddr) -> Result<()> {
        self.stream.try_host_fn(move || {
            // SAFETY: the caller guarantees an aligned, live slot. Its
            // halves are also written as 32-bit words (by peers and the
            // host): naturally aligned accesses of either size are
            // single-copy atomic on the targets this runs on, as on the
            // device.
            let slot = unsafe { &*(addr as *const AtomicU64) };
            let start = Instant::now();
            while slot.load(Ordering::Acquire) == 0 {
                if start.elapsed() > FLAG_WAIT_LIMIT {
                    return Err(format!("flag slot {addr:#x} never raised"));
                }
                std::thread::yield_now();
            }
            Ok(())
        })
    }

    unsafe fn enqueue_reduce(&self, r: &Reduction<'_>) -> Result<()> {
        let (dtype, op, count, avg_divisor, abort) =
            (r.dtype, r.op, r.count, r.avg_divisor, r.abort);
        let (srcs, dsts) = (r.srcs.to_vec(), r.dsts.to_vec());
        let bytes = count * dtype.size();
        self.stream.try_host_fn(move || {
            // SAFETY: the caller keeps the word valid while this can run.
            if abort != 0 && unsafe { &*(abort as *const AtomicU32) }.load(Ordering::Acquire) != 0 {
                return Ok(());
            }
            // SAFETY: the caller guarantees `count` elements at every
            // address while this runs; the result is built apart and copied
            // last, so a destination may be a source.
            let view = |a: DevAddr| unsafe { std::slice::from_raw_parts(a as *const u8, bytes) };
            let mut acc = view(srcs[0]).to_vec();
            let step = if op == ReduceOp::Avg {
                ReduceOp::Sum
            } else {
                op
            };
            for &s in &srcs[1..] {
                streamcomm_kernels::reduce_in_place(dtype, step, &mut acc, view(s))
                    .map_err(|e| e.to_string())?;
            }
            if op == ReduceOp::Avg {
                streamcomm_kernels::divide(dtype, &mut acc, avg_divisor as usize)
                    .map_err(|e| e.to_string())?;
            }
            for &dst in &dsts {
                // SAFETY: as above.
                unsafe { std::ptr::copy(acc.as_ptr(), dst as *mut u8, bytes) };
            }
            Ok(())
        })
    }

    fn enqueue_release(
        &self,
        owner: Box<dyn Any + Send>,
        graveyard: &Arc<Graveyard>,
    ) -> Result<()> {
        let release = Mutex::new(Some(graveyard.release(owner)));
        // The stream (or the graph) owns the closure, so the release drops
        // when the job has run (or the graph is dropped).
        self.stream.host_fn(move || {
            let _ = &release;
        })
    }
}
