//! Ring memory in this process, for proxied transports.
//!
//! A proxied transport (tcp) keeps both of a connection's rings in local
//! memory: the stream writes outgoing slots into a staging ring that the
//! progress engine drains to the socket, and the progress engine fills an
//! inbound ring that the stream reads. The rings are the same [`RingEnd`]
//! protocol as in shared memory, so the plan executor does not care which
//! transport a peer uses.

use crate::transport::ring::{RingEnd, RingShape};

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// A zeroed, 64-byte aligned allocation holding one ring.
pub(crate) struct LocalRing {
    mem: Box<[Line]>,
    shape: RingShape,
}

impl std::fmt::Debug for LocalRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LocalRing({:?})", self.shape)
    }
}

impl LocalRing {
    /// Allocates a ring of `shape`.
    pub(crate) fn new(shape: RingShape) -> LocalRing {
        let lines = shape.ring_bytes().div_ceil(64);
        LocalRing {
            mem: vec![Line([0; 64]); lines].into_boxed_slice(),
            shape,
        }
    }

    /// Start of the ring's memory and its length in bytes (for a transport
    /// that registers it with a NIC).
    #[cfg(feature = "verbs")]
    pub(crate) fn memory(&self) -> (*mut u8, usize) {
        (
            self.mem.as_ptr() as *mut u8,
            self.mem.len() * std::mem::size_of::<Line>(),
        )
    }

    /// An end of the ring. Every end of one `LocalRing` shares its memory;
    /// the `LocalRing` must outlive them (its owner keeps both).
    pub(crate) fn end(&self) -> RingEnd {
        // SAFETY: the allocation is 64-aligned, zeroed, ring_bytes long, and
        // never moves (boxed slice); the owner keeps it alive as long as the
        // ends (Connection holds the LocalRing in an Arc beside them).
        unsafe { RingEnd::new(self.mem.as_ptr() as *mut u8, self.shape) }
    }
}
