//! Stream capture into CUDA graphs, instantiation and replay.

use crate::context::Device;
use crate::driver::result::check;
use crate::driver::sys::{self, CUgraph, CUgraphExec, CUstreamCaptureStatus};
use crate::error::Result;
use crate::guard::guarded;
use crate::stream::Stream;

/// A captured graph, destroyed on drop.
pub struct Graph {
    device: Device,
    raw: CUgraph,
}

/// An instantiated graph, replayable with [`GraphExec::launch`].
pub struct GraphExec {
    device: Device,
    raw: CUgraphExec,
}

// SAFETY: graph handles may be used from any thread (one at a time, which
// `&mut`/ownership guarantees for mutation; launch only reads the handle).
unsafe impl Send for Graph {}
// SAFETY: as above.
unsafe impl Send for GraphExec {}
// SAFETY: as above.
unsafe impl Sync for GraphExec {}

impl Stream {
    /// Starts capturing this stream (thread-local mode: other threads' CUDA calls
    /// are not affected).
    pub fn begin_capture(&self) -> Result<()> {
        guarded("cuStreamBeginCapture", || {
            self.device().bind()?;
            let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
            // SAFETY: the stream is live.
            check("cuStreamBeginCapture_v2", unsafe {
                sys::cuStreamBeginCapture_v2(self.as_raw(), mode)
            })
        })
    }

    /// Ends the capture started by [`Stream::begin_capture`].
    pub fn end_capture(&self) -> Result<Graph> {
        guarded("cuStreamEndCapture", || {
            self.device().bind()?;
            let mut raw: CUgraph = std::ptr::null_mut();
            // SAFETY: valid out-pointer; the stream is live.
            check("cuStreamEndCapture", unsafe {
                sys::cuStreamEndCapture(self.as_raw(), &mut raw)
            })?;
            Ok(Graph {
                device: self.device().clone(),
                raw,
            })
        })
    }

    /// True while the stream is capturing.
    pub fn is_capturing(&self) -> Result<bool> {
        guarded("cuStreamIsCapturing", || {
            self.device().bind()?;
            let mut status = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
            // SAFETY: valid out-pointer; the stream is live.
            check("cuStreamIsCapturing", unsafe {
                sys::cuStreamIsCapturing(self.as_raw(), &mut status)
            })?;
            Ok(status != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
        })
    }
}

impl Graph {
    /// Instantiates the graph for replay.
    pub fn instantiate(&self) -> Result<GraphExec> {
        guarded("cuGraphInstantiate", || {
            self.device.bind()?;
            let mut raw: CUgraphExec = std::ptr::null_mut();
            // SAFETY: valid out-pointer; the graph is live.
            check("cuGraphInstantiateWithFlags", unsafe {
                sys::cuGraphInstantiateWithFlags(&mut raw, self.raw, 0)
            })?;
            Ok(GraphExec {
                device: self.device.clone(),
                raw,
            })
        })
    }

    /// The raw handle.
    pub fn as_raw(&self) -> CUgraph {
        self.raw
    }
}

impl GraphExec {
    /// Enqueues one replay on `stream`.
    pub fn launch(&self, stream: &Stream) -> Result<()> {
        guarded("cuGraphLaunch", || {
            self.device.bind()?;
            // SAFETY: both handles are live.
            check("cuGraphLaunch", unsafe {
                sys::cuGraphLaunch(self.raw, stream.as_raw())
            })
        })
    }

    /// The raw handle.
    pub fn as_raw(&self) -> CUgraphExec {
        self.raw
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        let _ = guarded("cuGraphDestroy", || {
            self.device.bind()?;
            // SAFETY: destroyed once; instantiated copies are independent.
            check("cuGraphDestroy", unsafe { sys::cuGraphDestroy(self.raw) })
        });
    }
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        let _ = guarded("cuGraphExecDestroy", || {
            self.device.bind()?;
            // SAFETY: destroyed once.
            check("cuGraphExecDestroy", unsafe {
                sys::cuGraphExecDestroy(self.raw)
            })
        });
    }
}
