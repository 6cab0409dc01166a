//! Barrier flags over verbs, this transport's half: a flag or release word
//! for a peer is one inline RDMA WRITE into its registered barrier area, an
//! arrival at the central counter one RDMA fetch-and-add on it (see
//! `barrier::area`).

use std::time::Instant;

use super::{IMM_CONTROL, PeerRdma, STALL, SharedPeer, Wake, Write};
use crate::Error;
use crate::barrier::area::RemoteArea;

impl PeerRdma {
    /// Writes `value` into the word at `offset` of the peer's barrier area
    /// (inline, after everything posted before it; its completion wakes the
    /// peer's engine if a stream sleeps there, which wakes the waiter).
    ///
    /// # Errors
    /// [`Error::Transport`] when the peer failed or posting fails, or the
    /// send queue stays full for `STALL`.
    pub(crate) fn write_barrier_word(&mut self, offset: u64, value: u64) -> Result<(), Error> {
        self.wait_for_room(2)?;
        let (addr, rkey) = (self.remote.barrier_addr + offset, self.remote.barrier_rkey);
        self.post_u64(addr, rkey, value, Wake::IfAsked, false)
    }

    /// Adds `value` to the word at `offset` of the peer's barrier area with
    /// an RDMA fetch-and-add (the old value lands in the communicator's sink), then
    /// tells the peer with an empty WRITE_WITH_IMM, which wakes it if it
    /// sleeps (an atomic leaves no completion at its target).
    ///
    /// # Errors
    /// As [`PeerRdma::write_barrier_word`].
    pub(crate) fn fetch_add_barrier_word(&mut self, offset: u64, value: u64) -> Result<(), Error> {
        self.wait_for_room(3)?;
        let (base, rkey) = (self.remote.barrier_addr, self.remote.barrier_rkey);
        let slots = self.posted;
        let (sink, sink_lkey) = self.qp.shared.sink();
        let add = Write {
            fetch_add: Some(value),
            local: sink,
            len: 8,
            remote: base + offset,
            rkey,
            lkey: Some(sink_lkey),
            notify: false,
            imm: 0,
            solicited: false,
            signal: false,
            slots,
        };
        let tell = Write {
            fetch_add: None,
            local: sink,
            len: 0,
            remote: base,
            rkey,
            lkey: None,
            notify: true,
            imm: IMM_CONTROL,
            solicited: false,
            signal: false,
            slots,
        };
        self.post_writes(&[add, tell])
    }

    /// Waits until the send queue has room for `n` more requests (reaping
    /// completions; the clock is read only once it is found full).
    fn wait_for_room(&mut self, n: u64) -> Result<(), Error> {
        let mut since = None;
        loop {
            if self.dead || self.deferred.is_some() || self.peer_closed() {
                return Err(self.fail("the connection failed or was closed".into()));
            }
            if self.room() >= n {
                return Ok(());
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
    }
}

impl RemoteArea for SharedPeer {
    fn store(&self, offset: usize, v: u64) -> Result<(), Error> {
        self.await_up()?;
        self.lock().write_barrier_word(offset as u64, v)
    }

    fn fetch_add(&self, offset: usize, v: u64) -> Result<(), Error> {
        self.await_up()?;
        self.lock().fetch_add_barrier_word(offset as u64, v)
    }

    fn poke(&self) {
        self.poll_now();
    }
}
