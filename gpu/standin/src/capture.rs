//! Stream capture: recording stream work into a graph, and the driver's
//! refusals around it.
//!
//! Rules (from `cuda.h` and the Programming Guide, see
//! `cuda-driver-semantics.md` §1):
//! - A thread is barred from potentially unsafe calls (allocation, free,
//!   pinned allocation and registration, event query/synchronise, stream and
//!   context synchronisation, graph-exec destruction) if its capture mode is
//!   GLOBAL and any GLOBAL capture is open in the process, or if (in GLOBAL or
//!   THREAD_LOCAL mode) it has its own non-RELAXED capture open. A barred call
//!   returns 900 and invalidates the captures that barred it.
//! - Synchronising or querying a capturing stream, and `cuCtxSynchronize`
//!   while any stream of the context captures, are always refused (900,
//!   invalidating the capture).
//! - Any use of the legacy stream while a blocking stream of the context
//!   captures is `CUDA_ERROR_STREAM_CAPTURE_IMPLICIT` (906).
//! - After invalidation the capture's streams refuse work (901) until
//!   `cuStreamEndCapture`, which returns 901 and a NULL graph.
//! - Fork/join through captured events; every stream pulled into a capture
//!   must be joined back into the origin stream before the end (904); ending
//!   on another stream is 903, from another thread (unless RELAXED) 908.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use crate::context::{Context, Stream, lock};
use crate::device::out;
use crate::error::{
    CAPTURE_IMPLICIT, CAPTURE_INVALIDATED, CAPTURE_MERGE, CAPTURE_UNJOINED, CAPTURE_UNMATCHED,
    CAPTURE_UNSUPPORTED, CAPTURE_WRONG_THREAD, CAPTURED_EVENT, ILLEGAL_STATE, INVALID_VALUE, Res,
};
use crate::exec::Work;
use crate::graph::{GRAPHS, Graph, Node};
use crate::guard::{entry, say_once};
use crate::stream::stream_of;

/// `CU_STREAM_CAPTURE_MODE_GLOBAL`.
const GLOBAL: u32 = 0;
/// `CU_STREAM_CAPTURE_MODE_RELAXED`.
const RELAXED: u32 = 2;

thread_local! {
    /// The thread's capture mode (`cuThreadExchangeStreamCaptureMode`).
    static MODE: Cell<u32> = const { Cell::new(GLOBAL) };
    /// Node handles returned by `cuStreamGetCaptureInfo_v2`.
    static DEPS: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// Captures begun and not yet ended, process-wide.
static ACTIVE: Mutex<Vec<Arc<Capture>>> = Mutex::new(Vec::new());

/// One capture sequence.
pub struct Capture {
    id: u64,
    mode: u32,
    ctx: &'static Context,
    origin: Arc<Stream>,
    thread: ThreadId,
    graph: Arc<Graph>,
    graph_handle: usize,
    state: Mutex<State>,
}

struct State {
    invalid: bool,
    /// Each member stream and the graph nodes its next node depends on.
    frontier: Vec<(Arc<Stream>, Vec<usize>)>,
}

/// The capture `stream` records into, if any.
pub(crate) fn of(stream: &Stream) -> Option<Arc<Capture>> {
    lock(&stream.capture).clone()
}

fn active() -> Vec<Arc<Capture>> {
    lock(&ACTIVE).clone()
}

impl Capture {
    /// Marks the capture invalid (its streams refuse work until the end).
    pub fn invalidate(&self, why: &str) {
        lock(&self.state).invalid = true;
        say_once(
            format!("invalidate:{why}"),
            &format!("stream capture {} invalidated: {why}", self.id),
        );
    }

    /// Invalidates and returns `code`, for `Err(...)`.
    pub fn invalidate_with(&self, code: u32, why: &str) -> u32 {
        self.invalidate(why);
        code
    }

    /// Appends `work` as a node after `stream`'s frontier.
    pub fn record(&self, stream: &Arc<Stream>, work: Work) -> Res<()> {
        let mut st = lock(&self.state);
        if st.invalid {
            return Err(CAPTURE_INVALIDATED);
        }
        let slot = st
            .frontier
            .iter_mut()
            .find(|(s, _)| Arc::ptr_eq(s, stream))
            .ok_or(ILLEGAL_STATE)?;
        let idx = self.graph.push(Node {
            deps: std::mem::take(&mut slot.1),
            work,
        });
        slot.1 = vec![idx];
        Ok(())
    }

    /// The nodes an event recorded now on `stream` stands for.
    pub fn frontier(&self, stream: &Arc<Stream>) -> Res<Vec<usize>> {
        let st = lock(&self.state);
        if st.invalid {
            return Err(CAPTURE_INVALIDATED);
        }
        Ok(st
            .frontier
            .iter()
            .find(|(s, _)| Arc::ptr_eq(s, stream))
            .map(|(_, f)| f.clone())
            .unwrap_or_default())
    }

    fn has_blocking_member(&self) -> bool {
        lock(&self.state).frontier.iter().any(|(s, _)| s.blocking)
    }

    fn status(&self) -> c_int {
        if lock(&self.state).invalid { 2 } else { 1 }
    }
}

fn refuse(caps: Vec<Arc<Capture>>, code: u32, why: String) -> Res<()> {
    if caps.is_empty() {
        return Ok(());
    }
    for c in &caps {
        c.invalidate(&why);
    }
    Err(code)
}

/// Refuses a potentially unsafe call (900) if a capture bars this thread.
pub(crate) fn check_unsafe(name: &str) -> Res<()> {
    let mode = MODE.with(Cell::get);
    if mode == RELAXED {
        return Ok(());
    }
    let me = std::thread::current().id();
    let barring: Vec<_> = active()
        .into_iter()
        .filter(|c| (c.thread == me && c.mode != RELAXED) || (mode == GLOBAL && c.mode == GLOBAL))
        .collect();
    refuse(
        barring,
        CAPTURE_UNSUPPORTED,
        format!("{name} is not permitted while a stream capture bars this thread"),
    )
}

/// Refuses `cuCtxSynchronize` (900) while any stream of `ctx` captures.
pub(crate) fn check_context_sync(ctx: &Context, name: &str) -> Res<()> {
    let caps = active()
        .into_iter()
        .filter(|c| std::ptr::eq(c.ctx, ctx))
        .collect();
    refuse(
        caps,
        CAPTURE_UNSUPPORTED,
        format!("{name} while a stream of the context captures"),
    )
}

/// Refuses synchronising or querying a capturing stream (900).
pub(crate) fn check_stream_sync(stream: &Stream, name: &str) -> Res<()> {
    refuse(
        of(stream).into_iter().collect(),
        CAPTURE_UNSUPPORTED,
        format!("{name} on a capturing stream"),
    )
}

/// Refuses legacy-stream use (906) while a blocking stream of `ctx` captures.
pub(crate) fn check_legacy(ctx: &Context, name: &str) -> Res<()> {
    let caps = legacy_conflicts(ctx);
    refuse(
        caps,
        CAPTURE_IMPLICIT,
        format!("{name} used the legacy stream while a blocking stream captures"),
    )
}

fn legacy_conflicts(ctx: &Context) -> Vec<Arc<Capture>> {
    active()
        .into_iter()
        .filter(|c| std::ptr::eq(c.ctx, ctx) && c.has_blocking_member())
        .collect()
}

/// `cuStreamWaitEvent` on an event recorded in capture `cap`: forks `stream`
/// into the capture or joins the event's nodes into its frontier.
pub(crate) fn wait_captured(stream: &Arc<Stream>, cap: &Arc<Capture>, nodes: &[usize]) -> Res<()> {
    if !active().iter().any(|c| Arc::ptr_eq(c, cap)) {
        return Err(CAPTURED_EVENT);
    }
    match of(stream) {
        Some(mine) if Arc::ptr_eq(&mine, cap) => {
            let mut st = lock(&cap.state);
            if st.invalid {
                return Err(CAPTURE_INVALIDATED);
            }
            if let Some((_, f)) = st.frontier.iter_mut().find(|(s, _)| Arc::ptr_eq(s, stream)) {
                for n in nodes {
                    if !f.contains(n) {
                        f.push(*n);
                    }
                }
            }
            Ok(())
        }
        Some(other) => {
            other.invalidate("cuStreamWaitEvent merged two captures");
            Err(cap.invalidate_with(CAPTURE_MERGE, "cuStreamWaitEvent merged two captures"))
        }
        None => {
            if stream.legacy {
                return Err(cap
                    .invalidate_with(CAPTURE_IMPLICIT, "the legacy stream cannot join a capture"));
            }
            let mut st = lock(&cap.state);
            if st.invalid {
                return Err(CAPTURE_INVALIDATED);
            }
            st.frontier.push((stream.clone(), nodes.to_vec()));
            *lock(&stream.capture) = Some(cap.clone());
            Ok(())
        }
    }
}

/// `cuStreamBeginCapture_v2`: not on the legacy stream (900) or a stream
/// already capturing (401).
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuStreamBeginCapture_v2(h: usize, mode: u32) -> u32 {
    entry("cuStreamBeginCapture_v2", || {
        let s = stream_of(h)?;
        if mode > RELAXED {
            return Err(INVALID_VALUE);
        }
        if s.legacy {
            return Err(CAPTURE_UNSUPPORTED);
        }
        if of(&s).is_some() {
            return Err(ILLEGAL_STATE);
        }
        static IDS: AtomicU64 = AtomicU64::new(1);
        let graph = Arc::new(Graph::default());
        let graph_handle = GRAPHS.insert(graph.clone());
        let cap = Arc::new(Capture {
            id: IDS.fetch_add(1, Ordering::Relaxed),
            mode,
            ctx: s.ctx,
            origin: s.clone(),
            thread: std::thread::current().id(),
            graph,
            graph_handle,
            state: Mutex::new(State {
                invalid: false,
                frontier: vec![(s.clone(), Vec::new())],
            }),
        });
        *lock(&s.capture) = Some(cap.clone());
        lock(&ACTIVE).push(cap);
        Ok(())
    })
}

/// `cuStreamEndCapture`: the captured graph, or NULL with 901 (invalidated)
/// or 904 (a forked stream was not joined).
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuStreamEndCapture(h: usize, pgraph: *mut usize) -> u32 {
    entry("cuStreamEndCapture", || {
        let s = stream_of(h)?;
        if pgraph.is_null() {
            return Err(INVALID_VALUE);
        }
        let cap = of(&s).ok_or(ILLEGAL_STATE)?;
        if !Arc::ptr_eq(&cap.origin, &s) {
            return Err(cap.invalidate_with(
                CAPTURE_UNMATCHED,
                "cuStreamEndCapture on a stream other than the origin",
            ));
        }
        if cap.mode != RELAXED && cap.thread != std::thread::current().id() {
            return Err(CAPTURE_WRONG_THREAD);
        }
        lock(&ACTIVE).retain(|c| !Arc::ptr_eq(c, &cap));
        let st = std::mem::replace(
            &mut *lock(&cap.state),
            State {
                invalid: true,
                frontier: Vec::new(),
            },
        );
        for (m, _) in &st.frontier {
            *lock(&m.capture) = None;
        }
        let verdict = if st.invalid {
            Err(CAPTURE_INVALIDATED)
        } else if !joined(&cap.graph, &st.frontier, &s) {
            say_once(
                format!("unjoined:{}", cap.id),
                &format!(
                    "stream capture {}: a forked stream was not joined into the origin stream",
                    cap.id
                ),
            );
            Err(CAPTURE_UNJOINED)
        } else {
            Ok(())
        };
        match verdict {
            Ok(()) => out(pgraph, cap.graph_handle),
            Err(code) => {
                let _ = GRAPHS.remove(cap.graph_handle);
                out(pgraph, 0)?;
                Err(code)
            }
        }
    })
}

/// True when every member stream's frontier is an ancestor of the origin's.
fn joined(graph: &Graph, frontier: &[(Arc<Stream>, Vec<usize>)], origin: &Arc<Stream>) -> bool {
    let deps = graph.deps();
    let mut seen = BTreeSet::new();
    let mut todo: Vec<usize> = frontier
        .iter()
        .find(|(s, _)| Arc::ptr_eq(s, origin))
        .map(|(_, f)| f.clone())
        .unwrap_or_default();
    while let Some(n) = todo.pop() {
        if seen.insert(n) {
            todo.extend(deps.get(n).into_iter().flatten().copied());
        }
    }
    frontier
        .iter()
        .filter(|(s, _)| !Arc::ptr_eq(s, origin))
        .all(|(_, f)| f.iter().all(|n| seen.contains(n)))
}

fn capture_status(h: usize) -> Res<(c_int, Option<Arc<Capture>>)> {
    let s = stream_of(h)?;
    if s.legacy {
        if legacy_conflicts(s.ctx).is_empty() {
            return Ok((0, None));
        }
        return Err(CAPTURE_IMPLICIT);
    }
    Ok(match of(&s) {
        Some(c) => (c.status(), Some(c)),
        None => (0, None),
    })
}

/// `cuStreamIsCapturing`: 0 none, 1 active, 2 invalidated; on the legacy
/// stream while a blocking stream captures: 906.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuStreamIsCapturing(h: usize, status: *mut c_int) -> u32 {
    entry("cuStreamIsCapturing", || out(status, capture_status(h)?.0))
}

/// `cuStreamGetCaptureInfo_v2`: status, capture id, the graph being built,
/// and the stream's current dependency nodes (valid until the next call on
/// this thread). Every out-pointer but the status may be NULL.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuStreamGetCaptureInfo_v2(
    h: usize,
    status: *mut c_int,
    id: *mut u64,
    graph: *mut usize,
    deps: *mut *const usize,
    ndeps: *mut usize,
) -> u32 {
    entry("cuStreamGetCaptureInfo_v2", || {
        let (st, cap) = capture_status(h)?;
        out(status, st)?;
        let Some(cap) = cap else {
            return Ok(());
        };
        if !id.is_null() {
            out(id, cap.id)?;
        }
        if !graph.is_null() {
            out(graph, cap.graph_handle)?;
        }
        let s = stream_of(h)?;
        let nodes = cap.frontier(&s).unwrap_or_default();
        let handles: Vec<usize> = nodes
            .iter()
            .map(|n| crate::graph::node_handle(cap.graph_handle, *n))
            .collect();
        let n = handles.len();
        let ptr = DEPS.with(|d| {
            *d.borrow_mut() = handles;
            d.borrow().as_ptr()
        });
        if !deps.is_null() {
            out(deps, ptr)?;
        }
        if !ndeps.is_null() {
            out(ndeps, n)?;
        }
        Ok(())
    })
}

/// `cuThreadExchangeStreamCaptureMode`: swaps the calling thread's mode.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuThreadExchangeStreamCaptureMode(mode: *mut u32) -> u32 {
    entry("cuThreadExchangeStreamCaptureMode", || {
        crate::device::require_init()?;
        if mode.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: non-null; the caller passes a valid in/out pointer.
        let new = unsafe { *mode };
        if new > RELAXED {
            return Err(INVALID_VALUE);
        }
        let old = MODE.with(|m| m.replace(new));
        out(mode, old)
    })
}
