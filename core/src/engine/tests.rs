use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::AtomicUsize;
use std::sync::mpsc;
use std::time::Duration;

use super::*;

/// A sink that counts failures.
#[derive(Default)]
struct Count(AtomicUsize);

impl FailureSink for Count {
    fn fail(&self, _error: Error) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A source reading bytes from a pipe, failing at a 0xff byte, reporting
/// what it saw through a channel.
struct PipeSource {
    rx: OwnedFd,
    seen: mpsc::Sender<String>,
}

impl Source for PipeSource {
    fn progress(&mut self, ctx: &Ctx<'_>, fds: &PollSet) -> bool {
        if fds.revents(0) & libc::POLLIN == 0 {
            return false;
        }
        let mut b = [0u8; 1];
        // SAFETY: reading one byte into a valid buffer from our pipe.
        let n = unsafe { libc::read(self.rx.as_raw_fd(), b.as_mut_ptr().cast(), 1) };
        if n == 1 && b[0] == 0xff {
            ctx.fail(Error::Aborted("bad byte".into()), 3);
        }
        let _ = self.seen.send(format!("read {n}"));
        n == 1
    }

    fn arm(&mut self, fds: &mut PollSet) -> Option<Duration> {
        fds.add(self.rx.as_raw_fd(), libc::POLLIN);
        None
    }

    fn abort(&mut self, failed: usize, _note: Option<streamcomm_types::MismatchNote>) -> bool {
        let _ = self.seen.send(format!("abort {failed}"));
        true
    }

    fn close(&mut self) {
        let _ = self.seen.send("close".into());
    }
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into a valid array.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK) };
    assert_eq!(r, 0);
    // SAFETY: both descriptors are fresh and ours.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

fn write_byte(fd: &OwnedFd, b: u8) {
    // SAFETY: writing one byte from a valid buffer to our pipe.
    let n = unsafe { libc::write(fd.as_raw_fd(), [b].as_ptr().cast(), 1) };
    assert_eq!(n, 1);
}

const T: Duration = Duration::from_secs(10);

#[test]
fn drives_a_source_runs_jobs_in_order_and_reports_failures_once() {
    let (rx, tx) = pipe();
    let (seen_tx, seen) = mpsc::channel();
    let count = Arc::new(Count::default());
    let engine = Engine::new().unwrap();
    let source = PipeSource { rx, seen: seen_tx };
    engine
        .start(7, vec![Box::new(source)], count.clone())
        .unwrap();
    // A descriptor wakes the sleeping engine.
    write_byte(&tx, 1);
    assert_eq!(seen.recv_timeout(T).unwrap(), "read 1");
    // Jobs run in the order posted.
    let (done_tx, done) = mpsc::channel();
    for i in 0..5 {
        let d = done_tx.clone();
        engine
            .handle()
            .post(Box::new(move || d.send(i).unwrap()))
            .unwrap();
    }
    let order: Vec<i32> = (0..5).map(|_| done.recv_timeout(T).unwrap()).collect();
    assert_eq!(order, vec![0, 1, 2, 3, 4]);
    // A failure goes to the sink and aborts, naming the culprit.
    write_byte(&tx, 0xff);
    assert_eq!(seen.recv_timeout(T).unwrap(), "read 1");
    assert_eq!(seen.recv_timeout(T).unwrap(), "abort 3");
    assert_eq!(count.0.load(Ordering::SeqCst), 1);
    // Drop stops the thread after closing its sources.
    drop(engine);
    assert_eq!(seen.recv_timeout(T).unwrap(), "close");
}

#[test]
fn an_engine_dropped_by_its_own_job_stops_without_deadlock() {
    let engine = Arc::new(Mutex::new(Some(Engine::new().unwrap())));
    let (seen_tx, seen) = mpsc::channel();
    let (rx, _tx) = pipe();
    {
        let e = engine.lock().unwrap();
        let e = e.as_ref().unwrap();
        e.start(
            0,
            vec![Box::new(PipeSource { rx, seen: seen_tx })],
            Arc::new(Count::default()),
        )
        .unwrap();
    }
    let handle = engine.lock().unwrap().as_ref().unwrap().handle().clone();
    let mine = engine.clone();
    handle
        .post(Box::new(move || drop(mine.lock().unwrap().take())))
        .unwrap();
    assert_eq!(seen.recv_timeout(T).unwrap(), "close");
}

/// A source that counts its ticks.
struct Ticks(Arc<AtomicUsize>);

impl Source for Ticks {
    fn progress(&mut self, _ctx: &Ctx<'_>, _fds: &PollSet) -> bool {
        false
    }

    fn tick(&mut self, _ctx: &Ctx<'_>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    fn arm(&mut self, _fds: &mut PollSet) -> Option<Duration> {
        None
    }
}

#[test]
fn starts_at_the_first_job_and_ticks_sources_while_a_job_waits() {
    let engine = Engine::new().unwrap();
    let ticks = Arc::new(AtomicUsize::new(0));
    engine
        .start(1, Vec::new(), Arc::new(Count::default()))
        .unwrap();
    // No source: no thread until work comes.
    assert!(matches!(
        &*engine.handle().shared.thread.lock().unwrap(),
        Thread::Pending { .. }
    ));
    engine
        .handle()
        .attach(Box::new(Ticks(ticks.clone())))
        .unwrap();
    // A job that waits 100 ms on a notifier nobody notifies: the engine's
    // source keeps ticking between the wait's sleeps (2 ms slices).
    let (done_tx, done) = mpsc::channel();
    engine
        .handle()
        .post(Box::new(move || {
            let n = crate::wait::Notifier::new();
            let policy = crate::wait::WaitPolicy::new(0, Duration::from_millis(100));
            let r = n.wait_until(&policy, || None::<()>);
            done_tx.send(r).unwrap();
        }))
        .unwrap();
    let r = done.recv_timeout(T).unwrap();
    assert!(matches!(r, Err(crate::wait::WaitError::Timeout(_))));
    let n = ticks.load(Ordering::SeqCst);
    assert!(n >= 10, "only {n} ticks during a 100 ms wait on the engine");
}
