//! Stream entry points: create, destroy, synchronise, query, and the one
//! place work is submitted ([`submit`]), which either enqueues it on the
//! stream's hardware queue or records it into the stream's capture.

use std::ffi::{c_int, c_uint};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::capture;
use crate::context::{Context, Dep, Stream, lock};
use crate::device::{CONTEXTS, current, out};
use crate::error::{INVALID_VALUE, NOT_READY, NOT_SUPPORTED, Res};
use crate::exec::Work;
use crate::guard::{entry, say_once};
use crate::handles::Registry;

/// Streams created by `cuStreamCreate*`.
pub(crate) static STREAMS: Registry<Stream> = Registry::new(0x12);

/// `CU_STREAM_LEGACY`.
const STREAM_LEGACY: usize = 1;
/// `CU_STREAM_PER_THREAD`.
const STREAM_PER_THREAD: usize = 2;

/// The stream behind a handle in the current context: NULL and
/// `CU_STREAM_LEGACY` are the legacy stream; the per-thread default stream is
/// not implemented.
pub(crate) fn stream_of(handle: usize) -> Res<Arc<Stream>> {
    let ctx = current()?;
    match handle {
        0 | STREAM_LEGACY => Ok(ctx.legacy().clone()),
        STREAM_PER_THREAD => {
            say_once(
                "ptds".into(),
                "the per-thread default stream (CU_STREAM_PER_THREAD) is not implemented: CUDA_ERROR_NOT_SUPPORTED",
            );
            Err(NOT_SUPPORTED)
        }
        h => {
            let s = STREAMS.get(h)?;
            if !std::ptr::eq(s.ctx, ctx) {
                return Err(crate::error::INVALID_HANDLE);
            }
            Ok(s)
        }
    }
}

/// Submits `work` to `stream` after `deps`: recorded into the stream's
/// capture if it is capturing, else enqueued. Legacy-stream use while a
/// blocking stream captures is refused (906). Returns the sequence number
/// when enqueued.
pub(crate) fn submit(
    stream: &Arc<Stream>,
    work: Work,
    deps: Vec<Dep>,
    name: &str,
) -> Res<Option<u64>> {
    if stream.legacy {
        capture::check_legacy(stream.ctx, name)?;
    }
    if let Some(cap) = capture::of(stream) {
        cap.record(stream, work)?;
        return Ok(None);
    }
    Ok(Some(stream.ctx.enqueue(stream, work, deps)))
}

/// Submits `work` and, outside capture, waits until it has run.
pub(crate) fn submit_and_wait(stream: &Arc<Stream>, work: Work, name: &str) -> Res<()> {
    if let Some(seq) = submit(stream, work, Vec::new(), name)? {
        stream.ctx.wait(&Dep {
            stream: stream.clone(),
            seq,
        });
        stream.ctx.check_sticky()?;
    }
    Ok(())
}

fn create(ph: *mut usize, flags: c_uint, priority: c_int) -> Res<()> {
    let ctx = current()?;
    if ph.is_null() || flags > 1 {
        return Err(INVALID_VALUE);
    }
    let blocking = flags == 0;
    let h = STREAMS.insert_with(|h| ctx.new_stream(h, false, blocking, priority.clamp(-5, 0)));
    lock(&ctx.streams).push(STREAMS.get(h)?);
    out(ph, h)
}

/// `cuStreamCreate`: flags `CU_STREAM_DEFAULT` (blocking: synchronises with
/// the legacy stream) or `CU_STREAM_NON_BLOCKING`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuStreamCreate(ph: *mut usize, flags: c_uint) -> u32 {
    entry("cuStreamCreate", || create(ph, flags, 0))
}

/// `cuStreamCreateWithPriority`: the priority is recorded, not used.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuStreamCreateWithPriority(
    ph: *mut usize,
    flags: c_uint,
    priority: c_int,
) -> u32 {
    entry("cuStreamCreateWithPriority", || create(ph, flags, priority))
}

/// `cuStreamDestroy_v2`: returns at once; pending work still completes.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuStreamDestroy_v2(h: usize) -> u32 {
    entry("cuStreamDestroy_v2", || {
        let ctx = current()?;
        if h == 0 || h == STREAM_LEGACY || h == STREAM_PER_THREAD {
            return Err(INVALID_VALUE);
        }
        let s = stream_of(h)?;
        if let Some(cap) = capture::of(&s) {
            cap.invalidate("cuStreamDestroy_v2 on a capturing stream");
        }
        STREAMS.remove(h)?;
        lock(&ctx.streams).retain(|x| !Arc::ptr_eq(x, &s));
        Ok(())
    })
}

/// The stream behind `h`, for `name`, which waits on it or asks after it:
/// refused on a capturing stream (900, the capture invalidated), while a
/// capture bars this thread (900), and for the legacy stream while a
/// blocking stream captures (906).
fn stream_to_wait_on(h: usize, name: &str) -> Res<Arc<Stream>> {
    let s = stream_of(h)?;
    capture::check_stream_sync(&s, name)?;
    capture::check_unsafe(name)?;
    if s.legacy {
        capture::check_legacy(s.ctx, name)?;
    }
    Ok(s)
}

/// `cuStreamSynchronize`: waits for the stream's work (for ever, if it never
/// finishes). On a capturing stream: 900, and the capture is invalidated.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuStreamSynchronize(h: usize) -> u32 {
    entry("cuStreamSynchronize", || {
        let s = stream_to_wait_on(h, "cuStreamSynchronize")?;
        s.ctx.wait(&Context::tail(&s));
        s.ctx.check_sticky()
    })
}

/// `cuStreamQuery`: `CUDA_SUCCESS` when idle, else `CUDA_ERROR_NOT_READY`.
/// On a capturing stream: 900, and the capture is invalidated.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuStreamQuery(h: usize) -> u32 {
    entry("cuStreamQuery", || {
        let s = stream_to_wait_on(h, "cuStreamQuery")?;
        if s.done.load(Ordering::Acquire) < s.enqueued.load(Ordering::Acquire) {
            return Err(NOT_READY);
        }
        s.ctx.check_sticky()
    })
}

/// `cuStreamGetFlags`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuStreamGetFlags(h: usize, flags: *mut c_uint) -> u32 {
    entry("cuStreamGetFlags", || {
        let s = stream_of(h)?;
        out(flags, c_uint::from(!s.blocking))
    })
}

/// `cuStreamGetPriority`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuStreamGetPriority(h: usize, priority: *mut c_int) -> u32 {
    entry("cuStreamGetPriority", || {
        let s = stream_of(h)?;
        out(priority, s.priority)
    })
}

/// `cuStreamGetCtx`: the stream's context.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuStreamGetCtx(h: usize, pctx: *mut usize) -> u32 {
    entry("cuStreamGetCtx", || {
        let s = stream_of(h)?;
        out(pctx, CONTEXTS.handle(s.ctx.ordinal))
    })
}

/// `cuStreamGetId`: the handle value (0 for the legacy stream).
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuStreamGetId(h: usize, id: *mut u64) -> u32 {
    entry("cuStreamGetId", || {
        let s = stream_of(h)?;
        out(id, s.handle as u64)
    })
}

/// `cuCtxGetStreamPriorityRange`: 0 (least) to -5 (greatest), as on sm_90.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuCtxGetStreamPriorityRange(
    least: *mut c_int,
    greatest: *mut c_int,
) -> u32 {
    entry("cuCtxGetStreamPriorityRange", || {
        current()?;
        if !least.is_null() {
            out(least, 0)?;
        }
        if !greatest.is_null() {
            out(greatest, -5)?;
        }
        Ok(())
    })
}
