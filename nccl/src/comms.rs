//! The communicator table: an `ncclComm_t` is a key into it, never a
//! pointer, so a destroyed, forged or stale handle is an error naming it.
//! A communicator made without blocking is `Pending` until its thread is
//! done.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use streamcomm::Error;
use streamcomm::cuda::CudaComm;

use crate::api::ncclComm_t;

/// A communicator ready for operations.
pub(crate) struct Ready {
    /// The communicator on its device.
    pub(crate) cuda: CudaComm,
    /// Its device ordinal.
    pub(crate) device: usize,
}

enum State {
    /// Being made by a thread (non-blocking initialization).
    Pending(JoinHandle<Result<Ready, Error>>),
    /// Made.
    Ready(Arc<Ready>),
    /// Its making failed.
    Failed(Error),
    /// Between states (never seen outside `resolve`).
    Moving,
}

/// The table, by key.
static TABLE: Mutex<BTreeMap<usize, Arc<Mutex<State>>>> = Mutex::new(BTreeMap::new());
/// The next key: spaced and offset so that a small integer or a stray
/// pointer is never a handle.
static NEXT: AtomicUsize = AtomicUsize::new(0x5c0c_0000);

fn table() -> MutexGuard<'static, BTreeMap<usize, Arc<Mutex<State>>>> {
    TABLE.lock().unwrap_or_else(PoisonError::into_inner)
}

fn insert(state: State) -> ncclComm_t {
    let key = NEXT.fetch_add(0x40, Ordering::Relaxed);
    table().insert(key, Arc::new(Mutex::new(state)));
    key as ncclComm_t
}

/// A handle for a communicator that is made.
pub(crate) fn insert_ready(ready: Ready) -> ncclComm_t {
    insert(State::Ready(Arc::new(ready)))
}

/// A handle for a communicator `thread` is making.
pub(crate) fn insert_pending(thread: JoinHandle<Result<Ready, Error>>) -> ncclComm_t {
    insert(State::Pending(thread))
}

fn entry(comm: ncclComm_t) -> Result<Arc<Mutex<State>>, Error> {
    if comm.is_null() {
        return Err(Error::invalid("the communicator is NULL"));
    }
    table().get(&(comm as usize)).cloned().ok_or_else(|| {
        Error::invalid(format!(
            "{comm:p} is not a communicator (destroyed, aborted, or never made)"
        ))
    })
}

/// Where a communicator stands.
pub(crate) enum Status {
    /// Still being made.
    InProgress,
    /// Made.
    Ready(Arc<Ready>),
    /// Its making failed with this.
    Failed(Error),
}

/// `comm`'s status, collecting a finished thread's outcome.
///
/// # Errors
/// `comm` is no communicator.
pub(crate) fn status(comm: ncclComm_t) -> Result<Status, Error> {
    let entry = entry(comm)?;
    let mut state = entry.lock().unwrap_or_else(PoisonError::into_inner);
    if let State::Pending(t) = &*state
        && t.is_finished()
    {
        let State::Pending(t) = std::mem::replace(&mut *state, State::Moving) else {
            unreachable!("checked above")
        };
        *state = match t.join() {
            Ok(Ok(ready)) => State::Ready(Arc::new(ready)),
            Ok(Err(e)) => State::Failed(e),
            Err(_) => State::Failed(Error::InvalidUsage(
                "the thread making the communicator panicked".into(),
            )),
        };
    }
    Ok(match &*state {
        State::Pending(_) | State::Moving => Status::InProgress,
        State::Ready(r) => Status::Ready(r.clone()),
        State::Failed(e) => Status::Failed(e.clone()),
    })
}

/// `comm`, made, for an operation.
///
/// # Errors
/// `comm` is no communicator, is still being made, or failed to be made.
pub(crate) fn get(comm: ncclComm_t) -> Result<Arc<Ready>, Error> {
    match status(comm)? {
        Status::Ready(r) => Ok(r),
        Status::InProgress => Err(Error::InvalidUsage(
            "the communicator is still being made: poll ncclCommGetAsyncError until it \
             returns something other than ncclInProgress"
                .into(),
        )),
        Status::Failed(e) => Err(e),
    }
}

/// Takes `comm` out of the table; returns it if it was made.
///
/// # Errors
/// `comm` is no communicator.
pub(crate) fn remove(comm: ncclComm_t) -> Result<Option<Arc<Ready>>, Error> {
    let ready = match status(comm)? {
        Status::Ready(r) => Some(r),
        Status::InProgress | Status::Failed(_) => None,
    };
    table().remove(&(comm as usize));
    Ok(ready)
}
