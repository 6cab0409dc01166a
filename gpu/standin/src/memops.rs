//! Stream memory operations (`cuStreamWaitValue*_v2`, `cuStreamWriteValue*_v2`)
//! and host functions (`cuLaunchHostFunc`).
//!
//! A wait blocks its hardware queue until the condition holds, for ever if
//! nobody writes: as on the device, the ordering a memop establishes is
//! invisible to the scheduler. Targets must be device-accessible memory
//! (device memory, IPC mappings, `DEVICEMAP` pinned memory) and aligned.

use std::ffi::c_void;

use crate::device::{can_flush_remote_writes, current};
use crate::error::{INVALID_VALUE, Res};
use crate::exec::{HostFn, Work};
use crate::guard::{entry, say_once};
use crate::memory::resolve;
use crate::stream::{stream_of, submit};

/// `CU_STREAM_WAIT_VALUE_FLUSH`.
const FLUSH: u32 = 1 << 30;

fn target(addr: u64, wide: bool, name: &str) -> Res<()> {
    let size = if wide { 8 } else { 4 };
    if !addr.is_multiple_of(size) || resolve(addr, size as usize).is_err() {
        say_once(
            format!("memop-target:{name}"),
            &format!(
                "{name}: {addr:#x} is not an aligned word of device-accessible memory: CUDA_ERROR_INVALID_VALUE"
            ),
        );
        return Err(INVALID_VALUE);
    }
    Ok(())
}

/// Entry point `name`: submits one stream memory operation to `stream`, its
/// work made (and its arguments checked) by `work`.
fn memop(name: &'static str, stream: usize, work: impl FnOnce(&'static str) -> Res<Work>) -> u32 {
    entry(name, || {
        current()?;
        refuse_memops(name)?;
        let s = stream_of(stream)?;
        submit(&s, work(name)?, Vec::new(), name).map(|_| ())
    })
}

/// `CUDA_ERROR_NOT_SUPPORTED` for `name` under
/// `STREAMCOMM_STANDIN_REFUSE=memops`.
fn refuse_memops(name: &'static str) -> Res<()> {
    if crate::config::config().refuse.memops {
        return Err(crate::guard::refused(name, "memops"));
    }
    Ok(())
}

/// The work of a stream wait, its arguments checked.
fn wait_work(addr: u64, value: u64, flags: u32, wide: bool, name: &'static str) -> Res<Work> {
    if flags & !(FLUSH | 0x3) != 0 {
        return Err(INVALID_VALUE);
    }
    if flags & FLUSH != 0 && !can_flush_remote_writes() {
        say_once(
            "flush".into(),
            &format!(
                "{name}: CU_STREAM_WAIT_VALUE_FLUSH needs CAN_FLUSH_REMOTE_WRITES, which this device lacks"
            ),
        );
        return Err(INVALID_VALUE);
    }
    target(addr, wide, name)?;
    Ok(Work::WaitValue {
        addr,
        value,
        cond: flags & 0x3,
        wide,
    })
}

/// The work of a stream write, its arguments checked.
fn write_work(addr: u64, value: u64, flags: u32, wide: bool, name: &'static str) -> Res<Work> {
    if flags != 0 {
        say_once(
            format!("write-flags:{name}"),
            &format!(
                "{name}: flags {flags:#x} (NO_MEMORY_BARRIER is not supported by the _v2 API): CUDA_ERROR_INVALID_VALUE"
            ),
        );
        return Err(INVALID_VALUE);
    }
    target(addr, wide, name)?;
    Ok(Work::WriteValue { addr, value, wide })
}

/// Most operations one `cuStreamBatchMemOp_v2` takes (the driver's
/// documented limit).
const BATCH_MAX: u32 = 256;

/// Bytes of one `CUstreamBatchMemOpParams` (a union of six 64-bit words).
const PARAMS: usize = 48;

/// `cuStreamBatchMemOp_v2`: 1 to 256 waits and writes (32 or 64 bits),
/// run in order as one piece of stream work (one graph node when
/// captured); `flags` must be 0. Each operation is checked as its single
/// form is; memory barriers and remote-write flushes are refused (this
/// device cannot flush remote writes, and the stand-in models no barrier
/// without one).
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn cuStreamBatchMemOp_v2(
    stream: usize,
    count: u32,
    params: *const u8,
    flags: u32,
) -> u32 {
    entry("cuStreamBatchMemOp_v2", || {
        current()?;
        refuse_memops("cuStreamBatchMemOp_v2")?;
        if crate::config::config().refuse.batch_memops {
            return Err(crate::guard::refused(
                "cuStreamBatchMemOp_v2",
                "batch-memops",
            ));
        }
        let s = stream_of(stream)?;
        if flags != 0 || count == 0 || count > BATCH_MAX || params.is_null() {
            say_once(
                format!("batch:{flags}:{count}"),
                &format!(
                    "cuStreamBatchMemOp_v2: count {count} (1..={BATCH_MAX}), flags {flags:#x} (0), \
                     params {params:?}: CUDA_ERROR_INVALID_VALUE"
                ),
            );
            return Err(INVALID_VALUE);
        }
        let name = "cuStreamBatchMemOp_v2";
        let mut ops = Vec::with_capacity(count as usize);
        for i in 0..count as usize {
            // SAFETY: the caller passes `count` parameter blocks of 48
            // bytes (the driver's contract); read unaligned, as bytes.
            let op = unsafe { std::slice::from_raw_parts(params.add(i * PARAMS), PARAMS) };
            let word = |at: usize| u64::from_ne_bytes(op[at..at + 8].try_into().expect("8 bytes"));
            let operation = u32::from_ne_bytes(op[0..4].try_into().expect("4 bytes"));
            let (addr, value) = (word(8), word(16));
            let op_flags = u32::from_ne_bytes(op[24..28].try_into().expect("4 bytes"));
            ops.push(match operation {
                1 => wait_work(addr, value & 0xffff_ffff, op_flags, false, name)?,
                4 => wait_work(addr, value, op_flags, true, name)?,
                2 => write_work(addr, value & 0xffff_ffff, op_flags, false, name)?,
                5 => write_work(addr, value, op_flags, true, name)?,
                other => {
                    say_once(
                        format!("batch-op:{other}"),
                        &format!(
                            "cuStreamBatchMemOp_v2: operation {other} (of entry {i}) is not a wait or \
                             write the stand-in runs: CUDA_ERROR_NOT_SUPPORTED"
                        ),
                    );
                    return Err(crate::error::NOT_SUPPORTED);
                }
            });
        }
        submit(&s, Work::Batch(ops.into()), Vec::new(), name).map(|_| ())
    })
}

/// Defines the single-operation entry points, each `fn(stream, addr, value,
/// flags)` with its value type, width and kind of work.
macro_rules! single_memops {
    ($($(#[doc = $doc:literal])* $name:ident($value:ty, wide: $wide:literal) => $work:ident;)*) => {$(
        $(#[doc = $doc])*
        #[unsafe(no_mangle)]
        pub(crate) extern "C" fn $name(stream: usize, addr: u64, value: $value, flags: u32) -> u32 {
            memop(stringify!($name), stream, |name| {
                $work(addr, u64::from(value), flags, $wide, name)
            })
        }
    )*};
}

single_memops! {
    /// `cuStreamWaitValue32_v2`: GEQ (cyclic), EQ, AND, NOR; FLUSH only where
    /// the device can flush remote writes (this one cannot).
    cuStreamWaitValue32_v2(u32, wide: false) => wait_work;
    /// `cuStreamWaitValue64_v2`.
    cuStreamWaitValue64_v2(u64, wide: true) => wait_work;
    /// `cuStreamWriteValue32_v2`: flags must be 0 (the write is fenced).
    cuStreamWriteValue32_v2(u32, wide: false) => write_work;
    /// `cuStreamWriteValue64_v2`.
    cuStreamWriteValue64_v2(u64, wide: true) => write_work;
}

/// `cuLaunchHostFunc`: runs `f(data)` when the stream reaches it, one host
/// function at a time process-wide; CUDA calls from it fail with
/// `CUDA_ERROR_NOT_PERMITTED`. Captured, it runs at every replay.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuLaunchHostFunc(
    stream: usize,
    f: Option<HostFn>,
    data: *mut c_void,
) -> u32 {
    entry("cuLaunchHostFunc", || {
        let s = stream_of(stream)?;
        let f = f.ok_or(INVALID_VALUE)?;
        submit(
            &s,
            Work::HostFn {
                f,
                data: data as usize,
            },
            Vec::new(),
            "cuLaunchHostFunc",
        )
        .map(|_| ())
    })
}
