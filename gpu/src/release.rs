//! Stream work whose host-side resources outlive the call that enqueued it:
//! host functions the caller keeps alive (so they may be captured and
//! replayed), and releasing resources once the stream, or the graph captured
//! from it, can no longer use them (a CUDA user object owned by the graph, as
//! NCCL does for its persistent plans).

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::driver::result::check;
use crate::driver::sys::{self, CUgraph, CUgraphNode, CUstreamCaptureStatus, CUuserObject};
use crate::error::Result;
use crate::guard::guarded;
use crate::stream::Stream;

/// A host function called with a pointer the caller keeps alive.
pub type RawHostFn = unsafe extern "C" fn(*mut c_void);

type Release = Box<dyn FnOnce() + Send + 'static>;

unsafe extern "C" fn run_release(data: *mut c_void) {
    // SAFETY: `data` is the Box<Release> leaked by `release_after`; the driver
    // destroys a user object exactly once.
    let f: Box<Release> = unsafe { Box::from_raw(data.cast()) };
    let _ = catch_unwind(AssertUnwindSafe(f));
}

impl Stream {
    /// True when the stream belongs to its device's primary context (what a
    /// stream created by cudarc, PyTorch or the runtime API on that device
    /// uses); false for another device's or another context's stream.
    pub fn is_on_primary_context(&self) -> Result<bool> {
        guarded("cuStreamGetCtx", || {
            self.device().bind()?;
            let mut ctx: sys::CUcontext = std::ptr::null_mut();
            // SAFETY: valid out-pointer; the caller of `from_raw` vouched for
            // the stream handle.
            check("cuStreamGetCtx", unsafe {
                sys::cuStreamGetCtx(self.as_raw(), &mut ctx)
            })?;
            Ok(ctx == self.device().as_raw())
        })
    }

    /// The graph this stream is capturing into, if it is capturing.
    pub fn capture_graph(&self) -> Result<Option<CUgraph>> {
        guarded("cuStreamGetCaptureInfo", || {
            self.device().bind()?;
            let mut status = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
            let mut id: u64 = 0;
            let mut graph: CUgraph = std::ptr::null_mut();
            let mut deps: *const CUgraphNode = std::ptr::null();
            let mut ndeps: usize = 0;
            // SAFETY: valid out-pointers; the stream is live.
            check("cuStreamGetCaptureInfo_v2", unsafe {
                crate::driver::stable::stream_get_capture_info(
                    self.as_raw(),
                    &mut status,
                    &mut id,
                    &mut graph,
                    &mut deps,
                    &mut ndeps,
                )?
            })?;
            Ok(
                (status == CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE
                    && !graph.is_null())
                .then_some(graph),
            )
        })
    }

    /// Enqueues `f(data)`, run on a driver thread when the stream reaches it;
    /// unlike [`Stream::launch_host_fn`] it may be captured, and then runs at
    /// every replay.
    ///
    /// # Safety
    /// `data` must stay valid for `f` until the stream, and every graph
    /// captured from it, can no longer run it (see [`Stream::release_after`]);
    /// `f` must not call CUDA, and must not unwind.
    pub unsafe fn launch_host_fn_raw(&self, f: RawHostFn, data: *mut c_void) -> Result<()> {
        guarded("cuLaunchHostFunc", || {
            self.device().bind()?;
            // SAFETY: the caller guarantees `data` and `f`.
            check("cuLaunchHostFunc", unsafe {
                sys::cuLaunchHostFunc(self.as_raw(), Some(f), data)
            })
        })
    }

    /// Runs `release` on a driver thread (it must not call CUDA) once the
    /// work enqueued so far can no longer run: when it has completed, or,
    /// while the stream is capturing, when the captured graph and every
    /// executable graph made from it are destroyed.
    ///
    /// On an error `release` is never run (what it would free may still be
    /// in use), so its captures leak rather than dangle.
    pub fn release_after(&self, release: impl FnOnce() + Send + 'static) -> Result<()> {
        let Some(graph) = self.capture_graph()? else {
            return self.launch_host_fn(release);
        };
        guarded("cuUserObjectCreate", || {
            self.device().bind()?;
            let data = Box::into_raw(Box::new(Box::new(release) as Release));
            let mut object: CUuserObject = std::ptr::null_mut();
            // SAFETY: `run_release` takes ownership of `data` when the object
            // is destroyed; one reference, moved to the graph below.
            let created = check("cuUserObjectCreate", unsafe {
                sys::cuUserObjectCreate(
                    &mut object,
                    data.cast(),
                    Some(run_release),
                    1,
                    sys::CUuserObject_flags::CU_USER_OBJECT_NO_DESTRUCTOR_SYNC as u32,
                )
            });
            if let Err(e) = created {
                // No object owns `data`: leak it rather than run `release`
                // (see the docs).
                let _ = data;
                return Err(e);
            }
            // SAFETY: both handles are live; MOVE hands our reference over.
            check("cuGraphRetainUserObject", unsafe {
                sys::cuGraphRetainUserObject(
                    graph,
                    object,
                    1,
                    sys::CUuserObjectRetain_flags::CU_GRAPH_USER_OBJECT_MOVE as u32,
                )
            })
            // On failure the object (and `release`) is leaked, never run.
        })
    }
}
