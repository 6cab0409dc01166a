//! The rendezvous mailbox: where a receiver tells a sender where to put a
//! large message.
//!
//! It is the clear-to-send of MPI's rendezvous protocol
//! (`docs/design/p2p.md`), kept in the ring header but out of the data ring,
//! so that a grant never queues behind slots the sender cannot yet consume.
//! The receiver writes a grant (destination address, length, its process
//! id or a remote key, and the ring index of the first data slot), then
//! bumps the grant count; the sender, or a proxy placing arriving data,
//! reads the grant once the count reaches its number. Grants are numbered
//! from 1 per direction; a receiver withdraws a grant before its buffer
//! goes back to its owner, and waits out any proxy still writing into it.

use std::sync::atomic::{AtomicU64, Ordering};

use super::ring::Counter;
use crate::wait::Notifier;

/// The latest grant's fields: the destination, then the receiver's own
/// bookkeeping.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub(crate) struct Grant {
    /// Address of the destination in the receiver's address space.
    pub addr: AtomicU64,
    /// Bytes the destination holds.
    pub len: AtomicU64,
    /// Process id of the receiver (for cross-memory attach), or the remote
    /// key of the destination's registration over verbs.
    pub pid: AtomicU64,
    /// Ring index of the grant's first data slot (for a proxy placing
    /// arriving data straight into the destination).
    pub first_seq: AtomicU64,
    /// Non-zero while a proxy writes into the destination.
    pub busy: AtomicU64,
    /// The latest grant withdrawn by the receiver: no more writes into it.
    pub revoked: AtomicU64,
    /// The latest grant whose back part the receiver finished pulling.
    pub pulled: AtomicU64,
    /// Whether that pull succeeded (1) or was refused (0).
    pub pull_ok: AtomicU64,
}

/// The mailbox in a ring header: the grant count and the latest grant.
#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct Mailbox {
    /// Rendezvous grants written by the receiver (clear-to-send count).
    pub cts: Counter,
    /// The latest grant, valid once `cts` moved.
    pub grant: Grant,
}

/// Bytes of [`Mailbox`] (part of the ring header's fixed layout).
pub(crate) const MAILBOX_BYTES: usize = 128;
const _: () = assert!(std::mem::size_of::<Mailbox>() == MAILBOX_BYTES);

impl Mailbox {
    /// Receiver: grants rendezvous number `grant` (1-based), telling the
    /// sender to write `len` bytes at `addr` in process `pid`; its data
    /// slots, if any travel through the ring, start at ring index
    /// `first_seq`.
    pub(crate) fn grant(&self, grant: u64, addr: u64, len: u64, pid: u32, first_seq: u64) {
        let g = &self.grant;
        g.addr.store(addr, Ordering::Relaxed);
        g.len.store(len, Ordering::Relaxed);
        g.pid.store(u64::from(pid), Ordering::Relaxed);
        g.first_seq.store(first_seq, Ordering::Relaxed);
        self.cts.value.store(grant, Ordering::Release);
        self.cts.notifier.notify();
    }

    /// Receiver: withdraws grant `grant` and waits until no proxy is
    /// writing into its destination any more, so the memory may be reused.
    pub(crate) fn revoke(&self, grant: u64) {
        let g = &self.grant;
        g.revoked.store(grant, Ordering::SeqCst);
        // A proxy holds `busy` only across one read(2) into the destination.
        while g.busy.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
    }

    /// Proxy side: where the payload of data slot `index` (of rendezvous
    /// number `rdv`, modulo 2^36, carrying `len` bytes of slots of
    /// `slot_bytes`) belongs in the granted destination, if the receiver has
    /// granted that rendezvous and not withdrawn it: `(grant, address)`.
    pub(crate) fn placement(
        &self,
        index: u64,
        rdv: u64,
        len: usize,
        slot_bytes: usize,
    ) -> Option<(u64, u64)> {
        let grant = self.cts.value.load(Ordering::Acquire);
        let g = &self.grant;
        if grant == 0 || grant & ((1 << 36) - 1) != rdv || g.revoked.load(Ordering::SeqCst) == grant
        {
            return None;
        }
        let first = g.first_seq.load(Ordering::Relaxed);
        let offset = index.checked_sub(first)?.checked_mul(slot_bytes as u64)?;
        let end = offset.checked_add(len as u64)?;
        (end <= g.len.load(Ordering::Relaxed))
            .then(|| (grant, g.addr.load(Ordering::Relaxed) + offset))
    }

    /// Proxy side: claims grant `grant`'s destination for one write; false
    /// when it was withdrawn meanwhile. Pair with [`Mailbox::end_place`].
    pub(crate) fn begin_place(&self, grant: u64) -> bool {
        let g = &self.grant;
        g.busy.store(1, Ordering::SeqCst);
        if g.revoked.load(Ordering::SeqCst) == grant {
            g.busy.store(0, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Proxy side: ends a write begun with [`Mailbox::begin_place`].
    pub(crate) fn end_place(&self) {
        self.grant.busy.store(0, Ordering::SeqCst);
    }

    /// Sender: the destination of rendezvous number `grant` once the
    /// receiver granted it: `(addr, len, pid)`.
    pub(crate) fn granted(&self, grant: u64) -> Option<(u64, u64, u32)> {
        if self.cts.value.load(Ordering::Acquire) < grant {
            return None;
        }
        let g = &self.grant;
        let pid = g.pid.load(Ordering::Relaxed);
        Some((
            g.addr.load(Ordering::Relaxed),
            g.len.load(Ordering::Relaxed),
            u32::try_from(pid).unwrap_or(u32::MAX),
        ))
    }

    /// Receiver: reports that its pull for grant `grant` ended (`ok`: the
    /// back part of the message is in place).
    pub(crate) fn pulled(&self, grant: u64, ok: bool) {
        let g = &self.grant;
        g.pull_ok.store(u64::from(ok), Ordering::Relaxed);
        g.pulled.store(grant, Ordering::Release);
        self.cts.notifier.notify();
    }

    /// Sender: whether the receiver's pull for grant `grant` ended, and
    /// how (`Some(true)`: it has the back part).
    pub(crate) fn pull_done(&self, grant: u64) -> Option<bool> {
        let g = &self.grant;
        (g.pulled.load(Ordering::Acquire) >= grant).then(|| g.pull_ok.load(Ordering::Relaxed) == 1)
    }

    /// The latest rendezvous grant number given (0 before the first).
    #[cfg(any(feature = "verbs", test))]
    pub(crate) fn grant_count(&self) -> u64 {
        self.cts.value.load(Ordering::Acquire)
    }

    /// What a sender waiting for a grant or a pull sleeps on.
    pub(crate) fn notifier(&self) -> &Notifier {
        &self.cts.notifier
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_places_data_slots_until_it_is_revoked() {
        let m = Mailbox::default();
        assert_eq!(m.granted(1), None);
        assert_eq!(m.placement(5, 1, 10, 64), None);
        m.grant(1, 0x1000, 200, 42, 5);
        assert_eq!(m.grant_count(), 1);
        assert_eq!(m.granted(1), Some((0x1000, 200, 42)));
        assert_eq!(m.granted(2), None);
        // Slots 5, 6, 7 carry bytes 0.., 64.., 128..; the last one 8 bytes
        // short of the end of the destination fits, one past it does not.
        assert_eq!(m.placement(5, 1, 64, 64), Some((1, 0x1000)));
        assert_eq!(m.placement(7, 1, 64, 64), Some((1, 0x1000 + 128)));
        assert_eq!(m.placement(8, 1, 64, 64), None);
        assert_eq!(m.placement(4, 1, 64, 64), None, "before the first slot");
        assert_eq!(m.placement(5, 2, 64, 64), None, "another rendezvous");
        assert!(m.begin_place(1));
        m.end_place();
        m.revoke(1);
        assert_eq!(m.placement(5, 1, 64, 64), None);
        assert!(!m.begin_place(1));
        assert_eq!(m.pull_done(1), None);
        m.pulled(1, true);
        assert_eq!(m.pull_done(1), Some(true));
    }
}
