//! Resources of device operations that outlive the call that enqueued them,
//! and the one rule for letting them go: never on a driver thread.
//!
//! A stream (outside capture) or a captured graph keeps an operation's
//! resources (staging memory, windows, completion words) until the work can
//! no longer run, then lets go of them on one of the driver's own threads:
//! a host function, or a graph user object's destructor. Dropping them
//! there would call the driver (freeing pinned or device memory, releasing
//! the context) from a thread on which the driver refuses every call
//! (`CUDA_ERROR_NOT_PERMITTED`) or may deadlock. So a driver thread only
//! *hands them over*: a [`Release`] takes its resources to the
//! communicator's [`Graveyard`], and application threads drop what the
//! graveyard holds ([`Graveyard::bury`]).
//!
//! A release holds the graveyard weakly, so the last reference to the
//! graveyard (and whatever it holds) is never dropped on a driver thread
//! either. The graveyard counts the releases not yet handed over, and the
//! communicator's drop waits for them, bounded ([`Graveyard::settle`]); a
//! release that comes after the communicator is gone (a graph kept past
//! it, which the docs rule out) leaks its resources rather than free them
//! under the driver.

use std::any::Any;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Resources owned by work in flight.
pub(crate) type Owned = Box<dyn Any + Send>;

/// Releases handed over after their graveyard was gone, in this process:
/// their resources were leaked.
static ORPHANED: AtomicU64 = AtomicU64::new(0);

/// Resources of finished device operations, waiting to be dropped on an
/// application thread.
#[derive(Default)]
pub(crate) struct Graveyard {
    dead: Mutex<Vec<Owned>>,
    /// Releases made and not yet dropped.
    pending: AtomicUsize,
}

impl Graveyard {
    /// A release of `owner`, to be dropped on a driver thread once the work
    /// that uses it can no longer run: it hands `owner` over to this
    /// graveyard instead of dropping it there.
    pub(crate) fn release(self: &Arc<Self>, owner: Owned) -> Release {
        self.pending.fetch_add(1, Ordering::AcqRel);
        Release {
            graveyard: Arc::downgrade(self),
            owner: Some(owner),
        }
    }

    /// Drops what was handed over (call from an application thread).
    pub(crate) fn bury(&self) -> usize {
        let dead = std::mem::take(&mut *self.dead.lock().unwrap_or_else(|p| p.into_inner()));
        let n = dead.len();
        drop(dead);
        n
    }

    /// True when something handed over waits to be dropped.
    pub(crate) fn has_dead(&self) -> bool {
        !self
            .dead
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// Releases made and not yet handed over.
    pub(crate) fn pending(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }

    /// Waits, at most `within`, until every release was handed over,
    /// burying with `bury` (which may refuse to free while a stream
    /// captures) as they come. True when none is pending.
    pub(crate) fn settle(&self, within: Duration, bury: impl Fn(&Self)) -> bool {
        let start = Instant::now();
        loop {
            bury(self);
            if self.pending() == 0 {
                return true;
            }
            if start.elapsed() >= within {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Releases handed over after their graveyard was gone, in this process
    /// (their resources leaked).
    #[cfg(test)]
    pub(crate) fn orphaned() -> u64 {
        ORPHANED.load(Ordering::Relaxed)
    }
}

/// Resources on their way to a [`Graveyard`]: dropping a release (on any
/// thread, a driver's included) hands them over; it never drops them.
pub(crate) struct Release {
    graveyard: Weak<Graveyard>,
    owner: Option<Owned>,
}

impl Drop for Release {
    fn drop(&mut self) {
        let Some(owner) = self.owner.take() else {
            return;
        };
        match self.graveyard.upgrade() {
            Some(graveyard) => {
                graveyard
                    .dead
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(owner);
                // After the push: a settle that sees no release pending
                // buries this owner. The strong reference taken above may
                // then be the last one, but the graveyard it drops is
                // empty.
                graveyard.pending.fetch_sub(1, Ordering::AcqRel);
            }
            None => {
                // No application thread will ever bury it, and dropping it
                // here would call the driver from its own thread.
                std::mem::forget(owner);
                ORPHANED.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    "a device operation's resources were released after their communicator \
                     was dropped (a graph kept past it?): leaked, not freed"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// Records on which thread it was dropped.
    struct Marker(Arc<Mutex<Option<std::thread::ThreadId>>>);

    impl Drop for Marker {
        fn drop(&mut self) {
            *self.0.lock().unwrap() = Some(std::thread::current().id());
        }
    }

    #[test]
    fn a_release_dropped_on_another_thread_is_buried_on_the_settling_thread() {
        let graveyard = Arc::new(Graveyard::default());
        let dropped_on = Arc::new(Mutex::new(None));
        let release = graveyard.release(Box::new(Marker(dropped_on.clone())));
        assert_eq!(graveyard.pending(), 1);
        let driver = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            drop(release);
        });
        assert!(graveyard.settle(Duration::from_secs(10), |g| {
            g.bury();
        }));
        driver.join().unwrap();
        assert_eq!(graveyard.pending(), 0);
        assert_eq!(
            *dropped_on.lock().unwrap(),
            Some(std::thread::current().id()),
            "the owner must be dropped by the thread that settles, not the releasing one"
        );
    }

    #[test]
    fn settle_is_bounded_and_a_late_release_leaks_instead_of_dropping() {
        let graveyard = Arc::new(Graveyard::default());
        let dropped = Arc::new(AtomicBool::new(false));
        struct Flag(Arc<AtomicBool>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let release = graveyard.release(Box::new(Flag(dropped.clone())));
        let start = Instant::now();
        assert!(!graveyard.settle(Duration::from_millis(50), |g| {
            g.bury();
        }));
        assert!(start.elapsed() >= Duration::from_millis(50));
        let before = Graveyard::orphaned();
        drop(graveyard);
        drop(release);
        assert!(
            !dropped.load(Ordering::SeqCst),
            "a release after its graveyard is gone must not drop its owner"
        );
        assert!(Graveyard::orphaned() > before);
    }
}
