//! Stream-ordered waits on 32- and 64-bit words and writes on 32-bit words:
//! `cuStreamWaitValue32_v2`/`64_v2` and `cuStreamWriteValue32_v2` where the device supports stream memory
//! operations, else the `sc_spin_wait` / `sc_spin_write` kernels.

use std::time::Duration;

use streamcomm_kernels::cuda::{SpinWaitArgs, SpinWriteArgs};

use crate::batch::MemOp;
use crate::context::Device;
use crate::doorbell::Doorbells;
use crate::driver::result::check;
use crate::driver::sys::{self, CUdevice_attribute, CUdeviceptr};
use crate::error::{Error, Result};
use crate::guard::guarded;
use crate::kernels::Kernels;
use crate::stream::Stream;

/// When a stream wait is released (the `CU_STREAM_WAIT_VALUE_*` values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum WaitCondition {
    /// `(i32)(word - value) >= 0` (wrap-around safe "at least").
    Geq = 0,
    /// `word == value`.
    Eq = 1,
    /// `(word & value) != 0`.
    And = 2,
    /// `!(word | value) != 0`.
    Nor = 3,
}

/// Which mechanism a [`Signals`] uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignalPath {
    /// The driver's stream memory operations.
    StreamMemOps,
    /// One-thread kernels that spin (bounded) or write.
    SpinKernel,
}

/// Stream-ordered waits and writes for one device.
pub struct Signals {
    device: Device,
    path: SignalPath,
    /// Stream memory operations are batched (`cuStreamBatchMemOp_v2`).
    batches: bool,
    kernels: Option<Kernels>,
    status: Doorbells,
    spin_timeout: Duration,
}

impl Signals {
    /// Chooses the path for `device`: stream memory operations when a trial
    /// write lands, else the spin kernels (which need
    /// `kernels`). `force_spin` selects the spin kernels regardless (tests).
    /// Spin waits give up after `spin_timeout` and report it in
    /// [`Signals::check_timeouts`].
    pub fn new(
        device: &Device,
        kernels: Option<&Kernels>,
        force_spin: bool,
        spin_timeout: Duration,
    ) -> Result<Signals> {
        let status = Doorbells::new(device, 2)?;
        let native = !force_spin && native_works(device, &status)?;
        let batches = native && crate::batch::batches_work(device, &status)?;
        let path = if native {
            SignalPath::StreamMemOps
        } else if kernels.is_some() {
            SignalPath::SpinKernel
        } else {
            return Err(Error::Unavailable(format!(
                "{device:?} has no stream memory operations and no spin kernels were given"
            )));
        };
        Ok(Signals {
            device: device.clone(),
            path,
            batches,
            kernels: kernels.cloned(),
            status,
            spin_timeout,
        })
    }

    /// The path in use.
    pub fn path(&self) -> SignalPath {
        self.path
    }

    /// True when [`Signals::batch`] enqueues several operations with one
    /// driver call (`cuStreamBatchMemOp_v2`), false where it makes one call
    /// per operation (no batches from this driver, or the spin kernels).
    pub fn batches(&self) -> bool {
        self.batches
    }

    /// Enqueues `ops` on `stream`, in order: with one driver call per 256
    /// where [`Signals::batches`], else each alone (as
    /// [`Signals::write_value32`], [`Signals::wait_value32`] and
    /// [`Signals::wait_value64`] do).
    ///
    /// # Safety
    /// Every address must be a device-visible word, aligned to its width,
    /// valid until its operation has run (at every replay of a graph that
    /// captures it).
    pub unsafe fn batch(&self, stream: &Stream, ops: &[MemOp]) -> Result<()> {
        for op in ops {
            op.checked_addr()?;
        }
        if self.batches {
            // SAFETY: forwarded contract.
            return unsafe { crate::batch::submit(&self.device, stream, ops) };
        }
        for op in ops {
            // SAFETY: forwarded contract.
            unsafe {
                match *op {
                    MemOp::Write32 { addr, value } => self.write_value32(stream, addr, value)?,
                    MemOp::Wait32 { addr, value, cond } => {
                        self.wait_value32(stream, addr, value, cond)?
                    }
                    MemOp::Wait64 { addr, value, cond } => {
                        self.wait_value64(stream, addr, value, cond)?
                    }
                }
            }
        }
        Ok(())
    }

    /// Makes `stream` wait until the word at `addr` satisfies `cond` against `value`.
    ///
    /// # Safety
    /// `addr` must be a device-visible, 4-byte aligned word (e.g.
    /// [`Doorbells::device_ptr`]) that stays valid until the wait has run.
    pub unsafe fn wait_value32(
        &self,
        stream: &Stream,
        addr: CUdeviceptr,
        value: u32,
        cond: WaitCondition,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.wait(stream, addr, u64::from(value), cond, false) }
    }

    /// [`Signals::wait_value32`] on a 64-bit word (`cuStreamWaitValue64_v2`).
    ///
    /// # Safety
    /// `addr` must be a device-visible, 8-byte aligned word that stays valid
    /// until the wait has run.
    pub unsafe fn wait_value64(
        &self,
        stream: &Stream,
        addr: CUdeviceptr,
        value: u64,
        cond: WaitCondition,
    ) -> Result<()> {
        if !addr.is_multiple_of(8) {
            return Err(Error::invalid(format!(
                "64-bit signal word address {addr:#x} is not 8-byte aligned"
            )));
        }
        // SAFETY: forwarded contract.
        unsafe { self.wait(stream, addr, value, cond, true) }
    }

    /// # Safety
    /// As [`Signals::wait_value64`] for a `wide` word, else as
    /// [`Signals::wait_value32`].
    unsafe fn wait(
        &self,
        stream: &Stream,
        addr: CUdeviceptr,
        value: u64,
        cond: WaitCondition,
        wide: bool,
    ) -> Result<()> {
        check_addr(addr)?;
        match (&self.path, &self.kernels) {
            (SignalPath::SpinKernel, Some(k)) => {
                let args = SpinWaitArgs {
                    addr,
                    status: self.status.device_ptr(0)?,
                    timeout_ns: self.spin_timeout.as_nanos().min(u64::MAX as u128) as u64,
                    value,
                    cond: cond as u32,
                    wide: u32::from(wide),
                };
                // SAFETY: the layout matches sc_spin_wait_args; the caller
                // guarantees `addr`, and the status word lives in `self`.
                unsafe { k.spin_wait.launch(stream, 1, 32, &args) }
            }
            _ if wide => guarded("cuStreamWaitValue64", || {
                self.device.bind()?;
                // SAFETY: the caller guarantees `addr`; the stream is live.
                check("cuStreamWaitValue64_v2", unsafe {
                    sys::cuStreamWaitValue64_v2(stream.as_raw(), addr, value, cond as u32)
                })
            }),
            _ => guarded("cuStreamWaitValue32", || {
                self.device.bind()?;
                // SAFETY: the caller guarantees `addr`; the stream is live.
                check("cuStreamWaitValue32_v2", unsafe {
                    sys::cuStreamWaitValue32_v2(stream.as_raw(), addr, value as u32, cond as u32)
                })
            }),
        }
    }

    /// Enqueues `*addr = value` on `stream`, after all earlier work of the stream.
    ///
    /// # Safety
    /// As for [`Signals::wait_value32`].
    pub unsafe fn write_value32(
        &self,
        stream: &Stream,
        addr: CUdeviceptr,
        value: u32,
    ) -> Result<()> {
        check_addr(addr)?;
        match (&self.path, &self.kernels) {
            (SignalPath::SpinKernel, Some(k)) => {
                let args = SpinWriteArgs {
                    addr,
                    value,
                    reserved: 0,
                };
                // SAFETY: the layout matches sc_spin_write_args; the caller
                // guarantees `addr`.
                unsafe { k.spin_write.launch(stream, 1, 32, &args) }
            }
            // SAFETY: forwarded contract.
            _ => unsafe { write_native(&self.device, stream, addr, value) },
        }
    }

    /// [`Error::Timeout`] if a spin wait gave up since the last call.
    pub fn check_timeouts(&self) -> Result<()> {
        if self.status.load(0)? != 0 {
            self.status.store(0, 0)?;
            return Err(Error::Timeout(format!(
                "a device-side wait gave up after {:?}",
                self.spin_timeout
            )));
        }
        Ok(())
    }
}

fn check_addr(addr: CUdeviceptr) -> Result<()> {
    if addr == 0 || !addr.is_multiple_of(4) {
        return Err(Error::invalid(format!(
            "signal word address {addr:#x} is null or unaligned"
        )));
    }
    Ok(())
}

/// # Safety
/// `addr` must be a valid device-visible word until the write has run.
unsafe fn write_native(
    device: &Device,
    stream: &Stream,
    addr: CUdeviceptr,
    value: u32,
) -> Result<()> {
    guarded("cuStreamWriteValue32", || {
        device.bind()?;
        let flags = sys::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as u32;
        // SAFETY: forwarded from the caller.
        check("cuStreamWriteValue32_v2", unsafe {
            sys::cuStreamWriteValue32_v2(stream.as_raw(), addr, value, flags)
        })
    })
}

/// True when stream memory operations work on `device`: the legacy attribute
/// (`CAN_USE_STREAM_MEM_OPS_V1`) is read, but in CUDA 12+ it describes the
/// deprecated v1 entry points, so the decision is a trial
/// `cuStreamWriteValue32_v2` to doorbell 1 of `scratch` that must land.
fn native_works(device: &Device, scratch: &Doorbells) -> Result<bool> {
    let attr = CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1;
    let _legacy_attribute = device.attribute(attr)?;
    let stream = Stream::new(device)?;
    let magic = 0x5c5c_0001;
    // SAFETY: the doorbell lives in `scratch`, which outlives the synchronisation below.
    let trial = unsafe { write_native(device, &stream, scratch.device_ptr(1)?, magic) };
    if trial.is_err() {
        return Ok(false);
    }
    stream.synchronize_timeout(Duration::from_secs(10))?;
    Ok(scratch.load(1)? == magic)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::sys::CUstreamWaitValue_flags as F;
    use streamcomm_kernels::cuda::DEVICE_HEADER;

    #[test]
    fn conditions_match_the_driver_and_the_spin_kernel() {
        let pairs = [
            (
                WaitCondition::Geq,
                F::CU_STREAM_WAIT_VALUE_GEQ,
                "SC_WAIT_GEQ",
            ),
            (WaitCondition::Eq, F::CU_STREAM_WAIT_VALUE_EQ, "SC_WAIT_EQ"),
            (
                WaitCondition::And,
                F::CU_STREAM_WAIT_VALUE_AND,
                "SC_WAIT_AND",
            ),
            (
                WaitCondition::Nor,
                F::CU_STREAM_WAIT_VALUE_NOR,
                "SC_WAIT_NOR",
            ),
        ];
        for (cond, flag, define) in pairs {
            assert_eq!(cond as u32, flag as u32, "{cond:?}");
            let line = format!("#define {define} {}u", cond as u32);
            assert!(DEVICE_HEADER.contains(&line), "header lacks `{line}`");
        }
    }

    #[test]
    fn null_and_unaligned_words_are_refused() {
        assert!(check_addr(0).is_err());
        assert!(
            check_addr(0x1002)
                .unwrap_err()
                .to_string()
                .contains("0x1002")
        );
        assert!(check_addr(0x1004).is_ok());
    }
}
