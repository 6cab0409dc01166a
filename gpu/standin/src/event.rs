//! Events: record, query, synchronise, elapsed time, and `cuStreamWaitEvent`
//! (which also forks and joins streams during capture).
//!
//! A record snapshots "the stream up to here"; re-recording replaces the
//! snapshot, and waits already enqueued keep the old one. A never-recorded
//! event is complete. An event last recorded inside a capture refuses query,
//! synchronise and elapsed time with `CUDA_ERROR_CAPTURED_EVENT`.

use std::ffi::c_uint;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use crate::capture::{self, Capture};
use crate::context::{Dep, lock};
use crate::device::{current, out};
use crate::error::{CAPTURED_EVENT, INVALID_HANDLE, INVALID_VALUE, NOT_READY, NOT_SUPPORTED, Res};
use crate::exec::Work;
use crate::guard::entry;
use crate::handles::Registry;
use crate::stream::{stream_of, submit};

/// `CU_EVENT_DISABLE_TIMING`.
const DISABLE_TIMING: u32 = 2;
/// `CU_EVENT_INTERPROCESS`.
const INTERPROCESS: u32 = 4;
/// `CU_EVENT_WAIT_EXTERNAL`.
const WAIT_EXTERNAL: u32 = 1;

/// An event.
pub(crate) struct Event {
    flags: u32,
    state: Mutex<State>,
}

/// What the last record captured.
#[derive(Clone)]
pub(crate) enum State {
    /// Never recorded: complete.
    Never,
    /// Recorded on a stream outside capture.
    Recorded {
        /// The stream up to the record.
        dep: Dep,
        /// When the record ran.
        at: Arc<OnceLock<Instant>>,
    },
    /// Recorded inside a capture: the capture and the graph nodes it covers.
    Captured {
        /// The capture.
        capture: Arc<Capture>,
        /// Graph nodes the event depends on.
        nodes: Vec<usize>,
    },
}

static EVENTS: Registry<Event> = Registry::new(0x13);

fn state(h: usize) -> Res<(Arc<Event>, State)> {
    current()?;
    let e = EVENTS.get(h)?;
    let s = lock(&e.state).clone();
    Ok((e, s))
}

/// `cuEventCreate`: flags BLOCKING_SYNC 1, DISABLE_TIMING 2, INTERPROCESS 4
/// (which needs DISABLE_TIMING).
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuEventCreate(ph: *mut usize, flags: c_uint) -> u32 {
    entry("cuEventCreate", || {
        current()?;
        if ph.is_null()
            || flags & !0x7 != 0
            || (flags & INTERPROCESS != 0 && flags & DISABLE_TIMING == 0)
        {
            return Err(INVALID_VALUE);
        }
        let h = EVENTS.insert(Arc::new(Event {
            flags,
            state: Mutex::new(State::Never),
        }));
        out(ph, h)
    })
}

/// `cuEventDestroy_v2`: returns at once; a pending record still completes.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuEventDestroy_v2(h: usize) -> u32 {
    entry("cuEventDestroy_v2", || {
        current()?;
        EVENTS.remove(h).map(|_| ())
    })
}

fn record(h: usize, stream: usize) -> Res<()> {
    let e = EVENTS.get(h)?;
    let s = stream_of(stream)?;
    if s.legacy {
        capture::check_legacy(s.ctx, "cuEventRecord")?;
    }
    if let Some(cap) = capture::of(&s) {
        let nodes = cap.frontier(&s)?;
        *lock(&e.state) = State::Captured {
            capture: cap,
            nodes,
        };
        return Ok(());
    }
    let at = Arc::new(OnceLock::new());
    let seq = submit(&s, Work::Record(at.clone()), Vec::new(), "cuEventRecord")?;
    if let Some(seq) = seq {
        *lock(&e.state) = State::Recorded {
            dep: Dep { stream: s, seq },
            at,
        };
    }
    Ok(())
}

/// `cuEventRecord`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuEventRecord(h: usize, stream: usize) -> u32 {
    entry("cuEventRecord", || record(h, stream))
}

/// `cuEventRecordWithFlags`: flags 0 only (external record nodes are not
/// implemented).
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuEventRecordWithFlags(h: usize, stream: usize, flags: c_uint) -> u32 {
    entry("cuEventRecordWithFlags", || match flags {
        0 => record(h, stream),
        1 => Err(crate::guard::unsupported(
            "cuEventRecordWithFlags(CU_EVENT_RECORD_EXTERNAL)",
        )),
        _ => Err(INVALID_VALUE),
    })
}

/// The stream position event `h` last recorded (`None`: never recorded),
/// for `name`, which waits on it: refused for an event recorded in a
/// capture (`CUDA_ERROR_CAPTURED_EVENT`) and, being potentially unsafe, while
/// a capture bars this thread (900).
fn recorded(h: usize, name: &str) -> Res<Option<Dep>> {
    let (_, st) = state(h)?;
    if matches!(st, State::Captured { .. }) {
        return Err(CAPTURED_EVENT);
    }
    capture::check_unsafe(name)?;
    match st {
        State::Never => Ok(None),
        State::Captured { .. } => Err(CAPTURED_EVENT),
        State::Recorded { dep, .. } => Ok(Some(dep)),
    }
}

/// `cuEventQuery`: potentially unsafe during capture (900).
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuEventQuery(h: usize) -> u32 {
    entry("cuEventQuery", || match recorded(h, "cuEventQuery")? {
        None => Ok(()),
        Some(dep) if dep.is_done() => dep.stream.ctx.check_sticky(),
        Some(_) => Err(NOT_READY),
    })
}

/// `cuEventSynchronize`: potentially unsafe during capture (900).
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuEventSynchronize(h: usize) -> u32 {
    entry("cuEventSynchronize", || {
        let Some(dep) = recorded(h, "cuEventSynchronize")? else {
            return Ok(());
        };
        dep.stream.ctx.wait(&dep);
        dep.stream.ctx.check_sticky()
    })
}

/// `cuEventElapsedTime`: milliseconds between two completed, timed records;
/// `CUDA_ERROR_INVALID_HANDLE` for an unrecorded or DISABLE_TIMING event,
/// `CUDA_ERROR_NOT_READY` if either has not completed.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuEventElapsedTime(ms: *mut f32, start: usize, end: usize) -> u32 {
    entry("cuEventElapsedTime", || {
        let (e0, s0) = state(start)?;
        let (e1, s1) = state(end)?;
        if ms.is_null() {
            return Err(INVALID_VALUE);
        }
        let when = |e: &Event, s: State| -> Res<Option<Instant>> {
            match s {
                State::Captured { .. } => Err(CAPTURED_EVENT),
                State::Never => Err(INVALID_HANDLE),
                _ if e.flags & DISABLE_TIMING != 0 => Err(INVALID_HANDLE),
                State::Recorded { dep, at } => {
                    Ok(dep.is_done().then(|| at.get().copied()).flatten())
                }
            }
        };
        let (t0, t1) = (when(&e0, s0)?, when(&e1, s1)?);
        let (Some(t0), Some(t1)) = (t0, t1) else {
            return Err(NOT_READY);
        };
        let d = if t1 >= t0 {
            (t1 - t0).as_secs_f64()
        } else {
            -(t0 - t1).as_secs_f64()
        };
        out(ms, (d * 1e3) as f32)
    })
}

/// `cuStreamWaitEvent`: later work of the stream waits for the event's
/// snapshot. During capture: a captured event forks or joins the stream into
/// its capture (another capture's event: 902); a non-captured event is
/// `CUDA_ERROR_STREAM_CAPTURE_ISOLATION` (905).
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuStreamWaitEvent(stream: usize, h: usize, flags: c_uint) -> u32 {
    entry("cuStreamWaitEvent", || {
        let (_, st) = state(h)?;
        let s = stream_of(stream)?;
        if flags & !WAIT_EXTERNAL != 0 {
            return Err(INVALID_VALUE);
        }
        if s.legacy {
            capture::check_legacy(s.ctx, "cuStreamWaitEvent")?;
        }
        match st {
            State::Never => Ok(()),
            State::Captured { capture, nodes } => capture::wait_captured(&s, &capture, &nodes),
            State::Recorded { dep, .. } => {
                if let Some(cap) = capture::of(&s) {
                    if flags & WAIT_EXTERNAL != 0 {
                        return Err(NOT_SUPPORTED);
                    }
                    return Err(cap.invalidate_with(
                        crate::error::CAPTURE_ISOLATION,
                        "cuStreamWaitEvent on an event recorded outside the capture",
                    ));
                }
                if !dep.is_done() {
                    submit(&s, Work::Nop, vec![dep], "cuStreamWaitEvent")?;
                }
                Ok(())
            }
        }
    })
}
