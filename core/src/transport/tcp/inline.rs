//! The stream's share of tcp progress: move your own bytes instead of waiting.
//!
//! A hop through the network thread costs two thread hand-offs on top of the
//! socket itself: the sending stream wakes its network thread (eventfd), and
//! the receiving network thread wakes the receiving stream. On a machine
//! where ranks outnumber cores each hand-off can wait for a core, and a
//! 4-rank ring all-reduce of 64 B over loopback took ~600 µs (≈ 100 µs a hop,
//! against 7 µs one way for raw tcp). So a stream that has just staged a
//! slot writes it to the socket itself, and a stream waiting for a slot (or
//! for room in its staging ring) reads and writes the sockets itself between
//! checks, as the host stream's `synchronize` runs queued work itself
//! (DESIGN.md §10). The network thread remains for everything nobody is
//! waiting on (large transfers, frames arriving between calls), and stays the
//! one place where failures are reported.
//!
//! Each peer's [`PeerIo`] sits behind a mutex. A stream only ever
//! `try_lock`s it (if the network thread holds it, that thread is already
//! moving the bytes); the network thread locks it only around non-blocking
//! I/O. After moving bytes, a stream wakes the network thread when a socket
//! now needs an event the thread is not polling for ([`PeerIo::needs_net`]),
//! so a half-written slot or a freed inbound slot is never left unattended.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use super::kick::Kick;
use super::progress::PeerIo;
use crate::wait::WaitPolicy;

/// Checks between two pumps while a wait still spins: a pump is two
/// syscalls per socket (~1 µs each), a spin check a few nanoseconds, so
/// pumping at every check would stretch the spin phase a hundredfold.
const SPIN_CHECKS_PER_PUMP: u32 = 64;

/// One tcp peer's transfer state, shared by the network thread and the
/// streams, and how many streams are reading its sockets themselves.
#[derive(Debug)]
pub struct TcpPeer {
    io: Mutex<PeerIo>,
    /// Streams in the active part of a wait on this peer (spinning or
    /// yielding, pumping between checks). While there are any, the network
    /// thread does not poll the sockets for reading: it would only be woken
    /// to find the bytes already taken, a context switch per hop on cores
    /// the ranks need.
    readers: AtomicU32,
}

impl TcpPeer {
    /// Shares `io`.
    pub fn new(io: PeerIo) -> TcpPeer {
        TcpPeer {
            io: Mutex::new(io),
            readers: AtomicU32::new(0),
        }
    }

    /// Locks the state (a poisoned lock is still usable: the state only
    /// changes by complete non-blocking steps).
    pub fn lock(&self) -> MutexGuard<'_, PeerIo> {
        self.io.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// True while some stream reads this peer's sockets itself.
    pub fn streams_reading(&self) -> bool {
        self.readers.load(Ordering::SeqCst) > 0
    }
}

/// Moves what can move now between the peer's rings and sockets, without
/// blocking, if no other thread is doing so; wakes the network thread when
/// it must take over. An error is left for the network thread to report.
pub fn pump(peer: &TcpPeer, kick: &Kick) {
    let mut p = match peer.io.try_lock() {
        Ok(p) => p,
        Err(TryLockError::Poisoned(p)) => p.into_inner(),
        Err(TryLockError::WouldBlock) => {
            // The network thread (or another stream) is moving this peer's
            // bytes now; make sure it looks again before sleeping.
            kick.kick();
            return;
        }
    };
    if p.is_dead() {
        return;
    }
    match p.pump() {
        Ok(()) => {
            let wake = p.needs_net(peer.streams_reading());
            drop(p);
            if wake {
                kick.kick();
            }
        }
        Err(e) => {
            p.set_inline_error(e);
            drop(p);
            kick.signal();
        }
    }
}

/// A stream waiting on a tcp peer: pumps between checks, at a pace that
/// suits the wait's phase, and counts as a reader of the peer's sockets
/// until the wait ends or is about to sleep (then the network thread is
/// woken to watch the sockets for it).
pub struct Waiter<'a> {
    peer: &'a TcpPeer,
    kick: &'a Kick,
    checks: u32,
    spin: u32,
    sleep_at: u32,
    reading: bool,
}

impl<'a> Waiter<'a> {
    /// Starts a wait under `policy`.
    pub fn new(peer: &'a TcpPeer, kick: &'a Kick, policy: &WaitPolicy<'_>) -> Waiter<'a> {
        peer.readers.fetch_add(1, Ordering::SeqCst);
        Waiter {
            peer,
            kick,
            checks: 0,
            spin: policy.spin,
            sleep_at: policy.spin.saturating_add(policy.yields),
            reading: true,
        }
    }

    /// Called at every check of the wait that found nothing: pumps every
    /// [`SPIN_CHECKS_PER_PUMP`]-th check while spinning and every check
    /// after (each of those already costs a syscall); hands the sockets back
    /// to the network thread before the wait first sleeps.
    pub fn poke(&mut self) {
        let c = self.checks;
        self.checks = c.saturating_add(1);
        if c >= self.sleep_at && self.reading {
            self.reading = false;
            self.peer.readers.fetch_sub(1, Ordering::SeqCst);
            // After the count drops: either the network thread sees it when
            // it next computes what to poll, or it is asleep and this wakes it.
            self.kick.kick();
        }
        if c >= self.spin || c % SPIN_CHECKS_PER_PUMP == 0 {
            pump(self.peer, self.kick);
        }
    }
}

impl Drop for Waiter<'_> {
    /// The wait is over; the network thread polls the sockets again from
    /// its next round (within its short poll timeout while it left them
    /// to readers), so no wake-up is spent here.
    fn drop(&mut self) {
        if self.reading {
            self.peer.readers.fetch_sub(1, Ordering::SeqCst);
        }
    }
}
