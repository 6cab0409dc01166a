//! Host streams and events for C: create, enqueue a callback, record/wait
//! events, synchronize, destroy.
//!
//! These are the host backend's [`HostStream`] and [`HostEvent`] behind
//! handles. CUDA streams are not wrapped into a `streamcomm_stream_t`: the
//! CUDA functions (`streamcomm_cuda_*`, module `cuda`) take a `cudaStream_t`
//! / `CUstream` as it is, with a `streamcomm_cuda_comm_t`.

use std::ffi::{c_int, c_void};

use streamcomm::host::{HostEvent, HostStream};

use crate::args::out_ptr;
use crate::guard::{as_callback, guard, refuse_in_callback};
use crate::result::FfiResult;
use crate::{EVENTS, STREAMS};

/// A C callback and its argument, run on a stream.
#[derive(Clone, Copy)]
struct Callback {
    f: unsafe extern "C" fn(*mut c_void) -> c_int,
    user_data: *mut c_void,
}

// SAFETY: the header documents that the callback runs on another thread
// (the stream's worker, or a thread synchronizing the stream) with
// `user_data`; making that safe is the C caller's part of the contract.
unsafe impl Send for Callback {}
// SAFETY: as for `Send`: the pair is only read, to make the call.
unsafe impl Sync for Callback {}

impl Callback {
    fn call(&self) -> Result<(), String> {
        // SAFETY: `f` is a valid function pointer of this signature (checked
        // non-null at enqueue; the rest is the caller's contract).
        let rc = as_callback(|| unsafe { (self.f)(self.user_data) });
        match rc {
            0 => Ok(()),
            rc => Err(format!("stream callback returned {rc}")),
        }
    }
}

/// Stores a handle in a checked out-parameter.
fn publish(out: *mut *mut c_void, handle: *mut c_void) {
    // SAFETY: `out` was checked by `out_ptr`; writable per the contract.
    unsafe { out.write(handle) };
}

/// Creates a host stream in `*stream`.
///
/// # Safety
/// `stream` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_stream_create(stream: *mut *mut c_void) -> c_int {
    guard("streamcomm_stream_create", || {
        let out = out_ptr(stream, "stream")?;
        publish(out, std::ptr::null_mut());
        publish(out, STREAMS.insert(HostStream::new()?)?);
        Ok(())
    })
}

/// Finishes the stream's enqueued work, then destroys it.
///
/// # Safety
/// None beyond passing a handle value (any value is checked).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_stream_destroy(stream: *mut c_void) -> c_int {
    guard("streamcomm_stream_destroy", || {
        refuse_in_callback("streamcomm_stream_destroy")?;
        let s = STREAMS.remove(stream)?;
        // The last reference finishes the work (bounded by its timeouts).
        let result = s.synchronize();
        drop(s);
        Ok(result?)
    })
}

/// Blocks until the stream's enqueued work has finished; returns its error.
///
/// # Safety
/// None beyond passing a handle value (any value is checked).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_stream_synchronize(stream: *mut c_void) -> c_int {
    guard("streamcomm_stream_synchronize", || {
        refuse_in_callback("streamcomm_stream_synchronize")?;
        Ok(STREAMS.get(stream)?.synchronize()?)
    })
}

/// Enqueues `callback(user_data)`; a non-zero return fails the stream with
/// `STREAMCOMM_USER_CALLBACK_ERROR`.
///
/// # Safety
/// `callback` is NULL or a function of this signature that may run on any
/// thread with `user_data`, which must stay valid until it has run.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_stream_enqueue_callback(
    stream: *mut c_void,
    callback: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
    user_data: *mut c_void,
) -> c_int {
    guard("streamcomm_stream_enqueue_callback", || {
        let s = STREAMS.get(stream)?;
        let f = callback.ok_or_else(|| crate::result::Failure::invalid("callback is NULL"))?;
        let cb = Callback { f, user_data };
        Ok(s.try_host_fn(move || cb.call())?)
    })
}

/// Makes the stream's later work wait for the event's last record.
///
/// # Safety
/// None beyond passing handle values (any value is checked).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_stream_wait_event(
    stream: *mut c_void,
    event: *mut c_void,
) -> c_int {
    guard("streamcomm_stream_wait_event", || {
        let s = STREAMS.get(stream)?;
        Ok(s.wait(&*EVENTS.get(event)?)?)
    })
}

/// Creates an event (never recorded: it queries as complete) in `*event`.
///
/// # Safety
/// `event` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_event_create(event: *mut *mut c_void) -> c_int {
    guard("streamcomm_event_create", || {
        let out = out_ptr(event, "event")?;
        publish(out, std::ptr::null_mut());
        publish(out, EVENTS.insert(HostEvent::new())?);
        Ok(())
    })
}

/// Destroys the event (streams already waiting on it are unaffected).
///
/// # Safety
/// None beyond passing a handle value (any value is checked).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_event_destroy(event: *mut c_void) -> c_int {
    guard("streamcomm_event_destroy", || {
        EVENTS.remove(event)?;
        Ok(())
    })
}

/// Records the event at the current end of the stream.
///
/// # Safety
/// None beyond passing handle values (any value is checked).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_event_record(event: *mut c_void, stream: *mut c_void) -> c_int {
    guard("streamcomm_event_record", || {
        let e = EVENTS.get(event)?;
        Ok(e.record(&*STREAMS.get(stream)?)?)
    })
}

/// Blocks until the event's last record has completed (bounded by
/// `STREAMCOMM_TIMEOUT`'s default).
///
/// # Safety
/// None beyond passing a handle value (any value is checked).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_event_synchronize(event: *mut c_void) -> c_int {
    guard("streamcomm_event_synchronize", || {
        refuse_in_callback("streamcomm_event_synchronize")?;
        Ok(EVENTS.get(event)?.synchronize()?)
    })
}

/// Stores 1 in `*done` when the event's last record has completed, else 0.
///
/// # Safety
/// `done` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn streamcomm_event_query(event: *mut c_void, done: *mut c_int) -> c_int {
    guard("streamcomm_event_query", || {
        let e = EVENTS.get(event)?;
        let done = out_ptr(done, "done")?;
        // SAFETY: checked non-null and aligned; writable per the contract.
        unsafe { done.write(c_int::from(e.query())) };
        Ok(())
    })
}

/// The host stream a `streamcomm_stream_t` names (for the operations).
pub(crate) fn stream_of(stream: *mut c_void) -> FfiResult<std::sync::Arc<HostStream>> {
    STREAMS.get(stream)
}
