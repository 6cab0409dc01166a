//! CPU implementations of the project's CUDA C kernels
//! (`kernels/cuda/reduce.cu`, `signal.cu`), decoding the same by-value
//! argument structs (`streamcomm_kernels::cuda::{ReduceArgs, SpinWaitArgs,
//! SpinWriteArgs}`).
//!
//! They reproduce the kernels' arithmetic (f16/bf16 widened to f32 over all
//! sources and rounded once, integer sum/prod wrapping, min/max as
//! fminf/fmaxf, avg dividing in the accumulation type) and their memory
//! accesses: every pointer is translated as device memory, so a bad pointer
//! is a device fault, and a misaligned element pointer is
//! `CUDA_ERROR_MISALIGNED_ADDRESS`, as on the GPU. They do not run the CUDA C
//! code itself: only a GPU checks that.

use std::sync::atomic::{AtomicU32, Ordering, fence};
use std::time::{Duration, Instant};

use half::{bf16, f16};
use streamcomm_kernels::cuda::{
    MAX_DSTS, MAX_SRCS, ReduceArgs, SPIN_WAIT_KERNEL, SPIN_WRITE_KERNEL, SpinWaitArgs,
    SpinWriteArgs, reduce_kernel_name,
};
use streamcomm_kernels::{DataType, ReduceOp};

use crate::context::Context;
use crate::error::LAUNCH_FAILED;
use crate::exec::{Fault, device, satisfied};

/// `CUDA_ERROR_MISALIGNED_ADDRESS`.
const MISALIGNED: u32 = 716;

/// A kernel the stand-in can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// `sc_reduce_copy_<dtype>_<op>`.
    Reduce(DataType, ReduceOp),
    /// `sc_spin_wait`.
    SpinWait,
    /// `sc_spin_write`.
    SpinWrite,
}

impl Kernel {
    /// The CPU kernel named `name`, if there is one.
    pub fn lookup(name: &str) -> Option<Kernel> {
        match name {
            SPIN_WAIT_KERNEL => return Some(Kernel::SpinWait),
            SPIN_WRITE_KERNEL => return Some(Kernel::SpinWrite),
            _ => {}
        }
        DataType::ALL.iter().find_map(|&d| {
            ReduceOp::ALL
                .iter()
                .find(|&&op| reduce_kernel_name(d, op) == name)
                .map(|&op| Kernel::Reduce(d, op))
        })
    }

    /// Bytes of the kernel's (single, by-value struct) parameter.
    pub fn param_size(self) -> usize {
        match self {
            Kernel::Reduce(..) => size_of::<ReduceArgs>(),
            Kernel::SpinWait => size_of::<SpinWaitArgs>(),
            Kernel::SpinWrite => size_of::<SpinWriteArgs>(),
        }
    }

    /// Most threads per block (`__launch_bounds__(512)` on the reduce kernels).
    pub fn max_threads(self) -> u32 {
        match self {
            Kernel::Reduce(..) => 512,
            _ => 1024,
        }
    }
}

/// One launch: the kernel and a copy of its argument bytes.
pub struct Launch {
    /// The kernel.
    pub kernel: Kernel,
    /// The parameter bytes, as the kernel would read them.
    pub params: Vec<u8>,
}

fn decode<T: Copy>(params: &[u8]) -> T {
    assert!(params.len() >= size_of::<T>(), "parameter block too short");
    // SAFETY: length checked; T is a plain #[repr(C)] struct of integers,
    // valid for any bit pattern; read_unaligned tolerates any alignment.
    unsafe { std::ptr::read_unaligned(params.as_ptr().cast()) }
}

/// Runs a launch on the calling queue worker.
pub fn run(ctx: &Context, launch: &Launch) -> Result<(), Fault> {
    match launch.kernel {
        Kernel::Reduce(dtype, op) => reduce(dtype, op, &decode(&launch.params)),
        Kernel::SpinWait => spin_wait(ctx, &decode(&launch.params)),
        Kernel::SpinWrite => {
            let a: SpinWriteArgs = decode(&launch.params);
            let w = device(a.addr, 4, "sc_spin_write")?;
            check_aligned(a.addr, 4, "sc_spin_write")?;
            fence(Ordering::SeqCst);
            // SAFETY: translated, in bounds, aligned word.
            unsafe { AtomicU32::from_ptr(w.ptr.cast()).store(a.value, Ordering::Release) };
            fence(Ordering::SeqCst);
            Ok(())
        }
    }
}

fn check_aligned(addr: u64, align: u64, what: &str) -> Result<(), Fault> {
    if !addr.is_multiple_of(align) {
        return Err((
            MISALIGNED,
            format!("{what}: address {addr:#x} is not {align}-byte aligned"),
        ));
    }
    Ok(())
}

fn spin_wait(ctx: &Context, a: &SpinWaitArgs) -> Result<(), Fault> {
    let wide = a.wide != 0;
    let size = if wide { 8 } else { 4 };
    let w = device(a.addr, size, "sc_spin_wait")?;
    check_aligned(a.addr, size as u64, "sc_spin_wait")?;
    let start = Instant::now();
    // SAFETY: translated, in bounds, aligned word of `size` bytes.
    let read = || unsafe { crate::exec::load_word(&w, wide) };
    let value = if wide { a.value } else { a.value & 0xffff_ffff };
    while !satisfied(read(), value, a.cond.min(4), wide) {
        if start.elapsed().as_nanos() > u128::from(a.timeout_ns) {
            let s = device(a.status, 4, "sc_spin_wait (status)")?;
            // SAFETY: translated, in bounds word.
            unsafe { AtomicU32::from_ptr(s.ptr.cast()).store(1, Ordering::Release) };
            fence(Ordering::SeqCst);
            return Ok(());
        }
        if ctx.check_sticky().is_err() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_micros(20));
    }
    fence(Ordering::SeqCst);
    Ok(())
}

/// Element types: storage, accumulation, and the kernel's arithmetic.
trait Elem: Copy {
    type Acc: Copy;
    fn widen(self) -> Self::Acc;
    fn narrow(a: Self::Acc) -> Self;
    fn apply(op: ReduceOp, a: Self::Acc, b: Self::Acc) -> Self::Acc;
    /// Avg's division; `None` where the device result is undefined.
    fn div(a: Self::Acc, d: u32) -> Option<Self::Acc>;
}

macro_rules! int_elem {
    ($($t:ty => $wide:ty),*) => {$(
        impl Elem for $t {
            type Acc = $t;
            fn widen(self) -> $t { self }
            fn narrow(a: $t) -> $t { a }
            fn apply(op: ReduceOp, a: $t, b: $t) -> $t {
                match op {
                    ReduceOp::Sum | ReduceOp::Avg => a.wrapping_add(b),
                    ReduceOp::Prod => a.wrapping_mul(b),
                    ReduceOp::Min => if b < a { b } else { a },
                    ReduceOp::Max => if a < b { b } else { a },
                }
            }
            fn div(a: $t, d: u32) -> Option<$t> {
                (d != 0).then(|| (<$wide>::from(a) / <$wide>::from(d)) as $t)
            }
        }
    )*};
}
int_elem!(i8 => i64, u8 => u64, i32 => i64, u32 => u64, i64 => i64, u64 => u64);

macro_rules! float_elem {
    ($($t:ty: $acc:ty, $widen:expr, $narrow:expr);*) => {$(
        impl Elem for $t {
            type Acc = $acc;
            fn widen(self) -> $acc { $widen(self) }
            fn narrow(a: $acc) -> $t { $narrow(a) }
            fn apply(op: ReduceOp, a: $acc, b: $acc) -> $acc {
                match op {
                    ReduceOp::Sum | ReduceOp::Avg => a + b,
                    ReduceOp::Prod => a * b,
                    ReduceOp::Min => a.min(b),
                    ReduceOp::Max => a.max(b),
                }
            }
            fn div(a: $acc, d: u32) -> Option<$acc> {
                Some(a / d as $acc)
            }
        }
    )*};
}
float_elem!(
    f32: f32, |x| x, |a| a;
    f64: f64, |x| x, |a| a;
    f16: f32, f16::to_f32, f16::from_f32;
    bf16: f32, bf16::to_f32, bf16::from_f32
);

fn reduce(dtype: DataType, op: ReduceOp, a: &ReduceArgs) -> Result<(), Fault> {
    match dtype {
        DataType::F32 => reduce_typed::<f32>(op, a),
        DataType::F64 => reduce_typed::<f64>(op, a),
        DataType::F16 => reduce_typed::<f16>(op, a),
        DataType::Bf16 => reduce_typed::<bf16>(op, a),
        DataType::I8 => reduce_typed::<i8>(op, a),
        DataType::U8 => reduce_typed::<u8>(op, a),
        DataType::I32 => reduce_typed::<i32>(op, a),
        DataType::U32 => reduce_typed::<u32>(op, a),
        DataType::I64 => reduce_typed::<i64>(op, a),
        DataType::U64 => reduce_typed::<u64>(op, a),
    }
}

fn reduce_typed<T: Elem>(op: ReduceOp, a: &ReduceArgs) -> Result<(), Fault> {
    let name = "sc_reduce_copy";
    // The kernel's first read: a raised abort word means it touches nothing.
    if a.abort != 0 {
        check_aligned(a.abort, 4, name)?;
        let word = device(a.abort, 4, name)?;
        // SAFETY: translated for 4 aligned bytes; the host may write the
        // word at any time, so it is read atomically.
        let raised = unsafe { &*word.ptr.cast::<std::sync::atomic::AtomicU32>() }
            .load(std::sync::atomic::Ordering::Acquire);
        if raised != 0 {
            return Ok(());
        }
    }
    if a.nsrcs as usize > MAX_SRCS || a.ndsts as usize > MAX_DSTS {
        return Err((
            LAUNCH_FAILED,
            format!(
                "{name}: nsrcs {} / ndsts {} index past the argument block",
                a.nsrcs, a.ndsts
            ),
        ));
    }
    let count = a.count as usize;
    if count == 0 {
        return Ok(());
    }
    let size = size_of::<T>();
    let bytes = count
        .checked_mul(size)
        .ok_or((LAUNCH_FAILED, format!("{name}: count overflows")))?;
    // The kernel reads srcs[0] even when nsrcs is 0.
    let nsrcs = (a.nsrcs as usize).max(1);
    let mut srcs = Vec::with_capacity(nsrcs);
    for &p in &a.srcs[..nsrcs] {
        check_aligned(p, size as u64, name)?;
        let source = device(p, bytes, name)?;
        crate::counters::read(&source, bytes);
        srcs.push(source);
    }
    let mut dsts = Vec::with_capacity(a.ndsts as usize);
    for &p in &a.dsts[..a.ndsts as usize] {
        check_aligned(p, size as u64, name)?;
        dsts.push(device(p, bytes, name)?);
    }
    let avg = op == ReduceOp::Avg;
    for i in 0..count {
        // SAFETY: every range was translated for `count` elements; accesses are aligned.
        let load = |s: usize| unsafe { srcs[s].ptr.cast::<T>().add(i).read() }.widen();
        let mut acc = load(0);
        for s in 1..a.nsrcs as usize {
            acc = T::apply(op, acc, load(s));
        }
        if avg {
            acc = T::div(acc, a.avg_divisor).ok_or((
                LAUNCH_FAILED,
                format!("{name}: integer avg with avg_divisor 0"),
            ))?;
        }
        let v = T::narrow(acc);
        for d in &dsts {
            // SAFETY: as above.
            unsafe { d.ptr.cast::<T>().add(i).write(v) };
        }
    }
    Ok(())
}
