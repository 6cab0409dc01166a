//! Which rank made the call that differs, from the mismatch records ranks
//! tell each other.
//!
//! A rank only compares its own call with the slots of the peers it receives
//! from, so each record says "`witness` called this where `suspect` sent
//! that": either may be the odd one out. Every record goes, before the
//! failure word is raised, into the segment header of every rank that shares
//! memory with its writer (and over tcp in the abort notice), so a rank woken
//! by the failure reads them all. With this rank's own call they decide: the
//! call most of the known ranks made is the majority, and the record's rank
//! that did not make it is the culprit. A rank woken by a record adds its own
//! comparison (its call against the culprit's), which gives the record's two
//! ranks the third call they lack. When the records and this rank's call
//! cannot tell (the only record compares this rank with another), the rank
//! waits up to a second for more records, unless they already hold every
//! rank's call (two ranks), then reports the pair as it is, saying that
//! which of the two differs is unknown.

use std::time::{Duration, Instant};

use super::core::Core;
use crate::Error;
use crate::plan::signature;
use crate::transport::mismatches;
use streamcomm_types::MismatchNote;

/// How long a rank whose records cannot name the culprit waits for more
/// (unless they already hold every rank's call: then none can come).
const GRACE: Duration = Duration::from_secs(1);

/// The record to report from `notes`, as seen by `rank` whose own call is
/// `ours`, and whether its suspect is known to differ from the majority;
/// `None` without records.
pub(crate) fn resolve(
    notes: &[MismatchNote],
    rank: usize,
    ours: Option<u64>,
) -> Option<(MismatchNote, bool)> {
    let first = *notes.first()?;
    // Each known rank's call (the first record of a rank wins).
    let mut known: Vec<(usize, u64)> = Vec::new();
    let mut add = |r: usize, sig: u64| {
        if !known.iter().any(|&(k, _)| k == r) {
            known.push((r, sig));
        }
    };
    if let Some(sig) = ours {
        add(rank, sig);
    }
    for n in notes {
        add(n.suspect, n.suspect_sig);
        add(n.witness, n.witness_sig);
    }
    known.sort_unstable();
    let call_of = |r: usize| known.iter().find(|&&(k, _)| k == r).map(|&(_, s)| s);
    // The call strictly more known ranks made than any other, by two at least.
    let mut tally: Vec<(u64, usize)> = Vec::new();
    for &(_, sig) in &known {
        match tally.iter_mut().find(|(s, _)| *s == sig) {
            Some((_, n)) => *n += 1,
            None => tally.push((sig, 1)),
        }
    }
    tally.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
    let majority = match tally.as_slice() {
        [(sig, n), rest @ ..] if *n >= 2 && rest.first().is_none_or(|r| r.1 < *n) => *sig,
        _ => return Some((first, false)),
    };
    let culprit = [first.suspect, first.witness]
        .into_iter()
        .chain(known.iter().map(|&(r, _)| r))
        .find(|&r| call_of(r) != Some(majority))?;
    // Its partner in a record, if that one made the majority's call; else
    // the lowest rank that did.
    let partner = notes.iter().find_map(|n| {
        let other = match (n.suspect == culprit, n.witness == culprit) {
            (true, _) => n.witness,
            (_, true) => n.suspect,
            _ => return None,
        };
        (call_of(other) == Some(majority)).then_some(other)
    });
    let witness =
        partner.or_else(|| known.iter().find(|&&(_, s)| s == majority).map(|&(r, _)| r))?;
    Some((
        MismatchNote {
            suspect: culprit,
            suspect_sig: call_of(culprit)?,
            witness,
            witness_sig: majority,
        },
        true,
    ))
}

/// How many ranks' calls `notes` and this rank's own call `ours` tell.
fn known_ranks(notes: &[MismatchNote], rank: usize, ours: Option<u64>) -> usize {
    let mut ranks: Vec<usize> = notes.iter().flat_map(|n| [n.suspect, n.witness]).collect();
    ranks.extend(ours.map(|_| rank));
    ranks.sort_unstable();
    ranks.dedup();
    ranks.len()
}

impl Core {
    /// The mismatch this rank reports during `op` (its own call `ours`), from
    /// the records in its segment; `None` without records. Waits up to
    /// [`GRACE`] for more records while they cannot name the culprit.
    pub(crate) fn mismatch_error(&self, op: &str, ours: Option<u64>) -> Option<Error> {
        let deadline = Instant::now() + GRACE.min(self.config().timeout / 4);
        if let Some(ours) = ours {
            self.compare_with_records(ours);
        }
        loop {
            let notes = mismatches(self.segment().header());
            let (note, confirmed) = resolve(&notes, self.rank(), ours)?;
            let everyone = known_ranks(&notes, self.rank(), ours) >= self.size();
            if confirmed || everyone || Instant::now() >= deadline {
                return Some(signature::mismatch_error(
                    op,
                    self.rank(),
                    note,
                    ours,
                    confirmed,
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Core {
    /// Adds this rank's own comparisons to the records: its call `ours`
    /// against each recorded call that differs from it. The ranks of a
    /// record, which cannot tell from it which of them differs, find here
    /// the third call that decides (over shared memory; a tcp peer hears
    /// only the record its abort notice carried).
    fn compare_with_records(&self, ours: u64) {
        let mut mine = Vec::new();
        for n in mismatches(self.segment().header()) {
            for (r, sig) in [(n.suspect, n.suspect_sig), (n.witness, n.witness_sig)] {
                if r != self.rank() && sig != ours {
                    mine.push(MismatchNote {
                        suspect: r,
                        suspect_sig: sig,
                        witness: self.rank(),
                        witness_sig: ours,
                    });
                }
            }
        }
        for note in mine {
            self.failure().record_everywhere(note);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DataType;
    use crate::plan::signature::recv;

    const N: u64 = 1 << 20;

    fn sig(count: u64) -> u64 {
        recv(DataType::F32, count as usize)
    }

    fn note(suspect: usize, s: u64, witness: usize, w: u64) -> MismatchNote {
        MismatchNote {
            suspect,
            suspect_sig: sig(s),
            witness,
            witness_sig: sig(w),
        }
    }

    /// Ring of 4, rank 2 called 999: rank 3 refuses rank 2's slot and rank 2
    /// refuses rank 1's. Every rank, whatever records it has, names rank 2
    /// once it knows a third call.
    #[test]
    fn the_odd_rank_is_named_from_any_view() {
        let by3 = note(2, 999, 3, N);
        let by2 = note(1, N, 2, 999);
        let expect = |r: Option<(MismatchNote, bool)>| {
            let (n, confirmed) = r.unwrap();
            assert!(confirmed);
            assert_eq!((n.suspect, n.suspect_sig), (2, sig(999)));
            assert_eq!(n.witness_sig, sig(N));
            assert_ne!(n.witness, 2);
        };
        for rank in 0..4 {
            let ours = Some(sig(if rank == 2 { 999 } else { N }));
            expect(resolve(&[by3, by2], rank, ours));
            expect(resolve(&[by2, by3], rank, ours));
            if rank != 2 && rank != 1 {
                expect(resolve(&[by2], rank, ours));
            }
            if rank != 2 && rank != 3 {
                expect(resolve(&[by3], rank, ours));
            }
        }
        // Rank 2's witness is its partner in the record when that one agrees
        // with the majority.
        assert_eq!(resolve(&[by3], 0, Some(sig(N))).unwrap().0.witness, 3);
    }

    #[test]
    fn a_pair_alone_is_reported_as_unknown() {
        let n = note(0, 10, 1, 12);
        assert_eq!(resolve(&[n], 1, Some(sig(12))), Some((n, false)));
        assert_eq!(resolve(&[n], 5, None), Some((n, false)));
        // Three different calls: no majority.
        assert_eq!(resolve(&[n], 2, Some(sig(11))), Some((n, false)));
        assert_eq!(resolve(&[], 0, Some(sig(1))), None);
    }

    #[test]
    fn known_ranks_count_each_rank_once() {
        let n = note(0, 10, 1, 12);
        assert_eq!(known_ranks(&[n, n], 1, Some(sig(12))), 2);
        assert_eq!(known_ranks(&[n], 2, Some(sig(12))), 3);
        assert_eq!(known_ranks(&[n], 2, None), 2);
    }

    #[test]
    fn a_third_call_confirms() {
        let n = note(0, 10, 1, 12);
        let (r, confirmed) = resolve(&[n], 2, Some(sig(10))).unwrap();
        assert!(confirmed);
        assert_eq!((r.suspect, r.suspect_sig, r.witness), (1, sig(12), 0));
    }
}
