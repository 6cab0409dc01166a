//! The multicast barrier: every rank multicasts one "arrived" datagram to
//! a group all ranks joined, and leaves once it knows every rank arrived.
//! One network step, no root, no tree; `docs/design/barriers.md` gives the
//! protocol, its safety argument and its costs.
//!
//! Datagrams are unreliable, so a rank that has waited [`FIRST_RETRY`]
//! multicasts a `missing` naming the ranks it has not heard from, and they
//! multicast their last arrival again; the wait between questions doubles
//! up to [`MAX_RETRY`], and the barrier fails with [`Error::Timeout`] at
//! the communicator's timeout. What a rank knows, and why it never leaves
//! early, is in [`arrivals`]; the datagrams in [`wire`].
//!
//! A rank keeps answering questions between barriers: a peer that lost our
//! last arrival asks after we left, and the communicator's progress engine
//! answers for us ([`MulticastBarrier::service`]) while no barrier runs,
//! and on close until it has heard nothing for [`LINGER`].
//!
//! What carries the datagrams is a [`Datagrams`]: the verbs UD queue pair
//! attached to a multicast group (`transport::verbs::multicast`), or in
//! tests an in-memory fabric. It is the one way this module, which sits
//! below the transports, calls into one.

pub(crate) mod arrivals;
pub(crate) mod faults;
pub(crate) mod wire;

#[cfg(test)]
mod fabric;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use arrivals::{Arrivals, Asked};
use faults::{Dice, Fate};
use wire::Datagram;

use crate::Error;
use crate::wait::WaitPolicy;

pub(crate) use faults::DatagramFaults;

/// First wait for a missing arrival before asking for it again. Long
/// enough that a peer merely descheduled (2 vCPUs, 8 ranks) is seldom
/// asked, short enough that a lost datagram costs about a millisecond.
pub(crate) const FIRST_RETRY: Duration = Duration::from_millis(1);
/// Longest wait between two questions (the waits double up to it): a rank
/// that waits for a slow peer asks at most 16 times a second.
pub(crate) const MAX_RETRY: Duration = Duration::from_millis(64);
/// Longest sleep while waiting, so the abort flag is seen promptly.
const MAX_SLEEP: Duration = Duration::from_millis(16);
/// How long a closing communicator keeps answering after its last barrier
/// and the last datagram it heard ([`MulticastBarrier::activity`]): a
/// peer that lost this rank's last arrival asks within a millisecond and
/// again 2, 4, 8, ... ms later, six times within it unless descheduled.
pub(crate) const LINGER: Duration = Duration::from_millis(100);

/// Something that multicasts datagrams to the group and receives the
/// group's (its own may come back too; they are ignored).
pub(crate) trait Datagrams: Send {
    /// Multicasts `bytes` to the group.
    ///
    /// # Errors
    /// A transport error (the datagram may be lost without one).
    fn send(&mut self, bytes: &[u8]) -> Result<(), Error>;

    /// Hands every datagram received since the last call to `each`.
    ///
    /// # Errors
    /// A transport error.
    fn recv(&mut self, each: &mut dyn FnMut(&[u8])) -> Result<(), Error>;

    /// Sleeps until a datagram may have arrived, or `timeout` passed.
    ///
    /// # Errors
    /// A transport error.
    fn sleep(&mut self, timeout: Duration) -> Result<(), Error>;

    /// A descriptor that turns readable when a datagram arrives after
    /// [`Datagrams::arm`] (for the progress engine's `poll(2)`).
    fn wake_fd(&self) -> Option<i32>;

    /// Asks for a wake-up on the next datagram; true when one is already
    /// waiting (then there will be no wake-up for it).
    ///
    /// # Errors
    /// A transport error.
    fn arm(&mut self) -> Result<bool, Error>;
}

/// Counters of the protocol's extra traffic, for the benchmark.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct MulticastStats {
    /// Barriers run.
    pub barriers: u64,
    /// `missing` questions this rank multicast.
    pub questions: u64,
    /// Arrivals this rank multicast again, answering questions.
    pub resends: u64,
}

/// A communicator's multicast barrier.
pub(crate) struct MulticastBarrier {
    rank: usize,
    size: usize,
    /// Marks this communicator's datagrams.
    tag: u64,
    link: Mutex<Link>,
    /// Barriers run so far (the same on every rank).
    epoch: AtomicU64,
    questions: AtomicU64,
    resends: AtomicU64,
    /// Counts barriers ended and receives that found datagrams: the
    /// progress engine times the quiet from it, so no clock is read on
    /// the barrier's path for the linger.
    activity: AtomicU64,
}

/// The datagrams and what they taught, used by one thread at a time.
struct Link {
    net: Box<dyn Datagrams>,
    arrivals: Arrivals,
    dice: Option<Dice>,
    /// Encoding buffer.
    out: Vec<u8>,
    /// Decoded datagrams, kept to reuse their room.
    got: Vec<Datagram>,
}

impl std::fmt::Debug for MulticastBarrier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MulticastBarrier(rank {} of {}, tag {:#x})",
            self.rank, self.size, self.tag
        )
    }
}

impl MulticastBarrier {
    /// The barrier of `rank` of `size` over `net`, its datagrams tagged
    /// `tag` (the same on every rank of the communicator, unlike any other
    /// communicator's), with receive `faults` injected.
    pub(crate) fn new(
        rank: usize,
        size: usize,
        tag: u64,
        net: Box<dyn Datagrams>,
        faults: DatagramFaults,
    ) -> MulticastBarrier {
        MulticastBarrier {
            rank,
            size,
            tag,
            link: Mutex::new(Link {
                net,
                arrivals: Arrivals::new(rank, size),
                dice: Dice::new(faults, rank),
                out: Vec::with_capacity(wire::max_bytes(size)),
                got: Vec::new(),
            }),
            epoch: AtomicU64::new(0),
            questions: AtomicU64::new(0),
            resends: AtomicU64::new(0),
            activity: AtomicU64::new(0),
        }
    }

    /// The communicator closes: multicasts this rank's last arrival once
    /// more (a peer that lost it needs no question then), if a barrier ran.
    ///
    /// # Errors
    /// A transport error of the datagrams.
    pub(crate) fn part(&self) -> Result<(), Error> {
        if self.epoch.load(Ordering::Relaxed) == 0 {
            return Ok(());
        }
        let mut link = self.lock();
        let last = link.arrivals.last();
        link.send(self.tag, &last)?;
        self.mark_active();
        Ok(())
    }

    /// Grows whenever a barrier ends or datagrams come (or `part` sends):
    /// the group is quiet while it stands still.
    pub(crate) fn activity(&self) -> u64 {
        self.activity.load(Ordering::Relaxed)
    }

    fn mark_active(&self) {
        self.activity.fetch_add(1, Ordering::Relaxed);
    }

    /// Injects `faults` into the datagrams received from now on (the
    /// creation's probe runs without them).
    pub(crate) fn set_faults(&self, faults: DatagramFaults) {
        self.lock().dice = Dice::new(faults, self.rank);
    }

    /// What the protocol sent beyond one arrival per barrier.
    pub(crate) fn stats(&self) -> MulticastStats {
        MulticastStats {
            barriers: self.epoch.load(Ordering::Relaxed),
            questions: self.questions.load(Ordering::Relaxed),
            resends: self.resends.load(Ordering::Relaxed),
        }
    }

    /// Runs the next barrier (call in issue order, once per barrier, on
    /// every rank), waiting under `policy`.
    ///
    /// # Errors
    /// [`Error::Timeout`] naming the ranks not heard from when the
    /// policy's timeout passes; [`Error::Aborted`] when its abort flag is
    /// raised; a transport error of the datagrams.
    pub(crate) fn run(&self, policy: &WaitPolicy<'_>) -> Result<(), Error> {
        let epoch = self.epoch.fetch_add(1, Ordering::Relaxed) + 1;
        let mut link = self.lock();
        let arrived = link.arrivals.arrive(epoch);
        link.send(self.tag, &arrived)?;
        // The clock is read only once the spin phase is over (as in every
        // wait, `wait.rs`: in an emulated guest a read is a system call),
        // so the questions and the timeout count from there.
        let mut clock: Option<(Instant, Instant)> = None;
        let mut gap = FIRST_RETRY;
        let mut polls: u32 = 0;
        let mut asked: u32 = 0;
        loop {
            self.pump(&mut link)?;
            if link.arrivals.complete(epoch) {
                self.mark_active();
                return Ok(());
            }
            polls = polls.saturating_add(1);
            if polls <= policy.spin {
                if polls.is_multiple_of(256) && policy.aborted() {
                    return Err(self.aborted(epoch));
                }
                std::hint::spin_loop();
                continue;
            }
            let now = Instant::now();
            let (start, next_question) = clock.get_or_insert((now, now + FIRST_RETRY));
            if policy.aborted() {
                return Err(self.aborted(epoch));
            }
            let waited = now - *start;
            if waited >= policy.timeout {
                return Err(Error::Timeout {
                    op: format!("barrier #{epoch} (multicast)"),
                    what: format!(
                        "the arrivals of ranks {:?} (asked for them {asked} times)",
                        link.arrivals.missing_ranks(epoch),
                    ),
                    waited_ms: waited.as_millis() as u64,
                });
            }
            if now >= *next_question {
                let ask = Datagram::Missing {
                    rank: self.rank,
                    epoch,
                    ranks: link.arrivals.missing(epoch),
                };
                link.send(self.tag, &ask)?;
                self.questions.fetch_add(1, Ordering::Relaxed);
                asked += 1;
                gap = (gap * 2).min(MAX_RETRY);
                *next_question = now + gap;
            }
            if polls <= policy.spin.saturating_add(policy.yields) {
                std::thread::yield_now();
                continue;
            }
            let until = (*next_question - now)
                .min(policy.timeout - waited)
                .min(MAX_SLEEP);
            link.net.sleep(until)?;
        }
    }

    /// Answers questions while no barrier runs (the progress engine calls
    /// it): true if any datagram came. Does nothing while a barrier runs
    /// (its thread answers).
    ///
    /// # Errors
    /// A transport error of the datagrams.
    pub(crate) fn service(&self) -> Result<bool, Error> {
        let Some(mut link) = self.try_lock() else {
            return Ok(false);
        };
        self.pump(&mut link)
    }

    /// Before the progress engine sleeps: the descriptor to wake it on a
    /// datagram, or `Err(wait)`: look again after `wait` (a barrier holds
    /// the datagrams, or one is already there).
    ///
    /// # Errors
    /// A transport error (as `Ok(Err(..))` is not one).
    pub(crate) fn arm(&self) -> Result<Result<i32, Duration>, Error> {
        let Some(mut link) = self.try_lock() else {
            return Ok(Err(Duration::from_millis(5)));
        };
        if link.net.arm()? {
            return Ok(Err(Duration::ZERO));
        }
        Ok(link.net.wake_fd().ok_or(MAX_SLEEP))
    }

    fn lock(&self) -> MutexGuard<'_, Link> {
        self.link.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn try_lock(&self) -> Option<MutexGuard<'_, Link>> {
        match self.link.try_lock() {
            Ok(l) => Some(l),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    fn aborted(&self, epoch: u64) -> Error {
        Error::Aborted(format!("barrier #{epoch} (multicast)"))
    }

    /// Takes in what arrived (through the fault dice), learns from it and
    /// answers questions naming us: true if anything arrived.
    fn pump(&self, link: &mut Link) -> Result<bool, Error> {
        let Link { net, dice, got, .. } = link;
        let (tag, size) = (self.tag, self.size);
        let mut any = false;
        net.recv(&mut |bytes| {
            any = true;
            let Some(d) = Datagram::decode(tag, size, bytes) else {
                return;
            };
            match dice.as_mut().map_or(Fate::Once, Dice::roll) {
                Fate::Drop => {}
                Fate::Once => got.push(d),
                Fate::Twice => {
                    got.push(d.clone());
                    got.push(d);
                }
            }
        })?;
        if any {
            self.mark_active();
        }
        let mut asked = false;
        for d in link.got.drain(..) {
            asked |= link.arrivals.note(&d) == Asked::Resend;
        }
        if asked {
            let last = link.arrivals.last();
            link.send(self.tag, &last)?;
            self.resends.fetch_add(1, Ordering::Relaxed);
        }
        Ok(any)
    }
}

impl Link {
    fn send(&mut self, tag: u64, d: &Datagram) -> Result<(), Error> {
        d.encode(tag, &mut self.out);
        self.net.send(&self.out)
    }
}
