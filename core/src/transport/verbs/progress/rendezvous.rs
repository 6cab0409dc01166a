//! Rendezvous over verbs, the transport's half: the receiver's grant goes
//! into the sender's staging ring header, and the sender's NIC writes the
//! message straight from the send buffer into the granted receive buffer
//! (see `comm::p2p::rdma` for the protocol's other half).

use std::sync::Arc;

use super::{PeerRdma, Wake};
use crate::Error;
use crate::transport::mailbox::{Grant, Mailbox};
use crate::transport::ring::{Counter, RingHeader};
use crate::transport::verbs::regcache::{RegCache, Registration};

/// Offsets in a ring header of the grant mailbox and the grant number.
const MAILBOX: u64 =
    (std::mem::offset_of!(RingHeader, mailbox) + std::mem::offset_of!(Mailbox, grant)) as u64;
const CTS: u64 = (std::mem::offset_of!(RingHeader, mailbox)
    + std::mem::offset_of!(Mailbox, cts)
    + std::mem::offset_of!(Counter, value)) as u64;
/// The mailbox's grant fields (`addr`, `len`, `pid`, `first_seq`), which
/// lead it; the rest of it is the receiver's own bookkeeping.
const MAILBOX_GRANT_BYTES: u32 = 32;
const _: () = assert!(std::mem::offset_of!(Grant, first_seq) == 24);
/// Largest single RDMA WRITE of user data (below the 2 GiB message limit).
const MAX_WRITE: usize = 1 << 30;

impl PeerRdma {
    /// Copies a new rendezvous grant of our stream (its inbound ring
    /// header's mailbox, then its grant number, with an immediate) into the
    /// peer's staging ring header, where its sender waits for it.
    #[inline]
    pub(super) fn forward_grant(&mut self) -> Result<bool, Error> {
        let cts = self.inbound.mailbox().grant_count();
        if cts == self.grant_sent || self.room() <= 3 {
            return Ok(false);
        }
        // A grant answers the peer's slots, so the rings are up, unless
        // this side has not read the peer's word yet.
        if !self.rings_up && !self.rings_ready()? {
            return Ok(false);
        }
        let local = self.rings.inbound.memory().0 as u64;
        let remote = self.peer_rings.staging_addr;
        self.post_write(
            local + MAILBOX,
            MAILBOX_GRANT_BYTES,
            remote + MAILBOX,
            self.peer_rings.staging_rkey,
            None,
            Wake::Nobody,
            false,
        )?;
        // The waiting sender sees the grant in its memory or polls.
        let rkey = self.peer_rings.staging_rkey;
        self.post_u64(remote + CTS, rkey, cts, Wake::IfAsked, false)?;
        self.grant_sent = cts;
        Ok(true)
    }

    /// Posts an RDMA WRITE of `len` bytes at `local` (registered as `reg`)
    /// to `remote` under `rkey` in the peer's memory (a rendezvous grant),
    /// signalled: `Some(n)` means done once [`PeerRdma::completed`]`(n)`;
    /// `None` when the send queue has no room now (try again later).
    ///
    /// # Errors
    /// [`Error::Transport`] when posting fails or the peer was given up.
    pub(crate) fn write_user(
        &mut self,
        reg: &Registration,
        local: u64,
        len: usize,
        remote: u64,
        rkey: u32,
    ) -> Result<Option<u64>, Error> {
        if self.dead {
            return Err(self.fail("the connection failed or was closed".into()));
        }
        let chunks = len.div_ceil(MAX_WRITE).max(1);
        if self.room() < chunks as u64 + 3 {
            return Ok(None);
        }
        for i in 0..chunks {
            let off = i * MAX_WRITE;
            let n = (len - off).min(MAX_WRITE);
            self.post_write(
                local + off as u64,
                n as u32,
                remote + off as u64,
                rkey,
                Some(reg.lkey()),
                Wake::Nobody,
                i + 1 == chunks,
            )?;
        }
        Ok(Some(self.wr_posted))
    }

    /// True once work request number `wr` (from [`PeerRdma::write_user`])
    /// completed.
    pub(crate) fn completed(&self, wr: u64) -> bool {
        self.wr_done >= wr
    }

    /// The communicator's registration cache.
    pub(crate) fn regs(&self) -> &Arc<RegCache> {
        &self.regs
    }
}
