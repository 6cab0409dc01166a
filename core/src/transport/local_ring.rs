//! Ring memory in this process, for proxied transports.
//!
//! A proxied transport (tcp) keeps both of a connection's rings in local
//! memory: the stream writes outgoing slots into a staging ring that the
//! progress engine drains to the socket, and the progress engine fills an
//! inbound ring that the stream reads. The rings are the same [`RingEnd`]
//! protocol as in shared memory, so the plan executor does not care which
//! transport a peer uses.
//!
//! The memory is an anonymous mapping of its own: zero, page-aligned, and
//! resident only as its pages are used (a zeroing allocation of 64-byte
//! aligned memory would write every byte at creation, making every rank
//! hold every peer's rings, 8 MiB a peer, whatever it uses).

use std::ptr::NonNull;

use crate::transport::ring::{RingEnd, RingShape};
use crate::{Error, Result};

/// A zeroed, page-aligned mapping holding one ring.
pub(crate) struct LocalRing {
    mem: NonNull<u8>,
    len: usize,
    shape: RingShape,
}

// SAFETY: the mapping is owned by this value and freed once, in `drop`;
// access to its contents goes through the ring protocol's atomics.
unsafe impl Send for LocalRing {}
// SAFETY: as above.
unsafe impl Sync for LocalRing {}

impl std::fmt::Debug for LocalRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LocalRing({:?})", self.shape)
    }
}

impl LocalRing {
    /// Maps a ring of `shape`.
    ///
    /// # Errors
    /// [`Error::Os`] when the memory cannot be mapped.
    pub(crate) fn new(shape: RingShape) -> Result<LocalRing> {
        let len = shape.ring_bytes();
        // SAFETY: an anonymous private mapping at an address the kernel picks;
        // nothing else refers to it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::os(
                format!("map a local ring of {len} bytes"),
                std::io::Error::last_os_error(),
            ));
        }
        let mem = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| Error::Unavailable("mmap returned null".into()))?;
        Ok(LocalRing { mem, len, shape })
    }

    /// Start of the ring's memory and its length in bytes (for a transport
    /// that registers it with a NIC).
    #[cfg(feature = "verbs")]
    pub(crate) fn memory(&self) -> (*mut u8, usize) {
        (self.mem.as_ptr(), self.len)
    }

    /// An end of the ring. Every end of one `LocalRing` shares its memory;
    /// the `LocalRing` must outlive them (its owner keeps both).
    pub(crate) fn end(&self) -> RingEnd {
        // SAFETY: the mapping is page-aligned (so 64-aligned), zeroed,
        // ring_bytes long, and never moves; the owner keeps it alive as long
        // as the ends (Connection holds the LocalRing in an Arc beside them).
        unsafe { RingEnd::new(self.mem.as_ptr(), self.shape) }
    }
}

impl Drop for LocalRing {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; no end outlives
        // this value (see `end`).
        unsafe { libc::munmap(self.mem.as_ptr().cast(), self.len) };
    }
}
