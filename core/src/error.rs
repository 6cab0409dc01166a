//! The one public error type.
//!
//! Every fallible call of the library returns [`Error`]. Variants are grouped by
//! kind (mscclpp's `ErrorCode`), and carry what a user needs to act: the
//! operation, the peer and the cause. Errors are `Clone` because one error
//! raised on a stream or the proxy is stored once and returned by every later
//! call (NCCL's `asyncResult`).

use std::sync::Arc;

/// Result alias used throughout streamcomm.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in streamcomm.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument was out of range or inconsistent (names the argument).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The call was made in a state where it is not allowed (e.g. launching a
    /// graph while capturing, calling a collective from a rank of another size).
    #[error("invalid usage: {0}")]
    InvalidUsage(String),

    /// A needed facility is missing on this machine (no CUDA driver, no
    /// InfiniBand device, shared memory not available, ...).
    #[error("unavailable: {0}")]
    Unavailable(String),

    /// A wait took longer than the configured timeout.
    #[error("timed out after {waited_ms} ms in {op}: {what}")]
    Timeout {
        /// The operation that was waiting (e.g. `all_reduce #12`).
        op: String,
        /// What it was waiting for (e.g. `data from rank 3 over shm`).
        what: String,
        /// How long it waited, in milliseconds.
        waited_ms: u64,
    },

    /// The communicator or stream was aborted by `abort()` or by an earlier error.
    #[error("aborted: {0}")]
    Aborted(String),

    /// A peer rank failed, disconnected, or disagreed about the operation.
    #[error("rank {peer} failed during {op}: {cause}")]
    RemoteFailed {
        /// The peer's rank.
        peer: usize,
        /// The operation in progress.
        op: String,
        /// What was observed.
        cause: String,
    },

    /// A transport (shared memory, sockets) reported an error.
    #[error("{transport} transport error with rank {peer}: {cause}")]
    Transport {
        /// `shm`, `tcp`, ...
        transport: &'static str,
        /// The peer involved.
        peer: usize,
        /// The cause.
        cause: String,
    },

    /// The bootstrap (rendezvous of ranks) failed.
    #[error("bootstrap failed: {0}")]
    Bootstrap(String),

    /// An operating-system call failed.
    #[error("{call} failed: {source}")]
    Os {
        /// The call, with its important arguments.
        call: String,
        /// The OS error.
        #[source]
        source: Arc<std::io::Error>,
    },

    /// A user-supplied function enqueued on a stream failed or panicked.
    #[error("user task failed: {0}")]
    UserTask(String),

    /// A CUDA driver call failed (a driver that is missing altogether is
    /// [`Error::Unavailable`] instead). `code` and `name` are the driver's
    /// `CUresult`; `source()` is the CUDA layer's own error.
    ///
    /// ```
    /// use streamcomm::Error;
    /// fn out_of_memory(e: &Error) -> bool {
    ///     matches!(e, Error::Cuda { name: "CUDA_ERROR_OUT_OF_MEMORY", .. })
    /// }
    /// # assert!(!out_of_memory(&Error::invalid("x")));
    /// ```
    #[error("CUDA driver call {call} failed: {name} ({code})")]
    Cuda {
        /// The driver function, e.g. `cuMemcpyAsync`.
        call: String,
        /// The `CUresult` value, e.g. 2.
        code: u32,
        /// The driver's name of `code`, e.g. `CUDA_ERROR_OUT_OF_MEMORY`.
        name: &'static str,
        /// The error of the CUDA layer that reported it.
        #[source]
        source: Arc<dyn std::error::Error + Send + Sync>,
    },
}

impl Error {
    /// Wraps an I/O error with the call that produced it.
    pub fn os(call: impl Into<String>, source: std::io::Error) -> Error {
        Error::Os {
            call: call.into(),
            source: Arc::new(source),
        }
    }

    /// Shorthand for [`Error::InvalidArgument`].
    pub fn invalid(msg: impl Into<String>) -> Error {
        Error::InvalidArgument(msg.into())
    }
}
