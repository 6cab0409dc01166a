//! Rendezvous by RDMA: the capability a connection offers point-to-point
//! messages whose bytes go straight from the sender's buffer into the
//! receiver's, written by the NIC (verbs): the receiver registers its
//! buffer and grants its remote key; the sender's NIC writes the message
//! into it and the sender waits for the write's completion.
//!
//! The grant travels like shared memory's (the mailbox of the receiver's
//! inbound ring header), except that the receiver's side of the verbs
//! transport copies it into the sender's staging ring header by RDMA
//! (see `transport::verbs::progress`), and the mailbox's `pid` field
//! carries the remote key. The done slot the sender sends next lands after
//! the data (one RC queue pair, in order). Host registrations come from
//! the communicator's cache (`transport::verbs::regcache`); device memory
//! (GPUDirect RDMA) is registered afresh for each operation
//! (`transport::verbs::gpudirect`), held while the NIC may touch it.
//! Connections of other transports, and every connection in a build
//! without the `verbs` feature, offer none: [`Connection::writes_remotely`]
//! is false and the calls below do nothing.

use crate::Result;
use crate::transport::Connection;
use crate::transport::device_span::DeviceSpan;

/// Where an operation's first byte is, for the NIC.
pub(crate) enum Place<'s> {
    /// A host address.
    Host(u64),
    /// Device memory.
    Device(&'s DeviceSpan),
}

/// A registration held while the NIC may touch the buffer.
#[cfg(feature = "verbs")]
pub(crate) type Registration = std::sync::Arc<crate::transport::verbs::regcache::Registration>;
/// Never made without the `verbs` feature.
#[cfg(not(feature = "verbs"))]
pub(crate) type Registration = std::convert::Infallible;

impl Connection {
    /// Whether rendezvous data goes by RDMA on this connection.
    pub(crate) fn writes_remotely(&self) -> bool {
        #[cfg(feature = "verbs")]
        return self.rdma().is_some();
        #[cfg(not(feature = "verbs"))]
        false
    }

    /// Receiver: registers the first `len` bytes at `place` for the peer's
    /// write; its remote key and the registration to hold until the
    /// message is in (`None` where the connection writes no remote memory).
    ///
    /// # Errors
    /// [`crate::Error::Os`] when the buffer cannot be registered.
    pub(crate) fn register_for_peer(
        &self,
        place: &Place<'_>,
        len: usize,
    ) -> Result<Option<(u32, Registration)>> {
        #[cfg(feature = "verbs")]
        if let Some(p) = self.rdma() {
            let reg = registration(p, place, len)?;
            return Ok(Some((reg.rkey(), reg)));
        }
        let _ = (place, len);
        Ok(None)
    }

    /// Sender: posts the write of the first `len` bytes at `place` to
    /// `addr` under `rkey` in the peer, registering them into `held` first
    /// (kept there while the NIC reads them, and across retries); `None`
    /// while the send queue is full (call again), or where the connection
    /// writes no remote memory.
    ///
    /// # Errors
    /// As registration, or [`crate::Error::Transport`] when posting fails.
    pub(crate) fn write_remote(
        &self,
        place: &Place<'_>,
        len: usize,
        (addr, rkey): (u64, u32),
        held: &mut Option<Registration>,
    ) -> Result<Option<u64>> {
        #[cfg(feature = "verbs")]
        if let Some(p) = self.rdma() {
            let local = match place {
                Place::Host(a) => *a,
                Place::Device(d) => d.addr,
            };
            let reg = match held {
                Some(r) => r,
                None => held.insert(registration(p, place, len)?),
            };
            return p.lock().write_user(reg, local, len, addr, rkey);
        }
        let _ = (place, len, addr, rkey, held);
        Ok(None)
    }

    /// The RDMA device the connection writes through (GPUDirect registers
    /// device memory with it); `None` where it writes through none.
    pub(crate) fn gpudirect_nic(&self) -> Option<crate::transport::gpudirect_nic::GpuDirectNic> {
        #[cfg(feature = "verbs")]
        return Some(crate::transport::gpudirect_nic::GpuDirectNic {
            device: self.rdma()?.lock().regs().device().clone(),
        });
        #[cfg(not(feature = "verbs"))]
        None
    }

    /// Sender: whether write `wr` from [`Connection::write_remote`]
    /// completed.
    pub(crate) fn remote_write_done(&self, wr: u64) -> bool {
        #[cfg(feature = "verbs")]
        if let Some(p) = self.rdma() {
            return p.lock().completed(wr);
        }
        let _ = wr;
        false
    }
}

/// A registration of the first `len` bytes at `place`: host memory from
/// the communicator's cache, device memory made afresh.
#[cfg(feature = "verbs")]
fn registration(
    p: &crate::transport::verbs::progress::SharedPeer,
    place: &Place<'_>,
    len: usize,
) -> Result<Registration> {
    let regs = p.lock().regs().clone();
    match place {
        Place::Host(a) => regs.get(*a as usize, len),
        Place::Device(d) => {
            crate::transport::verbs::gpudirect::register(regs.device(), &d.slice(0, len))
        }
    }
}

/// Receiver whose receive ends before the message did: drops the cached
/// registration of the `len` bytes at `addr`, so that the peer's NIC
/// cannot write them once the operation's hold is gone.
pub(crate) fn forget_registration(addr: u64, len: usize) {
    #[cfg(feature = "verbs")]
    crate::transport::verbs::regcache::forget(addr as usize, len);
    let _ = (addr, len);
}
