//! The CUDA backend: communicator operations on cudarc streams and buffers.
//!
//! ```no_run
//! use cudarc::driver::CudaContext;
//! use streamcomm::cuda::{self, CudaComm};
//! use streamcomm::{Communicator, ReduceOp};
//!
//! let comm = Communicator::from_env()?;          // under streamcomm-run, torchrun, Slurm…
//! let devices = cuda::device_count()?;           // Error::Unavailable without CUDA, never a panic
//! let ctx = CudaContext::new(comm.rank() % devices).expect("probed above");
//! let cuda = CudaComm::new(&comm, ctx.clone())?; // collective: every rank calls it
//! let stream = ctx.new_stream().expect("stream");
//! let send = stream.clone_htod(&[1.0f32; 1024]).expect("copy");
//! let mut recv = stream.alloc_zeros::<f32>(1024).expect("alloc");
//! cuda.all_reduce(&send, &mut recv, ReduceOp::Sum, &stream)?; // enqueued, returns at once
//! cuda.barrier(&stream)?;
//! stream.synchronize().expect("sync");
//! # Ok::<(), streamcomm::Error>(())
//! ```
//!
//! [`CudaComm::new`] binds a communicator to the cudarc context a program
//! already holds (a device's primary context, which is what
//! `CudaContext::new` returns); [`CudaComm::on_device`] opens that context
//! itself from an ordinal, and [`CudaComm::context`] hands it out. Every
//! operation of [`Communicator`] is here with cudarc buffers and a stream:
//! the collectives, `gather`, `scatter` and `all_to_allv` (one group of
//! sends and receives each), `send`, `recv` and groups
//! ([`CudaComm::group`]), and the barrier; [`raw`](CudaComm::collective_raw)
//! forms take device addresses and stream handles.
//!
//! A failed driver call is [`Error::Cuda`], with the driver's `CUresult`
//! (`code`, and `name` such as `CUDA_ERROR_OUT_OF_MEMORY`) and the CUDA
//! layer's error as its `source()`; a machine without a usable driver gets
//! [`Error::Unavailable`] instead.
//!
//! # How it runs
//! Two paths; [`CudaComm::new`] picks one for the communicator, alike on
//! every rank ([`CudaComm::uses_direct_path`] says which):
//!
//! - **Direct** (ranks of one host, the default there): each rank owns a
//!   window of device memory that every other rank maps (CUDA IPC between
//!   processes, so several ranks may share a GPU; the plain address between
//!   threads of one process on different devices), and a page of flag words
//!   in shared host memory that every rank registers with its device. A
//!   call is enqueued on the caller's stream as device work only: a copy of
//!   the input into the window, a *ready* round of `cuStreamWriteValue32`
//!   into the peers' flag pages and `cuStreamWaitValue32` on its own, the
//!   NVRTC reduce kernel reading every rank's window (a copy out of a
//!   peer's window is the same kernel with one source), and a *done* round, per chunk of
//!   `STREAMCOMM_CUDA_WINDOW` bytes (default 32 MiB). No host thread takes
//!   part and no host function runs per call. Reductions over more than 8
//!   ranks, and p2p groups, take the staged path. See
//!   `core/src/device/direct/mod.rs` for the protocol and why it is replay-safe.
//! - **Staged** (ranks on several hosts, `STREAMCOMM_CUDA_WINDOW=0`, or
//!   where a window cannot be mapped): each call enqueues a copy of the input
//!   into pinned host-mapped staging memory, a host function
//!   (`cuLaunchHostFunc`) that hands the host backend's task for the call to
//!   this communicator's progress engine, a `cuStreamWaitValue32` on a
//!   completion word the engine sets when the task is done (then a write of
//!   0), and a copy of the output back. The plans, transports (shm, tcp,
//!   verbs) and reductions are the host backend's own; the data crosses
//!   PCIe twice. The sends and receives of a p2p group with peers over
//!   verbs skip staging where GPUDirect RDMA works
//!   ([`CudaComm::gpudirect`]): the NIC reads and writes device memory.
//!
//! Every step of both paths is capturable: a CUDA graph that captured a
//! call runs a fresh, correct collective at every replay, and the call's
//! resources are released with the graph (a CUDA user object).
//!
//! # One rank per GPU per process
//! [`CudaComm::new`] refuses ([`Error::InvalidUsage`], on every rank) a
//! communicator with two ranks that are threads of one process on one GPU,
//! as NCCL does. Such ranks share one context, whose streams share a
//! bounded set of hardware queues (`CUDA_DEVICE_MAX_CONNECTIONS`): when two
//! ranks' streams alias onto one queue, one rank's stream-memory wait sits
//! in front of the other's signal, and the driver, which does not see the
//! ordering that stream memory operations express, never reorders them.
//! Several ranks per GPU in separate processes (each with its own context)
//! work, and so do ranks as threads on different GPUs. Threads that share a
//! GPU should share one rank, or run as processes (`streamcomm-run`).
//!
//! # Errors instead of hangs
//! A staged task that fails still raises its completion word. On the direct
//! path the progress engine checks every 100 ms that the peer processes live
//! (or left after dropping their communicator cleanly) and that the
//! communicator has not failed; on a failure it fails the communicator,
//! raises this rank's abort word and keeps raising its flag words, with
//! CPU stores (no stream, so no hardware queue a parked wait holds), so
//! waiting streams drain; every kernel reading a peer's window reads the
//! abort word first and does nothing, so no survivor touches a dead peer's
//! memory. Either way the error is kept ([`CudaComm::async_error`]) and
//! returned by every later call.
//!
//! # Buffers and streams
//! Buffers are cudarc's [`CudaSlice`](cudarc::driver::CudaSlice),
//! [`CudaView`](cudarc::driver::CudaView) or
//! [`CudaViewMut`](cudarc::driver::CudaViewMut) (anything
//! [`DevicePtr`]/[`DevicePtrMut`]), and cudarc's event tracking is honoured:
//! the call waits for earlier writes of its inputs and records its reads and
//! writes, as a cudarc kernel launch does. The stream must be a stream of
//! the `CudaComm`'s context ([`CudaComm::context`]; any other is refused
//! with [`Error::InvalidArgument`]). While a stream captures a graph,
//! cudarc's tracking would make it wait on events recorded before the
//! capture, which the driver refuses: a call on a capturing stream with
//! tracking on is refused with [`Error::InvalidArgument`] naming
//! `disable_event_tracking`. Synchronize the streams (or drop captured
//! graphs) before dropping the `CudaComm`: its drop waits (at most 2 s) for
//! the driver to hand back what they held, and frees it on the dropping
//! thread; what is still held after that is leaked, never freed under the
//! device or on a driver thread.
//!
//! # Verified where
//! On a CUDA driver, through this module's real queue, cudarc and libcuda:
//! `core/tests/cuda/` runs every collective and dtype on both paths with 2
//! and 4 ranks (processes, windows over CUDA IPC), captured steps replayed
//! with fresh data, p2p groups, gather, scatter and all_to_allv, a driver
//! failure's `CUresult`, bad arguments, aborting and dead peers, the
//! fall-back past eight ranks, and the refusals above. Without a GPU they
//! run against the CPU stand-in libcuda (`gpu/standin`), which enforces the
//! driver's rules (capture refusals, legacy-stream ordering, shared hardware
//! queues, memop waits that never time out) but not the GPU memory model,
//! timing, or the CUDA C kernels' code: `scripts/gpu-check.sh --stand-in`
//! runs them there, and `scripts/gpu-check.sh --prepare DIR` bundles them
//! for a GPU machine, which alone checks those. The first run on the
//! stand-in found, and these tests keep fixed: staging allocated and frees
//! made while the caller's stream captured (now in relaxed capture mode,
//! frees deferred), ranks of one process sharing a GPU (now refused; this
//! also rules out cudarc's first `new_stream()` of one rank synchronising
//! the context while another rank's stream waits), and a panicking rank
//! thread that its peers never saw gone (now it fails the communicator).
//! The stand-in's `h200` profile and strict mode found more, each kept
//! fixed by a test: frees on driver threads after a captured call, the
//! dead-peer rescue hanging on one hardware queue, reads of a dead peer's
//! window, capture with event tracking on, and frees that invalidated
//! another thread's global capture (`docs/guide/cuda.md` has the table).
//!
//! # Where the CUDA code lives
//! Three homes, each with one job; a file's path says which it is.
//!
//! | path | job |
//! |---|---|
//! | `gpu/` (crate `streamcomm-gpu`) | **driver wrapping**: libcuda and NVRTC behind safe types (devices, memory, pinned memory, streams, stream memory operations, IPC, dma-buf, graphs, kernels); knows nothing of communicators |
//! | `core/src/cuda/` (this module) | **the communicator's CUDA API**: [`CudaComm`] and what users call on it |
//! | `core/src/device/` | **device-side execution** of communicator operations, for any device: the staged and direct paths, over the traits a device implements |
//! | `core/src/device/cuda/` | those traits implemented on `streamcomm-gpu`: the CUDA device |
//!
//! File by file:
//!
//! - `cuda/mod.rs`: [`CudaComm`], its construction and this glossary.
//! - `cuda/collectives.rs`: the collectives and the barrier on cudarc buffers.
//! - `cuda/group.rs`: `send`, `recv` and [`CudaGroup`] on cudarc buffers.
//! - `cuda/grouped.rs`: `gather`, `scatter` and `all_to_allv`, each one group of sends and receives.
//! - `cuda/raw.rs`: the same on raw device pointers and stream handles (C API, PyTorch).
//! - `cuda/placement.rs`: the one-rank-per-GPU-per-process check.
//! - `device/mod.rs`: the staged path, step by step.
//! - `device/device_queue.rs`: the traits a device implements (`DeviceQueue`, staging memory, completion words).
//! - `device/call.rs`: one operation on a device stream (buffers, host task, the steps it enqueues).
//! - `device/pool.rs`: what one communicator keeps per device (staging pools, direct path, NIC access).
//! - `device/runner.rs`: the host thread that runs staged tasks, and the graveyard of finished operations' resources.
//! - `device/gpudirect_probe.rs`: whether a communicator uses GPUDirect RDMA, and the probe that picks its mode.
//! - `device/direct/`: the direct path: `window.rs` (the windows every rank maps), `steps.rs` (a collective as copies, flag rounds and reductions), `window_watch.rs` (dead peers become errors).
//! - `device/cuda/cuda_queue.rs`: the CUDA `DeviceQueue` (pinned staging, doorbells, host functions, stream memory operations).
//! - `device/cuda/cuda_windows.rs`: direct-path windows in CUDA memory, shared by CUDA IPC.
//! - `device/cuda/cuda_nic.rs`: how the NIC reaches CUDA memory (dma-buf export, write flush) and its probe.
//! - `device/emulated.rs`, `device/tests.rs`, `device/gpudirect_probe_tests.rs`: a host stream playing a device, for the GPUDirect RDMA tests.
//! - `transport/device_span.rs`: device memory as the NIC sees it (`GpuDirectMode`, device spans, the access a device implements).
//! - `transport/verbs/gpudirect.rs`: registering device memory with the NIC (verbs side of GPUDirect RDMA).

mod collectives;
mod group;
mod grouped;
pub mod nccl;
mod placement;
mod raw;

use std::mem::ManuallyDrop;
use std::sync::Arc;

pub use cudarc;
use cudarc::driver::{CudaContext, CudaStream};
use streamcomm_gpu::{Device, GpuConfig, Kernels, SignalPath, Signals, Stream, relaxed_capture};

use crate::device::cuda::{CudaQueue, CudaSignal, CudaStaging};
use crate::device::cuda::{establish_direct, establish_gpudirect, gpu_error};
use crate::device::{DeviceCall, DeviceShared};
use crate::{Communicator, Error, Result};

pub use cudarc::driver::{DevicePtr, DevicePtrMut};
pub use group::CudaGroup;
pub use raw::RawP2p;

/// The number of CUDA devices (at least 1), probing the driver first:
/// [`Error::Unavailable`] (never a panic) where no usable CUDA driver is
/// installed or it reports no device. cudarc's own calls,
/// `CudaContext::new` among them, panic where the driver library is
/// missing, so a program that must also run without a GPU asks here before
/// it makes a context.
///
/// # Examples
/// ```
/// use streamcomm::cuda;
///
/// match cuda::device_count() {
///     Ok(n) => println!("{n} CUDA device(s)"),
///     Err(e) => println!("no CUDA here: {e}"), // Error::Unavailable
/// }
/// ```
///
/// # Errors
/// [`Error::Unavailable`] without a usable driver (library missing, too old,
/// or the toolkit's link-time stub) or without a device.
pub fn device_count() -> Result<usize> {
    match Device::count().map_err(gpu_error)? {
        0 => Err(Error::Unavailable(
            "the CUDA driver reports no device (CUDA_VISIBLE_DEVICES?)".into(),
        )),
        n => Ok(n),
    }
}

/// A [`Communicator`] bound to one CUDA context (a device's primary
/// context, the one cudarc's `CudaContext::new(ordinal)` returns):
/// collectives, point-to-point calls and barriers on that context's cudarc
/// streams.
pub struct CudaComm {
    comm: Communicator,
    /// Why the direct path is off (`None`: collectives take it).
    direct_off: Option<String>,
    device: Device,
    // Dropped by `Drop`, in relaxed capture mode (they free device memory).
    signals: ManuallyDrop<Signals>,
    kernels: Option<Kernels>,
    shared: ManuallyDrop<DeviceShared<CudaStaging, CudaSignal>>,
    /// Last: dropped after everything that may still use the context.
    ctx: Arc<CudaContext>,
}

impl std::fmt::Debug for CudaComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaComm")
            .field("comm", &self.comm)
            .field("device", &self.device)
            .field("signals", &self.signals.path())
            .finish()
    }
}

impl CudaComm {
    /// Binds `comm` to `ctx`, the cudarc context (of device
    /// `ctx.ordinal()`) whose streams and buffers the calls will use.
    ///
    /// Collective, like `ncclCommInitRank`: every rank of `comm` calls it
    /// (with the same `STREAMCOMM_CUDA_WINDOW`), since the ranks exchange
    /// their direct-path windows here and agree on the path. The context
    /// must be its device's primary context, as every context cudarc makes
    /// is; streams of any other context are refused by every call.
    ///
    /// # Examples
    /// ```no_run
    /// use streamcomm::cuda::cudarc::driver::CudaContext;
    /// use streamcomm::cuda::CudaComm;
    /// use streamcomm::Communicator;
    ///
    /// let comm = Communicator::from_env()?;
    /// let devices = streamcomm::cuda::device_count()?; // Unavailable, not a panic, without CUDA
    /// let ctx = CudaContext::new(comm.rank() % devices).expect("the probe found the driver");
    /// let cuda = CudaComm::new(&comm, ctx.clone())?;
    /// assert_eq!(cuda.device_ordinal(), comm.rank() % devices);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `ctx` is not its device's primary
    /// context; [`Error::Unavailable`] when the device has no stream memory
    /// operations and the NVRTC spin kernels cannot be built;
    /// [`Error::InvalidUsage`] when two ranks of `comm` are threads of one
    /// process on one device (see the module docs); [`Error::Cuda`] when a
    /// driver call fails.
    pub fn new(comm: &Communicator, ctx: Arc<CudaContext>) -> Result<CudaComm> {
        // Relaxed capture mode: the allocations and the zeroing below must
        // not fail, or invalidate, a capture another thread has open in
        // global mode (PyTorch's default).
        relaxed_capture(|| CudaComm::create(comm, ctx)).map_err(gpu_error)?
    }

    /// [`CudaComm::new`]'s body.
    fn create(comm: &Communicator, ctx: Arc<CudaContext>) -> Result<CudaComm> {
        let ordinal = ctx.ordinal();
        placement::check_one_rank_per_gpu(comm, ordinal)?;
        let device = Device::open(ordinal).map_err(gpu_error)?;
        if device.as_raw() != ctx.cu_ctx() {
            return Err(Error::invalid(format!(
                "CudaComm::new: the context is not the primary context of CUDA device \
                 {ordinal} (the one cudarc's CudaContext::new({ordinal}) returns)"
            )));
        }
        // The spin kernels are only needed where stream memory operations
        // are missing; NVRTC may be absent elsewhere.
        let gpu_config = GpuConfig::from_env();
        let kernels = Kernels::load(&device, &gpu_config);
        let signals = Signals::new(&device, kernels.as_ref().ok(), false, comm.config().timeout)
            .map_err(|e| match (&kernels, e) {
                (Err(k), streamcomm_gpu::Error::Unavailable(m)) => {
                    Error::Unavailable(format!("{m} (kernels: {k})"))
                }
                (_, e) => gpu_error(e),
            })?;
        let kernels = match kernels {
            Ok(k) => Some(k),
            Err(e) if gpu_config.require_gpu => {
                return Err(Error::Unavailable(format!(
                    "STREAMCOMM_REQUIRE_GPU=1, and the reduce kernels did not load, which \
                     would turn the direct path off: {e}"
                )));
            }
            Err(e) => {
                // Never silent: without the kernels the direct path is off
                // (every rank then agrees on the staged path). A program
                // without a tracing subscriber sees it on stderr, once.
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    eprintln!(
                        "streamcomm: warning: the reduce kernels did not load, so CUDA \
                         collectives are staged through host memory: {e}"
                    )
                });
                tracing::warn!(
                    error = %e,
                    "the reduce kernels did not load: the direct path is off"
                );
                None
            }
        };
        let shared = DeviceShared::new(
            comm.inner.core.engine().handle().clone(),
            comm.config().timeout,
        );
        let direct_off = if comm.config().cuda_window == 0 {
            Some("STREAMCOMM_CUDA_WINDOW=0".to_string())
        } else {
            match establish_direct(comm, &device, kernels.as_ref())? {
                Ok(direct) => {
                    let _ = shared.direct.set(direct);
                    None
                }
                // A fall-back (IPC, host registration, an allocation,
                // window sizes, kernels) must not pass the GPU check; the
                // ranks' placement (another host, threads of one process
                // on other devices) rules the path out by design.
                Err(off) if gpu_config.require_gpu && !off.by_design => {
                    return Err(Error::Unavailable(format!(
                        "STREAMCOMM_REQUIRE_GPU=1, and the CUDA direct path is off on rank {}: \
                         {}",
                        comm.rank(),
                        off.reason
                    )));
                }
                Err(off) => {
                    // Never silent: the staged path moves every byte through
                    // host memory, which a user must be able to see.
                    eprintln!(
                        "streamcomm: rank {}: the CUDA direct path is off, so collectives \
                         are staged through host memory: {}",
                        comm.rank(),
                        off.reason
                    );
                    Some(off.reason)
                }
            }
        };
        if let Some(nic) = establish_gpudirect(comm, &device) {
            let _ = shared.gpudirect.set(nic);
        }
        tracing::info!(
            device = ?device,
            signals = ?signals.path(),
            direct = shared.direct.get().is_some(),
            gpudirect = ?shared.gpudirect.get().map(|n| n.mode()),
            "CUDA backend ready"
        );
        Ok(CudaComm {
            comm: comm.clone(),
            direct_off,
            device,
            signals: ManuallyDrop::new(signals),
            kernels,
            shared: ManuallyDrop::new(shared),
            ctx,
        })
    }

    /// [`CudaComm::new`] on the primary context of device `ordinal`, which
    /// it opens itself (the context [`CudaComm::context`] then returns),
    /// after probing the driver: without CUDA this returns
    /// [`Error::Unavailable`] where `CudaContext::new` would panic.
    ///
    /// # Examples
    /// ```no_run
    /// use streamcomm::cuda::CudaComm;
    /// use streamcomm::Communicator;
    ///
    /// let comm = Communicator::from_env()?;
    /// match CudaComm::on_device(&comm, 0) {
    ///     Ok(cuda) => {
    ///         let stream = cuda.context().new_stream().expect("stream");
    ///         cuda.barrier(&stream)?;
    ///     }
    ///     Err(streamcomm::Error::Unavailable(why)) => println!("host backend only: {why}"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`CudaComm::new`]; [`Error::Unavailable`] without a usable CUDA
    /// driver; [`Error::InvalidArgument`] for an ordinal past the devices.
    pub fn on_device(comm: &Communicator, ordinal: usize) -> Result<CudaComm> {
        // The probe (inside `open`) makes cudarc's first call safe; the
        // device, held until the end, keeps the primary context retained.
        let probed = Device::open(ordinal).map_err(gpu_error)?;
        let ctx = CudaContext::new(ordinal).map_err(|e| {
            gpu_error(streamcomm_gpu::Error::driver(
                "CudaContext::new (cudarc)",
                e.0,
            ))
        })?;
        let cuda = CudaComm::new(comm, ctx);
        drop(probed);
        cuda
    }

    /// The cudarc context this communicator is bound to: make streams and
    /// buffers for its calls from it.
    ///
    /// # Examples
    /// ```no_run
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// let buf = stream.alloc_zeros::<f32>(1024).expect("alloc");
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// True when collectives of this communicator run on the direct path
    /// (device-side copies and reductions over the ranks' windows), false
    /// when they are staged through host memory.
    ///
    /// # Examples
    /// ```no_run
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// println!("direct path: {}", cuda.uses_direct_path()); // STREAMCOMM_CUDA_WINDOW=0: false
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn uses_direct_path(&self) -> bool {
        self.shared.direct.get().is_some()
    }

    /// Why collectives of this communicator are staged through host memory
    /// instead of taking the direct path (`None` when they take it): the
    /// same on every rank's side of the decision, also printed once on
    /// stderr when the communicator is made.
    ///
    /// # Examples
    /// ```no_run
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// if let Some(why) = cuda.direct_path_off() {
    ///     println!("staged: {why}"); // e.g. "rank 3 is on another host"
    /// }
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn direct_path_off(&self) -> Option<&str> {
        self.direct_off.as_deref()
    }

    /// How sends and receives with peers over verbs reach device memory:
    /// `Some(mode)` when the NIC reads and writes it directly (GPUDirect
    /// RDMA), `None` when they are staged through pinned host memory (no
    /// verbs peer, `STREAMCOMM_GPUDIRECT=0`, or neither dma-buf nor
    /// nvidia-peermem works here; the log says why).
    ///
    /// # Examples
    /// ```no_run
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// match cuda.gpudirect() {
    ///     Some(mode) => println!("GPUDirect RDMA: {mode:?}"),
    ///     None => println!("device memory staged through host memory for the NIC"),
    /// }
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn gpudirect(&self) -> Option<crate::GpuDirectMode> {
        self.shared.gpudirect.get().map(|n| n.mode())
    }

    /// The communicator.
    ///
    /// # Examples
    /// ```no_run
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let (rank, size) = (cuda.communicator().rank(), cuda.communicator().size());
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn communicator(&self) -> &Communicator {
        &self.comm
    }

    /// The CUDA device ordinal (of [`CudaComm::context`]).
    ///
    /// # Examples
    /// ```no_run
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// assert_eq!(cuda.device_ordinal(), cuda.context().ordinal());
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn device_ordinal(&self) -> usize {
        self.device.ordinal()
    }

    /// The device's name as the driver reports it (`cuDeviceGetName`),
    /// which tells which driver answered: NVIDIA's names the GPU, the CPU
    /// stand-in says `streamcomm CPU stand-in (not a GPU)`.
    ///
    /// # Examples
    /// ```no_run
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// println!("device {}: {}", cuda.device_ordinal(), cuda.device_name());
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn device_name(&self) -> &str {
        self.device.name()
    }

    /// True when stream waits and writes use the driver's stream memory
    /// operations, false when they use the spin kernels.
    ///
    /// # Examples
    /// ```no_run
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// println!("stream memory operations: {}", cuda.uses_stream_memory_ops());
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn uses_stream_memory_ops(&self) -> bool {
        self.signals.path() == SignalPath::StreamMemOps
    }

    /// The first error of this communicator or of one of its device
    /// operations, if any (NCCL's `ncclCommGetAsyncError`). A failed
    /// operation still releases its stream, so check this (or the next
    /// call's result) after synchronizing.
    ///
    /// # Examples
    /// ```no_run
    /// # use streamcomm::ReduceOp;
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// let mut buf = stream.alloc_zeros::<f32>(1024).expect("alloc");
    /// cuda.all_reduce_in_place(&mut buf, ReduceOp::Sum, &stream)?;
    /// stream.synchronize().expect("sync");
    /// if let Some(e) = cuda.async_error() {
    ///     return Err(e); // e.g. a peer failed while the stream waited for it
    /// }
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn async_error(&self) -> Option<Error> {
        self.comm
            .async_error()
            .or_else(|| self.shared.runner.error())
    }

    /// `stream` as the staged path's queue, if it is a stream of this
    /// communicator's context; `capturing` is whether the stream captures,
    /// where the call asked already ([`CudaComm::check_capturable`]), so
    /// that the queue does not ask the driver again.
    fn queue<'q>(
        &'q self,
        stream: &'q Arc<CudaStream>,
        what: impl std::fmt::Display,
        capturing: Option<bool>,
    ) -> Result<CudaQueue<'q>> {
        let theirs = stream.context();
        if theirs.cu_ctx() != self.device.as_raw() {
            let mine = self.device.ordinal();
            let whose = match theirs.ordinal() {
                o if o == mine => format!("another context of CUDA device {o}"),
                o => format!("CUDA device {o}"),
            };
            return Err(Error::invalid(format!(
                "{what}: the stream belongs to {whose}, this CudaComm to device {mine}'s \
                 primary context: make the stream from CudaComm::context()"
            )));
        }
        Ok(CudaQueue {
            device: &self.device,
            // SAFETY: the cudarc stream is of the device's primary context
            // (checked above) and outlives the queue, which lives for one call.
            stream: unsafe { Stream::from_raw(&self.device, stream.cu_stream()) },
            signals: &self.signals,
            kernels: self.kernels.as_ref(),
            capture: std::cell::Cell::new(capturing),
        })
    }

    /// Refuses a call that cudarc's event tracking would break: while
    /// `stream` captures a graph, cudarc makes it wait on events its
    /// buffers recorded before the capture, which the driver refuses
    /// (`CUDA_ERROR_STREAM_CAPTURE_ISOLATION`) and which invalidates the
    /// capture, so the next call fails with an error that says nothing of
    /// the cause. Called before the buffers are touched. Whether the
    /// stream captures, where it had to ask (tracking on): the call's
    /// queue takes the answer ([`CudaComm::queue`]).
    fn check_capturable(
        &self,
        stream: &Arc<CudaStream>,
        what: impl std::fmt::Display,
    ) -> Result<Option<bool>> {
        let ctx = stream.context();
        // Another context's stream is refused by `queue`, with its reason.
        if !ctx.is_managing_stream_synchronization() || ctx.cu_ctx() != self.device.as_raw() {
            return Ok(None);
        }
        // SAFETY: the cudarc stream is live for this call; the queue check
        // that follows refuses a stream of another context.
        let capturing = unsafe { Stream::from_raw(&self.device, stream.cu_stream()) }
            .is_capturing()
            .map_err(gpu_error)?;
        if capturing {
            return Err(Error::invalid(format!(
                "{what}: the stream is capturing a CUDA graph while cudarc's event tracking \
                 is on, and cudarc would make the capture wait on events recorded before it \
                 (CUDA_ERROR_STREAM_CAPTURE_ISOLATION): call ctx.disable_event_tracking() \
                 before making the buffers you capture with (the context's streams are then \
                 ordered by your own events or synchronisation)"
            )));
        }
        Ok(Some(false))
    }

    /// Enqueues `call` on `stream`; `capturing` as [`CudaComm::queue`]'s.
    fn enqueue(
        &self,
        stream: &Arc<CudaStream>,
        call: DeviceCall,
        capturing: Option<bool>,
    ) -> Result<()> {
        let queue = self.queue(stream, call.collective, capturing)?;
        crate::device::enqueue_device(&self.comm, &queue, &self.shared, &call)
    }
}

/// The longest a dropped [`CudaComm`] waits for the driver to hand back
/// the resources of operations it still holds (a graph destroyed just
/// before: the driver runs user-object destructors asynchronously).
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

impl Drop for CudaComm {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // A rank thread unwinding: its process lives on, so the peers'
            // watchdogs (which judge liveness by process) would never see
            // it gone, and their device waits never time out. Fail the
            // communicator: the failure word reaches every peer, whose
            // watchdog then releases its stream with the error.
            self.comm.inner.core.failure().fail(
                &Error::Aborted(format!(
                    "rank {}'s thread panicked while it held its CudaComm",
                    self.comm.rank()
                )),
                crate::comm::failure::Learned::Call,
            );
        }
        let _ = self.shared.runner.drain();
        // Resources the driver still holds (host functions not yet run,
        // graph user objects not yet destroyed) are handed over on its
        // threads: wait for them here, bounded, so that they are freed on
        // this thread (module `device::graveyard`). Relaxed capture mode:
        // another thread's global capture must not make these frees fail
        // (and invalidate it).
        let within = self.comm.config().timeout.min(RELEASE_WAIT);
        let settled = self.shared.graveyard.settle(within, |graveyard| {
            if relaxed_capture(|| graveyard.bury()).is_err() {
                graveyard.bury();
            }
        });
        if !settled {
            tracing::warn!(
                pending = self.shared.graveyard.pending(),
                "CudaComm dropped while streams or graphs still hold its operations: \
                 their resources will be leaked, not freed"
            );
        }
        // Frees, in relaxed capture mode as above. The kernels' modules
        // too; the device (a context release) goes after, with the fields.
        let mut free = || {
            // SAFETY: dropped once, here, and never used after (this is
            // `drop`; the fields left are the communicator, the device and
            // the context).
            unsafe {
                ManuallyDrop::drop(&mut self.shared);
                ManuallyDrop::drop(&mut self.signals);
            }
            drop(self.kernels.take());
        };
        if let Err(unrelaxed) = relaxed_capture(&mut free) {
            tracing::debug!(error = %unrelaxed, "freeing outside relaxed capture mode");
            free();
        }
    }
}
