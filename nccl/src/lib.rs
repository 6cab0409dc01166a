//! `libnccl.so.2`: NCCL's C API (2.30) on streamcomm.
//!
//! Programs that link NVIDIA's NCCL or load it at run time (PyTorch,
//! nccl-tests, engines that open `libnccl.so.2` with `dlopen`, cudarc's
//! `nccl` feature) run on streamcomm by finding this library first on the
//! loader's path (`streamcomm-run --nccl` puts it there). Its header,
//! `nccl/include/nccl.h`, is written from NCCL's ABI: the same signatures,
//! enum values and struct layouts. Every function also exists with NCCL's
//! profiling prefix (`pncclAllReduce`).
//!
//! What each call does, and how it differs from NVIDIA's library:
//! `docs/guide/nccl.md`. In short:
//! - communicators on the calling thread's current CUDA device (its
//!   current context's device, else device 0), made from an
//!   `ncclUniqueId` that carries streamcomm's [`streamcomm::bootstrap::UniqueId`];
//! - collectives and point-to-point enqueued on the caller's stream through
//!   [`streamcomm::cuda::CudaComm`]'s raw entry points;
//! - errors as NCCL's codes, with streamcomm's reason (the culprit rank,
//!   what timed out) in `ncclGetLastError` and, with `NCCL_DEBUG=WARN`,
//!   on stderr in NCCL's style;
//! - no panic crosses the boundary, and a bad handle is an error, not a
//!   crash: `ncclComm_t` values are keys into a table, never pointers.
//!
//! The exported functions are `extern "C"` and trust the C caller for what
//! cannot be checked: that non-NULL pointers point to memory of the stated
//! size, and that device buffers stay valid until their operation completes
//! on its stream.
#![deny(unreachable_pub)]
#![allow(non_snake_case, non_camel_case_types)]

mod api;
mod comms;
mod config;
mod device;
mod groups;
mod guard;
mod init;
mod memory;
mod ops;
mod unsupported;
