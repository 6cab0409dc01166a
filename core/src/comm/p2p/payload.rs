//! The bytes of one send or receive: host memory the CPU copies, or device
//! memory that only the NIC touches (GPUDirect RDMA, `transport::device_span`).
//!
//! Device memory is named by address only, never as a slice: the CPU cannot
//! read it, so a device payload can move only by an RDMA write into a
//! granted buffer. A device send therefore always takes the rendezvous path
//! (only an empty message goes as one empty eager slot), and a device
//! receive refuses bytes that arrive in slots, naming the cause.

use crate::host::RawBuffer;
use crate::transport::device_span::DeviceSpan;
use crate::transport::rendezvous::Place;

/// Bytes of a host buffer that an operation reaches under the buffer's
/// lock, taken only while it moves them and never across a wait for its
/// peer: the lock policy of a collective's step. A program that reads the
/// buffer before synchronizing sees the old values at once (or a message
/// half in) instead of waiting on the peer.
pub(super) struct HostBytes<'a> {
    raw: &'a RawBuffer,
    offset: usize,
    len: usize,
    /// Where the first byte is (the storage never moves while a handle to
    /// it exists).
    addr: u64,
}

impl<'a> HostBytes<'a> {
    /// Bytes `offset..offset + len` of `raw`.
    pub(super) fn new(raw: &'a RawBuffer, offset: usize, len: usize) -> HostBytes<'a> {
        let addr = {
            let g = raw.read();
            raw.bytes_of(&g).as_ptr() as u64 + offset as u64
        };
        HostBytes {
            raw,
            offset,
            len,
            addr,
        }
    }

    /// Runs `f` on the bytes under the buffer's read lock.
    pub(super) fn read<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        let g = self.raw.read();
        f(&self.raw.bytes_of(&g)[self.offset..self.offset + self.len])
    }

    /// Runs `f` on the bytes under the buffer's write lock.
    pub(super) fn write<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        let mut g = self.raw.write();
        f(&mut self.raw.bytes_of_mut(&mut g)[self.offset..self.offset + self.len])
    }
}

/// What a send reads.
pub(super) enum Src<'a> {
    /// Host bytes, locked while read.
    Host(HostBytes<'a>),
    /// Device memory (RDMA only).
    Device(DeviceSpan),
}

/// What a receive writes.
pub(super) enum Dst<'a> {
    /// Host bytes, locked while written.
    Host(HostBytes<'a>),
    /// Device memory (RDMA only).
    Device(DeviceSpan),
}

impl Src<'_> {
    /// Bytes to send.
    pub(super) fn len(&self) -> usize {
        match self {
            Src::Host(b) => b.len,
            Src::Device(d) => d.len,
        }
    }

    /// Where the bytes are (what the NIC registers).
    pub(super) fn place(&self) -> Place<'_> {
        match self {
            Src::Host(b) => Place::Host(b.addr),
            Src::Device(d) => Place::Device(d),
        }
    }

    /// Host bytes' address and length (what a peer pulls from), `None`
    /// for device memory.
    pub(super) fn host_span(&self) -> Option<(u64, usize)> {
        match self {
            Src::Host(b) => Some((b.addr, b.len)),
            Src::Device(_) => None,
        }
    }

    /// Runs `f` on the bytes, read-locked, where the CPU may read them (an
    /// empty device payload is no bytes); `None` for device memory.
    pub(super) fn read_host<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        match self {
            Src::Host(b) => Some(b.read(f)),
            Src::Device(d) if d.len == 0 => Some(f(&[])),
            Src::Device(_) => None,
        }
    }
}

impl Dst<'_> {
    /// Capacity in bytes.
    pub(super) fn len(&self) -> usize {
        match self {
            Dst::Host(b) => b.len,
            Dst::Device(d) => d.len,
        }
    }

    /// Where the bytes are.
    pub(super) fn place(&self) -> Place<'_> {
        match self {
            Dst::Host(b) => Place::Host(b.addr),
            Dst::Device(d) => Place::Device(d),
        }
    }

    /// Address of the first byte (host or device).
    pub(super) fn addr(&self) -> u64 {
        match self.place() {
            Place::Host(a) => a,
            Place::Device(d) => d.addr,
        }
    }

    /// Runs `f` on the bytes, write-locked, where the CPU may write them;
    /// `None` for device memory.
    pub(super) fn write_host<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> Option<R> {
        match self {
            Dst::Host(b) => Some(b.write(f)),
            Dst::Device(_) => None,
        }
    }
}
