//! Opaque handles for driver objects: a type tag in the high bits and a
//! serial number, never reused, so a destroyed or foreign handle is caught
//! (`CUDA_ERROR_INVALID_HANDLE`) instead of being dereferenced.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{INVALID_HANDLE, Res};

/// Live objects of one kind, by handle value.
pub(crate) struct Registry<T> {
    tag: usize,
    next: AtomicUsize,
    live: Mutex<BTreeMap<usize, Arc<T>>>,
}

impl<T> Registry<T> {
    /// An empty registry whose handles carry `tag` (1..=255).
    pub(crate) const fn new(tag: usize) -> Registry<T> {
        Registry {
            tag,
            next: AtomicUsize::new(1),
            live: Mutex::new(BTreeMap::new()),
        }
    }

    /// Registers `value` and returns its new handle.
    pub(crate) fn insert(&self, value: Arc<T>) -> usize {
        self.insert_with(|_| value)
    }

    /// Registers the object `make` builds from its handle; returns the handle.
    pub(crate) fn insert_with(&self, make: impl FnOnce(usize) -> Arc<T>) -> usize {
        let h = (self.tag << 44) | (self.next.fetch_add(1, Ordering::Relaxed) << 4);
        let value = make(h);
        self.lock().insert(h, value);
        h
    }

    /// The object behind `handle`.
    pub(crate) fn get(&self, handle: usize) -> Res<Arc<T>> {
        self.lock().get(&handle).cloned().ok_or(INVALID_HANDLE)
    }

    /// Unregisters `handle`, returning its object.
    pub(crate) fn remove(&self, handle: usize) -> Res<Arc<T>> {
        self.lock().remove(&handle).ok_or(INVALID_HANDLE)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<usize, Arc<T>>> {
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Handles of per-device objects (primary contexts, default memory pools):
/// one fixed handle per device, with a [`Registry`] handle's layout and the
/// device ordinal + 1 as its serial.
pub(crate) struct PerDevice {
    tag: usize,
}

impl PerDevice {
    /// The handles carrying `tag` (1..=255, distinct from every registry's).
    pub(crate) const fn new(tag: usize) -> PerDevice {
        PerDevice { tag }
    }

    /// The handle of device `ordinal`'s object.
    pub(crate) fn handle(&self, ordinal: usize) -> usize {
        (self.tag << 44) | ((ordinal + 1) << 4)
    }

    /// The device ordinal behind `handle`, if it is one of these handles
    /// and names one of the `devices` devices.
    pub(crate) fn ordinal(&self, handle: usize, devices: usize) -> Option<usize> {
        let ordinal = (handle >> 4).wrapping_sub(1) & 0xff_ffff;
        let ours = handle >> 44 == self.tag && self.handle(ordinal) == handle;
        (ours && ordinal < devices).then_some(ordinal)
    }
}
