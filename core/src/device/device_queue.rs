//! What a device stream offers: the staged path's five enqueue primitives,
//! and the flag words and reductions of the direct path.

use std::any::Any;
use std::sync::Arc;

use crate::host::RawBuffer;
use crate::{DataType, ReduceOp, Result};

/// One reduction on a device queue: `dst[i] = op(srcs[0][i], ...,
/// srcs[n-1][i])` for `count` elements of `dtype` into every `dst` of
/// `dsts` (1..=8 sources, 1..=8 destinations; a destination may be a
/// source); `Avg` divides the sum by `avg_divisor`. When it runs, it first
/// reads the 32-bit word at `abort` (0: none) and touches nothing if it is
/// raised.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reduction<'a> {
    pub dtype: DataType,
    pub op: ReduceOp,
    pub srcs: &'a [DevAddr],
    pub dsts: &'a [DevAddr],
    pub count: usize,
    pub avg_divisor: u32,
    pub abort: DevAddr,
}

/// A device address (CUDA's `CUdeviceptr`; a host address in the tests'
/// emulated device).
pub(crate) type DevAddr = u64;

/// A host callback enqueued on a device stream.
pub(crate) type HostCallback = dyn Fn() + Send + Sync + 'static;

/// Memory that the host reads and writes and the device addresses.
pub(crate) trait StagingMemory: Send + Sync + 'static {
    /// Bytes allocated.
    fn capacity(&self) -> usize;
    /// The first `bytes` bytes (at most [`StagingMemory::capacity`]), as a
    /// host buffer the host tasks read and write.
    fn host_buffer(&self, bytes: usize) -> RawBuffer;
    /// Where the device sees them.
    fn dev_addr(&self) -> DevAddr;
}

/// A word the host raises and a device stream waits on.
pub(crate) trait CompletionSignal: Send + Sync + 'static {
    /// Sets the word to 1 (release: the host's earlier writes are visible
    /// to whoever sees it).
    fn raise(&self);
    /// Sets the word to 0 (only while no stream or graph uses it).
    fn reset(&self);
}

/// One stream memory operation, for [`DeviceQueue::enqueue_signals`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Signal {
    /// [`DeviceQueue::enqueue_raise_word`]: a write of 1.
    Raise(DevAddr),
    /// [`DeviceQueue::enqueue_write_word`]: a write of a value.
    Write(DevAddr, u32),
    /// [`DeviceQueue::enqueue_wait_flag`]: a wait on a flag slot (its
    /// arrival half is reset by a later [`Signal::Write`] of 0).
    WaitFlag(DevAddr),
}

/// One device stream, as the staged path drives it. Every `enqueue_*` is
/// stream-ordered and capturable.
pub(crate) trait DeviceQueue {
    /// Staging memory of this queue's device.
    type Staging: StagingMemory;
    /// Completion words of this queue's device.
    type Signal: CompletionSignal;

    /// At least `bytes` bytes of staging memory.
    fn alloc_staging(&self, bytes: usize) -> Result<Self::Staging>;

    /// A completion word holding 0.
    fn alloc_signal(&self) -> Result<Self::Signal>;

    /// Enqueues a copy of `bytes` bytes from `src` to `dst`.
    ///
    /// # Safety
    /// Both ranges must stay valid device memory until the copy has run, at
    /// every replay of a graph that captures it.
    unsafe fn enqueue_copy(&self, dst: DevAddr, src: DevAddr, bytes: usize) -> Result<()>;

    /// Enqueues `callback`, run on a host thread when the stream reaches this
    /// point (and at every replay of a captured graph). It must not block
    /// and must not call the device's API.
    ///
    /// Returns what must be kept for the callback to stay callable.
    ///
    /// # Safety
    /// The returned token must stay alive until the stream, and any graph
    /// captured from it, can no longer run the callback: pass it to
    /// [`DeviceQueue::enqueue_release`] after the operation's last step.
    unsafe fn enqueue_callback(&self, callback: &Arc<HostCallback>) -> Result<Box<dyn Any + Send>>;

    /// Enqueues a wait until `signal` is at least 1, then a write of 0.
    fn enqueue_wait(&self, signal: &Self::Signal) -> Result<()>;

    /// Enqueues a write of 1 to the 32-bit flag word at `addr` (device
    /// memory of this rank's window or a peer's, mapped), after all earlier
    /// work of the stream, whose writes it makes visible first.
    ///
    /// # Safety
    /// `addr` must be a 4-byte aligned word the device can write, valid
    /// while the write can run (at every replay of a captured graph).
    unsafe fn enqueue_raise_word(&self, addr: DevAddr) -> Result<()>;

    /// Enqueues a write of `value` into the word at `addr`, after all
    /// earlier work of the stream (what [`DeviceQueue::enqueue_raise_word`]
    /// does with 1).
    ///
    /// # Safety
    /// As [`DeviceQueue::enqueue_raise_word`].
    unsafe fn enqueue_write_word(&self, addr: DevAddr, value: u32) -> Result<()>;

    /// Enqueues a wait until the flag word at `addr` is at least 1, then a
    /// write of 0 (the waiter resets the word, so a graph replay finds it at 0).
    ///
    /// # Safety
    /// As [`DeviceQueue::enqueue_raise_word`].
    unsafe fn enqueue_wait_word(&self, addr: DevAddr) -> Result<()>;

    /// Enqueues a wait until the 64-bit flag slot at `addr` is non-zero. Its
    /// low 32 bits are the *arrival* half, which a peer raises with
    /// [`DeviceQueue::enqueue_raise_word`] and the waiter resets with a
    /// later [`DeviceQueue::enqueue_write_word`] of 0; the high half is the
    /// *release* half, which only the host raises (after a failure) and the
    /// stream never resets, so every wait on the slot passes from then on.
    ///
    /// # Safety
    /// `addr` must be an 8-byte aligned slot the device can read and write,
    /// valid while the wait can run (at every replay of a captured graph).
    unsafe fn enqueue_wait_flag(&self, addr: DevAddr) -> Result<()>;

    /// Enqueues `signals` in order: one call per signal by default; a
    /// device that batches stream memory operations makes them all with
    /// one driver call (a flag round of the direct path is one batch).
    ///
    /// # Safety
    /// Each signal's address as its single form requires
    /// ([`DeviceQueue::enqueue_raise_word`], [`DeviceQueue::enqueue_wait_flag`]).
    unsafe fn enqueue_signals(&self, signals: &[Signal]) -> Result<()> {
        for signal in signals {
            // SAFETY: forwarded contract.
            unsafe {
                match *signal {
                    Signal::Raise(addr) => self.enqueue_raise_word(addr)?,
                    Signal::Write(addr, value) => self.enqueue_write_word(addr, value)?,
                    Signal::WaitFlag(addr) => self.enqueue_wait_flag(addr)?,
                }
            }
        }
        Ok(())
    }

    /// Enqueues `r` ([`Reduction`]).
    ///
    /// # Safety
    /// Every address of `r` must hold `r.count` elements of
    /// device-accessible memory, valid while the reduction can run, unless
    /// `r.abort` is raised by then; `r.abort` must stay valid while the
    /// reduction can run.
    unsafe fn enqueue_reduce(&self, r: &Reduction<'_>) -> Result<()>;

    /// Runs `f`, which enqueues several operations, with the per-call
    /// set-up they share made once (for CUDA: the context made current
    /// once, not once per operation).
    fn batched<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        f()
    }

    /// Drops what `graveyard` holds (which may free device or pinned
    /// memory), where the device allows it now: a driver refuses frees
    /// while the calling thread's stream captures, so a capturing queue
    /// leaves them for a later call.
    fn bury(&self, graveyard: &super::Graveyard) {
        graveyard.bury();
    }

    /// True while this queue's stream captures a graph (asked of the
    /// driver once per call at most).
    ///
    /// # Errors
    /// As the driver's query.
    fn capturing(&self) -> Result<bool> {
        Ok(false)
    }

    /// Keeps what `owner` makes alive for as long as a graph captured from
    /// this stream may run the work enqueued so far; outside capture the
    /// caller keeps it, and nothing is made (the default keeps it with
    /// [`DeviceQueue::enqueue_release`]).
    fn enqueue_keep(
        &self,
        owner: impl FnOnce() -> Box<dyn Any + Send>,
        graveyard: &Arc<super::Graveyard>,
    ) -> Result<()> {
        self.enqueue_release(owner(), graveyard)
    }

    /// Keeps `owner` until the work enqueued so far can no longer run (has
    /// run, outside capture; the captured graph is destroyed, inside it),
    /// then hands it to `graveyard` to be dropped on an application thread.
    fn enqueue_release(
        &self,
        owner: Box<dyn Any + Send>,
        graveyard: &Arc<super::Graveyard>,
    ) -> Result<()>;
}
