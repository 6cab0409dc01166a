//! The message barrier: the dissemination barrier's flag steps run as
//! messages over the slot rings.
//!
//! A communicator with a tcp peer has no flag memory every rank can write,
//! so its barrier runs on the data path instead: each flag notify
//! ([`FlagStep::Notify`]) is a zero-byte message to its peer ([`DataStep::signal`])
//! and each flag wait ([`FlagStep::WaitFlag`]) a wait for one ([`DataStep::wait`]).
//! The algorithm is not written here: `barrier/algo/dissemination.rs` is
//! the one definition the flag barrier of `crate::barrier` and this one
//! share.
//!
//! # Why the message form keeps the barrier property
//!
//! A flag wait of round `t` in barrier `e` is met by the peer's notify of
//! `(e, t)` or of anything later (words are monotonic); a message wait only
//! by the next message on that connection. When, for every directed pair,
//! the rounds the sender notifies and the rounds the receiver awaits are
//! the same sequence (true of dissemination: one notify per pair and round,
//! in round order), the `j`-th message from `p` is `p`'s notify of the very
//! step the receiver's `j`-th wait on `p` awaits. So every run of the message
//! plans is also a run of the flag plans, whose barrier property the flag
//! simulator (`barrier::simulate`) proves for every interleaving; the
//! message simulator (`simulate/messages.rs`) adds what only messages can
//! break (deadlock on full single-slot rings, undelivered
//! slots).

use super::Geometry;
use super::step::DataStep;
use crate::Error;
use crate::barrier::{FlagStep, dissemination};

/// The message barrier of `g.rank`: the dissemination barrier as messages
/// (none for a single rank).
///
/// # Errors
///
/// As [`message`] (never for dissemination).
pub(super) fn steps(g: &Geometry) -> Result<Vec<DataStep>, Error> {
    let all: Vec<usize> = (0..g.nranks).collect();
    dissemination::steps(&all, g.rank, 1, 0)
        .into_iter()
        .map(message)
        .collect()
}

/// The message form of a flag operation: a notify is a zero-byte message to
/// its peer, a flag wait a wait for one from its writer.
///
/// # Errors
///
/// [`Error::InvalidArgument`] naming the operation for a counter or
/// release-word operation: those words are shared by several ranks and have
/// no message form.
fn message(op: FlagStep) -> Result<DataStep, Error> {
    match op {
        FlagStep::Notify { peer, .. } => Ok(DataStep::signal(peer)),
        FlagStep::WaitFlag { from, .. } => Ok(DataStep::wait(from)),
        other => Err(Error::invalid(format!(
            "flag operation {other:?} has no message form (only flag notifies and waits do)"
        ))),
    }
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
        steps(&geometry(0, n)).unwrap().len() / 2
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
            steps(&geometry(1, 5)).unwrap(),
            vec![
                DataStep::signal(2),
                DataStep::wait(0),
                DataStep::signal(3),
                DataStep::wait(4),
                DataStep::signal(0),
                DataStep::wait(2),
            ]
        );
    }

    #[test]
    fn refuses_shared_words_naming_the_operation() {
        assert_eq!(
            message(FlagStep::Notify { peer: 1, round: 0 }).unwrap(),
            DataStep::signal(1)
        );
        match message(FlagStep::FetchAdd { root: 0 }) {
            Err(Error::InvalidArgument(msg)) => assert!(msg.contains("FetchAdd"), "{msg}"),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
        assert!(message(FlagStep::WaitRelease { at: 0 }).is_err());
        assert!(message(FlagStep::WaitCounter { count_per_epoch: 1 }).is_err());
        assert!(message(FlagStep::Release { peer: 0 }).is_err());
    }

    /// The rounds of the steps of `plan` that `of` picks, in order.
    fn picked_rounds(plan: &[FlagStep], of: impl Fn(FlagStep) -> Option<u32>) -> Vec<u32> {
        plan.iter().filter_map(|&s| of(s)).collect()
    }

    /// The condition of the module docs: for every directed pair, the
    /// rounds the sender notifies are the rounds the receiver awaits, in
    /// the same order, for every size the simulators cover.
    #[test]
    fn every_pair_sends_the_rounds_its_receiver_awaits() {
        for n in 1..=64 {
            let all: Vec<usize> = (0..n).collect();
            let plans: Vec<_> = (0..n)
                .map(|r| dissemination::steps(&all, r, 1, 0))
                .collect();
            for (p, r) in (0..n).flat_map(|p| (0..n).map(move |r| (p, r))) {
                let sent = picked_rounds(&plans[p], |s| match s {
                    FlagStep::Notify { peer, round } if peer == r => Some(round),
                    _ => None,
                });
                let awaited = picked_rounds(&plans[r], |s| match s {
                    FlagStep::WaitFlag { from, round } if from == p => Some(round),
                    _ => None,
                });
                assert_eq!(sent, awaited, "n={n}: {p} -> {r}");
                assert!(sent.len() <= 1, "n={n}: {p} -> {r} carries {sent:?}");
            }
            // One message step per flag step, in the same order.
            for (r, ops) in plans.iter().enumerate() {
                let msgs = steps(&geometry(r, n)).unwrap();
                assert_eq!(msgs.len(), ops.len(), "n={n} rank {r}");
                for (m, op) in msgs.iter().zip(ops) {
                    match *op {
                        FlagStep::Notify { peer, .. } => assert_eq!(*m, DataStep::signal(peer)),
                        FlagStep::WaitFlag { from, .. } => assert_eq!(*m, DataStep::wait(from)),
                        other => panic!("n={n} rank {r}: unexpected {other:?}"),
                    }
                }
            }
        }
    }
}
