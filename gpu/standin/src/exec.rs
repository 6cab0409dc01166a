//! What a hardware queue executes: the work items streams and graphs hold,
//! and how each runs on the CPU. An error here is a device fault: it becomes
//! the context's sticky error.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::context::{Context, lock};
use crate::error::ILLEGAL_ADDRESS;
use crate::guard::as_host_fn;
use crate::memory::{Mapped, resolve};

/// A host function (`CUhostFn`).
pub(crate) type HostFn = unsafe extern "C" fn(*mut c_void);

/// One unit of stream work, cheap to clone into graphs and replays.
#[derive(Clone)]
pub enum Work {
    /// Orders only (event waits, joins).
    Nop,
    /// An event record: notes the time it ran.
    Record(Arc<OnceLock<Instant>>),
    /// Host memory (raw address) to device memory.
    ToDevice {
        /// Device address.
        dst: u64,
        /// Host address, valid when the copy runs (caller's contract).
        src: usize,
        /// Bytes.
        len: usize,
    },
    /// Device memory to host memory (raw address).
    ToHost {
        /// Host address.
        dst: usize,
        /// Device address.
        src: u64,
        /// Bytes.
        len: usize,
    },
    /// Device to device.
    DeviceCopy {
        /// Device address.
        dst: u64,
        /// Device address.
        src: u64,
        /// Bytes.
        len: usize,
    },
    /// Host bytes copied at enqueue time (pageable source), then to the device.
    Staged {
        /// Device address.
        dst: u64,
        /// The staged bytes.
        data: Arc<Vec<u8>>,
    },
    /// `count` elements of `width` bytes set to `value`.
    Memset {
        /// Device address.
        dst: u64,
        /// The value (low `width` bytes).
        value: u32,
        /// 1, 2 or 4.
        width: usize,
        /// Elements.
        count: usize,
    },
    /// `cuStreamWaitValue32/64`: blocks the queue until the condition holds.
    WaitValue {
        /// Device address of the word.
        addr: u64,
        /// Compared value.
        value: u64,
        /// `CU_STREAM_WAIT_VALUE_*` condition (0..=3).
        cond: u32,
        /// 64-bit word.
        wide: bool,
    },
    /// `cuStreamWriteValue32/64`, after a system-wide fence.
    WriteValue {
        /// Device address of the word.
        addr: u64,
        /// Written value.
        value: u64,
        /// 64-bit word.
        wide: bool,
    },
    /// `cuStreamBatchMemOp_v2`: its waits and writes, in order.
    Batch(Arc<[Work]>),
    /// A host function with its user data.
    HostFn {
        /// The function.
        f: HostFn,
        /// Its argument, as an address.
        data: usize,
    },
    /// A kernel launch.
    Kernel(Arc<crate::kernels::Launch>),
    /// An executable graph: its nodes in order.
    Graph(Arc<crate::graph::Exec>),
    /// `cuMemAllocAsync` reached: the allocation at this base becomes usable.
    PoolAlloc(u64),
    /// `cuMemFreeAsync` reached: the allocation at this base is freed.
    PoolFree(u64),
}

/// A device fault: the code and what happened.
pub(crate) type Fault = (u32, String);

/// Host functions of all streams run one at a time, as the driver runs them
/// on one thread.
static HOST_FN: Mutex<()> = Mutex::new(());

/// Translates a device range for work that is running, or faults: the
/// range must be device-accessible memory, and usable now (not a
/// stream-ordered allocation its stream has not reached, not an IPC mapping
/// whose exporter freed it or exited).
pub(crate) fn device(addr: u64, len: usize, what: &str) -> Result<Mapped, Fault> {
    let m = resolve(addr, len).map_err(|_| {
        (
            ILLEGAL_ADDRESS,
            format!(
                "{what} touched {len} bytes at {addr:#x}, which is not device-accessible memory"
            ),
        )
    })?;
    if let Some(why) = m.unusable() {
        return Err((
            ILLEGAL_ADDRESS,
            format!("{what} touched {len} bytes at {addr:#x}, but {why}"),
        ));
    }
    Ok(m)
}

/// Runs `work` on the calling queue worker.
pub(crate) fn run(ctx: &Context, work: &Work) -> Result<(), Fault> {
    match work {
        Work::Nop => {}
        Work::Record(at) => {
            let _ = at.set(Instant::now());
        }
        Work::ToDevice { dst, src, len } => {
            let d = device(*dst, *len, "a host-to-device copy")?;
            // SAFETY: `d` maps `len` bytes; the host range is the caller's
            // contract (valid until the copy has run).
            unsafe { std::ptr::copy(*src as *const u8, d.ptr, *len) };
        }
        Work::ToHost { dst, src, len } => {
            let s = device(*src, *len, "a device-to-host copy")?;
            // SAFETY: as above, in the other direction.
            unsafe { std::ptr::copy(s.ptr, *dst as *mut u8, *len) };
        }
        Work::DeviceCopy { dst, src, len } => {
            let s = device(*src, *len, "a device-to-device copy (source)")?;
            let d = device(*dst, *len, "a device-to-device copy (destination)")?;
            crate::counters::read(&s, *len);
            // SAFETY: both translated ranges hold `len` bytes.
            unsafe { std::ptr::copy(s.ptr, d.ptr, *len) };
        }
        Work::Staged { dst, data } => {
            let d = device(*dst, data.len(), "a host-to-device copy")?;
            // SAFETY: the translated range holds `data.len()` bytes.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), d.ptr, data.len()) };
        }
        Work::Memset {
            dst,
            value,
            width,
            count,
        } => {
            let d = device(*dst, width * count, "a memset")?;
            let bytes = value.to_ne_bytes();
            for i in 0..*count {
                // SAFETY: element i lies inside the translated range.
                unsafe {
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), d.ptr.add(i * width), *width)
                };
            }
        }
        Work::WaitValue {
            addr,
            value,
            cond,
            wide,
        } => wait_value(ctx, *addr, *value, *cond, *wide)?,
        Work::WriteValue { addr, value, wide } => {
            let d = device(*addr, if *wide { 8 } else { 4 }, "cuStreamWriteValue")?;
            fence(Ordering::SeqCst);
            // SAFETY: the word is translated, in bounds, and aligned (checked at enqueue).
            unsafe {
                if *wide {
                    AtomicU64::from_ptr(d.ptr.cast()).store(*value, Ordering::Release);
                } else {
                    AtomicU32::from_ptr(d.ptr.cast()).store(*value as u32, Ordering::Release);
                }
            }
        }
        Work::Batch(ops) => {
            for op in ops.iter() {
                run(ctx, op)?;
            }
        }
        Work::HostFn { f, data } => {
            let _one_at_a_time = lock(&HOST_FN);
            // SAFETY: the application vouched for `f` and `data` when enqueuing.
            as_host_fn(|| unsafe { f(*data as *mut c_void) });
        }
        Work::Kernel(launch) => crate::kernels::run(ctx, launch)?,
        Work::Graph(exec) => {
            for w in exec.works() {
                run(ctx, w)?;
            }
        }
        Work::PoolAlloc(base) => crate::pool::reached_alloc(*base),
        Work::PoolFree(base) => crate::pool::reached_free(*base),
    }
    Ok(())
}

/// True when `word` satisfies `cond` against `value` (GEQ is cyclic).
pub(crate) fn satisfied(word: u64, value: u64, cond: u32, wide: bool) -> bool {
    match cond {
        1 => word == value,
        2 => word & value != 0,
        3 => {
            let nor = !(word | value);
            if wide { nor != 0 } else { nor as u32 != 0 }
        }
        _ if wide => (word.wrapping_sub(value) as i64) >= 0,
        _ => ((word as u32).wrapping_sub(value as u32) as i32) >= 0,
    }
}

/// The 32- or 64-bit word at `d`, read atomically (acquire).
///
/// # Safety
/// `d` must be translated for at least the word's bytes, aligned to them.
pub(crate) unsafe fn load_word(d: &Mapped, wide: bool) -> u64 {
    // SAFETY: the caller's contract.
    unsafe {
        if wide {
            AtomicU64::from_ptr(d.ptr.cast()).load(Ordering::Acquire)
        } else {
            u64::from(AtomicU32::from_ptr(d.ptr.cast()).load(Ordering::Acquire))
        }
    }
}

/// Polls the word until the condition holds; never gives up (as on the
/// device), unless the context faults.
fn wait_value(ctx: &Context, addr: u64, value: u64, cond: u32, wide: bool) -> Result<(), Fault> {
    let d = device(addr, if wide { 8 } else { 4 }, "cuStreamWaitValue")?;
    // SAFETY: the word is translated, in bounds, and aligned (checked at enqueue).
    let read = || unsafe { load_word(&d, wide) };
    let mut spins = 0u32;
    while !satisfied(read(), value, cond, wide) {
        spins += 1;
        if spins < 64 {
            std::hint::spin_loop();
        } else if spins < 256 {
            std::thread::yield_now();
        } else {
            if ctx.check_sticky().is_err() {
                return Ok(());
            }
            // Every ~5 ms: has the word's memory gone (an IPC exporter freed
            // it or exited)? On a GPU the next poll would fault.
            if spins.is_multiple_of(128)
                && let Some(why) = d.unusable()
            {
                return Err((
                    ILLEGAL_ADDRESS,
                    format!("cuStreamWaitValue polled {addr:#x}, but {why}"),
                ));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    fence(Ordering::SeqCst);
    Ok(())
}
