//! Rendezvous over verbs: the receiver registers its buffer and grants its
//! remote key; the sender's NIC writes the message straight into it.
//!
//! The grant travels like shared memory's (the mailbox of the receiver's
//! inbound ring header), except that the receiver's side of the verbs
//! transport copies it into the sender's staging ring header by RDMA
//! (see `transport::verbs::progress`), and the mailbox's `pid` field
//! carries the remote key. The sender posts the write on the connection's
//! QP, waits for its completion (so that its buffer is no longer read), then
//! sends the done slot, which lands after the data (one RC QP, in order).
//! Registrations come from the communicator's cache
//! (`transport::verbs::regcache`). Device memory (GPUDirect RDMA) is
//! registered afresh for each operation instead
//! (`transport::verbs::gpudirect`), held while the NIC may touch it. Without
//! the `verbs` feature nothing here applies: [`is_rdma`] is false.

#[cfg(feature = "verbs")]
use super::payload::Place;
use super::payload::{Dst, Src};
use crate::Result;
use crate::transport::Connection;

/// A registration held while the NIC may touch the buffer.
#[cfg(feature = "verbs")]
pub(super) type Reg = std::sync::Arc<crate::transport::verbs::regcache::Registration>;
/// Never built without the `verbs` feature.
#[cfg(not(feature = "verbs"))]
pub(super) type Reg = std::convert::Infallible;

/// True when the connection writes rendezvous data by RDMA.
pub(super) fn is_rdma(conn: &Connection) -> bool {
    #[cfg(feature = "verbs")]
    return conn.rdma().is_some();
    #[cfg(not(feature = "verbs"))]
    {
        let _ = conn;
        false
    }
}

/// Receiver: registers the first `len` bytes of `dst` for the peer's
/// write; its remote key and the registration to hold until the message is
/// in.
///
/// # Errors
/// [`crate::Error::Os`] when the buffer cannot be registered.
pub(super) fn register(conn: &Connection, dst: &Dst<'_>, len: usize) -> Result<Option<(u32, Reg)>> {
    #[cfg(feature = "verbs")]
    if let Some(p) = conn.rdma() {
        let reg = registration(p, &dst.place(), len)?;
        return Ok(Some((reg.rkey(), reg)));
    }
    let _ = (conn, dst, len);
    Ok(None)
}

/// Sender: posts the write of the first `len` bytes of `data` to `addr`
/// under `rkey` in the peer, registering `data` into `held` first (kept
/// there while the NIC reads it, and across retries); `None` while the
/// send queue is full (call again).
///
/// # Errors
/// As registration, or [`crate::Error::Transport`] when posting fails.
pub(super) fn write(
    conn: &Connection,
    data: &Src<'_>,
    len: usize,
    addr: u64,
    rkey: u32,
    held: &mut Option<Reg>,
) -> Result<Option<u64>> {
    #[cfg(feature = "verbs")]
    if let Some(p) = conn.rdma() {
        let place = data.place();
        let local = match place {
            Place::Host(a) => a,
            Place::Device(d) => d.addr,
        };
        let reg = match held {
            Some(r) => r,
            None => held.insert(registration(p, &place, len)?),
        };
        return p.lock().write_user(reg, local, len, addr, rkey);
    }
    let _ = (conn, data, len, addr, rkey, held);
    Ok(None)
}

/// A registration of the first `len` bytes at `place`: host memory from
/// the communicator's cache, device memory made afresh.
#[cfg(feature = "verbs")]
fn registration(
    p: &crate::transport::verbs::progress::SharedPeer,
    place: &Place<'_>,
    len: usize,
) -> Result<Reg> {
    let regs = p.lock().regs().clone();
    match place {
        Place::Host(a) => regs.get(*a as usize, len),
        Place::Device(d) => {
            crate::transport::verbs::gpudirect::register(regs.device(), &d.slice(0, len))
        }
    }
}

/// Sender: whether write `wr` from [`write`] completed.
pub(super) fn written(conn: &Connection, wr: u64) -> bool {
    #[cfg(feature = "verbs")]
    if let Some(p) = conn.rdma() {
        return p.lock().completed(wr);
    }
    let _ = (conn, wr);
    false
}

/// Receiver whose receive ends before the message did: drops the cached
/// registration of `dst`, so that the peer's NIC cannot write it once the
/// operation's hold is gone.
pub(super) fn forget(dst: &[u8]) {
    #[cfg(feature = "verbs")]
    crate::transport::verbs::regcache::forget(dst.as_ptr() as usize, dst.len());
    let _ = dst;
}
