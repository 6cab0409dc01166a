//! Communicator operations on *device* streams (CUDA).
//!
//! Between ranks of one host a collective is device work only: the
//! [`direct`] path (windows every rank maps, flag rounds, reduce kernels).
//! Elsewhere, and for p2p groups, it is *staged* through host memory, as
//! follows (except the sends and receives of a p2p group with peers over
//! verbs, where GPUDirect RDMA works: the NIC then moves their bytes
//! straight from and into device memory, see [`gpudirect_probe`]). A device stream cannot run the host backend's tasks itself, so
//! each staged operation is appended to it as five stream steps, all
//! capturable:
//!
//! 1. copy the input from device memory into *staging* memory: host memory
//!    the device can address (pinned, host-mapped with CUDA);
//! 2. a host callback, which runs when the stream reaches it (and again at
//!    every replay of a graph captured from it). It prepares the very task
//!    the host backend would run for this call, over the staging buffers, and
//!    hands it to the communicator's *runner*, which runs it as a job of
//!    the communicator's progress engine, in order, without blocking;
//! 3. a wait until the operation's completion word is at least 1, which the
//!    runner sets once the task has run (or failed), then a write of 0: the
//!    doorbell rule (`docs/design/architecture.md`, *Graph capture*), so a
//!    replay behaves like the first run;
//! 4. a copy of the output from staging memory into device memory;
//! 5. the release of the operation's resources once the stream (or the
//!    captured graph) can no longer run it.
//!
//! So the plans, transports, tickets and error handling are the host
//! backend's own code, tested end to end here; what a device adds is the
//! [`DeviceQueue`] (its enqueue primitives), implemented for CUDA in
//! [`crate::cuda`], and tested through it on a CUDA driver: a GPU, or the
//! CPU stand-in libcuda (`core/tests/cuda/`, run by
//! `scripts/gpu-check.sh --stand-in`).
//!
//! # Order
//! A device operation takes its ticket on the communicator when the device
//! reaches its callback, not when it is enqueued: that is the order in which
//! a captured graph's replays run. Issue a communicator's device operations
//! on one stream (or order the streams with events), and the same way on
//! every rank, as with NCCL.
//!
//! # Errors
//! A task that fails still raises its completion word, so the device stream
//! never waits forever; the error is kept by the communicator
//! ([`Communicator::async_error`](crate::Communicator::async_error)) and
//! every later call returns it.

// Without the `cuda` feature only the tests use this module.
#![cfg_attr(not(feature = "cuda"), allow(dead_code, unused_imports))]

mod call;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
mod device_queue;
pub(crate) mod direct;
pub(crate) mod gpudirect_probe;
mod graveyard;
mod pool;
mod runner;

// The emulated device serves only the GPUDirect RDMA tests (see tests.rs);
// every other device test runs on a CUDA driver (core/tests/cuda/).
#[cfg(test)]
mod emulated;
#[cfg(test)]
mod gpudirect_probe_tests;
#[cfg(test)]
mod tests;

pub(crate) use crate::transport::device_span::NicAccess;
pub(crate) use call::{
    DeviceBuffers, DeviceCall, DeviceP2p, DeviceRange, enqueue_device, enqueue_device_exchange,
    enqueue_device_group,
};
pub(crate) use device_queue::{
    CompletionSignal, DevAddr, DeviceQueue, HostCallback, StagingMemory,
};
pub(crate) use direct::{DirectExchange, GathervLayout, ScatterLayout};
pub(crate) use graveyard::Graveyard;
pub(crate) use pool::DeviceShared;
