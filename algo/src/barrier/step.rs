//! Flag steps: the steps that synchronise through flag memory instead of
//! moving data.
//!
//! A barrier is a plan ([`BarrierPlan`](super::BarrierPlan)) of
//! [`FlagStep`]s: *actions* (add to a counter, raise a flag, write a
//! release word) and *waits* (until a word reaches a value), over the flag
//! memory of [`BarrierMemory`](super::BarrierMemory). They are a type of
//! their own, apart from the data steps of every other collective
//! (`plan::DataStep`), so neither interpreter can be handed the other's
//! steps. [`exec::apply`](super::exec::apply) is their one interpreter: the
//! barrier executor and the flag simulator (`barrier/simulate/`) both call it. The
//! same dissemination notifies and flag waits are also the message barrier
//! of communicators with tcp peers (`plan/barrier.rs`), where a notify is a
//! zero-byte data message and a flag wait a wait for one.
//!
//! # Values and epochs
//!
//! Words are never reset. Every value a step writes or awaits is computed
//! from the barrier's *epoch* (its sequence number `1, 2, 3, ...`, the same
//! on every rank, supplied at execution time, never stored in a plan) and the
//! step's *round*, by [`signal_value`]; waits use `>=`. Values written by one
//! writer into one word only grow (epochs grow, and within an epoch a plan's
//! rounds towards one peer grow), so a wait for `(epoch, round)` that sees a
//! later value knows the earlier store happened: a rank that runs ahead into
//! the next barrier never confuses a slower peer, and there is no reset race.
//!
//! The arrival counter only adds, so its target counts barriers of its
//! own: it is `counter epoch * arrivals per barrier`, where the *counter
//! epoch* is how many barriers on this memory so far, this one included,
//! used the counter ([`Epoch`](super::Epoch)). Algorithms may then be
//! switched between barriers, counter or not. Epochs must still be
//! consecutive on a given memory (`1, 2, 3, ...` with no gaps), and every
//! counter barrier on it must have the same number of ranks.

/// Rounds one epoch may use: values of consecutive epochs never overlap.
pub const ROUNDS_PER_EPOCH: u64 = 256;

/// Largest epoch whose values fit in a `u64`.
pub const MAX_EPOCH: u64 = u64::MAX / ROUNDS_PER_EPOCH - 1;

/// The value of a flag or release word meaning "`round` of barrier `epoch`
/// has happened": `epoch * ROUNDS_PER_EPOCH + round`.
///
/// Always at least `ROUNDS_PER_EPOCH` for a valid epoch, so the initial 0 of
/// a fresh word never satisfies a wait. Release words use round 0.
/// Returns `None` for epoch 0, an epoch above `MAX_EPOCH`, or a round not
/// below `ROUNDS_PER_EPOCH`.
///
/// # Examples
///
/// ```
/// use streamcomm_algo::barrier::signal_value;
///
/// assert_eq!(signal_value(1, 0), Some(256));
/// assert_eq!(signal_value(2, 3), Some(515));
/// assert_eq!(signal_value(0, 0), None);
/// ```
#[inline]
pub const fn signal_value(epoch: u64, round: u32) -> Option<u64> {
    if epoch == 0 || epoch > MAX_EPOCH || round as u64 >= ROUNDS_PER_EPOCH {
        return None;
    }
    Some(epoch * ROUNDS_PER_EPOCH + round as u64)
}

/// One step of a barrier plan, executed by the plan's rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlagStep {
    /// Atomically add 1 to `counter` in `root`'s area (an arrival).
    FetchAdd {
        /// Owner of the counter.
        root: usize,
    },
    /// Wait until `counter` in this rank's own area is at least
    /// `epoch * count_per_epoch` (every arrival of every barrier so far).
    WaitCounter {
        /// Arrivals each barrier adds to the counter.
        count_per_epoch: u64,
    },
    /// Store `signal_value(epoch, round)` into `flags[rank]` of `peer`'s area.
    Notify {
        /// Whose area receives the flag.
        peer: usize,
        /// Round within the barrier.
        round: u32,
    },
    /// Wait until `flags[from]` in this rank's own area is at least
    /// `signal_value(epoch, round)`.
    WaitFlag {
        /// The rank that writes the flag.
        from: usize,
        /// Round within the barrier.
        round: u32,
    },
    /// Store `signal_value(epoch, 0)` into `release` of `peer`'s area (the
    /// plan's own rank for a central root releasing everybody at once).
    Release {
        /// Whose release word is written.
        peer: usize,
    },
    /// Wait until `release` in `at`'s area is at least `signal_value(epoch, 0)`
    /// (`at` is this rank for per-rank releases, the root for a central one).
    WaitRelease {
        /// Whose release word is read.
        at: usize,
    },
}

impl FlagStep {
    /// Whether this operation waits (as opposed to acting).
    #[inline]
    pub const fn is_wait(&self) -> bool {
        matches!(
            self,
            FlagStep::WaitCounter { .. } | FlagStep::WaitFlag { .. } | FlagStep::WaitRelease { .. }
        )
    }

    /// Whether this operation touches the arrival counter.
    #[inline]
    pub const fn uses_counter(&self) -> bool {
        matches!(
            self,
            FlagStep::FetchAdd { .. } | FlagStep::WaitCounter { .. }
        )
    }

    /// The other rank the operation names: whose area it writes or reads,
    /// or whose flag it awaits (`None` for [`FlagStep::WaitCounter`], which
    /// only reads this rank's own area).
    #[inline]
    pub const fn peer(&self) -> Option<usize> {
        match *self {
            FlagStep::FetchAdd { root } => Some(root),
            FlagStep::Notify { peer, .. } | FlagStep::Release { peer } => Some(peer),
            FlagStep::WaitFlag { from, .. } => Some(from),
            FlagStep::WaitRelease { at } => Some(at),
            FlagStep::WaitCounter { .. } => None,
        }
    }

    /// The round of a flag notify or wait.
    #[inline]
    pub const fn round(&self) -> Option<u32> {
        match *self {
            FlagStep::Notify { round, .. } | FlagStep::WaitFlag { round, .. } => Some(round),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_grow_with_epoch_then_round() {
        let mut last = 0;
        for epoch in 1..4 {
            for round in [0, 1, 7, 255] {
                let v = signal_value(epoch, round).unwrap();
                assert!(v > last, "epoch {epoch} round {round}");
                last = v;
            }
        }
        assert_eq!(signal_value(1, 256), None);
        assert_eq!(signal_value(MAX_EPOCH + 1, 0), None);
        assert!(signal_value(MAX_EPOCH, 255).is_some());
    }

    #[test]
    fn classifies_operations() {
        assert!(FlagStep::WaitCounter { count_per_epoch: 3 }.is_wait());
        assert!(!FlagStep::Release { peer: 1 }.is_wait());
        assert!(FlagStep::FetchAdd { root: 0 }.uses_counter());
        assert!(!FlagStep::WaitRelease { at: 0 }.uses_counter());
        assert_eq!(FlagStep::WaitRelease { at: 4 }.peer(), Some(4));
        assert_eq!(FlagStep::WaitCounter { count_per_epoch: 3 }.peer(), None);
        assert_eq!(FlagStep::Notify { peer: 2, round: 5 }.round(), Some(5));
    }
}
