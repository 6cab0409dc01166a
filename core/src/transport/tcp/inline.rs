//! The stream's share of tcp progress: move your own bytes instead of waiting.
//!
//! A hop through the engine costs two thread hand-offs on top of the
//! socket itself: the sending stream wakes its engine (eventfd), and
//! the receiving engine wakes the receiving stream. On a machine
//! where ranks outnumber cores each hand-off can wait for a core, and a
//! 4-rank ring all-reduce of 64 B over loopback took ~600 µs (≈ 100 µs a hop,
//! against 7 µs one way for raw tcp). So a stream that has just staged a
//! slot writes it to the socket itself, and a stream waiting for a slot (or
//! for room in its staging ring) reads and writes the sockets itself between
//! checks, as the host stream's `synchronize` runs queued work itself
//! (`docs/design/architecture.md`). The engine remains for everything nobody is
//! waiting on (large transfers, frames arriving between calls), and stays the
//! one place where failures are reported.
//!
//! Each peer's [`PeerIo`] sits behind a mutex. A stream only ever
//! `try_lock`s it (if the engine holds it, that thread is already
//! moving the bytes); the engine locks it only around non-blocking
//! I/O. After moving bytes, a stream wakes the engine when a socket
//! now needs an event the thread is not polling for ([`PeerIo::needs_net`]),
//! so a half-written slot or a freed inbound slot is never left unattended.

use std::sync::{Mutex, TryLockError};

use super::progress::PeerIo;
use crate::engine::Kick;
use crate::wait::WaitPolicy;

/// Checks between two pumps while a wait still spins: a pump is two
/// syscalls per socket (~1 µs each), a spin check a few nanoseconds, so
/// pumping at every check would stretch the spin phase a hundredfold.
pub(crate) const SPIN_CHECKS_PER_PUMP: u32 = 64;

/// When a waiting stream should pump: every [`SPIN_CHECKS_PER_PUMP`]-th
/// check while the wait spins, every check once it yields or sleeps (each
/// of those checks already costs a syscall or more).
#[derive(Debug)]
pub(crate) struct Pace {
    checks: u32,
    spin: u32,
    period: u32,
}

impl Pace {
    /// Pacing for a wait under `policy` that pumps every `period`-th check
    /// while it spins (a cheaper pump than a socket's can go more often).
    pub(crate) fn every(policy: &WaitPolicy<'_>, period: u32) -> Pace {
        Pace {
            checks: 0,
            spin: policy.spin,
            period: period.max(1),
        }
    }

    /// True when this check should pump.
    pub(crate) fn due(&mut self) -> bool {
        let c = self.checks;
        self.checks = c.saturating_add(1);
        c >= self.spin || c.is_multiple_of(self.period)
    }
}

/// Moves what can move now between `io`'s rings and sockets, without
/// blocking, if no other thread is doing so; wakes the engine when
/// it must take over. An error is left for the engine to report.
pub(crate) fn pump(io: &Mutex<PeerIo>, kick: &Kick) {
    with_peer(io, kick, |p| {
        p.stream_read();
        p.pump()
    });
}

/// After the stream staged a slot: writes it out now, without reading
/// (a read there found nothing but cost a system call before the call
/// returned; the stream's next wait reads), as [`pump`] otherwise.
pub(crate) fn pump_out(io: &Mutex<PeerIo>, kick: &Kick) {
    with_peer(io, kick, PeerIo::pump_out);
}

/// After the stream consumed a slot: no I/O (the next receive reads),
/// only a wake-up for the engine if it must now look again (it stopped
/// reading a socket while the inbound ring was full).
pub(crate) fn settle(io: &Mutex<PeerIo>, kick: &Kick) {
    with_peer(io, kick, |_| Ok(()));
}

/// Runs `work` on the peer if no other thread holds it, then wakes the
/// engine when it must take over; an error is left for it to report.
fn with_peer(
    io: &Mutex<PeerIo>,
    kick: &Kick,
    work: impl FnOnce(&mut PeerIo) -> Result<(), crate::Error>,
) {
    let mut p = match io.try_lock() {
        Ok(p) => p,
        Err(TryLockError::Poisoned(p)) => p.into_inner(),
        Err(TryLockError::WouldBlock) => {
            // The engine (or another stream) is moving this peer's
            // bytes now; make sure it looks again before sleeping.
            kick.kick();
            return;
        }
    };
    if p.is_failed() {
        return;
    }
    match work(&mut p) {
        Ok(()) => {
            let wake = p.needs_net();
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
