//! The CUDA layer of streamcomm, on cudarc's raw driver bindings.
//!
//! Layered like cudarc itself: raw bindings (`cudarc::driver::sys`, re-exported
//! as [`driver::sys`], and this crate's own [`nvrtc::sys`]) → `Result`-returning
//! checks ([`driver::result`](crate::driver)) → the safe types of this crate.
//!
//! Nothing here calls into cudarc before [`driver::probe::driver`] has succeeded:
//! cudarc panics when libcuda is missing, so every public entry point probes
//! first and returns [`Error::Unavailable`] on a machine without a usable CUDA
//! driver (and runs foreign calls inside `catch_unwind` as a second guard).
//!
//! What is here: devices ([`Device`]), device memory ([`DeviceBuffer`]), pinned
//! and host-mapped memory ([`PinnedBuffer`]), doorbell words visible to host and
//! device ([`Doorbells`]), stream memory operations with a spin-kernel fallback
//! ([`Signals`]), host functions on streams ([`Stream::launch_host_fn`]), events
//! ([`Event`]), graph capture ([`Graph`]), CUDA IPC ([`IpcHandle`]), dma-buf
//! export ([`DeviceBuffer::export_dmabuf`]) and the NVRTC-compiled kernels
//! ([`Kernels`]), cached on disk ([`KernelCache`]).
//!
//! With cudarc in the same program: `CudaContext::new(n)` and [`Device::open`]
//! retain the same primary context, so a cudarc stream can be used here through
//! [`Stream::from_raw`]`(&device, cuda_stream.cu_stream())`, and a `CudaSlice`'s
//! device pointer passed to [`Kernels::reduce_copy`]. Probe with
//! [`Device::count`] before calling cudarc, which panics without a driver.
#![deny(unreachable_pub)]

pub mod config;
pub mod driver;
mod error;
mod guard;
pub mod nvrtc;

mod batch;
mod cache;
mod capture_mode;
mod context;
mod dmabuf;
mod doorbell;
mod event;
mod graph;
mod host_fn;
mod ipc;
mod kernels;
mod memory;
mod module;
mod pinned;
mod registered;
mod release;
mod signals;
mod stream;
#[cfg(test)]
mod test_support;
mod vmm;

pub use batch::MemOp;
pub use cache::{KernelCache, cache_key};
pub use capture_mode::relaxed_capture;
pub use config::GpuConfig;
pub use context::{ComputeMode, Device};
pub use dmabuf::GpuDirectFlush;
pub use doorbell::Doorbells;
pub use error::{Error, Result};
pub use event::Event;
pub use graph::{Graph, GraphExec};
pub use ipc::{IpcHandle, IpcMapping};
pub use kernels::{Kernels, REDUCE_BLOCK, ReduceCopy, cubin_for};
pub use memory::{ALLOC_GRANULE, DeviceBuffer};
pub use module::{Function, Module};
pub use nvrtc::Arch;
pub use pinned::PinnedBuffer;
pub use registered::HostRegistration;
pub use release::RawHostFn;
pub use signals::{SignalPath, Signals, WaitCondition};
pub use stream::Stream;
pub use vmm::VmmBuffer;
