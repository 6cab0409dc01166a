//! Reduction arithmetic for streamcomm.
//!
//! Every layer above needs the same element-wise arithmetic: the host backend
//! reduces slots into buffers, the plan simulator checks algorithms, and the
//! CUDA backend (later) compiles the same operations with NVRTC. This crate
//! holds the [`DataType`] / [`ReduceOp`] vocabulary and CPU loops for every pair.
//!
//! # Quick start
//!
//! ```
//! use streamcomm_kernels::{divide, element_as_f64, reduce_in_place, DataType, ReduceOp};
//!
//! // Two ranks' contributions to an `Avg` all-reduce of f32 values.
//! let mut acc: Vec<u8> = [1.0f32, 4.0].iter().flat_map(|x| x.to_ne_bytes()).collect();
//! let other: Vec<u8> = [3.0f32, 8.0].iter().flat_map(|x| x.to_ne_bytes()).collect();
//! reduce_in_place(DataType::F32, ReduceOp::Avg, &mut acc, &other)?; // sums
//! divide(DataType::F32, &mut acc, 2)?; // once, at the end
//! assert_eq!(element_as_f64(DataType::F32, &acc, 0), 2.0);
//! assert_eq!(element_as_f64(DataType::F32, &acc, 1), 6.0);
//! # Ok::<(), streamcomm_kernels::KernelError>(())
//! ```
//!
//! # The kernels
//!
//! - [`reduce()`]: `dst[i] = a[i] op b[i]`.
//! - [`reduce_in_place`]: `dst[i] = dst[i] op src[i]`.
//! - [`divide`]: the final division of [`ReduceOp::Avg`]; `reduce` and
//!   `reduce_in_place` treat `Avg` as `Sum`.
//! - [`element_as_f64`] / [`write_element_from_f64`]: per-element access for
//!   tests and reference computations.
//!
//! Buffers are raw native-endian bytes (`&[u8]`), as they come from user
//! buffers and transports. Lengths must be whole elements and must agree,
//! otherwise a [`KernelError`] is returned; nothing panics on bad lengths or
//! misaligned slices.
//!
//! # Arithmetic
//!
//! - Integers: `Sum` and `Prod` wrap (two's complement), `Avg`'s division
//!   truncates toward zero.
//! - Floats: IEEE 754 in the element's precision. `Min`/`Max` are minNum/maxNum
//!   (`f32::min`/`f32::max`): when one operand is NaN the other is returned; NaN
//!   results only from two NaNs.
//! - `f16`/`bf16`: each operation is computed in `f32` and rounded back to
//!   nearest-even once.
//!
//! # Performance
//!
//! Dispatch on dtype and op happens once per call; the loop that runs is
//! monomorphic, works on blocks of 32 typed elements and is auto-vectorised by
//! LLVM. `f16`/`bf16` are widened to `f32` 64 elements at a time with
//! branch-free conversions that vectorise; on x86-64 CPUs with AVX2 and F16C
//! (detected at run time, once per call) the half loops run a second copy
//! compiled for those features, converting `f16` with `vcvtph2ps`/`vcvtps2ph`.
//! Results are bit-identical either way. Slices aligned for the element type
//! are reinterpreted in place; unaligned ones are staged through aligned stack
//! blocks, which costs an extra copy per block.
//!
//! Integer division (only in [`divide`], i.e. `Avg` on integer types) has no
//! SIMD instruction and runs at scalar speed.
//!
//! # Thread safety
//!
//! Every function is pure over its arguments: no global state, no allocation,
//! safe to call from any number of threads on disjoint buffers.
#![deny(unreachable_pub)]

mod convert;
pub mod cuda;
mod element;
mod error;
mod half_bits;
mod loops;
mod reduce;
mod stage;
mod types;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use convert::{element_as_f64, write_element_from_f64};
pub use error::{KernelError, KernelErrorKind};
pub use reduce::{divide, reduce, reduce_in_place};
pub use types::{DataType, ReduceOp};
