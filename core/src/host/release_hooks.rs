//! Hooks that run when a buffer's memory goes away (or goes back to its
//! owner), for layers above that keep state keyed by buffer addresses: the
//! verbs transport's registration cache installs one, so that no cached
//! RDMA registration outlives the memory it covers. The host backend knows
//! nothing of who installed them.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Called with the address and length of memory that is going away.
pub(crate) type ReleaseHook = fn(addr: usize, len: usize);

static HOOKS: Mutex<Vec<ReleaseHook>> = Mutex::new(Vec::new());
/// False until a hook is installed: buffers then skip the lock.
static ANY: AtomicBool = AtomicBool::new(false);

/// Installs `hook` for every buffer dropped from now on (for the life of the
/// process; install each hook once). Only the verbs registration cache
/// installs one (a build without that transport installs none).
#[allow(
    dead_code,
    reason = "called only by transports that cache registrations"
)]
pub(crate) fn install(hook: ReleaseHook) {
    HOOKS.lock().unwrap_or_else(|e| e.into_inner()).push(hook);
    ANY.store(true, Ordering::Release);
}

/// Runs every installed hook for `len` bytes at `addr`.
pub(super) fn released(addr: usize, len: usize) {
    if !ANY.load(Ordering::Acquire) {
        return;
    }
    // Copied out: a hook never runs under the lock.
    let hooks: Vec<ReleaseHook> = HOOKS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for hook in hooks {
        hook(addr, len);
    }
}
