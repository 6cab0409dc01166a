//! The bytes of one send or receive: host memory the CPU copies, or device
//! memory that only the NIC touches (GPUDirect RDMA, `transport::device_span`).
//!
//! Device memory is named by address only, never as a slice: the CPU cannot
//! read it, so a device payload can move only by an RDMA write into a
//! granted buffer. A device send therefore always takes the rendezvous path
//! (only an empty message goes as one empty eager slot), and a device
//! receive refuses bytes that arrive in slots, naming the cause.

use crate::transport::device_span::DeviceSpan;
use crate::transport::rendezvous::Place;

/// What a send reads.
pub(super) enum Src<'a> {
    /// Locked host bytes.
    Host(&'a [u8]),
    /// Device memory (RDMA only).
    Device(DeviceSpan),
}

/// What a receive writes.
pub(super) enum Dst<'a> {
    /// Locked host bytes.
    Host(&'a mut [u8]),
    /// Device memory (RDMA only).
    Device(DeviceSpan),
}

impl Src<'_> {
    /// Bytes to send.
    pub(super) fn len(&self) -> usize {
        match self {
            Src::Host(b) => b.len(),
            Src::Device(d) => d.len,
        }
    }

    /// Where the bytes are (what the NIC registers).
    pub(super) fn place(&self) -> Place<'_> {
        match self {
            Src::Host(b) => Place::Host(b.as_ptr() as u64),
            Src::Device(d) => Place::Device(d),
        }
    }

    /// The bytes, where the CPU may read them.
    pub(super) fn host(&self) -> Option<&[u8]> {
        match self {
            Src::Host(b) => Some(b),
            Src::Device(d) if d.len == 0 => Some(&[]),
            Src::Device(_) => None,
        }
    }
}

impl Dst<'_> {
    /// Capacity in bytes.
    pub(super) fn len(&self) -> usize {
        match self {
            Dst::Host(b) => b.len(),
            Dst::Device(d) => d.len,
        }
    }

    /// Where the bytes are.
    pub(super) fn place(&self) -> Place<'_> {
        match self {
            Dst::Host(b) => Place::Host(b.as_ptr() as u64),
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

    /// The bytes, where the CPU may write them.
    pub(super) fn host_mut(&mut self) -> Option<&mut [u8]> {
        match self {
            Dst::Host(b) => Some(b),
            Dst::Device(_) => None,
        }
    }
}
