//! The verbs proxy thread's loop: steps every peer, then sleeps on events.
//!
//! Each round locks every live peer in turn and runs `PeerRdma::step`
//! (completions, slots the stream staged, credits, grants, heartbeat).
//! While anything moves it goes
//! round again; once nothing moves it arms every CQ (for
//! solicited completions only, unless a stream sleeps on a verbs ring: see
//! [`super::event`]) and the streams' kick, goes round once more (so
//! nothing that arrived before the arming is missed) and then sleeps in
//! `poll(2)` until a completion event, a kick, or `IDLE_WAIT` (which bounds
//! the heartbeat and stall checks).
//!
//! A failing peer is marked dead (its streams stop posting to it) and the
//! communicator's failure sink is told; an abort is written to every live
//! peer. On stop the loop writes what was staged (bounded by `DRAIN`),
//! then a goodbye word to every peer.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::event;
use super::progress::{SharedPeer, Wake};
use super::qp::{CTRL_ABORT, CTRL_CLOSED};
use crate::transport::tcp::kick::Kick;
use crate::transport::tcp::progress::FailureSink;
use crate::Error;

/// The thread's loop; runs until `stop` (then flushes and says goodbye).
pub fn run(
    peers: Vec<Arc<SharedPeer>>,
    kick: Arc<Kick>,
    stop: Arc<AtomicBool>,
    abort: Arc<AtomicU32>,
    sink: impl FailureSink,
) {
    let mut dead = vec![false; peers.len()];
    // Every peer's CQ reports to the same channel (one per communicator).
    let channel = peers.first().map(|p| p.lock().qp.channel.clone());
    let chan_fd = channel.as_ref().map_or(-1, |c| c.fd());
    let mut armed = false;
    // Woken by these and not drained yet.
    let (mut kicked, mut evented) = (false, false);
    let mut drain_deadline: Option<Instant> = None;
    loop {
        let failed = abort.load(Ordering::Acquire);
        if failed != 0 {
            for (p, _) in peers.iter().zip(&dead).filter(|(_, &d)| !d) {
                let mut p = p.lock();
                if !p.abort_sent && p.room() > 0 {
                    p.abort_sent = true;
                    let _ = p.post_word(CTRL_ABORT, u64::from(failed), Wake::Proxy, true);
                }
            }
        }
        let stopping = stop.load(Ordering::Acquire);
        if stopping {
            let now = Instant::now();
            let deadline = *drain_deadline.get_or_insert(now + DRAIN);
            let flushed = peers.iter().zip(&dead).all(|(p, &d)| {
                let p = p.lock();
                d || p.flushed() || p.peer_closed()
            });
            if flushed || now >= deadline {
                goodbye(&peers, &dead);
                return;
            }
        }
        let mut moved = false;
        for (i, p) in peers.iter().enumerate() {
            if dead[i] {
                continue;
            }
            let mut p = p.lock();
            match p.step() {
                Ok(m) => moved |= m,
                Err(e) => {
                    dead[i] = true;
                    p.dead = true;
                    if !stopping {
                        let culprit = match &e {
                            Error::RemoteFailed { peer, .. } | Error::Transport { peer, .. } => {
                                *peer
                            }
                            _ => p.peer,
                        };
                        let code = u32::try_from(culprit).map_or(u32::MAX, |r| r.saturating_add(1));
                        let _ =
                            abort.compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire);
                        sink.fail(e);
                    }
                }
            }
        }
        if moved {
            if armed {
                armed = false;
                kick.set_sleeping(false);
            }
            continue;
        }
        // Nothing moved: no spinning (see `IDLE_WAIT`), arm and sleep.
        if !armed {
            // About to sleep: clear the events that woke us (read only now,
            // so that after a wake-up the stream is served first), ask for a
            // channel event at the next completion of every live CQ and for
            // a kick from the streams, then go round once more, so a
            // completion or a staged slot that came before the arming is
            // seen now rather than after the sleep.
            if std::mem::take(&mut kicked) {
                kick.drain();
            }
            if let (true, Some(c)) = (std::mem::take(&mut evented), &channel) {
                c.drain();
            }
            kick.set_sleeping(true);
            // Tails are not solicited: wake for them only while a stream
            // sleeps on a verbs ring (it kicks us before it sleeps, after
            // counting itself, so either we see it here or its kick wakes
            // us to arm again).
            let live = || peers.iter().zip(&dead).filter(|(_, &d)| !d);
            let all = live().any(|(p, _)| p.lock().has_sleepers());
            for (p, _) in live() {
                // A CQ that cannot be armed is polled after the timeout.
                let _ = p.lock().qp.arm(!all);
            }
            armed = true;
        } else {
            let (k, e) = event::wait(kick.raw_fd(), chan_fd, IDLE_WAIT);
            kicked |= k;
            evented |= e;
            // Look once; sleep again at once if nothing came.
            armed = false;
            kick.set_sleeping(false);
        }
    }
}

/// Writes "closed" to every live peer and waits (bounded) for the writes,
/// except to a peer that said goodbye itself: it reads nothing more, and
/// may have destroyed its QP already, after which Soft-RoCE never completes
/// a write to it (every close of two ranks at once then waited out the
/// whole second; seen in the guest as thousands of 50 µs sleeps at exit).
fn goodbye(peers: &[Arc<SharedPeer>], dead: &[bool]) {
    for (p, _) in peers.iter().zip(dead).filter(|(_, &d)| !d) {
        let mut p = p.lock();
        // Streams must not post after the goodbye.
        p.dead = true;
        if !p.closed_sent && p.room() > 0 {
            p.closed_sent = true;
            let _ = p.post_word(CTRL_CLOSED, 1, Wake::Proxy, true);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        let mut pending = false;
        for (p, _) in peers.iter().zip(dead).filter(|(_, &d)| !d) {
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

/// How long a closing communicator keeps writing what it staged.
const DRAIN: Duration = Duration::from_secs(10);
/// Longest sleep of an idle proxy: a completion (the peer wrote a counter)
/// or a kick from the stream ends it at once; the timeout only bounds the
/// heartbeat and stall checks.
///
/// An idle proxy does not poll before it arms the CQs and sleeps, and reads
/// no clock to decide so (in the Soft-RoCE guest a clock read is a system
/// call). Measured there (8 B ping-pong, host calls, four A/B pairs in one
/// session): 124-154 µs p50 without polling, 158-271 µs with 20 µs of it,
/// which takes a CPU from the streams after every message's completion
/// event. The loop still goes round while work moves.
///
/// 100 ms, half the `HEARTBEAT`: a heartbeat goes out 200-300 ms after a
/// peer's last write. (It was 20 ms: in a 2-rank host-call ping-pong in the
/// Soft-RoCE guest each idle proxy then woke ~50 times a second on that
/// timeout alone, on the 2 vCPUs the ranks spin on.)
const IDLE_WAIT: Duration = Duration::from_millis(100);
