//! CUDA C sources of the device kernels and the host mirror of their layouts.
//!
//! The sources (in `kernels/cuda/`) are compiled at run time with NVRTC by the
//! `streamcomm-gpu` crate. Every struct of `streamcomm_device.h` has a
//! `#[repr(C)]` twin here whose size and offsets are asserted at compile time and
//! checked against the header's `// offset N` / `// size N` comments by a test.

use std::mem::{offset_of, size_of};

use crate::{DataType, ReduceOp};

/// Name under which [`DEVICE_HEADER`] is included (`#include "streamcomm_device.h"`).
pub const DEVICE_HEADER_NAME: &str = "streamcomm_device.h";
/// The shared layout header.
pub const DEVICE_HEADER: &str = include_str!("../cuda/streamcomm_device.h");
/// Reduce / reduce-copy kernels, `sc_reduce_copy_<dtype>_<op>`.
pub const REDUCE_SOURCE: &str = include_str!("../cuda/reduce.cu");
/// Spin-kernel fallback for stream memory operations.
pub const SIGNAL_SOURCE: &str = include_str!("../cuda/signal.cu");

/// Every kernel source: `(file name, text)`.
pub const SOURCES: [(&str, &str); 2] = [("reduce.cu", REDUCE_SOURCE), ("signal.cu", SIGNAL_SOURCE)];

/// Most sources of one reduce-copy (`SC_MAX_SRCS`).
pub const MAX_SRCS: usize = 8;
/// Most destinations of one reduce-copy (`SC_MAX_DSTS`).
pub const MAX_DSTS: usize = 8;
/// Bytes between two doorbell words (`SC_DOORBELL_STRIDE`).
pub const DOORBELL_STRIDE: usize = 128;

/// Name of the spin-wait kernel.
pub const SPIN_WAIT_KERNEL: &str = "sc_spin_wait";
/// Name of the spin-write kernel.
pub const SPIN_WRITE_KERNEL: &str = "sc_spin_write";

/// The reduce-copy kernel for `dtype` and `op`, e.g. `sc_reduce_copy_bf16_avg`.
pub fn reduce_kernel_name(dtype: DataType, op: ReduceOp) -> String {
    format!("sc_reduce_copy_{}_{}", dtype.name(), op.name())
}

/// Every reduce-copy kernel name (10 dtypes × 5 ops).
pub fn all_reduce_kernel_names() -> Vec<String> {
    DataType::ALL
        .iter()
        .flat_map(|&d| {
            ReduceOp::ALL
                .iter()
                .map(move |&op| reduce_kernel_name(d, op))
        })
        .collect()
}

/// `struct sc_reduce_args`: device pointers as `u64` (`CUdeviceptr`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReduceArgs {
    /// Source pointers; the first `nsrcs` are used.
    pub srcs: [u64; MAX_SRCS],
    /// Destination pointers; the first `ndsts` are used.
    pub dsts: [u64; MAX_DSTS],
    /// Elements per buffer.
    pub count: u64,
    /// Number of sources, `1..=MAX_SRCS`.
    pub nsrcs: u32,
    /// Number of destinations, `1..=MAX_DSTS`.
    pub ndsts: u32,
    /// Divisor of the `avg` kernels (the rank count), `>= 1`.
    pub avg_divisor: u32,
    /// Zero.
    pub reserved: u32,
    /// Device address of a 32-bit word the kernel reads first (0: none):
    /// non-zero makes it return without touching any buffer.
    pub abort: u64,
}

/// `struct sc_spin_wait_args`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpinWaitArgs {
    /// Device address of the watched word.
    pub addr: u64,
    /// Device address of the status word (set to 1 on timeout).
    pub status: u64,
    /// Give up after this many nanoseconds.
    pub timeout_ns: u64,
    /// Value compared with the word (its low 32 bits for a 32-bit word).
    pub value: u64,
    /// `CU_STREAM_WAIT_VALUE_*` condition (0 GEQ, 1 EQ, 2 AND, 3 NOR).
    pub cond: u32,
    /// 1: the word is 64 bits wide; 0: 32 bits.
    pub wide: u32,
}

/// `struct sc_spin_write_args`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpinWriteArgs {
    /// Device address of the word written.
    pub addr: u64,
    /// Value written.
    pub value: u32,
    /// Zero.
    pub reserved: u32,
}

const _: () = {
    assert!(size_of::<ReduceArgs>() == 160);
    assert!(offset_of!(ReduceArgs, abort) == 152);
    assert!(offset_of!(ReduceArgs, dsts) == 64);
    assert!(offset_of!(ReduceArgs, count) == 128);
    assert!(offset_of!(ReduceArgs, nsrcs) == 136);
    assert!(offset_of!(ReduceArgs, ndsts) == 140);
    assert!(offset_of!(ReduceArgs, avg_divisor) == 144);
    assert!(size_of::<SpinWaitArgs>() == 40);
    assert!(offset_of!(SpinWaitArgs, status) == 8);
    assert!(offset_of!(SpinWaitArgs, timeout_ns) == 16);
    assert!(offset_of!(SpinWaitArgs, value) == 24);
    assert!(offset_of!(SpinWaitArgs, cond) == 32);
    assert!(offset_of!(SpinWaitArgs, wide) == 36);
    assert!(size_of::<SpinWriteArgs>() == 16);
    assert!(offset_of!(SpinWriteArgs, value) == 8);
};

#[cfg(test)]
#[path = "cuda_tests.rs"]
mod tests;
