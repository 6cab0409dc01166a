//! The verbs connections as a source of the progress engine.
//!
//! Each round locks every live peer in turn and runs `PeerRdma::step`
//! (completions, slots the stream staged, credits, grants, heartbeat).
//! Before the engine sleeps, this source arms every CQ (for solicited
//! completions only, unless a stream sleeps on a verbs ring: see
//! [`super::event`]) and adds the completion channel to the engine's
//! descriptors; the engine looks once more (so nothing that arrived
//! before the arming is missed) and sleeps until a completion event, a
//! kick, or [`IDLE_WAIT`] (which bounds the heartbeat and stall checks).
//!
//! A failing peer is marked dead (its streams stop posting to it) and the
//! communicator's failure is reported; an abort is written to every live
//! peer. On close the engine waits (bounded) until what was staged is
//! written, then this source writes a goodbye word to every peer.

use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::event::CompChannel;
use super::handshake::Shaker;
use super::progress::{SharedPeer, Wake};
use super::qp::{CTRL_ABORT, CTRL_CLOSED};
use crate::engine::{Ctx, PollSet, Source};

/// Every verbs peer of a communicator.
pub(crate) struct VerbsSource {
    peers: Vec<Arc<SharedPeer>>,
    /// Each peer with its rank, for the handshakes' answers.
    by_rank: Arc<[(usize, Arc<SharedPeer>)]>,
    dead: Vec<bool>,
    /// Every peer's CQ reports to this channel (one per communicator).
    channel: Option<Arc<CompChannel>>,
    /// The channel woke the engine and was not drained yet.
    evented: bool,
    /// Where the peers' handshakes arrive (non-blocking).
    listener: TcpListener,
    shaker: Arc<Shaker>,
    /// When the listener was last looked at (it is looked at when it
    /// woke the engine, and at least every [`ACCEPT_EVERY`] while the
    /// engine is too busy to sleep).
    accepted_at: Instant,
    /// The rank the communicator failed because of, once it aborted: told
    /// to each peer connected later too.
    aborted: Option<usize>,
}

impl VerbsSource {
    /// A source for `peers` (each with its rank), answering handshakes on
    /// `listener`.
    ///
    /// # Errors
    /// [`crate::Error::Os`] when the listener cannot be made non-blocking.
    pub(crate) fn new(
        peers: Vec<(usize, Arc<SharedPeer>)>,
        listener: TcpListener,
        shaker: Arc<Shaker>,
    ) -> crate::Result<VerbsSource> {
        listener
            .set_nonblocking(true)
            .map_err(|e| crate::Error::os("verbs: non-blocking handshake listener", e))?;
        let channel = peers.first().map(|(_, p)| p.lock().qp.channel.clone());
        let by_rank: Arc<[(usize, Arc<SharedPeer>)]> = peers.into();
        let peers: Vec<_> = by_rank.iter().map(|(_, p)| p.clone()).collect();
        Ok(VerbsSource {
            dead: vec![false; peers.len()],
            by_rank,
            peers,
            channel,
            evented: false,
            listener,
            shaker,
            accepted_at: Instant::now(),
            aborted: None,
        })
    }

    /// Answers the handshakes that arrived, each on a thread of its own.
    fn accept(&mut self) {
        self.accepted_at = Instant::now();
        while self.shaker.has_room()
            && let Ok((stream, _)) = self.listener.accept()
        {
            let _ = stream.set_nonblocking(false);
            let by_rank = self.by_rank.clone();
            self.shaker.answer(stream, move |rank| {
                let found = by_rank.iter().find(|(r, _)| *r == rank);
                found.map(|(_, p)| p.clone())
            });
        }
    }

    fn live(&self) -> impl Iterator<Item = &Arc<SharedPeer>> {
        self.peers
            .iter()
            .zip(&self.dead)
            .filter(|&(_, &d)| !d)
            .map(|(p, _)| p)
    }
}

impl Source for VerbsSource {
    fn progress(&mut self, ctx: &Ctx<'_>, fds: &PollSet) -> bool {
        self.evented |= fds.revents(0) != 0;
        if fds.revents(1) != 0 || self.accepted_at.elapsed() > ACCEPT_EVERY {
            self.accept();
        }
        let mut moved = false;
        for (shared, dead) in self.peers.iter().zip(&mut self.dead) {
            if *dead {
                continue;
            }
            let mut p = shared.lock();
            if p.wanted && !p.up() {
                // The pair's first use: connect it (the peer's answer, or
                // its failure, comes back through the peer and a kick).
                shared.want();
            }
            if let Some(failed) = self.aborted
                && !p.abort_sent
                && p.up()
                && p.room() > 0
            {
                p.abort_sent = true;
                let _ = p.post_word(CTRL_ABORT, failed as u64 + 1, Wake::Engine, true);
            }
            match p.step() {
                Ok(m) => moved |= m,
                Err(e) => {
                    *dead = true;
                    p.dead = true;
                    let peer = p.peer;
                    drop(p);
                    ctx.fail(e, peer);
                }
            }
        }
        moved
    }

    /// A job on the engine waits: answer the peers' handshakes too (a
    /// peer's first use of the pair may be what the job waits for).
    fn tick(&mut self, ctx: &Ctx<'_>) {
        self.accept();
        self.progress(ctx, &PollSet::default());
    }

    fn arm(&mut self, fds: &mut PollSet) -> Option<Duration> {
        // Clear the events that woke us (read only now, so that after a
        // wake-up the stream is served first), then ask for a channel event
        // at the next completion of every live CQ.
        if let (true, Some(c)) = (std::mem::take(&mut self.evented), &self.channel) {
            c.drain();
        }
        // Tails are not solicited: wake for them only while a stream sleeps
        // on a verbs ring (it kicks the engine before it sleeps, after
        // counting itself, so either we see it here or its kick wakes us to
        // arm again).
        let all = self.live().any(|p| p.lock().has_sleepers());
        for p in self.live() {
            // A CQ that cannot be armed is polled after the timeout.
            let _ = p.lock().qp.arm(!all);
        }
        if let Some(c) = &self.channel {
            fds.add(c.fd(), libc::POLLIN);
            fds.add(self.listener.as_raw_fd(), libc::POLLIN);
        }
        Some(IDLE_WAIT)
    }

    fn abort(&mut self, failed: usize, _note: Option<streamcomm_types::MismatchNote>) -> bool {
        // A pair connected later is told too (in `progress`).
        self.aborted = Some(failed);
        let mut all = true;
        for p in self.live() {
            let mut p = p.lock();
            if !p.up() {
                continue;
            }
            if !p.abort_sent && p.room() > 0 {
                p.abort_sent = true;
                let _ = p.post_word(CTRL_ABORT, failed as u64 + 1, Wake::Engine, true);
            }
            all &= p.abort_sent;
        }
        all
    }

    fn flushed(&mut self) -> bool {
        self.live().all(|p| {
            let p = p.lock();
            p.flushed() || p.peer_closed()
        })
    }

    fn close(&mut self) {
        goodbye(&self.peers, &self.dead);
    }
}

/// Writes "closed" to every live peer and waits (bounded) for the writes,
/// except to a peer that said goodbye itself: it reads nothing more, and
/// may have destroyed its QP already, after which Soft-RoCE never completes
/// a write to it (every close of two ranks at once then waited out the
/// whole second; seen in the guest as thousands of 50 µs sleeps at exit).
fn goodbye(peers: &[Arc<SharedPeer>], dead: &[bool]) {
    for (p, _) in peers.iter().zip(dead).filter(|&(_, &d)| !d) {
        let mut p = p.lock();
        // Streams must not post after the goodbye.
        p.dead = true;
        if !p.closed_sent && p.up() && p.room() > 0 {
            p.closed_sent = true;
            let _ = p.post_word(CTRL_CLOSED, 1, Wake::Engine, true);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        let mut pending = false;
        for (p, _) in peers.iter().zip(dead).filter(|&(_, &d)| !d) {
            let mut p = p.lock();
            if p.poll().is_err() {
                continue;
            }
            pending |= !p.inflight.is_empty() && !p.peer_closed();
        }
        if !pending {
            break;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// Longest an engine too busy to sleep leaves a peer's handshake waiting.
const ACCEPT_EVERY: Duration = Duration::from_millis(10);

/// Longest sleep the verbs connections allow an idle engine: a completion
/// (the peer wrote a counter) or a kick from the stream ends it at once;
/// the timeout only bounds the heartbeat and stall checks.
///
/// An idle engine does not poll before it arms the CQs and sleeps, and
/// reads no clock to decide so (in the Soft-RoCE guest a clock read is a
/// system call). Measured there (8 B ping-pong, host calls, four A/B pairs
/// in one session): 124-154 µs p50 without polling, 158-271 µs with 20 µs
/// of it, which takes a CPU from the streams after every message's
/// completion event. The loop still goes round while work moves.
///
/// 100 ms, half the `HEARTBEAT`: a heartbeat goes out 200-300 ms after a
/// peer's last write. (It was 20 ms: in a 2-rank host-call ping-pong in the
/// Soft-RoCE guest each idle engine then woke ~50 times a second on that
/// timeout alone, on the 2 vCPUs the ranks spin on.)
const IDLE_WAIT: Duration = Duration::from_millis(100);
