//! The fault-injection wrapper: where a rank publishes or consumes a slot.
//!
//! Every transport meets the stream at the same two points: the slot a step
//! publishes to a peer (`commit_send`: into the peer's shared memory, or the
//! tcp staging ring the progress engine drains) and the slot it consumes from
//! a peer. [`FaultInjector`] sits at those two points, so one hook covers
//! shared memory and tcp alike, and applies the rules of a
//! [`FaultPlan`]: delay a slot, drop it, send
//! it twice, or fail with a transport error.
//!
//! A dropped slot keeps its sequence number (the next slot carries the one
//! after it) and a duplicate repeats it, exactly what a transport that lost
//! or repeated a message would produce; receivers detect both from the
//! per-slot sequence number ([`super::ring`]) or the tcp frame's.
//!
//! Without the `fault-injection` feature the injector is an empty type whose
//! hooks are the plain ring calls, and a non-empty plan is refused.

use crate::config::fault_spec::FaultPlan;
use crate::transport::Connection;
use crate::transport::ring::RingError;
use crate::wait::WaitPolicy;
use crate::{Error, Result};

#[cfg(feature = "fault-injection")]
pub(crate) use enabled::FaultInjector;

#[cfg(not(feature = "fault-injection"))]
pub(crate) use disabled::FaultInjector;

#[cfg(not(feature = "fault-injection"))]
mod disabled {
    use super::*;

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

        /// Publishes the slot just written for `peer` (`commit_send`).
        ///
        /// # Errors
        /// Never in this build.
        #[inline(always)]
        pub(crate) fn commit_send(
            &self,
            _peer: usize,
            c: &Connection,
            len: usize,
            sig: u64,
            _policy: &WaitPolicy<'_>,
            _ring_error: impl Fn(RingError) -> Error,
        ) -> Result<()> {
            c.send.commit_send(len, sig);
            Ok(())
        }

        /// Called before consuming the next slot from `peer`.
        ///
        /// # Errors
        /// Never in this build.
        #[inline(always)]
        pub(crate) fn before_recv(
            &self,
            _peer: usize,
            _c: &Connection,
            _policy: &WaitPolicy<'_>,
        ) -> Result<()> {
            Ok(())
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
    use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    use super::*;
    use crate::config::fault_spec::{FaultAction, FaultDirection, FaultRule};

    /// Per-peer counters.
    #[derive(Debug, Default)]
    struct PeerState {
        /// Slots published to the peer so far (dropped ones included).
        sent: AtomicU64,
        /// Slots consumed from the peer so far.
        received: AtomicU64,
        /// Sequence number of the next slot minus the ring's tail:
        /// +1 per dropped slot, -1 per duplicate.
        skew: AtomicI64,
    }

    /// Applies this rank's fault rules at the slot hooks.
    #[derive(Debug, Default)]
    pub(crate) struct FaultInjector {
        rank: usize,
        rules: Vec<FaultRule>,
        peers: Vec<PeerState>,
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
            Ok(FaultInjector {
                rank,
                rules,
                peers: (0..size).map(|_| PeerState::default()).collect(),
            })
        }

        fn rule(&self, dir: FaultDirection, peer: usize, nth: u64) -> Option<&FaultRule> {
            self.rules
                .iter()
                .find(|r| r.direction == dir && r.peer == peer && r.nth == nth)
        }

        /// Publishes the slot just written for `peer` (`commit_send`), unless
        /// a rule delays, drops, duplicates or fails it.
        ///
        /// # Errors
        /// [`Error::Transport`] naming the rule for an injected error; what
        /// `ring_error` makes of a failed wait for credit when duplicating.
        pub(crate) fn commit_send(
            &self,
            peer: usize,
            c: &Connection,
            len: usize,
            sig: u64,
            policy: &WaitPolicy<'_>,
            ring_error: impl Fn(RingError) -> Error,
        ) -> Result<()> {
            let Some(state) = self.peers.get(peer) else {
                c.send.commit_send(len, sig);
                return Ok(());
            };
            let nth = state.sent.fetch_add(1, Ordering::Relaxed) + 1;
            let seq = c
                .send
                .tail()
                .wrapping_add_signed(state.skew.load(Ordering::Relaxed));
            let Some(rule) = self.rule(FaultDirection::Send, peer, nth) else {
                c.send.commit_send_numbered(len, sig, seq);
                return Ok(());
            };
            tracing::warn!(rank = self.rank, %rule, seq, "injecting fault");
            match rule.action {
                FaultAction::Delay(d) => {
                    pause(d, policy);
                    c.send.commit_send_numbered(len, sig, seq);
                }
                FaultAction::Drop => {
                    // The slot stays unpublished and is overwritten by the
                    // next one, which carries the following number.
                    state.skew.fetch_add(1, Ordering::Relaxed);
                }
                FaultAction::Duplicate => {
                    let copy = c
                        .send
                        .slot_for_write(c.send.tail())
                        .map(|s| s[..len].to_vec())
                        .unwrap_or_default();
                    c.send.commit_send_numbered(len, sig, seq);
                    c.after_step();
                    let again = c.send.acquire_send(policy).map_err(&ring_error)?;
                    again[..copy.len()].copy_from_slice(&copy);
                    c.send.commit_send_numbered(copy.len(), sig, seq);
                    state.skew.fetch_sub(1, Ordering::Relaxed);
                }
                FaultAction::Error => return Err(injected(rule, c, peer)),
            }
            Ok(())
        }

        /// Called before consuming the next slot from `peer`: delays or
        /// fails it when a rule says so.
        ///
        /// # Errors
        /// [`Error::Transport`] naming the rule for an injected error.
        pub(crate) fn before_recv(
            &self,
            peer: usize,
            c: &Connection,
            policy: &WaitPolicy<'_>,
        ) -> Result<()> {
            let Some(state) = self.peers.get(peer) else {
                return Ok(());
            };
            let nth = state.received.fetch_add(1, Ordering::Relaxed) + 1;
            let Some(rule) = self.rule(FaultDirection::Recv, peer, nth) else {
                return Ok(());
            };
            tracing::warn!(rank = self.rank, %rule, "injecting fault");
            match rule.action {
                FaultAction::Delay(d) => {
                    pause(d, policy);
                    Ok(())
                }
                FaultAction::Error => Err(injected(rule, c, peer)),
                // Refused by the parser: a receiver cannot lose what arrived.
                FaultAction::Drop | FaultAction::Duplicate => Ok(()),
            }
        }
    }

    fn injected(rule: &FaultRule, c: &Connection, peer: usize) -> Error {
        Error::Transport {
            transport: c.transport(),
            peer,
            cause: format!("injected fault `{rule}` (STREAMCOMM_FAULTS)"),
        }
    }

    /// Sleeps `d`, in short slices, ending early if the communicator fails.
    fn pause(d: Duration, policy: &WaitPolicy<'_>) {
        let end = Instant::now() + d;
        loop {
            let now = Instant::now();
            if now >= end || policy.abort.is_some_and(|a| a.load(Ordering::Relaxed) != 0) {
                return;
            }
            std::thread::sleep((end - now).min(Duration::from_millis(5)));
        }
    }
}
