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

    /// A peer rank failed or disconnected (ranks whose calls differ get
    /// [`Error::Mismatch`] instead).
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
    /// that did not fit the receive posted for it). Every rank gets this
    /// error with the same story; see [`Mismatch`].
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, Error, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// let id = UniqueId::new()?;
    /// let ranks: Vec<_> = (0..2)
    ///     .map(|rank| {
    ///         std::thread::spawn(move || -> streamcomm::Result<()> {
    ///             let comm = Communicator::init(&id, rank, 2)?;
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
    ///         Err(Error::Mismatch(m)) => {
    ///             let mut counts = [m.culprit_call.count, m.witness_call.count];
    ///             counts.sort();
    ///             assert_eq!(counts, [999, 1000]);
    ///             assert!(m.to_string().contains("999"));
    ///         }
    ///         other => panic!("expected a mismatch, got {other:?}"),
    ///     }
    /// }
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    #[error("{0}")]
    Mismatch(Box<Mismatch>),

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
            Error::Mismatch(m) => Some(m.culprit),
            Error::RemoteFailed { peer, .. } | Error::Transport { peer, .. } => Some(*peer),
            _ => None,
        }
    }

    /// The two calls a [`Error::Mismatch`] compared, as a record peers can
    /// be told.
    #[doc(hidden)]
    pub fn mismatch_note(&self) -> Option<MismatchNote> {
        match self {
            Error::Mismatch(m) => Some(MismatchNote {
                suspect: m.culprit,
                suspect_sig: m.culprit_call.sig,
                witness: m.witness,
                witness_sig: m.witness_call.sig,
            }),
            _ => None,
        }
    }
}

/// What [`Error::Mismatch`] says: two ranks whose calls were compared and
/// found different, what each called, and this rank's own call.
///
/// `culprit` is the rank whose call differs from the others' when
/// `confirmed` (a third rank's call agreed with `witness`'s). Otherwise only
/// these two calls were compared and either rank may be the odd one out
/// (two ranks, or point-to-point). Its text ends with `[culprit: rank N, ...]`
/// when confirmed, which `streamcomm-run` looks for to name the rank that
/// caused a job's failure.
///
/// # Examples
/// ```
/// use streamcomm::Error;
/// /// The rank to blame for `e`, when its call is known to be the odd one.
/// fn odd_rank(e: &Error) -> Option<usize> {
///     match e {
///         Error::Mismatch(m) if m.confirmed => Some(m.culprit),
///         _ => None,
///     }
/// }
/// assert_eq!(odd_rank(&Error::invalid("count")), None);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Mismatch {
    /// The operation in progress on this rank (e.g. `all_reduce #12`).
    pub op: String,
    /// This rank.
    pub rank: usize,
    /// The rank whose call differs (see `confirmed`).
    pub culprit: usize,
    /// What `culprit` called.
    pub culprit_call: CallDesc,
    /// A rank whose call was compared with `culprit`'s.
    pub witness: usize,
    /// What `witness` called.
    pub witness_call: CallDesc,
    /// What this rank called, when it was in a collective.
    pub ours: Option<CallDesc>,
    /// True when a third rank's call agreed with `witness`'s, so that
    /// `culprit` is the one that differs from the others; false when only
    /// the two calls were compared.
    pub confirmed: bool,
}

impl Mismatch {
    /// A mismatch seen by `rank` during `op`, between `culprit`'s call and
    /// `witness`'s (each a rank and what it called): how streamcomm
    /// reports one; programs read mismatches, they do not make them.
    #[doc(hidden)]
    pub fn between(
        op: String,
        rank: usize,
        culprit: (usize, CallDesc),
        witness: (usize, CallDesc),
        ours: Option<CallDesc>,
        confirmed: bool,
    ) -> Mismatch {
        Mismatch {
            op,
            rank,
            culprit: culprit.0,
            culprit_call: culprit.1,
            witness: witness.0,
            witness_call: witness.1,
            ours,
            confirmed,
        }
    }
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let who = |r: usize| {
            if r == self.rank {
                format!("rank {r} (this rank)")
            } else {
                format!("rank {r}")
            }
        };
        write!(
            f,
            "{}: {} called {} where {} called {}",
            self.op,
            who(self.culprit),
            self.culprit_call,
            who(self.witness),
            self.witness_call
        )?;
        if let Some(ours) = &self.ours
            && self.rank != self.culprit
            && self.rank != self.witness
        {
            write!(f, "; rank {} (this rank) called {ours}", self.rank)?;
        }
        if self.confirmed {
            write!(
                f,
                " [culprit: rank {}, whose call differs from the other ranks']",
                self.culprit
            )
        } else {
            write!(
                f,
                " [ranks {} and {} disagree; which of them differs from the rest is unknown]",
                self.culprit, self.witness
            )
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
/// /// The element counts of two calls of the same collective that differed.
/// fn counts(e: &Error) -> Option<(u64, u64)> {
///     let Error::Mismatch(m) = e else { return None };
///     let (a, b): (&CallDesc, &CallDesc) = (&m.culprit_call, &m.witness_call);
///     (a.op == b.op && a.dtype == b.dtype).then_some((a.count, b.count))
/// }
/// assert_eq!(counts(&Error::invalid("count")), None);
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
    /// The packed signature this was decoded from (told to peers as is):
    /// streamcomm's own, no promise of its layout.
    #[doc(hidden)]
    pub sig: u64,
}

impl CallDesc {
    /// The call that the packed signature `sig` describes, decoded into
    /// its parts: how streamcomm reports one; programs read these.
    #[doc(hidden)]
    pub fn decoded(
        op: &'static str,
        dtype: Option<DataType>,
        reduce: Option<ReduceOp>,
        count: u64,
        root: Option<usize>,
        sig: u64,
    ) -> CallDesc {
        CallDesc {
            op,
            dtype,
            reduce,
            count,
            root,
            sig,
        }
    }
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
#[doc(hidden)]
pub struct MismatchNote {
    /// The rank whose slot differed.
    pub suspect: usize,
    /// Its call's signature.
    pub suspect_sig: u64,
    /// The rank that compared.
    pub witness: usize,
    /// The witness's own call's signature.
    pub witness_sig: u64,
}
