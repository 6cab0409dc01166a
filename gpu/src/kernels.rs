//! The device kernels: compiled with NVRTC for the device's architecture
//! (cached on disk), loaded, and launched.

use std::collections::HashMap;
use std::path::Path;

use streamcomm_kernels::cuda::{
    self, DEVICE_HEADER, DEVICE_HEADER_NAME, MAX_DSTS, MAX_SRCS, ReduceArgs, SPIN_WAIT_KERNEL,
    SPIN_WRITE_KERNEL,
};
use streamcomm_kernels::{DataType, ReduceOp};

use crate::cache::{KernelCache, cache_key};
use crate::config::GpuConfig;
use crate::context::Device;
use crate::driver::sys::{CUdevice_attribute, CUdeviceptr};
use crate::error::{Error, Result};
use crate::module::{Function, Module};
use crate::nvrtc::compile::{compile_cubin, compile_options};
use crate::nvrtc::{Arch, Nvrtc};
use crate::stream::Stream;

/// Threads per block of the reduce-copy kernels (their `__launch_bounds__`).
pub const REDUCE_BLOCK: u32 = 512;

/// The CUBIN of kernel source `name` (one of [`cuda::SOURCES`]) for `arch`:
/// from `cache` when present, else compiled with `nvrtc` and stored. `include`
/// is an extra include directory (the kernels need none). Returns the image and
/// whether it came from the cache.
pub fn cubin_for(
    nvrtc: &Nvrtc,
    name: &str,
    arch: Arch,
    cache: &KernelCache,
    include: Option<&Path>,
) -> Result<(Vec<u8>, bool)> {
    let source = cuda::SOURCES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
        .ok_or_else(|| Error::invalid(format!("no kernel source named {name}")))?;
    let options = compile_options(arch, include);
    let key = cache_key(
        name,
        arch,
        &[source, DEVICE_HEADER],
        &options,
        nvrtc.version()?,
    );
    if let Some(image) = cache.load(&key) {
        return Ok((image, true));
    }
    let compiled = compile_cubin(
        nvrtc,
        name,
        source,
        &[(DEVICE_HEADER_NAME, DEVICE_HEADER)],
        &options,
    )?;
    // A cache that cannot be written only costs a recompilation next time.
    let _ = cache.store(&key, &compiled.cubin);
    Ok((compiled.cubin, false))
}

/// The buffers of one reduce-copy.
#[derive(Clone, Copy, Debug)]
pub struct ReduceCopy<'a> {
    /// 1..=8 source device pointers.
    pub srcs: &'a [CUdeviceptr],
    /// 1..=8 destination device pointers.
    pub dsts: &'a [CUdeviceptr],
    /// Elements per buffer.
    pub count: usize,
    /// Divisor of [`ReduceOp::Avg`] (the rank count), ≥ 1; ignored by other ops.
    pub avg_divisor: u32,
}

/// Every kernel of this crate, loaded on one device.
#[derive(Clone)]
pub struct Kernels {
    device: Device,
    reduce: HashMap<(DataType, ReduceOp), Function>,
    pub(crate) spin_wait: Function,
    pub(crate) spin_write: Function,
    max_grid: u32,
}

impl Kernels {
    /// Compiles (or takes from the cache in `config`) and loads every kernel
    /// for `device`'s architecture.
    pub fn load(device: &Device, config: &GpuConfig) -> Result<Kernels> {
        let nvrtc = Nvrtc::get()?;
        let cache = KernelCache::new(config.kernel_cache.clone());
        let include = config.cuda_include.as_deref();
        let (reduce_img, _) = cubin_for(nvrtc, "reduce.cu", device.arch(), &cache, include)?;
        let (signal_img, _) = cubin_for(nvrtc, "signal.cu", device.arch(), &cache, include)?;
        let reduce_mod = Module::load(device, &reduce_img)?;
        let signal_mod = Module::load(device, &signal_img)?;
        let mut reduce = HashMap::new();
        for dtype in DataType::ALL {
            for op in ReduceOp::ALL {
                reduce.insert(
                    (dtype, op),
                    reduce_mod.function(&cuda::reduce_kernel_name(dtype, op))?,
                );
            }
        }
        let sms = device.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        Ok(Kernels {
            device: device.clone(),
            reduce,
            spin_wait: signal_mod.function(SPIN_WAIT_KERNEL)?,
            spin_write: signal_mod.function(SPIN_WRITE_KERNEL)?,
            max_grid: (sms.max(1) as u32) * 4,
        })
    }

    /// The device the kernels are loaded on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Enqueues `dsts[d][i] = op(srcs[0][i], ...)` for `work.count` elements of
    /// `dtype` (see [`ReduceCopy`]). A destination may equal a source (in place).
    ///
    /// # Safety
    /// Every pointer must address `count` elements of device-accessible memory
    /// that stays valid until the kernel has run on `stream`.
    pub unsafe fn reduce_copy(
        &self,
        stream: &Stream,
        dtype: DataType,
        op: ReduceOp,
        work: &ReduceCopy<'_>,
    ) -> Result<()> {
        let ReduceCopy {
            srcs,
            dsts,
            count,
            avg_divisor,
        } = *work;
        let args = reduce_args(dtype, srcs, dsts, count, avg_divisor)?;
        if count == 0 {
            return Ok(());
        }
        let per_block = (REDUCE_BLOCK as usize) * (16 / dtype.size());
        let grid = count.div_ceil(per_block).min(self.max_grid as usize).max(1) as u32;
        let f = &self.reduce[&(dtype, op)];
        // SAFETY: `ReduceArgs` mirrors `struct sc_reduce_args` (asserted in the
        // kernels crate); the caller guarantees the pointers.
        unsafe { f.launch(stream, grid, REDUCE_BLOCK, &args) }
    }
}

/// Validates and packs the arguments of a reduce-copy.
pub(crate) fn reduce_args(
    dtype: DataType,
    srcs: &[CUdeviceptr],
    dsts: &[CUdeviceptr],
    count: usize,
    avg_divisor: u32,
) -> Result<ReduceArgs> {
    if srcs.is_empty() || srcs.len() > MAX_SRCS {
        return Err(Error::invalid(format!(
            "reduce_copy: {} sources (1..={MAX_SRCS})",
            srcs.len()
        )));
    }
    if dsts.is_empty() || dsts.len() > MAX_DSTS {
        return Err(Error::invalid(format!(
            "reduce_copy: {} destinations (1..={MAX_DSTS})",
            dsts.len()
        )));
    }
    if avg_divisor == 0 {
        return Err(Error::invalid("reduce_copy: avg_divisor is 0"));
    }
    if let Some(p) = srcs
        .iter()
        .chain(dsts)
        .find(|&&p| p == 0 || p % dtype.size() as u64 != 0)
    {
        return Err(Error::invalid(format!(
            "reduce_copy: pointer {p:#x} is null or not aligned to {dtype} ({} bytes)",
            dtype.size()
        )));
    }
    let mut args = ReduceArgs {
        count: count as u64,
        nsrcs: srcs.len() as u32,
        ndsts: dsts.len() as u32,
        avg_divisor,
        ..ReduceArgs::default()
    };
    args.srcs[..srcs.len()].copy_from_slice(srcs);
    args.dsts[..dsts.len()].copy_from_slice(dsts);
    Ok(args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reduce_args_are_checked_and_packed() {
        let a = reduce_args(DataType::F32, &[0x1000, 0x2000], &[0x3000], 77, 4).unwrap();
        assert_eq!((a.nsrcs, a.ndsts, a.count, a.avg_divisor), (2, 1, 77, 4));
        assert_eq!(&a.srcs[..3], &[0x1000, 0x2000, 0]);
        assert_eq!(a.dsts[0], 0x3000);
        let bad = |r: Result<ReduceArgs>, needle: &str| {
            let e = r.unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
        };
        bad(reduce_args(DataType::F32, &[], &[0x10], 1, 1), "0 sources");
        bad(
            reduce_args(DataType::F32, &[0x10; 9], &[0x10], 1, 1),
            "9 sources",
        );
        bad(
            reduce_args(DataType::F32, &[0x10], &[0x10; 9], 1, 1),
            "9 destinations",
        );
        bad(
            reduce_args(DataType::F32, &[0x10], &[0x10], 1, 0),
            "avg_divisor",
        );
        bad(reduce_args(DataType::F64, &[0x14], &[0x10], 1, 1), "0x14");
        bad(reduce_args(DataType::U8, &[0x11], &[0], 1, 1), "null");
    }
}
