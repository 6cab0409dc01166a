//! A CPU implementation of the CUDA driver API: a stand-in libcuda that
//! cudarc, `streamcomm-gpu` and `CudaComm` load through their normal loading
//! path, so the project's real CUDA code path runs on machines without a GPU.
//! The build makes `libstreamcomm_cuda_standin.so`; link `libcuda.so` and
//! `libcuda.so.1` to it in a directory of their own and put that directory
//! on `LD_LIBRARY_PATH` (the tests do this in `tests/common`).
//!
//! **What it checks, and what it does not.** The stand-in checks API use and
//! ordering: the driver's argument rules and error codes, stream order, the
//! legacy stream's implicit synchronisation, events, hardware-queue sharing
//! (`CUDA_DEVICE_MAX_CONNECTIONS`), stream memory operations that wait for
//! ever, host functions, graph capture with the driver's refusals, IPC between
//! processes, and kernel argument packing. It does **not** check the GPU memory
//! model, timing, or the CUDA C kernels' code: kernels run as CPU
//! re-implementations ([`kernels`]). A run on the stand-in is never a GPU run;
//! `cuDeviceGetName` says `streamcomm CPU stand-in (not a GPU)`.
//!
//! It is strict, never more lenient than the driver API reference documents,
//! and loud: every entry point it does not implement returns
//! `CUDA_ERROR_NOT_SUPPORTED` and names itself on stderr (module `exports`).
//!
//! Model, in brief:
//! - one device (`STREAMCOMM_STANDIN_DEVICES`), sm_90 limits, driver version
//!   13000 (CUDA 13.0, what driver 580 reports; `STREAMCOMM_STANDIN_DRIVER_VERSION`);
//! - device memory lives in POSIX shared memory behind a reserved, unmapped
//!   device address range (modules `memory` and `shm`);
//! - each context has `CUDA_DEVICE_MAX_CONNECTIONS` (default 8) hardware
//!   queues, each drained in order by one worker thread; streams share them
//!   round-robin (module `context`);
//! - a device fault (bad address in work that runs) makes the context's error
//!   sticky, as on a GPU.
//!
//! Configuration: [`config`].

mod capture;
pub mod config;
mod context;
mod copy;
mod device;
mod error;
mod error_table;
mod event;
mod exec;
mod exports;
mod graph;
mod guard;
mod handles;
mod ipc;
pub mod kernels;
mod memops;
mod memory;
mod mode;
mod module;
mod pinned;
mod pointer;
mod pool;
mod shm;
mod stream;
