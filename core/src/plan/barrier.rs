//! Barriers as message plans: a flag barrier plan interpreted over the slot
//! rings.
//!
//! A communicator with a tcp peer has no flag memory every rank can write,
//! so its barrier runs as plan steps instead: each
//! [`BarrierStep::Notify`] of the flag plan becomes a zero-byte message
//! ([`Step::signal`]) and each [`BarrierStep::WaitFlag`] a wait for one
//! ([`Step::wait`]). The algorithm is not written here: [`dissemination`]
//! translates the flag dissemination barrier of [`crate::barrier`], the
//! one definition both forms come from.
//!
//! # Why the translation keeps the barrier property
//!
//! A flag wait of round `t` in barrier `e` is met by the peer's notify of
//! `(e, t)` or of anything later (words are monotonic); a message wait only
//! by the next message on that connection. When, for every directed pair,
//! the rounds the sender notifies and the rounds the receiver awaits are
//! the same sequence (true of dissemination: one notify per pair and round,
//! in round order), the `j`-th message from `p` is `p`'s notify of the very
//! step the receiver's `j`-th wait on `p` awaits. So every run of the message
//! plans is also a run of the flag plans, whose barrier property the
//! simulator of [`crate::barrier::sim`] proves for every interleaving; the
//! plan simulator adds what only messages can break (deadlock on full
//! single-slot rings, undelivered slots).

use super::step::Step;
use super::Geometry;
use crate::barrier::{self, BarrierAlgo, BarrierStep};
use crate::Error;

/// Message steps of the dissemination barrier for `g.rank`; none for a
/// single rank.
///
/// # Errors
///
/// As [`barrier::build`] (not for a validated geometry).
pub(super) fn dissemination(g: &Geometry) -> Result<Vec<Step>, Error> {
    let hosts = vec![0; g.nranks];
    let plan = barrier::build(BarrierAlgo::Dissemination, g.rank, g.nranks, &hosts)?;
    messages(&plan.steps)
}

/// The message form of a flag plan's `steps`: a notify is a zero-byte
/// message to its peer, a flag wait a wait for one from its writer.
///
/// # Errors
///
/// [`Error::InvalidArgument`] naming the step for a counter or release-word
/// step: those words are shared by several ranks and have no message form.
pub(crate) fn messages(steps: &[BarrierStep]) -> Result<Vec<Step>, Error> {
    steps
        .iter()
        .map(|s| match *s {
            BarrierStep::Notify { peer, .. } => Ok(Step::signal(peer)),
            BarrierStep::WaitFlag { from, .. } => Ok(Step::wait(from)),
            other => Err(Error::invalid(format!(
                "barrier step {other:?} has no message form (only flag notifies and waits do)"
            ))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(rank: usize, nranks: usize) -> Geometry {
        Geometry {
            rank,
            nranks,
            count: 0,
            chunk: 1,
            breaker: true,
        }
    }

    fn rounds(n: usize) -> usize {
        dissemination(&geometry(0, n)).unwrap().len() / 2
    }

    #[test]
    fn ceil_log2_rounds() {
        assert_eq!(rounds(1), 0);
        assert_eq!(rounds(2), 1);
        assert_eq!(rounds(3), 2);
        assert_eq!(rounds(4), 2);
        assert_eq!(rounds(5), 3);
        assert_eq!(rounds(64), 6);
        assert_eq!(rounds(65), 7);
    }

    #[test]
    fn signals_then_waits() {
        assert_eq!(
            dissemination(&geometry(1, 5)).unwrap(),
            vec![
                Step::signal(2),
                Step::wait(0),
                Step::signal(3),
                Step::wait(4),
                Step::signal(0),
                Step::wait(2),
            ]
        );
    }

    #[test]
    fn refuses_shared_words_naming_the_step() {
        let steps = [
            BarrierStep::Notify { peer: 1, round: 0 },
            BarrierStep::FetchAdd { root: 0 },
        ];
        match messages(&steps) {
            Err(Error::InvalidArgument(msg)) => assert!(msg.contains("FetchAdd"), "{msg}"),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
        let release = [BarrierStep::WaitRelease { at: 0 }];
        assert!(messages(&release).is_err());
    }

    /// The condition of the module docs: for every directed pair, the
    /// rounds the sender notifies are the rounds the receiver awaits, in
    /// the same order, for every size the simulators cover.
    #[test]
    fn every_pair_sends_the_rounds_its_receiver_awaits() {
        for n in 1..=64 {
            let hosts = vec![0; n];
            let plans: Vec<_> = (0..n)
                .map(|r| barrier::build(BarrierAlgo::Dissemination, r, n, &hosts).unwrap())
                .collect();
            for (p, r) in (0..n).flat_map(|p| (0..n).map(move |r| (p, r))) {
                let sent: Vec<u32> = plans[p]
                    .steps
                    .iter()
                    .filter_map(|s| match *s {
                        BarrierStep::Notify { peer, round } if peer == r => Some(round),
                        _ => None,
                    })
                    .collect();
                let awaited: Vec<u32> = plans[r]
                    .steps
                    .iter()
                    .filter_map(|s| match *s {
                        BarrierStep::WaitFlag { from, round } if from == p => Some(round),
                        _ => None,
                    })
                    .collect();
                assert_eq!(sent, awaited, "n={n}: {p} -> {r}");
                assert!(sent.len() <= 1, "n={n}: {p} -> {r} carries {sent:?}");
            }
            // One message step per flag step, in the same order.
            for (r, plan) in plans.iter().enumerate() {
                let msgs = dissemination(&geometry(r, n)).unwrap();
                assert_eq!(msgs.len(), plan.steps.len(), "n={n} rank {r}");
                for (m, s) in msgs.iter().zip(&plan.steps) {
                    match *s {
                        BarrierStep::Notify { peer, .. } => assert_eq!(*m, Step::signal(peer)),
                        BarrierStep::WaitFlag { from, .. } => assert_eq!(*m, Step::wait(from)),
                        other => panic!("n={n} rank {r}: unexpected {other:?}"),
                    }
                }
            }
        }
    }
}
