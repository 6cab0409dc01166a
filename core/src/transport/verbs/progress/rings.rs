//! A pair's rings, registered at its first use.
//!
//! The pair's QPs are made first, by the handshake the first use asks the
//! engine for ([`super::super::handshake`]).
//!
//! Creation registers each peer's control block and the barrier area, not
//! the slot rings (two a peer, pinned once registered): a rank that never
//! sends to a peer, nor hears from it, never pins their memory. The first
//! slot staged for a peer registers this side's rings and writes where they
//! are into the peer's control block ([`RingKeys`], one inline write whose
//! last word says it is complete, with a solicited immediate so that the
//! peer's engine wakes); the peer, seeing it, registers its own and answers
//! the same way. Each side tells once, whoever started, so both starting
//! at once needs no rule. A side writes slots only once it has the peer's
//! keys; it has told its own by then, so the peer's inbound ring is
//! registered before anything is written into it.

use super::{PeerRdma, Wake};
use crate::Error;
use crate::transport::verbs::qp::{CTRL_RINGS, RingKeys};

impl PeerRdma {
    /// True once the peer has written where its rings are.
    #[inline]
    pub(super) fn peer_told_rings(&self) -> bool {
        self.rings.ctrl.rings.present()
    }

    /// Registers our rings and tells the peer where they are (once), then
    /// takes where the peer's are if it told us: true once both are known
    /// and slots may go. Called by a side with a slot to send (the pair's
    /// first use), or that has a word from the peer to answer.
    pub(super) fn rings_ready(&mut self) -> Result<bool, Error> {
        if self.rings_up {
            return Ok(true);
        }
        if !self.qp_up {
            // The pair's first use: the engine connects it first.
            self.wanted = true;
            return Ok(false);
        }
        if !self.rings_told {
            if self.room() < 2 {
                return Ok(false);
            }
            let ours = self
                .qp
                .register_rings(&self.rings)
                .map_err(|e| self.fail(format!("registering the pair's rings: {e}")))?;
            let words = ours.words();
            let (addr, rkey) = (self.remote.ctrl_addr + CTRL_RINGS, self.remote.ctrl_rkey);
            // Inline: the words are copied at post time.
            self.post_write(
                words.as_ptr() as u64,
                std::mem::size_of_val(&words) as u32,
                addr,
                rkey,
                None,
                Wake::Engine,
                false,
            )?;
            self.rings_told = true;
        }
        if let Some(theirs) = RingKeys::read(&self.rings.ctrl.rings) {
            self.peer_rings = theirs;
            self.rings_up = true;
        }
        Ok(self.rings_up)
    }

    /// True once the pair's rings are registered on both sides (the link
    /// has carried, or may carry, slots).
    pub(crate) fn rings_up(&self) -> bool {
        self.rings_up
    }
}
