//! Fault injection at the slot seam: where a rank publishes or consumes a slot.
//!
//! Every transport meets the stream at the same two points of its
//! [`Connection`]: the slot it publishes to a peer
//! ([`Connection::commit_send`]: into the peer's shared memory, or the
//! staging ring tcp or verbs drain) and the slot it takes from a peer
//! ([`Connection::try_acquire_recv`]). Every
//! writer of slots goes through them (collective steps, point-to-point
//! messages, the immediate path of small host calls), so one hook covers
//! shared memory, tcp and verbs, collectives and point-to-point alike.
//! [`FaultInjector`] hands each connection the rules of a [`FaultPlan`]
//! that concern it ([`SlotFaults`]): delay a slot, drop it, send it twice,
//! or fail with a transport error.
//!
//! A dropped slot keeps its sequence number (the next slot carries the one
//! after it) and a duplicate repeats it, exactly what a transport that lost
//! or repeated a message would produce; receivers detect both from the
//! per-slot sequence number ([`super::ring`]) or the tcp frame's.
//!
//! Without the `fault-injection` feature the injector and [`SlotFaults`]
//! are empty types whose hooks do nothing (and cost nothing), and a
//! non-empty plan is refused.

use std::time::Duration;

use crate::Result;
use crate::config::fault_spec::{FaultPlan, FaultRule};
use crate::transport::Connection;

#[cfg(feature = "fault-injection")]
pub(crate) use enabled::{FaultInjector, SlotFaults};

#[cfg(not(feature = "fault-injection"))]
pub(crate) use disabled::{FaultInjector, SlotFaults};

/// What happens to the slot being published, when a rule or an earlier
/// fault changes anything about it.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
pub(crate) enum SendFault {
    /// No rule for this slot, but earlier drops or duplicates moved its
    /// sequence number: published numbered `seq`.
    Renumber(u64),
    /// Published numbered `seq` after a pause.
    Delay(Duration, u64),
    /// Never published.
    Drop,
    /// Published twice, both numbered `seq`.
    Duplicate(u64),
    /// Not published: the rule's transport error.
    Fail(FaultRule),
}

#[cfg(not(feature = "fault-injection"))]
mod disabled {
    use super::*;
    use crate::Error;
    use crate::transport::Segment;
    use crate::transport::ring::{RingEnd, RingError};
    use crate::wait::WaitPolicy;

    /// Applies fault rules (this build has none: see the module doc).
    #[derive(Debug, Default)]
    pub(crate) struct FaultInjector;

    impl FaultInjector {
        /// The injector for `rank` of `size`.
        ///
        /// # Errors
        /// [`Error::InvalidArgument`] when `plan` is not empty: this build
        /// cannot apply it.
        pub(crate) fn new(plan: &FaultPlan, _rank: usize, _size: usize) -> Result<FaultInjector> {
            if plan.is_empty() {
                Ok(FaultInjector)
            } else {
                Err(not_built())
            }
        }

        /// Hands each connection its rules (none in this build).
        pub(crate) fn arm(
            self,
            _peers: &mut [Option<Connection>],
            _own: &std::sync::Arc<Segment>,
            _timeout: Duration,
        ) {
        }
    }

    /// One connection's fault rules (none in this build).
    #[derive(Debug, Default)]
    pub(crate) struct SlotFaults;

    impl SlotFaults {
        /// True: no rule can hit a slot sent in this build.
        #[inline(always)]
        pub(crate) fn sends_plain(&self) -> bool {
            true
        }

        /// Never anything in this build.
        #[inline(always)]
        pub(crate) fn on_send(&self, _ring: &RingEnd) -> Option<SendFault> {
            None
        }

        /// Nothing to do in this build.
        ///
        /// # Errors
        /// Never in this build.
        #[inline(always)]
        pub(crate) fn before_recv(&self, _ring: &RingEnd) -> Result<(), RingError> {
            Ok(())
        }

        /// Never called in this build.
        pub(crate) fn pause(&self, _d: Duration) {}

        /// Never called in this build.
        pub(crate) fn policy(&self) -> WaitPolicy<'_> {
            WaitPolicy::new(0, Duration::ZERO)
        }
    }

    fn not_built() -> Error {
        Error::invalid(
            "STREAMCOMM_FAULTS is set, but this build of streamcomm has no fault injection \
             (build with the `fault-injection` feature)",
        )
    }
}

#[cfg(feature = "fault-injection")]
mod enabled {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
    use std::time::Instant;

    use super::*;
    use crate::config::fault_spec::{FaultAction, FaultDirection};
    use crate::transport::Segment;
    use crate::transport::ring::{RingEnd, RingError};
    use crate::wait::WaitPolicy;

    /// This rank's fault rules, until each connection has its own.
    #[derive(Debug, Default)]
    pub(crate) struct FaultInjector {
        rank: usize,
        rules: Vec<FaultRule>,
    }

    impl FaultInjector {
        /// The injector for `rank` of `size`, with the rules of `plan` that apply to it.
        ///
        /// # Errors
        /// As [`FaultPlan::for_rank`].
        pub(crate) fn new(plan: &FaultPlan, rank: usize, size: usize) -> Result<FaultInjector> {
            let rules = plan.for_rank(rank, size)?;
            for r in &rules {
                tracing::warn!(rank, rule = %r, "fault injection armed");
            }
            Ok(FaultInjector { rank, rules })
        }

        /// Hands each connection of `peers` the rules that name its peer;
        /// a delay ends early, and a repeated slot's wait for credit fails,
        /// once `own`'s failure word is raised, and that wait gives up
        /// after `timeout`.
        pub(crate) fn arm(
            self,
            peers: &mut [Option<Connection>],
            own: &Arc<Segment>,
            timeout: Duration,
        ) {
            for c in peers.iter_mut().flatten() {
                let peer = c.peer();
                let of = |dir| {
                    self.rules
                        .iter()
                        .filter(|r| r.peer == peer && r.direction == dir)
                        .copied()
                        .collect::<Vec<_>>()
                };
                let (send, recv) = (of(FaultDirection::Send), of(FaultDirection::Recv));
                if send.is_empty() && recv.is_empty() {
                    continue;
                }
                c.arm(SlotFaults {
                    rank: self.rank,
                    send,
                    recv,
                    sent: AtomicU64::new(0),
                    recv_hooked: AtomicU64::new(0),
                    skew: AtomicI64::new(0),
                    own: Some(own.clone()),
                    timeout,
                });
            }
        }
    }

    /// The fault rules of one connection and its counts.
    #[derive(Debug, Default)]
    pub(crate) struct SlotFaults {
        rank: usize,
        /// Rules on the slots this rank publishes to the peer.
        send: Vec<FaultRule>,
        /// Rules on the slots this rank consumes from the peer.
        recv: Vec<FaultRule>,
        /// Slots published to the peer so far (dropped ones included).
        sent: AtomicU64,
        /// Inbound slots whose hook ran: one past the latest one's index.
        recv_hooked: AtomicU64,
        /// Sequence number of the next slot minus the ring's tail:
        /// +1 per dropped slot, -1 per duplicate.
        skew: AtomicI64,
        /// This rank's segment, whose failure word ends a pause.
        own: Option<Arc<Segment>>,
        /// How long a repeated slot waits for credit.
        timeout: Duration,
    }

    impl SlotFaults {
        /// True when no rule can hit a slot this rank sends to the peer
        /// (so it may bypass the staging ring).
        #[inline]
        pub(crate) fn sends_plain(&self) -> bool {
            self.send.is_empty()
        }

        /// What happens to the slot about to be published in `ring`:
        /// `None`, published as it is, unless a rule says otherwise or
        /// earlier faults moved its number.
        #[inline]
        pub(crate) fn on_send(&self, ring: &RingEnd) -> Option<SendFault> {
            if self.send.is_empty() {
                return None;
            }
            self.on_ruled_send(ring)
        }

        #[cold]
        fn on_ruled_send(&self, ring: &RingEnd) -> Option<SendFault> {
            let nth = self.sent.fetch_add(1, Ordering::Relaxed) + 1;
            let seq = ring
                .tail()
                .wrapping_add_signed(self.skew.load(Ordering::Relaxed));
            let Some(rule) = self.send.iter().find(|r| r.nth == nth) else {
                return Some(SendFault::Renumber(seq));
            };
            tracing::warn!(rank = self.rank, %rule, seq, "injecting fault");
            Some(match rule.action {
                FaultAction::Delay(d) => SendFault::Delay(d, seq),
                FaultAction::Drop => {
                    self.skew.fetch_add(1, Ordering::Relaxed);
                    SendFault::Drop
                }
                FaultAction::Duplicate => {
                    self.skew.fetch_sub(1, Ordering::Relaxed);
                    SendFault::Duplicate(seq)
                }
                FaultAction::Error => SendFault::Fail(*rule),
            })
        }

        /// Called before the next inbound slot of `ring` is taken: delays
        /// it (once, however often it is looked at) or fails it (each time
        /// it is looked at) when a rule says so.
        ///
        /// # Errors
        /// [`RingError::Injected`] for an injected error.
        #[inline]
        pub(crate) fn before_recv(&self, ring: &RingEnd) -> Result<(), RingError> {
            if self.recv.is_empty() {
                return Ok(());
            }
            self.before_ruled_recv(ring.head())
        }

        #[cold]
        fn before_ruled_recv(&self, head: u64) -> Result<(), RingError> {
            let Some(rule) = self.recv.iter().find(|r| r.nth == head + 1) else {
                return Ok(());
            };
            let first_look = self.recv_hooked.fetch_max(head + 1, Ordering::Relaxed) <= head;
            if first_look {
                tracing::warn!(rank = self.rank, %rule, "injecting fault");
            }
            match rule.action {
                FaultAction::Delay(d) => {
                    if first_look {
                        self.pause(d);
                    }
                    Ok(())
                }
                FaultAction::Error => Err(RingError::Injected(*rule)),
                // Refused by the parser: a receiver cannot lose what arrived.
                FaultAction::Drop | FaultAction::Duplicate => Ok(()),
            }
        }

        /// Sleeps `d`, in short slices, ending early if the communicator fails.
        pub(crate) fn pause(&self, d: Duration) {
            let end = Instant::now() + d;
            let failed = || {
                self.own
                    .as_ref()
                    .is_some_and(|s| s.header().failed_by.load(Ordering::Relaxed) != 0)
            };
            loop {
                let now = Instant::now();
                if now >= end || failed() {
                    return;
                }
                std::thread::sleep((end - now).min(Duration::from_millis(5)));
            }
        }

        /// The policy of a repeated slot's wait for credit.
        pub(crate) fn policy(&self) -> WaitPolicy<'_> {
            let p = WaitPolicy::new(0, self.timeout);
            match &self.own {
                Some(s) => p.with_abort(&s.header().failed_by),
                None => p,
            }
        }
    }
}
