//! The C API of streamcomm: `libstreamcomm_ffi.so` / `.a` and `include/streamcomm.h`.
//!
//! An NCCL-shaped C interface over the [`streamcomm`] crate for C, C++ and
//! Python (`ctypes`) callers. Every exported symbol starts with
//! `streamcomm_`; the header `ffi/include/streamcomm.h` declares exactly
//! those symbols and documents each one (it is the reference for C users;
//! `scripts/check-symbols.sh`, run by the tests, keeps it equal to the library's
//! exports).
//!
//! # How the boundary is kept safe
//! - Every entry point runs inside one guard (`guard.rs`): a panic is caught,
//!   an error becomes a result code, and its message is kept per thread for
//!   `streamcomm_last_error()`.
//! - Handles (`streamcomm_comm_t`, `streamcomm_stream_t`,
//!   `streamcomm_event_t`) are keys into tables, never pointers to Rust
//!   memory: a destroyed, forged or wrong-kind handle is reported as
//!   `STREAMCOMM_INVALID_HANDLE`.
//! - Enum values are decoded, never transmuted; buffers are checked for NULL,
//!   alignment and overlap before they are wrapped (without copying) with
//!   [`UntypedBuffer::from_raw_parts`](streamcomm::UntypedBuffer::from_raw_parts).
//!
//! # Streams
//! Host streams ([`streamcomm::host::HostStream`], `streamcomm_stream_t`,
//! created through the API) for host buffers, and CUDA streams
//! (`cudaStream_t`, passed as is) for device buffers through the
//! `streamcomm_cuda_*` functions and a `streamcomm_cuda_comm_t` ([`cuda`]).
//!
//! # Safety
//! The exported functions are `unsafe extern "C"`: they trust the C caller
//! for what cannot be checked (that a non-NULL pointer points to memory of
//! the stated size, that buffers stay valid until their stream operation
//! completes). Everything else is checked and reported.
#![deny(unreachable_pub)]

mod args;
pub mod collectives;
pub mod comm;
pub mod cuda;
pub mod group;
mod guard;
mod handles;
pub mod id;
pub mod ops;
pub mod p2p;
mod result;
pub mod stream;

use streamcomm::Communicator;
use streamcomm::host::{HostEvent, HostStream};

use handles::Table;

pub use args::SPLIT_NOCOLOR;
pub use result::{
    ABORTED, BOOTSTRAP_ERROR, INTERNAL_ERROR, INVALID_ARGUMENT, INVALID_HANDLE, INVALID_USAGE,
    REMOTE_FAILED, SUCCESS, SYSTEM_ERROR, TIMEOUT, TRANSPORT_ERROR, UNAVAILABLE,
    USER_CALLBACK_ERROR,
};

/// Live communicators, by `streamcomm_comm_t`.
static COMMS: Table<Communicator> = Table::new("communicator", 0xC0);
/// Live host streams, by `streamcomm_stream_t`.
static STREAMS: Table<HostStream> = Table::new("stream", 0xC5);
/// Live events, by `streamcomm_event_t`.
static EVENTS: Table<HostEvent> = Table::new("event", 0xCE);
/// Live CUDA communicators, by `streamcomm_cuda_comm_t`.
static CUDA_COMMS: Table<streamcomm::cuda::CudaComm> = Table::new("CUDA communicator", 0xCD);
