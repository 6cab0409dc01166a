//! Batched stream memory operations (`cuStreamBatchMemOp_v2`): several
//! waits and writes enqueued with one driver call, run by the device in the
//! order given (one graph node when captured). [`crate::Signals::batch`]
//! uses them where the driver takes them, else one call per operation.

use std::time::Duration;

use crate::context::Device;
use crate::doorbell::Doorbells;
use crate::driver::result::check;
use crate::driver::sys::{self, CUdeviceptr, CUstreamBatchMemOpType as Op};
use crate::error::{Error, Result};
use crate::guard::guarded;
use crate::signals::WaitCondition;
use crate::stream::Stream;

/// One operation of a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemOp {
    /// `*addr = value` (a 32-bit word), after all earlier work of the
    /// stream is visible.
    Write32 {
        /// Device address, 4-byte aligned.
        addr: CUdeviceptr,
        /// The value.
        value: u32,
    },
    /// Waits until the 32-bit word at `addr` satisfies `cond` against `value`.
    Wait32 {
        /// Device address, 4-byte aligned.
        addr: CUdeviceptr,
        /// Compared value.
        value: u32,
        /// The condition.
        cond: WaitCondition,
    },
    /// Waits until the 64-bit word at `addr` satisfies `cond` against `value`.
    Wait64 {
        /// Device address, 8-byte aligned.
        addr: CUdeviceptr,
        /// Compared value.
        value: u64,
        /// The condition.
        cond: WaitCondition,
    },
}

/// Most operations the driver takes in one batch.
pub(crate) const BATCH_MAX: usize = 256;

/// One `CUstreamBatchMemOpParams` as six 64-bit words: the operation, the
/// address, the value, the flags, the driver's alias word, padding.
type Params = [u64; 6];

const _: () = assert!(size_of::<sys::CUstreamBatchMemOpParams>() == size_of::<Params>());

impl MemOp {
    /// Its address, checked for alignment.
    pub(crate) fn checked_addr(&self) -> Result<CUdeviceptr> {
        let (addr, align) = match *self {
            MemOp::Write32 { addr, .. } | MemOp::Wait32 { addr, .. } => (addr, 4),
            MemOp::Wait64 { addr, .. } => (addr, 8),
        };
        if addr == 0 || !addr.is_multiple_of(align) {
            return Err(Error::invalid(format!(
                "batched memory operation {self:?}: the address is null or not {align}-byte aligned"
            )));
        }
        Ok(addr)
    }

    /// The driver's parameter block.
    fn params(&self) -> Params {
        let (op, addr, value, flags) = match *self {
            MemOp::Write32 { addr, value } => (
                Op::CU_STREAM_MEM_OP_WRITE_VALUE_32,
                addr,
                u64::from(value),
                0,
            ),
            MemOp::Wait32 { addr, value, cond } => (
                Op::CU_STREAM_MEM_OP_WAIT_VALUE_32,
                addr,
                u64::from(value),
                cond as u64,
            ),
            MemOp::Wait64 { addr, value, cond } => {
                (Op::CU_STREAM_MEM_OP_WAIT_VALUE_64, addr, value, cond as u64)
            }
        };
        [op as u64, addr, value, flags, 0, 0]
    }
}

/// Enqueues `ops` on `stream` with one `cuStreamBatchMemOp_v2` per
/// [`BATCH_MAX`] of them.
///
/// # Safety
/// Every address must be a device-visible word valid until its operation
/// has run (at every replay of a graph that captures it).
pub(crate) unsafe fn submit(device: &Device, stream: &Stream, ops: &[MemOp]) -> Result<()> {
    for part in ops.chunks(BATCH_MAX) {
        let mut params: Vec<Params> = part.iter().map(MemOp::params).collect();
        guarded("cuStreamBatchMemOp", || {
            device.bind()?;
            // SAFETY: `params` holds `part.len()` blocks laid out as the
            // driver's union (size checked above); the addresses are the
            // caller's contract.
            check("cuStreamBatchMemOp_v2", unsafe {
                sys::cuStreamBatchMemOp_v2(
                    stream.as_raw(),
                    part.len() as u32,
                    params.as_mut_ptr().cast(),
                    0,
                )
            })
        })?;
    }
    Ok(())
}

/// True when `device` runs batches: a trial batch writing doorbell 1 of
/// `scratch` must land (a driver or sandbox that refuses batches, or
/// lacks the entry point, leaves the single operations).
pub(crate) fn batches_work(device: &Device, scratch: &Doorbells) -> Result<bool> {
    let stream = Stream::new(device)?;
    let magic = 0x5c5c_0002;
    let write = MemOp::Write32 {
        addr: scratch.device_ptr(1)?,
        value: magic,
    };
    // SAFETY: the doorbell lives in `scratch`, which outlives the
    // synchronisation below.
    if unsafe { submit(device, &stream, &[write]) }.is_err() {
        return Ok(false);
    }
    stream.synchronize_timeout(Duration::from_secs(10))?;
    Ok(scratch.load(1)? == magic)
}
