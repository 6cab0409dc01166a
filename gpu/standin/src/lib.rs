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
//! ever, host functions, graph capture with the driver's refusals, IPC and
//! virtual memory management (VMM) export and import between processes, and
//! kernel argument packing. It does **not** check the GPU memory
//! model, timing, or the CUDA C kernels' code: kernels run as CPU
//! re-implementations ([`kernels`]). A run on the stand-in is never a GPU run;
//! `cuDeviceGetName` says `streamcomm CPU stand-in (not a GPU)` in every
//! profile (under `h100` followed by the H100 it stands for).
//!
//! It is strict, never more lenient than the driver API reference documents,
//! and loud: every entry point it does not implement returns
//! `CUDA_ERROR_NOT_SUPPORTED` and names itself on stderr (module `exports`;
//! the one quiet exception is `cuGetExportTable`, which NVRTC calls on every
//! compile), and every process says once on stderr, at `cuInit`, that it
//! runs on the stand-in and with which profile.
//!
//! Model, in brief:
//! - a **profile** (`STREAMCOMM_STANDIN_PROFILE`): `default`, `h200`, what
//!   an H200 on NVIDIA driver 580 (CUDA 13.0) reports, or `h100`, the same
//!   with an H100's name, total memory and memory bus; each setting below is
//!   also its own variable, which wins over the profile ([`config`] has the
//!   table); an unknown profile or unreadable setting makes `cuInit` fail
//!   with `CUDA_ERROR_INVALID_VALUE` after naming it;
//! - one device (`STREAMCOMM_STANDIN_DEVICES`), sm_90 limits, driver version
//!   13000 (CUDA 13.0, what driver 580 reports, in every profile;
//!   `STREAMCOMM_STANDIN_DRIVER_VERSION`), which bounds the PTX ISA and
//!   the CUBIN toolkit major version `cuModuleLoadData` accepts;
//! - compute mode DEFAULT (`STREAMCOMM_STANDIN_COMPUTE_MODE`: PROHIBITED
//!   refuses every context, EXCLUSIVE_PROCESS a second process's, with
//!   `CUDA_ERROR_DEVICE_UNAVAILABLE`, across processes; module `mode`);
//! - device memory lives in POSIX shared memory behind a reserved, unmapped
//!   device address range (modules `memory` and `shm`); addresses are never
//!   reused; an IPC mapping whose exporter freed the memory or exited makes
//!   device work that touches it a device fault;
//! - virtual memory management (module `vmm`): `cuMemCreate`,
//!   `cuMemRelease`, `cuMemAddressReserve`, `cuMemAddressFree`, `cuMemMap`,
//!   `cuMemUnmap`, `cuMemSetAccess`, `cuMemGetAccess`,
//!   `cuMemGetAllocationGranularity` (2 MiB, minimum and recommended),
//!   `cuMemGetAllocationPropertiesFromHandle`, `cuMemRetainAllocationHandle`,
//!   and export and import as POSIX file descriptors
//!   (`cuMemExportToShareableHandle`, `cuMemImportFromShareableHandle`; the
//!   other handle types are `CUDA_ERROR_NOT_SUPPORTED`), with the driver's
//!   argument rules; `VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED` and
//!   `HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED` read 1 in every profile.
//!   Each allocation is a sealed memfd that its handles, mappings and
//!   exported descriptors hold, so, unlike legacy IPC, an importer's mapping
//!   stays valid after its exporter released, unmapped or exited; device
//!   work touching a mapping before `cuMemSetAccess` gave its device
//!   read-write access, or reserved but unmapped addresses, faults; reading
//!   another process's allocation counts as imported bytes (module
//!   `counters`). `STREAMCOMM_STANDIN_REFUSE` does not touch it;
//! - memory pools off (`STREAMCOMM_STANDIN_MEMORY_POOLS`; on under `h200`
//!   and `h100`): `MEMORY_POOLS_SUPPORTED`, the default pool and
//!   stream-ordered `cuMemAllocAsync` / `cuMemFreeAsync`, which is the path
//!   cudarc takes for every buffer when pools are supported; memory used out
//!   of stream order faults; capture of these calls is refused (module
//!   `pool`);
//! - GPUDirect RDMA off (`STREAMCOMM_STANDIN_GDR`, `STREAMCOMM_STANDIN_GDR_FLUSH`;
//!   on under `h200` and `h100`): the device attributes as an H200 reports
//!   them, `IS_GPU_DIRECT_RDMA_CAPABLE` per buffer,
//!   `cuFlushGPUDirectRDMAWrites` (module `pointer`);
//! - each context has `CUDA_DEVICE_MAX_CONNECTIONS` (default 8) hardware
//!   queues, each drained in order by one worker thread; streams share them
//!   round-robin (module `context`);
//! - host functions and user-object destructors may not call the driver
//!   (`CUDA_ERROR_NOT_PERMITTED`, or an abort with
//!   `STREAMCOMM_STANDIN_STRICT=1`); destructors run on their own thread,
//!   `STREAMCOMM_STANDIN_DESTRUCTOR_DELAY_MS` after the last release (50
//!   under `h200` and `h100`);
//! - `STREAMCOMM_STANDIN_REFUSE` (`ipc`, `host-register`, comma-separated):
//!   CUDA IPC of memory or host registration returns
//!   `CUDA_ERROR_NOT_SUPPORTED`, as on a machine that refuses them, so that
//!   callers' fallbacks get tested;
//! - a device fault (bad address in work that runs) makes the context's error
//!   sticky, as on a GPU.
//!
//! Configuration: [`config`].
#![deny(unreachable_pub)]

mod capture;
pub mod config;
mod context;
mod copy;
mod counters;
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
mod vmm;
