//! `Graph`: captured stream work that can be replayed.
//!
//! Capture keeps the tasks, not their effects. Each [`Graph::launch`] prepares
//! every task again, in order, as one unit on the target stream: a collective
//! takes a fresh turn on its communicator, user functions run again, doorbell
//! waits and writes use the fixed values they were captured with (the graph
//! replay rule, `docs/design/architecture.md`).

use std::sync::Arc;

use crate::host::job::{Job, JobMode, Task};
use crate::host::stream::HostStream;
use crate::{Error, Result};

/// A replayable sequence of captured stream tasks (`cudaGraphExec_t`).
#[derive(Clone)]
pub struct Graph {
    tasks: Arc<Vec<Arc<dyn Task>>>,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.tasks.iter().map(|t| t.name()).collect();
        f.debug_struct("Graph").field("tasks", &names).finish()
    }
}

impl Graph {
    pub(crate) fn new(tasks: Vec<Arc<dyn Task>>) -> Graph {
        Graph {
            tasks: Arc::new(tasks),
        }
    }

    /// Number of captured tasks.
    ///
    /// # Examples
    /// ```
    /// let stream = streamcomm::host::HostStream::new()?;
    /// stream.begin_capture()?;
    /// stream.host_fn(|| {})?;
    /// stream.host_fn(|| {})?;
    /// assert_eq!(stream.end_capture()?.len(), 2);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// True when nothing was captured.
    ///
    /// # Examples
    /// ```
    /// let stream = streamcomm::host::HostStream::new()?;
    /// stream.begin_capture()?;
    /// assert!(stream.end_capture()?.is_empty());
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Enqueues one replay of the graph on `stream`.
    ///
    /// # Stream semantics
    /// The replay runs after earlier work on `stream` and before later work;
    /// its tasks run in captured order. If one fails, the rest are skipped.
    ///
    /// # Examples
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::sync::Arc;
    /// let stream = streamcomm::host::HostStream::new()?;
    /// let runs = Arc::new(AtomicU32::new(0));
    /// let r = runs.clone();
    /// stream.begin_capture()?;
    /// stream.host_fn(move || {
    ///     r.fetch_add(1, Ordering::Relaxed);
    /// })?;
    /// let graph = stream.end_capture()?; // captured, not run
    /// for _ in 0..3 {
    ///     graph.launch(&stream)?;
    /// }
    /// stream.synchronize()?;
    /// assert_eq!(runs.load(Ordering::Relaxed), 3);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidUsage`] when `stream` is itself capturing.
    pub fn launch(&self, stream: &HostStream) -> Result<()> {
        if stream.is_capturing() {
            return Err(Error::InvalidUsage(
                "cannot launch a graph on a stream that is capturing".into(),
            ));
        }
        let jobs: Vec<Job> = self.tasks.iter().map(|t| t.prepare()).collect();
        stream.enqueue_job(Box::new(move |mode| {
            let mut first_error = None;
            for job in jobs {
                let m = if first_error.is_some() {
                    JobMode::Skip
                } else {
                    mode
                };
                if let Err(e) = job(m) {
                    first_error.get_or_insert(e);
                }
            }
            first_error.map_or(Ok(()), Err)
        }))
    }
}
