//! A CUDA device and its primary context.

use std::cell::Cell;
use std::sync::Arc;

use crate::driver::probe;
use crate::driver::result::check;
use crate::driver::sys::{self, CUdevice, CUdevice_attribute};
use crate::error::{Error, Result};
use crate::guard::guarded;
use crate::nvrtc::Arch;

/// A device's compute mode (`CU_DEVICE_ATTRIBUTE_COMPUTE_MODE`, set with
/// `nvidia-smi -c`): how many processes may hold a context on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ComputeMode {
    /// Any number of processes (`DEFAULT`, 0).
    Default,
    /// No process (`PROHIBITED`, 2).
    Prohibited,
    /// One process at a time (`EXCLUSIVE_PROCESS`, 3), common on shared
    /// clusters: a second process's context creation fails with
    /// `CUDA_ERROR_DEVICE_UNAVAILABLE` (46).
    ExclusiveProcess,
    /// A value this crate does not know.
    Other(i32),
}

impl ComputeMode {
    /// The mode of the attribute's value.
    pub fn from_raw(value: i32) -> ComputeMode {
        match value {
            0 => ComputeMode::Default,
            2 => ComputeMode::Prohibited,
            3 => ComputeMode::ExclusiveProcess,
            v => ComputeMode::Other(v),
        }
    }

    /// The name `nvidia-smi -q` prints, e.g. `EXCLUSIVE_PROCESS`.
    pub fn name(self) -> String {
        match self {
            ComputeMode::Default => "DEFAULT".into(),
            ComputeMode::Prohibited => "PROHIBITED".into(),
            ComputeMode::ExclusiveProcess => "EXCLUSIVE_PROCESS".into(),
            ComputeMode::Other(v) => format!("compute mode {v}"),
        }
    }

    /// True when at most one process may use the device at a time.
    pub fn allows_one_process(self) -> bool {
        matches!(self, ComputeMode::ExclusiveProcess)
    }

    /// The compute mode of device `ordinal`, read without making a
    /// context (so it can explain why one could not be made).
    ///
    /// # Examples
    /// ```no_run
    /// let mode = streamcomm_gpu::ComputeMode::of(0)?;
    /// println!("compute mode: {}", mode.name());
    /// # Ok::<(), streamcomm_gpu::Error>(())
    /// ```
    pub fn of(ordinal: usize) -> Result<ComputeMode> {
        probe::driver()?;
        guarded("cuDeviceGetAttribute", || {
            let mut dev: CUdevice = 0;
            // SAFETY: valid out-pointer.
            check("cuDeviceGet", unsafe {
                sys::cuDeviceGet(&mut dev, ordinal as i32)
            })?;
            attribute(dev, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_MODE)
                .map(ComputeMode::from_raw)
        })
    }
}

/// `CUDA_ERROR_DEVICE_UNAVAILABLE`: what context creation returns on a
/// device whose compute mode keeps this process out.
const DEVICE_UNAVAILABLE: u32 = 46;

/// One CUDA device with its retained primary context (cheap to clone).
#[derive(Clone)]
pub struct Device {
    inner: Arc<DeviceInner>,
}

struct DeviceInner {
    ordinal: usize,
    dev: CUdevice,
    ctx: sys::CUcontext,
    arch: Arch,
    name: String,
}

// SAFETY: a CUcontext handle may be used from any thread (the driver API is
// thread-safe); `Device` only makes it current before use.
unsafe impl Send for DeviceInner {}
// SAFETY: as above; no interior mutability on the Rust side.
unsafe impl Sync for DeviceInner {}

impl Device {
    /// Number of CUDA devices; [`Error::Unavailable`] without a driver.
    pub fn count() -> Result<usize> {
        Ok(probe::driver()?.device_count)
    }

    /// Opens device `ordinal` (retains its primary context, as the runtime API
    /// and cudarc do).
    pub fn open(ordinal: usize) -> Result<Device> {
        let info = probe::driver()?;
        if ordinal >= info.device_count {
            return Err(Error::invalid(format!(
                "device ordinal {ordinal}: only {} CUDA devices",
                info.device_count
            )));
        }
        guarded("opening a CUDA device", || {
            let mut dev: CUdevice = 0;
            // SAFETY: valid out-pointer; the ordinal was range-checked.
            check("cuDeviceGet", unsafe {
                sys::cuDeviceGet(&mut dev, ordinal as i32)
            })?;
            let mut ctx: sys::CUcontext = std::ptr::null_mut();
            // SAFETY: valid out-pointer and device handle.
            let retained = check("cuDevicePrimaryCtxRetain", unsafe {
                sys::cuDevicePrimaryCtxRetain(&mut ctx, dev)
            });
            if let Err(Error::Driver { code, .. }) = &retained
                && *code == DEVICE_UNAVAILABLE
            {
                return Err(unavailable_by_mode(ordinal, dev, retained.unwrap_err()));
            }
            retained?;
            let major = attribute(
                dev,
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
            )?;
            let minor = attribute(
                dev,
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
            )?;
            let mut name = [0 as std::ffi::c_char; 256];
            // SAFETY: `name` holds 256 bytes, the length passed.
            check("cuDeviceGetName", unsafe {
                sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, dev)
            })?;
            // SAFETY: the driver NUL-terminates the name within the buffer.
            let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) };
            Ok(Device {
                inner: Arc::new(DeviceInner {
                    ordinal,
                    dev,
                    ctx,
                    arch: Arch {
                        major: major as u32,
                        minor: minor as u32,
                    },
                    name: name.to_string_lossy().into_owned(),
                }),
            })
        })
    }

    /// The ordinal this device was opened with.
    pub fn ordinal(&self) -> usize {
        self.inner.ordinal
    }

    /// The device's name, e.g. `NVIDIA H200`.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The device's compute mode.
    pub fn compute_mode(&self) -> Result<ComputeMode> {
        self.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_MODE)
            .map(ComputeMode::from_raw)
    }

    /// The compute capability, which NVRTC compiles the kernels for.
    pub fn arch(&self) -> Arch {
        self.inner.arch
    }

    /// One `cuDeviceGetAttribute` value.
    pub fn attribute(&self, attr: CUdevice_attribute) -> Result<i32> {
        guarded("cuDeviceGetAttribute", || attribute(self.inner.dev, attr))
    }

    /// Makes the primary context current on the calling thread (inside
    /// [`Device::bound`], only when another is).
    pub(crate) fn bind(&self) -> Result<()> {
        let known = BOUND.with(Cell::get);
        if !known.is_null() && known == self.inner.ctx {
            return Ok(());
        }
        // SAFETY: the context is retained for as long as `self` lives.
        check("cuCtxSetCurrent", unsafe {
            sys::cuCtxSetCurrent(self.inner.ctx)
        })?;
        if !known.is_null() {
            BOUND.with(|b| b.set(self.inner.ctx));
        }
        Ok(())
    }

    /// Runs `f` with the primary context made current once: the calls `f`
    /// makes through this crate do not make it current again each (one
    /// `cuCtxSetCurrent` for a whole collective's stream operations, not
    /// one per operation). Only this crate's code may run inside `f`: a
    /// context made current behind its back would go unnoticed.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), streamcomm_gpu::Error> {
    /// let device = streamcomm_gpu::Device::open(0)?;
    /// let stream = streamcomm_gpu::Stream::new(&device)?;
    /// device.bound(|| stream.synchronize_timeout(std::time::Duration::from_secs(5)))??;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// A context that cannot be made current (then `f` does not run).
    pub fn bound<T>(&self, f: impl FnOnce() -> T) -> Result<T> {
        let outer = BOUND.with(Cell::get);
        BOUND.with(|b| b.set(std::ptr::null_mut()));
        let made = self.bind();
        let result = made.map(|()| {
            BOUND.with(|b| b.set(self.inner.ctx));
            f()
        });
        // The context current now stays current: an enclosing scope goes on
        // knowing it (null, where a bind failed: then it knows nothing and
        // every later bind makes its context current).
        if outer.is_null() {
            BOUND.with(|b| b.set(std::ptr::null_mut()));
        }
        result
    }

    /// Waits for all work on the device (`cuCtxSynchronize`).
    pub fn synchronize(&self) -> Result<()> {
        guarded("cuCtxSynchronize", || {
            self.bind()?;
            // SAFETY: the context is current on this thread.
            check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })
        })
    }

    /// The primary context handle.
    pub fn as_raw(&self) -> sys::CUcontext {
        self.inner.ctx
    }
}

thread_local! {
    /// Inside [`Device::bound`]: the context current on this thread (null
    /// outside, where every bind makes its context current).
    static BOUND: Cell<sys::CUcontext> = const { Cell::new(std::ptr::null_mut()) };
}

/// The error of a context the driver refused with
/// `CUDA_ERROR_DEVICE_UNAVAILABLE`, naming the compute mode behind it.
fn unavailable_by_mode(ordinal: usize, dev: CUdevice, refused: Error) -> Error {
    let mode = attribute(dev, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_MODE)
        .map(ComputeMode::from_raw);
    Error::Unavailable(match mode {
        Ok(ComputeMode::ExclusiveProcess) => format!(
            "CUDA device {ordinal} is in compute mode EXCLUSIVE_PROCESS and another process \
             holds it: run one process per GPU (one rank per GPU, or ranks as threads on \
             several GPUs), or ask for the DEFAULT mode (`nvidia-smi -i {ordinal} -c DEFAULT`) \
             ({refused})"
        ),
        Ok(ComputeMode::Prohibited) => format!(
            "CUDA device {ordinal} is in compute mode PROHIBITED: no process may use it \
             ({refused})"
        ),
        Ok(other) => format!(
            "CUDA device {ordinal} ({}) is unavailable: {refused}",
            other.name()
        ),
        Err(e) => format!("CUDA device {ordinal} is unavailable: {refused} (compute mode: {e})"),
    })
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Device({} {} {})",
            self.inner.ordinal, self.inner.name, self.inner.arch
        )
    }
}

fn attribute(dev: CUdevice, attr: CUdevice_attribute) -> Result<i32> {
    let mut v = 0;
    // SAFETY: valid out-pointer and device handle.
    check("cuDeviceGetAttribute", unsafe {
        sys::cuDeviceGetAttribute(&mut v, attr, dev)
    })?;
    Ok(v)
}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        let _ = guarded("cuDevicePrimaryCtxRelease", || {
            // SAFETY: releases the retain done in `open`; errors cannot be
            // reported from Drop and a failed release only leaks the context.
            check("cuDevicePrimaryCtxRelease_v2", unsafe {
                sys::cuDevicePrimaryCtxRelease_v2(self.dev)
            })
        });
    }
}
