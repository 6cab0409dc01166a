//! Host functions enqueued on a stream (`cuLaunchHostFunc`).

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::driver::result::check;
use crate::driver::sys;
use crate::error::{Error, Result};
use crate::guard::guarded;
use crate::stream::Stream;

type HostFn = Box<dyn FnOnce() + Send + 'static>;

extern "C" fn trampoline(data: *mut c_void) {
    // SAFETY: `data` is the Box<HostFn> leaked by `launch_host_fn`, and the
    // driver calls a host function exactly once per enqueue outside capture.
    let f: Box<HostFn> = unsafe { Box::from_raw(data.cast()) };
    // A panic must not unwind into the driver's thread.
    let _ = catch_unwind(AssertUnwindSafe(f));
}

impl Stream {
    /// Runs `f` on a driver thread once all earlier work of the stream is done;
    /// later work waits for it. `f` must not call CUDA. Refused while the stream
    /// is capturing (a graph would run it once per replay).
    pub fn launch_host_fn(&self, f: impl FnOnce() + Send + 'static) -> Result<()> {
        if self.is_capturing()? {
            return Err(Error::invalid(
                "launch_host_fn: the stream is capturing a graph, which would replay a run-once function",
            ));
        }
        guarded("cuLaunchHostFunc", || {
            self.device().bind()?;
            let data = Box::into_raw(Box::new(Box::new(f) as HostFn));
            // SAFETY: the trampoline matches CUhostFn and takes ownership of
            // `data` when it runs.
            let r = unsafe { sys::cuLaunchHostFunc(self.as_raw(), Some(trampoline), data.cast()) };
            if let Err(e) = check("cuLaunchHostFunc", r) {
                // SAFETY: not enqueued, so the trampoline will never free it.
                drop(unsafe { Box::from_raw(data) });
                return Err(e);
            }
            Ok(())
        })
    }
}
