//! Memory pools and the stream-ordered allocator (`cuMemAllocAsync`,
//! `cuMemFreeAsync`), present when `STREAMCOMM_STANDIN_MEMORY_POOLS` is on
//! (the `h200` and `h100` profiles); otherwise every entry point here is
//! unimplemented (`CUDA_ERROR_NOT_SUPPORTED`, named on stderr) and
//! `MEMORY_POOLS_SUPPORTED` reads 0, as before.
//!
//! As on a GPU, `cuMemAllocAsync` returns the address at once and the memory
//! is usable in stream order: device work that touches it before its stream
//! reaches the allocation is a device fault (`CUDA_ERROR_ILLEGAL_ADDRESS`,
//! sticky), which also catches use on another stream without an event. The
//! free takes effect when the stream reaches `cuMemFreeAsync`: later work
//! touching it faults (addresses are never reused). Each device has one pool,
//! its default (`cuMemPoolCreate` is not implemented); its attributes are
//! kept and its usage counted, but memory is never really cached.
//!
//! Capture: `cuMemAllocAsync` on a capturing stream would add a graph
//! memory-allocation node on a GPU; the stand-in does not implement those, so
//! it refuses it with `CUDA_ERROR_NOT_SUPPORTED`. `cuMemFreeAsync` on a
//! capturing stream adds a free node, which the driver accepts only for a
//! graph allocation; with none to free here, it is `CUDA_ERROR_INVALID_VALUE`,
//! as on the driver for memory allocated outside graphs. Both name the call
//! on stderr and invalidate the capture (which then ends with 901).

use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;
use std::sync::{Mutex, OnceLock};

use crate::capture;
use crate::config::config;
use crate::context::lock;
use crate::device::{current, out, require_init};
use crate::error::{INVALID_DEVICE, INVALID_VALUE, NOT_SUPPORTED, Res};
use crate::exec::Work;
use crate::guard::{entry, say_once, unsupported};
use crate::handles::PerDevice;
use crate::memory::{FREED, Kind, LIVE, Region, insert, is_own_base, region_of, remove};
use crate::shm::Segment;
use crate::stream::{stream_of, submit};

/// Handles of the default memory pools.
const POOLS: PerDevice = PerDevice::new(0x19);

/// One device's default pool: its attributes and usage.
struct Pool {
    follow_event_dependencies: i32,
    allow_opportunistic: i32,
    allow_internal_dependencies: i32,
    release_threshold: u64,
    used: u64,
    used_high: u64,
    /// Freed bytes the pool counts as kept (up to the release threshold).
    cached: u64,
    reserved_high: u64,
}

impl Pool {
    fn reserved(&self) -> u64 {
        self.used + self.cached
    }

    fn note_high(&mut self) {
        self.used_high = self.used_high.max(self.used);
        self.reserved_high = self.reserved_high.max(self.reserved());
    }
}

fn pools() -> &'static [Mutex<Pool>] {
    static POOLS: OnceLock<Vec<Mutex<Pool>>> = OnceLock::new();
    POOLS.get_or_init(|| {
        (0..config().devices)
            .map(|_| {
                Mutex::new(Pool {
                    follow_event_dependencies: 1,
                    allow_opportunistic: 1,
                    allow_internal_dependencies: 1,
                    release_threshold: 0,
                    used: 0,
                    used_high: 0,
                    cached: 0,
                    reserved_high: 0,
                })
            })
            .collect()
    })
}

/// The device ordinal of a pool handle.
fn ordinal_of(pool: usize) -> Res<usize> {
    POOLS.ordinal(pool, pools().len()).ok_or(INVALID_VALUE)
}

/// `CUDA_ERROR_NOT_SUPPORTED`, named on stderr, unless memory pools are on.
fn enabled(name: &'static str) -> Res<()> {
    if config().memory_pools {
        Ok(())
    } else {
        Err(unsupported(name))
    }
}

fn device(dev: c_int) -> Res<usize> {
    require_init()?;
    usize::try_from(dev)
        .ok()
        .filter(|d| *d < pools().len())
        .ok_or(INVALID_DEVICE)
}

/// Refuses `cuMemAllocAsync` on a capturing stream: on a GPU it would add a
/// graph memory-allocation node, which the stand-in does not implement
/// (`CUDA_ERROR_NOT_SUPPORTED`, named, and the capture is invalidated).
fn refuse_alloc_capture(s: &crate::context::Stream, name: &str) -> Res<()> {
    if let Some(cap) = capture::of(s) {
        say_once(
            format!("pool-capture:{name}"),
            &format!(
                "{name} on a capturing stream would add a graph memory-allocation node, which the stand-in does not implement: CUDA_ERROR_NOT_SUPPORTED"
            ),
        );
        return Err(cap.invalidate_with(NOT_SUPPORTED, &format!("{name} on a capturing stream")));
    }
    Ok(())
}

/// Refuses `cuMemFreeAsync` on a capturing stream: captured, it adds a free
/// node, which the driver accepts only for an allocation made by a graph's
/// allocation node (`CUDA_ERROR_INVALID_VALUE` otherwise), and the stand-in
/// has no such allocations. The capture is invalidated.
fn refuse_free_capture(s: &crate::context::Stream) -> Res<()> {
    if let Some(cap) = capture::of(s) {
        say_once(
            "pool-capture:cuMemFreeAsync".into(),
            "cuMemFreeAsync on a capturing stream adds a free node, which must free a graph allocation (the stand-in has none): CUDA_ERROR_INVALID_VALUE",
        );
        return Err(cap.invalidate_with(
            INVALID_VALUE,
            "cuMemFreeAsync of memory no graph allocated, on a capturing stream",
        ));
    }
    Ok(())
}

fn alloc_async(
    dptr: *mut u64,
    size: usize,
    hstream: usize,
    pool: Option<usize>,
    name: &'static str,
) -> Res<()> {
    let ctx = current()?;
    let s = stream_of(hstream)?;
    if let Some(p) = pool
        && ordinal_of(p)? != ctx.ordinal
    {
        return Err(INVALID_VALUE);
    }
    if dptr.is_null() || size == 0 {
        return Err(INVALID_VALUE);
    }
    refuse_alloc_capture(&s, name)?;
    let (seg, _) = Segment::create(size)?;
    let base = insert(size, Kind::Pool, seg, ctx.ordinal)?;
    if let Err(code) = submit(&s, Work::PoolAlloc(base), Vec::new(), name) {
        let _ = remove(base, |_| true);
        return Err(code);
    }
    {
        let mut p = lock(&pools()[ctx.ordinal]);
        let reuse = p.cached.min(size as u64);
        p.cached -= reuse;
        p.used += size as u64;
        p.note_high();
    }
    out(dptr, base)
}

/// Work: the stream reached the allocation at `base`.
pub(crate) fn reached_alloc(base: u64) {
    if let Some(r) = region_of(base) {
        r.state.store(LIVE, Ordering::Release);
    }
}

/// Work: the stream reached the free of the allocation at `base`.
pub(crate) fn reached_free(base: u64) {
    if let Ok(r) = remove(base, |r| r.base == base) {
        r.state.store(FREED, Ordering::Release);
        released(&r);
    }
}

/// Counts a freed region against its pool, if it came from one.
pub(crate) fn released(r: &Region) {
    if !matches!(r.kind, Kind::Pool) {
        return;
    }
    if let Some(pool) = pools().get(r.ordinal) {
        let mut p = lock(pool);
        p.used = p.used.saturating_sub(r.len as u64);
        p.cached = (p.cached + r.len as u64).min(p.release_threshold);
    }
}

/// `cuMemAllocAsync`: from the current device's pool, usable in stream
/// order; size 0 is `CUDA_ERROR_INVALID_VALUE` (as for `cuMemAlloc`).
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemAllocAsync(dptr: *mut u64, bytesize: usize, stream: usize) -> u32 {
    entry("cuMemAllocAsync", || {
        enabled("cuMemAllocAsync")?;
        alloc_async(dptr, bytesize, stream, None, "cuMemAllocAsync")
    })
}

/// `cuMemAllocFromPoolAsync`: as `cuMemAllocAsync`; the pool must be the
/// current device's.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemAllocFromPoolAsync(
    dptr: *mut u64,
    bytesize: usize,
    pool: usize,
    stream: usize,
) -> u32 {
    entry("cuMemAllocFromPoolAsync", || {
        enabled("cuMemAllocFromPoolAsync")?;
        alloc_async(
            dptr,
            bytesize,
            stream,
            Some(pool),
            "cuMemAllocFromPoolAsync",
        )
    })
}

/// `cuMemFreeAsync`: the base of an allocation of this process
/// (`cuMemAllocAsync` or `cuMemAlloc`) not already freed; takes effect when
/// the stream reaches it.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemFreeAsync(dptr: u64, stream: usize) -> u32 {
    entry("cuMemFreeAsync", || {
        enabled("cuMemFreeAsync")?;
        current()?;
        let s = stream_of(stream)?;
        refuse_free_capture(&s)?;
        let r = region_of(dptr)
            .filter(|r| is_own_base(r, dptr))
            .ok_or(INVALID_VALUE)?;
        if r.free_queued.swap(true, Ordering::AcqRel) {
            return Err(INVALID_VALUE);
        }
        if let Err(code) = submit(&s, Work::PoolFree(dptr), Vec::new(), "cuMemFreeAsync") {
            r.free_queued.store(false, Ordering::Release);
            return Err(code);
        }
        Ok(())
    })
}

/// `cuDeviceGetDefaultMemPool`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuDeviceGetDefaultMemPool(pool: *mut usize, dev: c_int) -> u32 {
    entry("cuDeviceGetDefaultMemPool", || {
        enabled("cuDeviceGetDefaultMemPool")?;
        out(pool, POOLS.handle(device(dev)?))
    })
}

/// `cuDeviceGetMemPool`: the default pool (the only one there is).
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuDeviceGetMemPool(pool: *mut usize, dev: c_int) -> u32 {
    entry("cuDeviceGetMemPool", || {
        enabled("cuDeviceGetMemPool")?;
        out(pool, POOLS.handle(device(dev)?))
    })
}

/// `cuDeviceSetMemPool`: only the device's own default pool.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuDeviceSetMemPool(dev: c_int, pool: usize) -> u32 {
    entry("cuDeviceSetMemPool", || {
        enabled("cuDeviceSetMemPool")?;
        if ordinal_of(pool)? != device(dev)? {
            return Err(INVALID_VALUE);
        }
        Ok(())
    })
}

/// `cuMemPoolTrimTo`: the pool keeps at most `min_keep` bytes reserved
/// beyond what is in use.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemPoolTrimTo(pool: usize, min_keep: usize) -> u32 {
    entry("cuMemPoolTrimTo", || {
        enabled("cuMemPoolTrimTo")?;
        let mut p = lock(&pools()[ordinal_of(pool)?]);
        let keep = (min_keep as u64).saturating_sub(p.used);
        p.cached = p.cached.min(keep);
        Ok(())
    })
}

/// `cuMemPoolGetAttribute`: the three reuse flags (`int`), the release
/// threshold and the reserved and used counters (`cuuint64_t`).
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemPoolGetAttribute(
    pool: usize,
    attr: c_int,
    value: *mut c_void,
) -> u32 {
    entry("cuMemPoolGetAttribute", || {
        enabled("cuMemPoolGetAttribute")?;
        let p = lock(&pools()[ordinal_of(pool)?]);
        match attr {
            1 => out(value.cast(), p.follow_event_dependencies),
            2 => out(value.cast(), p.allow_opportunistic),
            3 => out(value.cast(), p.allow_internal_dependencies),
            4 => out(value.cast(), p.release_threshold),
            5 => out(value.cast(), p.reserved()),
            6 => out(value.cast(), p.reserved_high),
            7 => out(value.cast(), p.used),
            8 => out(value.cast(), p.used_high),
            _ => Err(INVALID_VALUE),
        }
    })
}

/// `cuMemPoolSetAttribute`: the reuse flags (0 or 1), the release threshold,
/// and the high watermarks, which only accept 0 (a reset).
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemPoolSetAttribute(
    pool: usize,
    attr: c_int,
    value: *mut c_void,
) -> u32 {
    entry("cuMemPoolSetAttribute", || {
        enabled("cuMemPoolSetAttribute")?;
        let mut p = lock(&pools()[ordinal_of(pool)?]);
        if value.is_null() {
            return Err(INVALID_VALUE);
        }
        let flag = || {
            // SAFETY: non-null; the reuse attributes point to an int.
            let v = unsafe { *value.cast::<c_int>() };
            if v == 0 || v == 1 {
                Ok(v)
            } else {
                Err(INVALID_VALUE)
            }
        };
        // SAFETY: non-null; the other settable attributes point to a cuuint64_t.
        let wide = || unsafe { *value.cast::<u64>() };
        match attr {
            1 => p.follow_event_dependencies = flag()?,
            2 => p.allow_opportunistic = flag()?,
            3 => p.allow_internal_dependencies = flag()?,
            4 => p.release_threshold = wide(),
            6 if wide() == 0 => p.reserved_high = p.reserved(),
            8 if wide() == 0 => p.used_high = p.used,
            _ => return Err(INVALID_VALUE),
        }
        Ok(())
    })
}
