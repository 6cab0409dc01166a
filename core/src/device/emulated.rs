//! A host stream playing a device stream, so that the staged path runs end to
//! end in tests on machines without a GPU: "device memory" is host memory,
//! copies and callbacks are host-stream functions, waits are doorbell waits,
//! capture is the host stream's capture.

use std::any::Any;
use std::sync::{Arc, Mutex};

use super::queue::{CompletionSignal, DevAddr, DeviceQueue, HostCallback, StagingMemory};
use super::runner::Graveyard;
use crate::host::{Doorbell, HostStream, RawBuffer, WaitCmp};
use crate::Result;

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

/// Drops into the graveyard when the stream (or graph) lets go of it.
struct ReleaseOnDrop {
    owner: Mutex<Option<Box<dyn Any + Send>>>,
    graveyard: Arc<Graveyard>,
}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        let owner = self
            .owner
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(owner) = owner {
            self.graveyard.receive(owner);
        }
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

    fn enqueue_release(
        &self,
        owner: Box<dyn Any + Send>,
        graveyard: &Arc<Graveyard>,
    ) -> Result<()> {
        let keep = ReleaseOnDrop {
            owner: Mutex::new(Some(owner)),
            graveyard: graveyard.clone(),
        };
        // The stream (or the graph) owns the closure, so `keep` drops when
        // the job has run (or the graph is dropped).
        self.stream.host_fn(move || {
            let _ = &keep;
        })
    }
}
