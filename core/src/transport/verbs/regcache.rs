//! Registering user buffers for rendezvous RDMA, with a small cache.
//!
//! A rendezvous message is written by the sender's NIC straight from its
//! send buffer into the receiver's receive buffer, so both must be
//! registered. Registration pins pages and costs a system call, so the
//! registrations of recently used buffers are kept ([`CAPACITY`] per
//! device, shared by every communicator of the process on it, least
//! recently used evicted), keyed by the address range they cover (exactly
//! the buffer: no neighbouring bytes become writable). A buffer used by a
//! communicator and its split children is registered once.
//!
//! A cached registration must never outlive the memory it covers: a buffer
//! freed and another allocated at the same address would get the old,
//! pinned pages. Every buffer the library accepts is a
//! [`RawBuffer`](crate::host::RawBuffer), whose storage runs the host's
//! release hooks when it goes away (before the memory is freed, and for
//! caller-owned memory before the caller may free it); the first cache
//! installs [`forget`] as one (`host::release_hooks`), which drops every
//! cached registration overlapping the memory, in every communicator. An operation in
//! flight holds its registration (`Arc`), so deregistration waits for it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Once, Weak};

use crate::transport::verbs::sys::*;

use super::device::Device;
use crate::{Error, Result};

/// Registrations kept per device.
pub(crate) const CAPACITY: usize = 16;

/// A registered user buffer range, deregistered when the last holder drops it.
pub(crate) struct Registration {
    mr: *mut ibv_mr,
    start: usize,
    end: usize,
    dev: Arc<Device>,
}

// SAFETY: an MR handle is usable from any thread; it is only read (keys)
// and deregistered once, on drop.
unsafe impl Send for Registration {}
// SAFETY: as above.
unsafe impl Sync for Registration {}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Registration({:#x}..{:#x})", self.start, self.end)
    }
}

impl Registration {
    /// Takes ownership of `mr`, which covers `start..end` on `dev`.
    ///
    /// # Safety
    /// `mr` must be a live registration made on `dev`'s protection domain,
    /// deregistered by nobody else.
    pub(super) unsafe fn adopt(
        mr: *mut ibv_mr,
        start: usize,
        end: usize,
        dev: Arc<Device>,
    ) -> Self {
        Registration {
            mr,
            start,
            end,
            dev,
        }
    }

    /// Local key (for our NIC reading the buffer).
    pub(crate) fn lkey(&self) -> u32 {
        // SAFETY: the MR is valid until drop.
        unsafe { (*self.mr).lkey }
    }

    /// Remote key (for the peer's NIC writing it).
    pub(crate) fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.mr).rkey }
    }

    fn covers(&self, start: usize, end: usize) -> bool {
        self.start <= start && end <= self.end
    }

    fn overlaps(&self, start: usize, end: usize) -> bool {
        self.start < end && start < self.end
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // SAFETY: registered once in `RegCache::get`, deregistered once
        // here; no work request uses it any more (holders keep the Arc
        // until their writes completed or their receive ended).
        unsafe { (self.dev.lib.dereg_mr)(self.mr) };
    }
}

/// The registrations of the verbs peers of every communicator of this
/// process on one device.
pub(crate) struct RegCache {
    dev: Arc<Device>,
    /// Most recently used last.
    entries: Mutex<Vec<Arc<Registration>>>,
}

impl std::fmt::Debug for RegCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RegCache({:?})", self.dev)
    }
}

/// Every live cache, so that a buffer going away reaches all of them.
static CACHES: Mutex<Vec<Weak<RegCache>>> = Mutex::new(Vec::new());
/// False until the first cache exists: [`forget`] then skips the lock.
static ANY: AtomicBool = AtomicBool::new(false);
/// Installs [`forget`] as a buffer release hook, once.
static HOOK: Once = Once::new();

impl RegCache {
    /// The cache of `dev`: the one another communicator of this process
    /// uses on it, or a new one, reachable from [`forget`].
    pub(crate) fn of(dev: Arc<Device>) -> Arc<RegCache> {
        let mut all = CACHES.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|w| w.strong_count() > 0);
        if let Some(c) = all
            .iter()
            .filter_map(Weak::upgrade)
            .find(|c| Arc::ptr_eq(&c.dev, &dev))
        {
            return c;
        }
        let c = Arc::new(RegCache {
            dev,
            entries: Mutex::new(Vec::new()),
        });
        all.push(Arc::downgrade(&c));
        ANY.store(true, Ordering::Release);
        HOOK.call_once(|| crate::host::release_hooks::install(forget));
        c
    }

    /// A registration covering `len` bytes at `addr` (readable by our NIC,
    /// writable by the peer's), from the cache or made now.
    ///
    /// # Errors
    /// [`Error::Os`] when `ibv_reg_mr` fails.
    pub(crate) fn get(&self, addr: usize, len: usize) -> Result<Arc<Registration>> {
        let (start, end) = (addr, addr + len.max(1));
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = entries.iter().position(|r| r.covers(start, end)) {
            let r = entries.remove(i);
            entries.push(r.clone());
            return Ok(r);
        }
        let access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0
            | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
        // SAFETY: the range is memory of a live RawBuffer (the caller holds
        // it); the registration is dropped from the cache before that memory
        // goes away (`forget`), and holders keep it only while they use it.
        let mr = unsafe {
            (self.dev.lib.reg_mr)(
                self.dev.pd,
                start as *mut std::ffi::c_void,
                end - start,
                access as i32,
            )
        };
        if mr.is_null() {
            return Err(Error::os(
                format!("verbs: ibv_reg_mr(user buffer, {} bytes)", end - start),
                std::io::Error::last_os_error(),
            ));
        }
        let r = Arc::new(Registration {
            mr,
            start,
            end,
            dev: self.dev.clone(),
        });
        if entries.len() >= CAPACITY {
            entries.remove(0);
        }
        entries.push(r.clone());
        Ok(r)
    }

    fn forget(&self, start: usize, end: usize) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|r| !r.overlaps(start, end));
    }

    /// The device this cache registers on.
    pub(crate) fn device(&self) -> &Arc<Device> {
        &self.dev
    }
}

/// Drops every cached registration overlapping `len` bytes at `addr`, in
/// every communicator (a buffer is going away).
pub(crate) fn forget(addr: usize, len: usize) {
    if !ANY.load(Ordering::Acquire) {
        return;
    }
    let all: Vec<Arc<RegCache>> = CACHES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    for c in all {
        c.forget(addr, addr + len.max(1));
    }
}
