//! Handle tables: what the opaque C handles (`streamcomm_comm_t`, ...) name.
//!
//! A C handle is never a pointer to Rust memory. It is a number that looks
//! like a pointer: the object's kind in the top byte and a never-reused serial
//! below it. The object itself lives in a table, so a handle that was
//! destroyed, forged, or of another kind (a stream passed as a communicator,
//! a `cudaStream_t`) is found missing and reported, never dereferenced. A call
//! takes a clone of the object's `Arc` and releases the table lock at once, so
//! a destroy racing with a call on another thread waits for nothing and frees
//! the object when that call ends.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::result::{Failure, FfiResult, INVALID_HANDLE};

/// Bits below the kind tag.
const SERIAL_BITS: u32 = usize::BITS - 8;

/// Objects of one kind, by handle.
pub(crate) struct Table<T> {
    /// What the handles name, for messages (`communicator`, `stream`, ...).
    kind: &'static str,
    /// Top byte of every handle of this kind.
    tag: usize,
    next: AtomicUsize,
    objects: Mutex<BTreeMap<usize, Arc<T>>>,
}

impl<T> Table<T> {
    /// An empty table whose handles carry `tag` in their top byte.
    pub(crate) const fn new(kind: &'static str, tag: u8) -> Table<T> {
        Table {
            kind,
            tag: tag as usize,
            next: AtomicUsize::new(1),
            objects: Mutex::new(BTreeMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<usize, Arc<T>>> {
        self.objects.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stores `object` and returns its new handle.
    pub(crate) fn insert(&self, object: T) -> FfiResult<*mut c_void> {
        let serial = self.next.fetch_add(1, Ordering::Relaxed);
        if serial >> SERIAL_BITS != 0 {
            return Err(Failure::new(
                INVALID_HANDLE,
                format!("too many {} handles created", self.kind),
            ));
        }
        let key = (self.tag << SERIAL_BITS) | serial;
        self.lock().insert(key, Arc::new(object));
        Ok(key as *mut c_void)
    }

    fn key(&self, handle: *const c_void) -> FfiResult<usize> {
        let key = handle as usize;
        if key == 0 {
            return Err(Failure::new(
                INVALID_HANDLE,
                format!("{} handle is NULL", self.kind),
            ));
        }
        if key >> SERIAL_BITS != self.tag {
            return Err(Failure::new(
                INVALID_HANDLE,
                format!("{key:#x} is not a {} handle", self.kind),
            ));
        }
        Ok(key)
    }

    fn missing(&self, key: usize) -> Failure {
        Failure::new(
            INVALID_HANDLE,
            format!(
                "{} handle {key:#x} was destroyed (or never created)",
                self.kind
            ),
        )
    }

    /// The object `handle` names.
    pub(crate) fn get(&self, handle: *const c_void) -> FfiResult<Arc<T>> {
        let key = self.key(handle)?;
        let found = self.lock().get(&key).cloned();
        found.ok_or_else(|| self.missing(key))
    }

    /// Removes the object `handle` names and returns it (later uses of the
    /// handle fail with `INVALID_HANDLE`).
    pub(crate) fn remove(&self, handle: *const c_void) -> FfiResult<Arc<T>> {
        let key = self.key(handle)?;
        let found = self.lock().remove(&key);
        found.ok_or_else(|| self.missing(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_checked_by_kind_and_life() {
        let a: Table<u32> = Table::new("alpha", 0xA1);
        let b: Table<u32> = Table::new("beta", 0xB2);
        let h = a.insert(7).unwrap();
        assert_eq!(*a.get(h).unwrap(), 7);
        let wrong_kind = b.get(h).unwrap_err();
        assert_eq!(wrong_kind.code, INVALID_HANDLE);
        assert!(wrong_kind.message.contains("not a beta handle"));
        assert_eq!(a.get(std::ptr::null()).unwrap_err().code, INVALID_HANDLE);
        assert_eq!(*a.remove(h).unwrap(), 7);
        let gone = a.get(h).unwrap_err();
        assert!(gone.message.contains("destroyed"), "{}", gone.message);
        assert_eq!(a.remove(h).unwrap_err().code, INVALID_HANDLE);
        let h2 = a.insert(8).unwrap();
        assert_ne!(h, h2, "serials are never reused");
    }
}
