//! The host backend: CPU streams with CUDA stream semantics.
//!
//! In-order queues ([`HostStream`]), markers ([`HostEvent`]), 32-bit
//! doorbells with wait/write operations ([`Doorbell`]), capture and replay
//! ([`Graph`]), and memory those streams work on ([`HostBuffer`]). This is how
//! streamcomm runs, and is tested end to end, on machines without a GPU.

mod buffer;
mod doorbell;
mod event;
mod graph;
mod job;
pub(crate) mod release_hooks;
mod shared_buffer;
pub(crate) mod stream;

pub(crate) use buffer::RawBuffer;
pub use buffer::{Element, HostBuffer, HostBufferRead, HostBufferWrite};
pub use doorbell::{Doorbell, WaitCmp};
pub use event::HostEvent;
pub use graph::Graph;
pub(crate) use job::{Job, JobMode, Task};
pub use shared_buffer::SharedHostBuffer;
pub use stream::HostStream;
