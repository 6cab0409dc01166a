//! Leaving cleanly: the rank's departed word, raised when the user's last
//! handle of the communicator goes.
//!
//! Peers whose watchdogs find this rank's process gone take it for a crash
//! unless the word is raised (`comm::peer_watch`, the direct path's window
//! watch): a rank that finished may exit while a peer finishes its own last
//! operation. The word is raised when the last clone of the `Communicator`
//! (or the `CudaComm` holding one) is dropped, on the thread that drops it,
//! not when the core goes: an engine source or a stream task may hold the
//! core a moment longer, on a thread that the process's exit does not wait
//! for, and a process exiting then would leave without the word.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::comm::core::Core;

/// Shared by a communicator's user handles only; raises the departed word
/// when the last goes, unless the rank failed or the thread is unwinding.
pub(crate) struct Departure {
    core: Arc<Core>,
}

impl Departure {
    /// The departure of `core`'s rank, for its first user handle.
    pub(crate) fn new(core: Arc<Core>) -> Departure {
        Departure { core }
    }
}

impl Drop for Departure {
    fn drop(&mut self) {
        // A failed rank, or one unwinding from a panic, did not leave cleanly.
        if !std::thread::panicking() && self.core.failure().error().is_none() {
            self.core
                .segment()
                .header()
                .departed
                .store(1, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::blocking::tests::on_ranks;
    use crate::config::TransportChoice;

    fn departed(core: &Core) -> bool {
        core.segment().header().departed.load(Ordering::Acquire) == 1
    }

    /// The word goes up with the last handle even while something else (as
    /// an engine source does for a moment) still holds the core; not with an
    /// earlier clone, and never for a rank that failed.
    #[test]
    fn the_last_handle_raises_the_word_while_the_core_lives_on() {
        let seen = on_ranks(2, TransportChoice::Auto, |comm| {
            let core = comm.inner.core.clone();
            let clone = comm.clone();
            drop(comm);
            let after_a_clone = departed(&core);
            drop(clone);
            Ok((after_a_clone, departed(&core)))
        });
        assert_eq!(seen, vec![(false, true); 2]);
        let failed = on_ranks(2, TransportChoice::Auto, |comm| {
            let core = comm.inner.core.clone();
            comm.abort();
            drop(comm);
            Ok(departed(&core))
        });
        assert_eq!(failed, vec![false; 2]);
    }
}
