//! The one public error type.
//!
//! Every fallible call of the library returns [`Error`]. Variants are grouped by
//! kind (mscclpp's `ErrorCode`), and carry what a user needs to act: the
//! operation, the peer and the cause. Errors are `Clone` because one error
//! raised on a stream or the proxy is stored once and returned by every later
//! call (NCCL's `asyncResult`).

use std::fmt;
use std::sync::Arc;

use streamcomm_kernels::{DataType, ReduceOp};

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

    /// Ranks made different calls at the same point of their programs: other
    /// collectives, element types, operators, counts or roots (or a message
    /// that did not fit the receive posted for it).
    ///
    /// Every rank of the communicator gets this error with the same story:
    /// two ranks whose calls were compared and found different, what each
    /// called, and this rank's own call. `culprit` is the rank whose call
    /// differs from the others' when `confirmed` (a third rank's call agreed
    /// with `witness`'s); otherwise only these two calls were compared and
    /// either rank may be the odd one out.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Backend, Communicator, Error, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// let id = UniqueId::new()?;
    /// let ranks: Vec<_> = (0..2)
    ///     .map(|rank| {
    ///         std::thread::spawn(move || -> streamcomm::Result<()> {
    ///             let comm = Communicator::init(&id, rank, 2, Backend::Host)?;
    ///             let stream = HostStream::new()?;
    ///             // Rank 1 passes 999 elements where rank 0 passes 1000.
    ///             let n = if rank == 1 { 999 } else { 1000 };
    ///             let send = HostBuffer::from_slice(&vec![1.0f32; n]);
    ///             let mut recv = HostBuffer::<f32>::zeroed(n);
    ///             comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &stream)?;
    ///             stream.synchronize()
    ///         })
    ///     })
    ///     .collect();
    /// for handle in ranks {
    ///     match handle.join().unwrap() {
    ///         Err(Error::Mismatch { culprit_call, witness_call, .. }) => {
    ///             let mut counts = [culprit_call.count, witness_call.count];
    ///             counts.sort();
    ///             assert_eq!(counts, [999, 1000]);
    ///         }
    ///         other => panic!("expected a mismatch, got {other:?}"),
    ///     }
    /// }
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    #[error("{op}: {}", mismatch_story(*.rank, *.culprit, .culprit_call, *.witness, .witness_call, .ours.as_ref(), *.confirmed))]
    Mismatch {
        /// The operation in progress on this rank (e.g. `all_reduce #12`).
        op: String,
        /// This rank.
        rank: usize,
        /// The rank whose call differs (see `confirmed`).
        culprit: usize,
        /// What `culprit` called.
        culprit_call: CallDesc,
        /// A rank whose call was compared with `culprit`'s.
        witness: usize,
        /// What `witness` called.
        witness_call: CallDesc,
        /// What this rank called, when it was in a collective.
        ours: Option<CallDesc>,
        /// True when a third rank's call agreed with `witness`'s, so that
        /// `culprit` is the one that differs from the others; false when only
        /// the two calls were compared.
        confirmed: bool,
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

    /// The rank this error blames: the culprit of a [`Error::Mismatch`], the
    /// peer of [`Error::RemoteFailed`] and [`Error::Transport`]; `None` for
    /// errors of this rank alone.
    ///
    /// # Examples
    /// ```
    /// use streamcomm::Error;
    /// let e = Error::RemoteFailed { peer: 3, op: "all_reduce #0".into(), cause: "it died".into() };
    /// assert_eq!(e.culprit(), Some(3));
    /// assert_eq!(Error::invalid("count").culprit(), None);
    /// ```
    pub fn culprit(&self) -> Option<usize> {
        match self {
            Error::Mismatch { culprit, .. } => Some(*culprit),
            Error::RemoteFailed { peer, .. } | Error::Transport { peer, .. } => Some(*peer),
            _ => None,
        }
    }

    /// The two calls a [`Error::Mismatch`] compared, as a record peers can
    /// be told.
    pub(crate) fn mismatch_note(&self) -> Option<MismatchNote> {
        match self {
            Error::Mismatch {
                culprit,
                culprit_call,
                witness,
                witness_call,
                ..
            } => Some(MismatchNote {
                suspect: *culprit,
                suspect_sig: culprit_call.sig,
                witness: *witness,
                witness_sig: witness_call.sig,
            }),
            _ => None,
        }
    }
}

/// One rank's call as the library saw it: the operation, its element type,
/// reduction operator, element count and root. Part of [`Error::Mismatch`],
/// so a program can branch on what differed.
///
/// `count` is the element count of the call's larger buffer (the total for
/// `all_gather`, the input for `reduce_scatter`); for a receive, the number
/// of elements the receive buffer holds.
///
/// # Examples
/// ```
/// use streamcomm::{CallDesc, Error};
/// fn counts_differ(e: &Error) -> Option<(u64, u64)> {
///     match e {
///         Error::Mismatch { culprit_call, witness_call, .. }
///             if culprit_call.op == witness_call.op =>
///         {
///             Some((culprit_call.count, witness_call.count))
///         }
///         _ => None,
///     }
/// }
/// assert_eq!(counts_differ(&Error::invalid("count")), None);
/// let _: Option<&CallDesc> = None;
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallDesc {
    /// `all_reduce`, `all_gather`, `reduce_scatter`, `broadcast`, `reduce`,
    /// `all_to_all`, `barrier`, `send` or `recv`.
    pub op: &'static str,
    /// The element type (`None` if the peer sent one this rank cannot name).
    pub dtype: Option<DataType>,
    /// The reduction operator, for reducing collectives.
    pub reduce: Option<ReduceOp>,
    /// The element count (see the type's documentation).
    pub count: u64,
    /// The root, for `broadcast` and `reduce`.
    pub root: Option<usize>,
    /// The packed signature this was decoded from (told to peers as is).
    pub(crate) sig: u64,
}

impl fmt::Display for CallDesc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.op)?;
        if self.op == "barrier" {
            return Ok(());
        }
        match self.dtype {
            Some(d) => write!(f, "({d}")?,
            None => f.write_str("(?")?,
        }
        if let Some(op) = self.reduce {
            write!(f, ", {op}")?;
        }
        if self.op == "recv" {
            write!(f, ", up to {}", self.count)?;
        } else {
            write!(f, ", {}", self.count)?;
        }
        if let Some(root) = self.root {
            write!(f, ", root {root}")?;
        }
        f.write_str(")")
    }
}

/// A mismatch record as ranks tell each other: `witness` compared its call
/// (signature `witness_sig`) with the slot `suspect` sent (`suspect_sig`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MismatchNote {
    pub suspect: usize,
    pub suspect_sig: u64,
    pub witness: usize,
    pub witness_sig: u64,
}

/// The text of [`Error::Mismatch`].
fn mismatch_story(
    rank: usize,
    culprit: usize,
    culprit_call: &CallDesc,
    witness: usize,
    witness_call: &CallDesc,
    ours: Option<&CallDesc>,
    confirmed: bool,
) -> String {
    let who = |r: usize| {
        if r == rank {
            format!("rank {r} (this rank)")
        } else {
            format!("rank {r}")
        }
    };
    let mut s = format!(
        "{} called {culprit_call} where {} called {witness_call}",
        who(culprit),
        who(witness)
    );
    if let Some(ours) = ours.filter(|_| rank != culprit && rank != witness) {
        s += &format!("; rank {rank} (this rank) called {ours}");
    }
    if confirmed {
        s += &format!(" [culprit: rank {culprit}, whose call differs from the other ranks']");
    } else {
        s += &format!(
            " [ranks {culprit} and {witness} disagree; which of them differs from the rest is unknown]"
        );
    }
    s
}
