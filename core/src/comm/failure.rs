//! A communicator's failure: one record of who failed, how, and who
//! learned it, and the one way every layer raises it and reads it.
//!
//! A failure must reach three audiences, each by its own path:
//! - this rank's later calls, which return the stored error;
//! - this rank's waits and those of every peer sharing memory with it,
//!   which watch the *failure word* in their segment's header (with the
//!   mismatch records written beside it before the word is raised);
//! - peers over tcp and verbs, which the progress engine tells with an
//!   abort notice.
//!
//! [`FailureState::fail`] does all three, once, whoever calls it: a call
//! that failed, the engine (a broken connection, a peer's notice), the
//! peer watch (a process gone), `abort()`. Nothing else writes them.
//! Readers ask [`FailureState::failure`] (the record) or
//! [`FailureState::raised`] (one load, for fast paths).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::engine::{EngineHandle, FailureSink};
use crate::transport::{Connection, Segment, raise_failure, record_mismatch};
use crate::{Error, Result};
use streamcomm_types::MismatchNote;

/// Who learned of a failure on this rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Learned {
    /// A call on this rank failed (a timeout, a mismatch, a bad slot, a
    /// CUDA error).
    Call,
    /// The progress engine: a tcp or verbs connection broke, or a peer's
    /// abort notice arrived.
    Engine,
    /// The peer watch: a peer's process on this host is gone.
    PeerWatch,
    /// `abort()` on this rank.
    Abort,
    /// A peer raised the failure word while this rank was idle.
    FailureWord,
}

/// How a communicator failed.
#[derive(Clone, Debug)]
pub(crate) struct Failure {
    /// The rank at fault (this rank when none is blamed).
    pub culprit: usize,
    /// What went wrong, as later calls report it.
    pub error: Error,
    /// Who on this rank learned it first.
    pub learned: Learned,
    /// When.
    pub at: Instant,
}

/// The address of this rank's failure word, resolved once (every check of
/// every call reads it).
struct WordAddr(NonNull<AtomicU32>);

// SAFETY: the address is of an `AtomicU32` (itself `Send` and `Sync`) in a
// shared mapping that the `FailureState` holding it keeps mapped (`own`);
// it is only read through `FailureState::word`, never freed or moved.
unsafe impl Send for WordAddr {}
// SAFETY: as above: shared use is atomic.
unsafe impl Sync for WordAddr {}

/// The failure state of one rank's communicator (see the module doc).
pub(crate) struct FailureState {
    rank: usize,
    first: Mutex<Option<Failure>>,
    /// This rank's segment: the failure word its own waits watch.
    own: Arc<Segment>,
    /// The failure word in `own`'s header.
    word: WordAddr,
    /// The segments of the peers that share memory with this rank.
    peers: Vec<Arc<Segment>>,
    /// Tells the peers over tcp and verbs.
    engine: EngineHandle,
}

impl FailureState {
    /// The failure state of `rank`, whose segment is `own`, whose shared-
    /// memory peers' segments are in `peers`, and whose engine is `engine`.
    pub(crate) fn new(
        rank: usize,
        own: &Arc<Segment>,
        peers: &[Option<Connection>],
        engine: EngineHandle,
    ) -> FailureState {
        FailureState {
            rank,
            first: Mutex::new(None),
            own: own.clone(),
            word: WordAddr(NonNull::from(&own.header().failed_by)),
            peers: peers
                .iter()
                .flatten()
                .filter_map(|c| c.peer_segment().cloned())
                .collect(),
            engine,
        }
    }

    /// Records `e` (if it is the first failure) as learned by `learned`,
    /// and tells every peer, so that their waits end now instead of at
    /// their timeout. Peers are told who is at fault, not who noticed.
    pub(crate) fn fail(&self, e: &Error, learned: Learned) {
        self.fail_blaming(e, e.culprit().unwrap_or(self.rank), learned);
    }

    /// [`FailureState::fail`], naming `culprit` in the failure word peers
    /// read: the rank at fault where `e` cannot say (a timeout waiting for
    /// that rank).
    pub(crate) fn fail_blaming(&self, e: &Error, culprit: usize, learned: Learned) {
        {
            let mut first = self.first.lock().unwrap_or_else(|p| p.into_inner());
            if first.is_none() {
                tracing::warn!(rank = self.rank, error = %e, ?learned, "communicator failed");
                *first = Some(Failure {
                    culprit,
                    error: e.clone(),
                    learned,
                    at: Instant::now(),
                });
            }
        }
        let note = note_to_tell(e);
        if let Some(note) = note {
            self.record_everywhere(note);
        }
        self.raise(culprit);
        self.engine.notify_abort(culprit, note);
    }

    /// A peer's mismatch record, heard over tcp: written where every wait
    /// woken by it looks, and the failure word raised. No error is stored:
    /// each failing call builds its own from the records, with its own call.
    pub(crate) fn heard(&self, note: MismatchNote) {
        self.record_everywhere(note);
        self.raise(note.suspect);
    }

    /// A mismatch this rank found in a slot: the record goes to every peer
    /// (here, over shared memory, and in the engine's abort notice), and
    /// the failure word names its suspect. No error is stored, as for
    /// [`FailureState::heard`].
    pub(crate) fn mismatched(&self, note: MismatchNote) {
        self.record_everywhere(note);
        self.raise(note.suspect);
        self.engine.notify_abort(note.suspect, Some(note));
    }

    /// Writes `note` into this rank's segment and every shared-memory
    /// peer's, before any failure word is raised.
    pub(crate) fn record_everywhere(&self, note: MismatchNote) {
        record_mismatch(self.own.header(), note);
        for seg in &self.peers {
            record_mismatch(seg.header(), note);
        }
    }

    fn raise(&self, culprit: usize) {
        raise_failure(self.own.header(), culprit);
        for seg in &self.peers {
            raise_failure(seg.header(), culprit);
        }
    }

    /// The failure, once recorded.
    pub(crate) fn failure(&self) -> Option<Failure> {
        self.first.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The stored error, if the communicator has failed. One load while it
    /// has not (inlined into the caller): the failure word is raised after
    /// the record is stored.
    #[inline]
    pub(crate) fn error(&self) -> Option<Error> {
        if !self.raised() {
            return None;
        }
        self.stored_error()
    }

    /// The stored error under the record's lock: [`FailureState::error`]
    /// once the word is raised.
    #[cold]
    fn stored_error(&self) -> Option<Error> {
        self.first
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|f| f.error.clone())
    }

    /// The stored error, as a result (one load while there is none).
    ///
    /// # Errors
    /// The stored error.
    #[inline]
    pub(crate) fn check(&self) -> Result<()> {
        self.error().map_or(Ok(()), Err)
    }

    /// True once this rank's failure word is raised: by its own failure
    /// (after the record), a peer's, or an abort. One load, where
    /// [`FailureState::failure`] takes a lock: for fast paths, which leave
    /// the error to the full path.
    #[inline]
    pub(crate) fn raised(&self) -> bool {
        self.word().load(Ordering::Acquire) != 0
    }

    /// The rank named by the raised failure word, if it is raised.
    pub(crate) fn raised_by(&self) -> Option<usize> {
        self.word()
            .load(Ordering::Acquire)
            .checked_sub(1)
            .map(|r| r as usize)
    }

    /// The failure word every wait of this rank watches.
    #[inline]
    pub(crate) fn word(&self) -> &AtomicU32 {
        // SAFETY: the word lies in the header of `own`'s mapping, which
        // `own` keeps mapped for as long as `self` lives (see `WordAddr`).
        unsafe { self.word.0.as_ref() }
    }
}

/// The engine's failures go to the same record.
impl FailureSink for FailureState {
    fn fail(&self, error: Error) {
        match error.mismatch_note() {
            Some(note) => self.heard(note),
            None => FailureState::fail(self, &error, Learned::Engine),
        }
    }
}

/// The mismatch record this rank tells its peers for `e`: its own call
/// compared with the culprit's when it made one that differs (a third call
/// for the two ranks of the record it was woken by, which over tcp hear no
/// other), else the record `e` tells.
fn note_to_tell(e: &Error) -> Option<MismatchNote> {
    let note = e.mismatch_note()?;
    if let Error::Mismatch(m) = e
        && let Some(ours) = m.ours.as_ref()
    {
        let outside = m.rank != m.culprit && m.rank != m.witness;
        if outside && ours.sig != m.culprit_call.sig {
            return Some(MismatchNote {
                suspect: m.culprit,
                suspect_sig: m.culprit_call.sig,
                witness: m.rank,
                witness_sig: ours.sig,
            });
        }
    }
    Some(note)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{Communicator, Config};

    /// Two ranks (threads of this process) of one communicator, by rank,
    /// with a 10 s timeout so that nothing here can wait long.
    fn two_ranks() -> Vec<Communicator> {
        let config = Config {
            timeout: Duration::from_secs(10),
            ..Config::default()
        };
        crate::comm::blocking::tests::on_ranks_with(2, config, Ok)
    }

    /// Every later failure, by each way one reaches the record (a call,
    /// `fail_blaming`, `abort()`, the engine), leaves the first record as
    /// it was: its error, culprit, learner and time, and the error later
    /// calls return. One thread: no timing decides which failure is first.
    #[test]
    fn a_later_failure_leaves_the_first_record_as_it_was() {
        let ranks = two_ranks();
        let state = ranks[0].inner.core.failure();
        let first = Error::RemoteFailed {
            peer: 1,
            op: "all_reduce #7".into(),
            cause: "its process is gone".into(),
        };
        state.fail(&first, Learned::PeerWatch);
        let recorded = state.failure().expect("the first failure is recorded");
        assert_eq!(recorded.culprit, 1, "the first failure blames rank 1");

        let late = Error::Timeout {
            op: "barrier #8".into(),
            what: "rank 1's arrival".into(),
            waited_ms: 10,
        };
        state.fail(&late, Learned::Call);
        state.fail_blaming(&late, 0, Learned::Call);
        ranks[0].abort();
        FailureSink::fail(&**state, Error::Aborted("a peer's abort notice".into()));

        let kept = state.failure().expect("a failure stays recorded");
        assert_eq!(
            kept.error.to_string(),
            first.to_string(),
            "a later failure overwrote the first one's error"
        );
        assert_eq!(
            kept.culprit, 1,
            "a later failure overwrote the first one's culprit"
        );
        assert_eq!(
            kept.learned,
            Learned::PeerWatch,
            "a later failure overwrote who learned the first one"
        );
        assert_eq!(
            kept.at, recorded.at,
            "a later failure overwrote when the first one was learned"
        );
        let e = state
            .check()
            .expect_err("a failed communicator's check fails");
        assert_eq!(
            e.to_string(),
            first.to_string(),
            "later calls must return the first failure's error"
        );
        assert_eq!(
            ranks[0].async_error().map(|e| e.to_string()),
            Some(first.to_string()),
            "async_error must report the first failure"
        );
        assert_eq!(
            state.raised_by(),
            Some(1),
            "the failure word names the first culprit"
        );
    }
}
