//! streamcomm: stream-ordered collectives, point-to-point and barriers.
//!
//! A call such as [`Communicator::all_reduce`] appends the collective to a
//! stream and returns at once; it runs when the stream reaches it, in order
//! with the program's own work, and it can be captured into a
//! [`host::Graph`] and replayed. Streams are the host backend's
//! ([`host::HostStream`]: CPU streams with CUDA stream semantics) or cudarc's
//! CUDA streams through [`cuda::CudaComm`].
//!
//! # Quick start
//! ```
//! use streamcomm::bootstrap::UniqueId;
//! use streamcomm::host::{HostBuffer, HostStream};
//! use streamcomm::{Communicator, ReduceOp};
//!
//! // Two ranks as threads; processes use `Communicator::from_env()` under
//! // `streamcomm-run`, torchrun, Slurm, Open MPI or PMI.
//! let id = UniqueId::new()?;
//! let ranks: Vec<_> = (0..2)
//!     .map(|rank| {
//!         std::thread::spawn(move || -> streamcomm::Result<Vec<f64>> {
//!             let comm = Communicator::init(&id, rank, 2)?;
//!             let stream = HostStream::new()?;
//!             let send = HostBuffer::from_slice(&[rank as f64; 8]);
//!             let mut recv = HostBuffer::<f64>::zeroed(8);
//!             comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &stream)?; // enqueued
//!             comm.barrier(&stream)?;
//!             stream.synchronize()?; // now complete
//!             Ok(recv.to_vec())
//!         })
//!     })
//!     .collect();
//! for r in ranks {
//!     assert_eq!(r.join().unwrap()?, vec![1.0; 8]);
//! }
//! # Ok::<(), streamcomm::Error>(())
//! ```
//!
//! # Features
//! - Collectives: all-reduce, all-gather, reduce-scatter, broadcast, reduce,
//!   all-to-all (in place and out of place), every [`DataType`] × [`ReduceOp`],
//!   with algorithms chosen per call by a cost model
//!   ([`Communicator::algorithm`] says which; `STREAMCOMM_ALGO` forces one).
//! - Point-to-point: `send` / `recv` ordered per peer, eager or rendezvous,
//!   [`Communicator::group`] for several at once, `all_to_allv`, `gather`,
//!   `scatter`.
//! - Barriers: stream-ordered and host-blocking, eight algorithms
//!   ([`barrier::BarrierAlgo`]).
//! - Transports: shared memory between ranks of one host, tcp between hosts,
//!   InfiniBand/RoCE verbs with the `verbs` cargo feature.
//! - Errors instead of hangs: every wait has a timeout; a failed or aborted
//!   rank fails its peers' pending operations promptly, naming it.
//!
//! Cargo features: `cuda` (on by default: the CUDA backend, libraries
//! loaded at run time), `verbs` (InfiniBand/RoCE; libibverbs loaded at run
//! time, nothing needed to build), `fault-injection` (tests only).
//!
//! Guides (launching, configuration, failures, CUDA, verbs, benchmarks) and
//! design notes live in the repository's `docs/` directory.
//!
//! # Runtime libraries
//! None beyond libc: shared memory is POSIX `shm_open`, waits use Linux
//! futexes, the bootstrap and tcp are plain sockets. The CUDA backend
//! ([`cuda`], feature `cuda`, on by default) loads libcuda and NVRTC at run
//! time and reports [`Error::Unavailable`] where they are missing.
//!
//! # Thread safety
//! [`Communicator`], [`host::HostStream`] and buffers are `Send + Sync`.
//! A communicator's operations run in the order they were issued, whatever
//! stream or thread issued them; every rank must issue them in the same order.
//!
//! # Cleanup
//! Dropping a stream finishes its enqueued work; dropping the last handle of
//! a communicator flushes what its tcp connections staged, says goodbye to
//! its peers and unmaps its shared memory. Shared-memory names are unlinked as
//! soon as every peer has mapped them, so a crash leaves nothing in `/dev/shm`.
//!
//! # Configuration
//! [`Config`] (one field per `STREAMCOMM_*` variable, see [`config`]).
//!
//! # Layers
//! The public API is what this page lists; every other module is internal.
//! The modules depend on each other bottom to top only, never in a cycle
//! (`scripts/check-layers.py` checks it):
//!
//! ```text
//!  7  cuda                                   CudaComm: the CUDA API
//!  6  device                                 device-side execution of operations
//!  5  comm                                   the Communicator
//!  4  transport                              the slot seam and the links that move slots between ranks
//!  3  host       launch     tuning           host streams, launchers' environments, algorithm choice
//!  2  config                                 settings
//!  1  barrier    bootstrap  engine           barriers at run time (flag memory, execution, multicast), rank rendezvous, progress thread
//!  0  framed     os_limits  wait             the framed tcp protocols' head, the OS's limits, waiting
//!  ─  streamcomm-algo, streamcomm-types      crates below them all: plans of data and flag steps and both simulators; the vocabulary
//! ```
//!
//! Some control flows up past that order, through a callback kept in a
//! static or a trait that a lower module defines and an upper one
//! implements (a stream runs the communicator's tasks, the progress engine
//! polls the transports' sources, ...): the one list of these channels,
//! with why each is there, is the design page's table ("Upward channels"
//! in `docs/design/architecture.md`), which the script checks.
//!
//! Below every module, two crates of their own: the vocabulary
//! (`streamcomm-types`: [`Error`], [`Result`], [`Collective`],
//! [`Algorithm`], [`barrier::BarrierAlgo`]) and the algorithms
//! (`streamcomm-algo`, internal: collectives as plans of data steps with
//! their signatures, the message barrier and the data-step simulator;
//! barriers as plans of flag steps with their interpreter and the flag
//! simulator), which the runtime names `plan` and `barrier::{build, exec,
//! ...}`.
//!
//! Each folder's job:
//! - `wait.rs`: how every wait spins, yields, sleeps and times out.
//! - `os_limits.rs`: the OS limits that grow with ranks: the open-file limit, raised to the hard one when a communicator's sockets reach it, and listen backlogs.
//! - `framed.rs`: the head the three framed tcp protocols share (magic, version, the secret compared in constant time) and bounded field reads.
//! - `config/`: [`Config`] and the types of its fields, parsed from `STREAMCOMM_*`; depends on nothing of this crate but `barrier` (whose [`barrier::BarrierAlgo`] is a field's type).
//! - `bootstrap/`: [`bootstrap::UniqueId`] and the root and client that let ranks meet.
//! - `engine/`: the progress engine, a communicator's one background thread (tcp and verbs progress, the peer watch, off-stream barriers, the CUDA backend's host side).
//! - `barrier/`: barriers at run time: the default choice, the flag memory of each rank's segment, the barriers' execution, the multicast barrier; the communicator's barrier part (its state, stream tasks and multicast service) is `comm/barrier/`.
//! - `host/`: the host backend: streams, events, doorbells, graphs, buffers.
//! - `tuning/`: the cost model and the choice of an algorithm per call.
//! - `launch/`: the variables of launchers (`streamcomm-run`, torchrun, Slurm, Open MPI, PMI) that `Communicator::from_env` reads.
//! - `transport/`: shared memory, tcp and verbs links and their slot rings.
//! - `comm/`: the [`Communicator`]: creation, collectives, barriers, point-to-point.
//! - `device/`: communicator operations on device streams (staged and direct paths).
//! - `cuda/`: [`cuda::CudaComm`], the CUDA API (its module docs map all CUDA code).
//! - `testing.rs`: internals the benchmark and integration tests reach (hidden, not public API).
#![deny(unreachable_pub)]

pub mod barrier;
pub mod bootstrap;
pub(crate) mod comm;
pub mod config;
#[cfg(feature = "cuda")]
pub mod cuda;
pub(crate) mod device;
pub(crate) mod engine;
pub(crate) mod framed;
pub mod host;
pub mod launch;
pub(crate) mod os_limits;
#[doc(hidden)]
pub mod testing;
pub(crate) mod transport;
pub(crate) mod tuning;
pub(crate) mod wait;

/// The README's programs, compiled with the doc tests so that they cannot
/// drift from the API (its fragments are marked `ignore`; one program uses
/// the CUDA backend).
#[cfg(all(doctest, feature = "cuda"))]
#[doc = include_str!("../../README.md")]
mod readme {}

pub use comm::{
    AsBufView, BufView, Communicator, CommunicatorBuilder, Group, P2pStats, RawBuffers, RawSpan,
    UntypedBuffer,
};
pub use config::{Config, Transport};
pub use streamcomm_types::{
    Algorithm, CallDesc, Collective, DataType, Error, Mismatch, ReduceOp, Result,
};

/// The plans of collectives and barriers, from the internal crate
/// `streamcomm-algo`, under the name the runtime has always used.
pub(crate) use streamcomm_algo::plan;
pub use transport::device_span::GpuDirectMode;
