//! Barrier flags over verbs, this transport's half: a flag or release word
//! for a peer is one inline RDMA WRITE into its registered barrier area
//! (see `transport::barrier_area`).

use std::time::Instant;

use super::{PeerRdma, SharedPeer, Wake, STALL};
use crate::transport::barrier_area::RemoteArea;
use crate::Error;

impl PeerRdma {
    /// Writes `value` into the word at `offset` of the peer's barrier area
    /// (inline, after everything posted before it; its completion wakes the
    /// peer's proxy if a stream sleeps there, which wakes the waiter).
    ///
    /// # Errors
    /// [`Error::Transport`] when the peer failed or posting fails, or the
    /// send queue stays full for `STALL`.
    pub fn write_barrier_word(&mut self, offset: u64, value: u64) -> Result<(), Error> {
        // The clock is read only once the send queue is found full.
        let mut since = None;
        loop {
            if self.dead || self.deferred.is_some() || self.peer_closed() {
                return Err(self.fail("the connection failed or was closed".into()));
            }
            if self.room() >= 2 {
                break;
            }
            self.poll()?;
            if since.get_or_insert_with(Instant::now).elapsed() > STALL {
                return Err(self.fail(format!(
                    "its send queue stayed full for {} s",
                    STALL.as_secs()
                )));
            }
            std::hint::spin_loop();
        }
        let (addr, rkey) = (self.remote.barrier_addr + offset, self.remote.barrier_rkey);
        self.post_u64(addr, rkey, value, Wake::IfAsked, false)
    }
}

impl RemoteArea for SharedPeer {
    fn store(&self, offset: usize, v: u64) -> Result<(), Error> {
        self.lock().write_barrier_word(offset as u64, v)
    }

    fn poke(&self) {
        self.poll_now();
    }
}
