//! A context's scheduler: its streams, the legacy stream's implicit
//! synchronisation, and a bounded set of hardware queues that execute work.
//!
//! Each context has `CUDA_DEVICE_MAX_CONNECTIONS` hardware queues, each a
//! FIFO drained by one worker thread. Streams are assigned to queues
//! round-robin at creation (the legacy stream takes queue 0), so with more
//! streams than queues, streams share a queue and inherit false dependencies:
//! a memory-operation wait at the head of a queue blocks every stream behind
//! it, as on the device. Everything is enqueued under one lock and a
//! dependency always names earlier work, so event and legacy-stream
//! dependencies alone can never deadlock; only memory-operation waits (whose
//! ordering CUDA does not see) can.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

use crate::capture::Capture;
use crate::config::config;
use crate::error::{Res, SUCCESS};
use crate::exec::{self, Work};
use crate::guard::say;

/// Locks `m`, ignoring poisoning (no panic leaves our state half-updated in a
/// way a later call could not cope with).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A primary context (never freed: a retired one stays allocated, inert).
pub struct Context {
    /// Device ordinal.
    pub ordinal: usize,
    legacy: OnceLock<Arc<Stream>>,
    queues: Vec<Arc<HwQueue>>,
    next_queue: AtomicUsize,
    /// Serialises enqueueing across the context's streams.
    sched: Mutex<()>,
    /// Streams created in this context and not destroyed.
    pub streams: Mutex<Vec<Arc<Stream>>>,
    progress: Mutex<()>,
    progressed: Condvar,
    /// The first device fault (a `CUresult`), 0 while healthy.
    sticky: AtomicU32,
}

/// A stream: an ordered sequence of work on one hardware queue.
pub struct Stream {
    /// The owning context.
    pub ctx: &'static Context,
    /// The handle value (0 for the legacy stream).
    pub handle: usize,
    /// True for the legacy (NULL) stream.
    pub legacy: bool,
    /// False for `CU_STREAM_NON_BLOCKING` streams, which never synchronise
    /// with the legacy stream.
    pub blocking: bool,
    /// Index of the hardware queue the stream runs on.
    pub queue: usize,
    /// `cuStreamCreateWithPriority`'s priority (recorded only).
    pub priority: i32,
    /// Sequence number of the last operation enqueued.
    pub enqueued: AtomicU64,
    /// Sequence number of the last operation completed.
    pub done: AtomicU64,
    /// The capture this stream records into, if any.
    pub capture: Mutex<Option<Arc<Capture>>>,
}

/// Work on a stream must not start before `stream` has completed `seq`.
#[derive(Clone)]
pub struct Dep {
    /// The stream depended on.
    pub stream: Arc<Stream>,
    /// Its sequence number.
    pub seq: u64,
}

impl Dep {
    /// True once the dependency is satisfied.
    pub fn is_done(&self) -> bool {
        self.stream.done.load(Ordering::Acquire) >= self.seq
    }
}

/// One enqueued operation.
struct Op {
    stream: Arc<Stream>,
    seq: u64,
    deps: Vec<Dep>,
    work: Work,
}

/// A hardware queue: a FIFO of operations drained by one worker thread.
struct HwQueue {
    ops: Mutex<VecDeque<Op>>,
    ready: Condvar,
}

impl Context {
    /// A fresh context for device `ordinal`, leaked (contexts live for the
    /// process).
    pub fn create(ordinal: usize) -> &'static Context {
        let n = config().max_connections;
        let ctx: &'static Context = Box::leak(Box::new(Context {
            ordinal,
            legacy: OnceLock::new(),
            queues: (0..n)
                .map(|_| {
                    Arc::new(HwQueue {
                        ops: Mutex::new(VecDeque::new()),
                        ready: Condvar::new(),
                    })
                })
                .collect(),
            next_queue: AtomicUsize::new(0),
            sched: Mutex::new(()),
            streams: Mutex::new(Vec::new()),
            progress: Mutex::new(()),
            progressed: Condvar::new(),
            sticky: AtomicU32::new(SUCCESS),
        }));
        for (i, q) in ctx.queues.iter().enumerate() {
            let q = q.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("cuda-standin-q{i}"))
                .spawn(move || worker(ctx, q));
            if let Err(e) = spawned {
                say(&format!("cannot start hardware queue {i}: {e}"));
            }
        }
        let _ = ctx.legacy.set(ctx.new_stream(0, true, true, 0));
        ctx
    }

    /// The legacy (NULL) stream.
    pub fn legacy(&self) -> &Arc<Stream> {
        self.legacy.get().expect("set at creation")
    }

    /// A new stream on the next hardware queue (round-robin).
    pub fn new_stream(
        &'static self,
        handle: usize,
        legacy: bool,
        blocking: bool,
        priority: i32,
    ) -> Arc<Stream> {
        let queue = self.next_queue.fetch_add(1, Ordering::Relaxed) % self.queues.len();
        Arc::new(Stream {
            ctx: self,
            handle,
            legacy,
            blocking,
            queue,
            priority,
            enqueued: AtomicU64::new(0),
            done: AtomicU64::new(0),
            capture: Mutex::new(None),
        })
    }

    /// The sticky error, if a device fault happened.
    pub fn check_sticky(&self) -> Res<()> {
        match self.sticky.load(Ordering::Acquire) {
            SUCCESS => Ok(()),
            code => Err(code),
        }
    }

    /// Records a device fault: every later call in the context fails with it.
    pub fn fault(&self, code: u32, what: &str) {
        if self
            .sticky
            .compare_exchange(SUCCESS, code, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            say(&format!(
                "device fault on context {}: {what}; the context is now unusable (error {code})",
                self.ordinal
            ));
        }
    }

    /// Appends `work` to `stream` (not capturing) after `deps` and, for the
    /// legacy stream and blocking streams, after the implicit legacy-stream
    /// dependencies. Returns the operation's sequence number.
    pub fn enqueue(&self, stream: &Arc<Stream>, work: Work, mut deps: Vec<Dep>) -> u64 {
        let _order = lock(&self.sched);
        if stream.legacy {
            for s in lock(&self.streams).iter().filter(|s| s.blocking) {
                push_pending(&mut deps, s);
            }
        } else if stream.blocking {
            push_pending(&mut deps, self.legacy());
        }
        let seq = stream.enqueued.fetch_add(1, Ordering::AcqRel) + 1;
        let q = &self.queues[stream.queue];
        lock(&q.ops).push_back(Op {
            stream: stream.clone(),
            seq,
            deps,
            work,
        });
        q.ready.notify_one();
        seq
    }

    /// The dependency "everything enqueued on `stream` so far".
    pub fn tail(stream: &Arc<Stream>) -> Dep {
        Dep {
            stream: stream.clone(),
            seq: stream.enqueued.load(Ordering::Acquire),
        }
    }

    /// Blocks until `dep` is satisfied (for ever, if it never is).
    pub fn wait(&self, dep: &Dep) {
        let mut g = lock(&self.progress);
        while !dep.is_done() {
            g = self.progressed.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Blocks until all work enqueued in the context so far has completed.
    pub fn wait_all(&self) {
        let mut tails = vec![Context::tail(self.legacy())];
        tails.extend(lock(&self.streams).iter().map(Context::tail));
        for t in &tails {
            self.wait(t);
        }
    }

    fn completed(&self, stream: &Stream, seq: u64) {
        stream.done.store(seq, Ordering::Release);
        let _g = lock(&self.progress);
        self.progressed.notify_all();
    }
}

fn push_pending(deps: &mut Vec<Dep>, s: &Arc<Stream>) {
    let d = Context::tail(s);
    if !d.is_done() {
        deps.push(d);
    }
}

/// A hardware queue's worker: runs operations in FIFO order, each after its
/// dependencies; after a device fault, operations complete without running.
fn worker(ctx: &'static Context, q: Arc<HwQueue>) {
    loop {
        let op = {
            let mut ops = lock(&q.ops);
            loop {
                if let Some(op) = ops.pop_front() {
                    break op;
                }
                ops = q.ready.wait(ops).unwrap_or_else(|e| e.into_inner());
            }
        };
        for d in &op.deps {
            d.stream.ctx.wait(d);
        }
        if ctx.check_sticky().is_ok() {
            let outcome =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| exec::run(ctx, &op.work)));
            match outcome {
                Ok(Ok(())) => {}
                Ok(Err((code, what))) => ctx.fault(code, &what),
                Err(_) => ctx.fault(
                    crate::error::LAUNCH_FAILED,
                    "internal panic while executing work",
                ),
            }
        }
        ctx.completed(&op.stream, op.seq);
    }
}
