//! The engine thread's loop (see the module docs of [`super`]).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::source::{Ctx, FailureSink, PollSet, Source};
use super::{Shared, Work};

/// How long a closing communicator keeps sending what its sources staged.
const DRAIN: Duration = Duration::from_secs(10);
/// Longest sleep of an engine whose sources set no bound: a kick, a job or
/// a descriptor ends it at once; this only bounds a lost wake-up.
const IDLE_WAIT: Duration = Duration::from_millis(100);
/// Longest sleep while closing (the sockets drain between looks).
const CLOSING_WAIT: Duration = Duration::from_millis(1);

/// Runs until the engine is stopped, then flushes and closes the sources.
pub(super) fn run(shared: Arc<Shared>, sources: Vec<Box<dyn Source>>, sink: Arc<dyn FailureSink>) {
    let sources = Rc::new(RefCell::new(sources));
    // While a job waits, its waits tick the sources between their sleeps.
    let (theirs, their_shared, their_sink) = (sources.clone(), shared.clone(), sink.clone());
    crate::wait::set_thread_slice_hook(Some(Box::new(move || {
        if let Ok(mut sources) = theirs.try_borrow_mut() {
            let ctx = Ctx {
                stopping: their_shared.stop.load(Ordering::Acquire),
                abort: &their_shared.abort,
                sink: &*their_sink,
            };
            for s in sources.iter_mut() {
                s.tick(&ctx);
            }
        }
    })));
    drive(&shared, &sources, &*sink);
    // The sources are dropped at the end of this function, not in the
    // thread's exit (the hook holds them too).
    crate::wait::set_thread_slice_hook(None);
}

/// The loop of [`run`].
fn drive(shared: &Shared, sources: &RefCell<Vec<Box<dyn Source>>>, sink: &dyn FailureSink) {
    let kick = &shared.kick;
    let mut fds = PollSet::default();
    let mut bases = Vec::new();
    let mut aborted = Vec::new();
    let mut drain_deadline: Option<Instant> = None;
    // Armed: the sleep is announced and the descriptors are set.
    let mut armed = false;
    let mut kicked = false;
    let mut sleep_for = IDLE_WAIT;
    loop {
        // Jobs run with the sources free for their waits' ticks.
        let mut moved = run_jobs(shared, sources);
        let mut sources = sources.borrow_mut();
        // A source attached since the last arming has no descriptors yet.
        bases.resize(sources.len(), usize::MAX);
        aborted.resize(sources.len(), false);
        // An abort notice goes out before anything else, a goodbye
        // included: peers must learn that we failed, not that we left.
        if let Some((failed, note)) = shared.abort.get() {
            for (s, done) in sources.iter_mut().zip(&mut aborted) {
                if !*done {
                    *done = s.abort(failed, note);
                }
            }
        }
        let stopping = shared.stop.load(Ordering::Acquire);
        if stopping {
            let deadline = *drain_deadline.get_or_insert_with(|| Instant::now() + DRAIN);
            let flushed = sources.iter_mut().all(|s| s.flushed());
            if flushed || Instant::now() >= deadline {
                for s in sources.iter_mut() {
                    s.close();
                }
                return;
            }
        }
        let ctx = Ctx {
            stopping,
            abort: &shared.abort,
            sink,
        };
        for (s, &base) in sources.iter_mut().zip(&bases) {
            fds.begin(base);
            moved |= s.progress(&ctx, &fds);
        }
        fds.forget();
        if moved {
            if armed {
                armed = false;
                kick.set_sleeping(false);
            }
            continue;
        }
        if !armed {
            // About to sleep: clear the kick that woke us (read only now,
            // so that after a wake-up the work is served first), announce
            // the sleep, let every source arm its wake-ups, then go round
            // once more, so work that came before the arming is seen now
            // rather than after the sleep.
            if std::mem::take(&mut kicked) {
                kick.drain();
            }
            kick.set_sleeping(true);
            fds.clear(kick.raw_fd());
            let mut timeout = if stopping { CLOSING_WAIT } else { IDLE_WAIT };
            for (s, base) in sources.iter_mut().zip(&mut bases) {
                *base = fds.len();
                fds.begin(*base);
                if let Some(t) = s.arm(&mut fds) {
                    timeout = timeout.min(t);
                }
            }
            armed = true;
            sleep_for = timeout;
            if timeout.is_zero() {
                // A source has work that no descriptor will announce.
                armed = false;
                kick.set_sleeping(false);
            }
            continue;
        }
        kicked |= fds.sleep(sleep_for);
        armed = false;
        kick.set_sleeping(false);
    }
}

/// Runs the jobs posted so far and takes the sources attached; true if
/// there were any.
fn run_jobs(shared: &Shared, sources: &RefCell<Vec<Box<dyn Source>>>) -> bool {
    let mut ran = false;
    loop {
        let work = shared
            .work
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front();
        match work {
            None => return ran,
            Some(Work::Job(job)) => job(),
            Some(Work::Attach(source)) => sources.borrow_mut().push(source),
        }
        ran = true;
    }
}
