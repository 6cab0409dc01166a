//! What one rank knows of the others' arrivals, and when it may leave.
//!
//! # Safety argument
//! A rank leaves barrier `e` only when it knows that every rank has
//! reached `e`. It knows that in one of two ways:
//! 1. it has heard, for every other rank r, a datagram of r's with an
//!    epoch of at least `e` (r sends `arrived(e)` on reaching `e`, and
//!    `missing(e, ..)` only while waiting at `e`, so either shows that r
//!    reached `e`; epochs only grow, so a later epoch shows it too);
//! 2. it has heard from some rank r a datagram with an epoch of at least
//!    `e + 1`: r reached `e + 1`, so r left `e`, so (by induction on the
//!    order in which ranks leave) r knew that every rank had reached `e`.
//!
//! Datagrams only ever raise what is known (`seen[r]` is a maximum), so a
//! duplicate, a late or a re-sent datagram cannot make a rank leave early;
//! a lost one only delays it until a re-send arrives. Ranks are at most
//! one barrier apart (nobody reaches `e + 1` before everybody reached
//! `e`), so a rank's last arrival answers any question asked of it.

use super::wire::{Datagram, bitmap_words};

/// One rank's view of the barrier.
#[derive(Debug)]
pub(crate) struct Arrivals {
    rank: usize,
    /// `seen[r]`: the highest epoch rank r is known to have reached (0:
    /// none yet; ours is ours).
    seen: Vec<u64>,
}

/// What a datagram asks of this rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Asked {
    /// Nothing.
    Nothing,
    /// Send our last arrival again.
    Resend,
}

impl Arrivals {
    /// Nothing known yet, for `rank` of `size`.
    pub(crate) fn new(rank: usize, size: usize) -> Arrivals {
        Arrivals {
            rank,
            seen: vec![0; size],
        }
    }

    /// This rank reaches barrier `epoch`: the datagram to multicast.
    pub(crate) fn arrive(&mut self, epoch: u64) -> Datagram {
        self.seen[self.rank] = self.seen[self.rank].max(epoch);
        Datagram::Arrived {
            rank: self.rank,
            epoch,
        }
    }

    /// Our last arrival (to send again when asked).
    pub(crate) fn last(&self) -> Datagram {
        Datagram::Arrived {
            rank: self.rank,
            epoch: self.seen[self.rank],
        }
    }

    /// Learns from a datagram (ours, looped back, teaches nothing) and
    /// says whether it asks us to re-send: a `missing` naming us, about a
    /// barrier we have reached.
    pub(crate) fn note(&mut self, d: &Datagram) -> Asked {
        let (rank, epoch) = match d {
            Datagram::Arrived { rank, epoch } | Datagram::Missing { rank, epoch, .. } => {
                (*rank, *epoch)
            }
        };
        if rank == self.rank || rank >= self.seen.len() {
            return Asked::Nothing;
        }
        self.seen[rank] = self.seen[rank].max(epoch);
        match d {
            Datagram::Missing { ranks, .. }
                if ranks
                    .get(self.rank / 64)
                    .is_some_and(|w| w & (1 << (self.rank % 64)) != 0)
                    && self.seen[self.rank] >= epoch =>
            {
                Asked::Resend
            }
            _ => Asked::Nothing,
        }
    }

    /// Whether this rank may leave barrier `epoch` (see the module docs).
    pub(crate) fn complete(&self, epoch: u64) -> bool {
        let mut all = true;
        for (r, &s) in self.seen.iter().enumerate() {
            if r == self.rank {
                continue;
            }
            if s > epoch {
                return true;
            }
            all &= s >= epoch;
        }
        all
    }

    /// The ranks not yet heard from at `epoch`, as a `missing` bitmap.
    pub(crate) fn missing(&self, epoch: u64) -> Vec<u64> {
        let mut words = vec![0u64; bitmap_words(self.seen.len())];
        for r in self.missing_ranks(epoch) {
            words[r / 64] |= 1 << (r % 64);
        }
        words
    }

    /// The ranks not yet heard from at `epoch`.
    pub(crate) fn missing_ranks(&self, epoch: u64) -> Vec<usize> {
        (0..self.seen.len())
            .filter(|&r| r != self.rank && self.seen[r] < epoch)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrived(rank: usize, epoch: u64) -> Datagram {
        Datagram::Arrived { rank, epoch }
    }

    #[test]
    fn leaves_only_once_everyone_arrived_or_someone_left() {
        let mut a = Arrivals::new(1, 4);
        a.arrive(1);
        assert!(!a.complete(1));
        a.note(&arrived(0, 1));
        a.note(&arrived(0, 1)); // a duplicate
        a.note(&arrived(3, 1));
        assert!(!a.complete(1));
        assert_eq!(a.missing_ranks(1), vec![2]);
        assert_eq!(a.missing(1), vec![0b100]);
        a.note(&arrived(2, 1));
        assert!(a.complete(1));
        // Barrier 2: rank 3 is heard at barrier 3, so it left 2, so
        // everyone reached 2.
        a.arrive(2);
        assert!(!a.complete(2));
        a.note(&arrived(3, 3));
        assert!(a.complete(2));
        // A stale datagram changes nothing.
        a.note(&arrived(0, 1));
        assert!(a.complete(2));
    }

    #[test]
    fn our_own_datagrams_teach_nothing() {
        let mut a = Arrivals::new(0, 2);
        a.arrive(1);
        a.note(&arrived(0, 5));
        assert!(!a.complete(1));
    }

    #[test]
    fn a_missing_asks_only_the_ranks_it_names_about_a_barrier_they_reached() {
        let mut a = Arrivals::new(2, 3);
        let ask = |rank, epoch, bits| Datagram::Missing {
            rank,
            epoch,
            ranks: vec![bits],
        };
        // Not reached barrier 1 yet: nothing to re-send.
        assert_eq!(a.note(&ask(0, 1, 0b100)), Asked::Nothing);
        a.arrive(1);
        assert_eq!(a.note(&ask(0, 1, 0b010)), Asked::Nothing);
        assert_eq!(a.note(&ask(0, 1, 0b100)), Asked::Resend);
        assert_eq!(a.last(), arrived(2, 1));
        // A question also tells that its sender reached the barrier.
        assert_eq!(a.missing_ranks(1), vec![1]);
    }
}
