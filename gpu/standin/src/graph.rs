//! Graphs (from capture), executable graphs, and user objects.
//!
//! A graph's nodes are kept in capture order, which is a topological order,
//! and an executable graph replays them one after another on the launching
//! stream: branches that a GPU could run concurrently run in sequence here.
//! Each launch of one executable graph is ordered after its previous launch.
//! User objects are released when the graphs and executable graphs holding
//! them are destroyed (after in-flight launches finish); their destructors run
//! on a separate thread, never inside the releasing call, after
//! `STREAMCOMM_STANDIN_DESTRUCTOR_DELAY_MS` (50 under the `h200` and `h100`
//! profiles, as the driver runs them asynchronously, some time later), and
//! must not call CUDA.

use std::ffi::c_uint;
use std::sync::{Arc, Mutex};

use crate::capture::{self, check_unsafe};
use crate::context::{Dep, lock};
use crate::device::{current, out};
use crate::error::{CAPTURE_UNSUPPORTED, INVALID_VALUE};
use crate::exec::{HostFn, Work};
use crate::guard::{as_host_fn, entry, unsupported};
use crate::handles::Registry;
use crate::stream::{stream_of, submit};

/// Graphs, by handle.
pub(crate) static GRAPHS: Registry<Graph> = Registry::new(0x14);
static EXECS: Registry<Exec> = Registry::new(0x15);
static OBJECTS: Registry<UserObject> = Registry::new(0x16);

/// One node: its work and the nodes it depends on.
pub(crate) struct Node {
    /// Indices of the nodes this one depends on.
    pub deps: Vec<usize>,
    /// What it does.
    pub work: Work,
}

/// A graph under construction or captured.
#[derive(Default)]
pub(crate) struct Graph {
    nodes: Mutex<Vec<Node>>,
    objects: Mutex<Vec<(Arc<UserObject>, u32)>>,
}

impl Graph {
    /// Appends a node; returns its index.
    pub(crate) fn push(&self, node: Node) -> usize {
        let mut n = lock(&self.nodes);
        n.push(node);
        n.len() - 1
    }

    /// Each node's dependencies.
    pub(crate) fn deps(&self) -> Vec<Vec<usize>> {
        lock(&self.nodes).iter().map(|n| n.deps.clone()).collect()
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        for (o, n) in std::mem::take(&mut *lock(&self.objects)) {
            o.release(n);
        }
    }
}

/// The handle a graph node is known by (for `cuStreamGetCaptureInfo_v2`).
pub(crate) fn node_handle(graph: usize, index: usize) -> usize {
    graph ^ ((index + 1) << 24)
}

/// An executable graph.
pub struct Exec {
    works: Vec<Work>,
    objects: Vec<(Arc<UserObject>, u32)>,
    last: Mutex<Option<Dep>>,
}

impl Exec {
    /// The nodes' work, in order.
    pub fn works(&self) -> &[Work] {
        &self.works
    }
}

impl Drop for Exec {
    fn drop(&mut self) {
        for (o, n) in self.objects.drain(..) {
            o.release(n);
        }
    }
}

/// A user object: a destructor run when the last reference goes.
pub(crate) struct UserObject {
    handle: Mutex<usize>,
    refs: Mutex<u32>,
    destroy: Mutex<Option<(HostFn, usize)>>,
}

impl UserObject {
    fn retain(&self, n: u32) {
        *lock(&self.refs) += n;
    }

    fn release(&self, n: u32) -> bool {
        let mut refs = lock(&self.refs);
        if n > *refs {
            return false;
        }
        *refs -= n;
        if *refs == 0 {
            let _ = OBJECTS.remove(*lock(&self.handle));
            if let Some((f, data)) = lock(&self.destroy).take() {
                let delay = crate::config::config().destructor_delay;
                let run = move || {
                    std::thread::sleep(delay);
                    // SAFETY: the application vouched for the destructor and
                    // its pointer at cuUserObjectCreate.
                    as_host_fn(|| unsafe { f(data as *mut std::ffi::c_void) })
                };
                if std::thread::Builder::new()
                    .name("cuda-standin-destructor".into())
                    .spawn(run)
                    .is_err()
                {
                    crate::guard::say(
                        "could not start a user-object destructor thread; the destructor is leaked",
                    );
                }
            }
        }
        true
    }
}

/// `cuGraphCreate`: an empty graph (flags must be 0).
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuGraphCreate(ph: *mut usize, flags: c_uint) -> u32 {
    entry("cuGraphCreate", || {
        current()?;
        if flags != 0 {
            return Err(INVALID_VALUE);
        }
        out(ph, GRAPHS.insert(Arc::new(Graph::default())))
    })
}

/// `cuGraphDestroy`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuGraphDestroy(h: usize) -> u32 {
    entry("cuGraphDestroy", || {
        current()?;
        GRAPHS.remove(h).map(|_| ())
    })
}

/// `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH`.
const AUTO_FREE_ON_LAUNCH: u64 = 1;

/// `cuGraphInstantiateWithFlags`: flags 0 or `AUTO_FREE_ON_LAUNCH` (which
/// frees the graph's memory-allocation nodes' memory before each relaunch;
/// the stand-in has no allocation nodes, since it refuses to capture
/// `cuMemAllocAsync` (module `pool`), so it changes nothing here, as on the
/// driver for such a graph); other flags are not implemented. Snapshots the
/// graph, whose user objects the executable graph also holds.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuGraphInstantiateWithFlags(
    ph: *mut usize,
    graph: usize,
    flags: u64,
) -> u32 {
    entry("cuGraphInstantiateWithFlags", || {
        current()?;
        let g = GRAPHS.get(graph)?;
        if ph.is_null() {
            return Err(INVALID_VALUE);
        }
        if flags & !AUTO_FREE_ON_LAUNCH != 0 {
            return Err(unsupported(
                "cuGraphInstantiateWithFlags with flags other than AUTO_FREE_ON_LAUNCH",
            ));
        }
        let works = lock(&g.nodes).iter().map(|n| n.work.clone()).collect();
        let objects: Vec<_> = lock(&g.objects).clone();
        for (o, n) in &objects {
            o.retain(*n);
        }
        out(
            ph,
            EXECS.insert(Arc::new(Exec {
                works,
                objects,
                last: Mutex::new(None),
            })),
        )
    })
}

/// `cuGraphLaunch`: replays the graph on the stream, after the previous launch
/// of the same executable graph. Into a capturing stream: 900.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuGraphLaunch(h: usize, stream: usize) -> u32 {
    entry("cuGraphLaunch", || {
        let exec = EXECS.get(h)?;
        let s = stream_of(stream)?;
        if let Some(cap) = capture::of(&s) {
            return Err(
                cap.invalidate_with(CAPTURE_UNSUPPORTED, "cuGraphLaunch into a capturing stream")
            );
        }
        let mut last = lock(&exec.last);
        let deps = last.iter().filter(|d| !d.is_done()).cloned().collect();
        if let Some(seq) = submit(&s, Work::Graph(exec.clone()), deps, "cuGraphLaunch")? {
            *last = Some(Dep { stream: s, seq });
        }
        Ok(())
    })
}

/// `cuGraphUpload`: nothing to upload; validates the handles.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuGraphUpload(h: usize, stream: usize) -> u32 {
    entry("cuGraphUpload", || {
        EXECS.get(h)?;
        stream_of(stream).map(|_| ())
    })
}

/// `cuGraphExecDestroy`: potentially unsafe during capture (900); a running
/// executable graph is freed when its launches finish.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuGraphExecDestroy(h: usize) -> u32 {
    entry("cuGraphExecDestroy", || {
        current()?;
        check_unsafe("cuGraphExecDestroy")?;
        EXECS.remove(h).map(|_| ())
    })
}

/// `cuUserObjectCreate`: flags must be `CU_USER_OBJECT_NO_DESTRUCTOR_SYNC`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuUserObjectCreate(
    ph: *mut usize,
    ptr: *mut std::ffi::c_void,
    destroy: Option<HostFn>,
    initial_refcount: c_uint,
    flags: c_uint,
) -> u32 {
    entry("cuUserObjectCreate", || {
        current()?;
        let Some(f) = destroy else {
            return Err(INVALID_VALUE);
        };
        if ph.is_null() || initial_refcount == 0 || flags != 1 {
            return Err(INVALID_VALUE);
        }
        let obj = Arc::new(UserObject {
            handle: Mutex::new(0),
            refs: Mutex::new(initial_refcount),
            destroy: Mutex::new(Some((f, ptr as usize))),
        });
        let h = OBJECTS.insert(obj.clone());
        *lock(&obj.handle) = h;
        out(ph, h)
    })
}

/// `cuUserObjectRetain`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuUserObjectRetain(h: usize, count: c_uint) -> u32 {
    entry("cuUserObjectRetain", || {
        current()?;
        if count == 0 {
            return Err(INVALID_VALUE);
        }
        OBJECTS.get(h)?.retain(count);
        Ok(())
    })
}

/// `cuUserObjectRelease`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuUserObjectRelease(h: usize, count: c_uint) -> u32 {
    entry("cuUserObjectRelease", || {
        current()?;
        if count == 0 || !OBJECTS.get(h)?.release(count) {
            return Err(INVALID_VALUE);
        }
        Ok(())
    })
}

/// `cuGraphRetainUserObject`: flags 0 (new references) or
/// `CU_GRAPH_USER_OBJECT_MOVE` (the caller's references move to the graph).
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuGraphRetainUserObject(
    graph: usize,
    h: usize,
    count: c_uint,
    flags: c_uint,
) -> u32 {
    entry("cuGraphRetainUserObject", || {
        current()?;
        let g = GRAPHS.get(graph)?;
        let o = OBJECTS.get(h)?;
        if count == 0 || flags > 1 {
            return Err(INVALID_VALUE);
        }
        if flags == 0 {
            o.retain(count);
        }
        lock(&g.objects).push((o, count));
        Ok(())
    })
}

/// `cuGraphReleaseUserObject`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuGraphReleaseUserObject(graph: usize, h: usize, count: c_uint) -> u32 {
    entry("cuGraphReleaseUserObject", || {
        current()?;
        let g = GRAPHS.get(graph)?;
        let o = OBJECTS.get(h)?;
        let mut objects = lock(&g.objects);
        let held: u32 = objects
            .iter()
            .filter(|(x, _)| Arc::ptr_eq(x, &o))
            .map(|(_, n)| n)
            .sum();
        if count == 0 || count > held {
            return Err(INVALID_VALUE);
        }
        let mut left = count;
        objects.retain_mut(|(x, n)| {
            if left == 0 || !Arc::ptr_eq(x, &o) {
                return true;
            }
            let take = left.min(*n);
            *n -= take;
            left -= take;
            *n > 0
        });
        drop(objects);
        o.release(count);
        Ok(())
    })
}
