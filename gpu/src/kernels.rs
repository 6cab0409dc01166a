//! The device kernels: taken from the on-disk cache or compiled with NVRTC
//! for the device's architecture, loaded, and launched.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use streamcomm_kernels::cuda::{
    self, DEVICE_HEADER, DEVICE_HEADER_NAME, MAX_DSTS, MAX_SRCS, ReduceArgs, SPIN_WAIT_KERNEL,
    SPIN_WRITE_KERNEL,
};
use streamcomm_kernels::{DataType, ReduceOp};

use crate::cache::{KernelCache, cache_key};
use crate::config::GpuConfig;
use crate::context::Device;
use crate::driver::probe;
use crate::driver::sys::{CUdevice_attribute, CUdeviceptr};
use crate::error::{Error, Result};
use crate::module::{Function, Module};
use crate::nvrtc::compile::{compile_cubin, compile_options};
use crate::nvrtc::{Arch, Nvrtc, Usable, choice, nvrtc_lib_candidates};
use crate::stream::Stream;

/// Threads per block of the reduce-copy kernels (their `__launch_bounds__`).
pub const REDUCE_BLOCK: u32 = 512;

/// The text of kernel source `name` (one of [`cuda::SOURCES`]).
fn source_of(name: &str) -> Result<&'static str> {
    cuda::SOURCES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
        .ok_or_else(|| Error::invalid(format!("no kernel source named {name}")))
}

/// The cache key of kernel source `name` for `arch` and its compile options.
fn key_of(name: &str, arch: Arch, include: Option<&Path>) -> Result<(String, Vec<String>)> {
    let source = source_of(name)?;
    let options = compile_options(arch, include);
    let key = cache_key(name, arch, &[source, DEVICE_HEADER], &options);
    Ok((key, options))
}

/// Compiles kernel source `name` with `options`.
fn compile(nvrtc: &Nvrtc, name: &str, options: &[String]) -> Result<Vec<u8>> {
    let compiled = compile_cubin(
        nvrtc,
        name,
        source_of(name)?,
        &[(DEVICE_HEADER_NAME, DEVICE_HEADER)],
        options,
    )?;
    Ok(compiled.cubin)
}

/// The CUBIN that `nvrtc` makes of kernel source `name` (one of
/// [`cuda::SOURCES`]) for `arch`: from `cache` when it holds this NVRTC
/// version's image, else compiled and stored. `include` is an extra include
/// directory (the kernels need none). Returns the image and whether it came
/// from the cache. ([`Kernels::load`] takes an image of any NVRTC version
/// from the cache, without loading NVRTC.)
pub fn cubin_for(
    nvrtc: &Nvrtc,
    name: &str,
    arch: Arch,
    cache: &KernelCache,
    include: Option<&Path>,
) -> Result<(Vec<u8>, bool)> {
    let (key, options) = key_of(name, arch, include)?;
    let version = nvrtc.version()?;
    if let Some(image) = cache.load(&key, version) {
        return Ok((image, true));
    }
    let cubin = compile(nvrtc, name, &options)?;
    // A cache that cannot be written only costs a recompilation next time.
    let _ = cache.store(&key, version, &cubin);
    Ok((cubin, false))
}

/// True for the driver's refusals of an image: any driver error but those
/// that say the context itself cannot go on. A toolkit newer than the
/// driver, no code for this GPU, PTX it cannot JIT, or a sandbox that
/// refuses the load (`CUDA_ERROR_INVALID_IMAGE` 200,
/// `CUDA_ERROR_NO_BINARY_FOR_GPU` 209, `CUDA_ERROR_INVALID_PTX` 218,
/// `CUDA_ERROR_JIT_COMPILER_NOT_FOUND` 221,
/// `CUDA_ERROR_UNSUPPORTED_PTX_VERSION` 222, `CUDA_ERROR_NOT_SUPPORTED` 801,
/// and others a real driver may pick): another candidate image may load
/// where such a one does not, as NCCL goes on to its next candidate. Out of
/// memory (2), an uninitialised or torn-down driver (3, 4), a bad context
/// (201) and the sticky errors of a faulted context (700 to 719) stop the
/// search.
fn refused(e: &Error) -> bool {
    match e {
        Error::Driver { code, .. } => !matches!(code, 2..=4 | 201 | 700..=719),
        _ => false,
    }
}

/// Where [`Search::obtain`] looks for kernel images, and for which device
/// and driver.
#[derive(Clone, Copy)]
struct Search<'a> {
    /// The device's architecture.
    arch: Arch,
    /// The driver's CUDA version, as `cuDriverGetVersion` gives it.
    driver_version: i32,
    /// The cache of compiled images.
    cache: &'a KernelCache,
    /// An extra include directory (the kernels need none).
    include: Option<&'a Path>,
    /// The NVRTC libraries to try: `None` when NVRTC is off.
    candidates: Option<&'a [String]>,
}

impl Search<'_> {
    /// An image of kernel source `name` that `load` accepts, and a line
    /// saying where it came from. Tried in order: every cached image, newest
    /// NVRTC first (no NVRTC needed), skipping those of an NVRTC newer than
    /// the driver; then each usable NVRTC of the candidates ([`Usable`]). An
    /// image the driver refuses (see [`refused`]) moves on to the next; any
    /// other error of `load` is returned as it is. When nothing loads,
    /// [`Error::Unavailable`] says what was tried and why each was passed
    /// over.
    fn obtain<M>(
        &self,
        name: &str,
        mut load: impl FnMut(&[u8]) -> Result<M>,
    ) -> Result<(M, String)> {
        let Search {
            arch,
            driver_version,
            cache,
            include,
            candidates,
        } = *self;
        let (key, options) = key_of(name, arch, include)?;
        let mut notes = Vec::new();
        // Images the driver refused: an NVRTC that makes the same bytes again
        // is passed over (a damaged cached file is compiled anew and replaced).
        let mut refused_images: Vec<Vec<u8>> = Vec::new();
        let cached = cache.images(&key);
        for img in &cached {
            let (v, file) = (img.nvrtc, img.path.display());
            if let Err(why) = choice::fits(v, driver_version) {
                notes.push(format!("cached {file}: {why}"));
                continue;
            }
            match load(&img.image) {
                Ok(m) => return Ok((m, format!("{name}: cached {file} (NVRTC {}.{})", v.0, v.1))),
                Err(e) if refused(&e) => {
                    notes.push(format!("cached {file}: the driver refused it: {e}"));
                    refused_images.push(img.image.clone());
                }
                Err(e) => return Err(e),
            }
        }
        if cached.is_empty() {
            notes.push(match cache.dir() {
                Some(dir) => format!("no cached image {key}-nvrtc*.cubin in {}", dir.display()),
                None => "no kernel cache (STREAMCOMM_KERNEL_CACHE=off)".to_string(),
            });
        }
        let (cuda_major, cuda_minor) = choice::driver_cuda(driver_version);
        let Some(candidates) = candidates else {
            notes.push("NVRTC is off (STREAMCOMM_NVRTC_LIB=off)".to_string());
            return Err(Error::Unavailable(format!(
                "the {name} kernels for {arch} did not load on the driver's CUDA \
                 {cuda_major}.{cuda_minor}: {}",
                notes.join("; ")
            )));
        };
        let mut usable = Usable::new(candidates, driver_version);
        while let Some(nvrtc) = usable.next() {
            let from = &nvrtc.loaded_from;
            let v = nvrtc.version()?;
            let cubin = match compile(nvrtc, name, &options) {
                Ok(c) => c,
                Err(e) => {
                    usable.note(format!("{from}: {e}"));
                    continue;
                }
            };
            if refused_images.contains(&cubin) {
                usable.note(format!(
                    "{from}: NVRTC {}.{} makes the image the driver refused",
                    v.0, v.1
                ));
                continue;
            }
            match load(&cubin) {
                Ok(m) => {
                    // A cache that cannot be written only costs a compilation.
                    let _ = cache.store(&key, v, &cubin);
                    let how = format!("{name}: compiled by NVRTC {}.{} ({from})", v.0, v.1);
                    return Ok((m, how));
                }
                Err(e) if refused(&e) => {
                    usable.note(format!(
                        "{from}: the driver refused the image of NVRTC {}.{}: {e}",
                        v.0, v.1
                    ));
                    refused_images.push(cubin);
                }
                Err(e) => return Err(e),
            }
        }
        notes.push(format!(
            "NVRTC candidates {}: {}",
            usable.names().join(", "),
            usable.notes().join("; ")
        ));
        Err(Error::Unavailable(format!(
            "the {name} kernels for {arch} did not load on the driver's CUDA \
             {cuda_major}.{cuda_minor}: {}. Set STREAMCOMM_NVRTC_LIB to a libnvrtc.so.N \
             with N <= {cuda_major} (e.g. from `pip install nvidia-cuda-nvrtc-cu12`), or \
             put precompiled kernels in the kernel cache (the kernel_cache example)",
            notes.join("; ")
        )))
    }
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
    origin: Vec<String>,
}

impl Kernels {
    /// Loads every kernel on `device`: a cached image when the cache in
    /// `config` holds one the driver accepts (no NVRTC needed), else compiled
    /// for `device`'s architecture with the first NVRTC that is not newer than
    /// the driver and whose image the driver accepts (see [`crate::nvrtc::choice`]).
    ///
    /// Fails with [`Error::Unavailable`] saying plainly what failed: no
    /// NVRTC found (each candidate and why, and `STREAMCOMM_NVRTC_LIB`),
    /// NVRTC too new for the driver, or the driver refusing each image (with
    /// its code); other driver errors are returned as they are.
    pub fn load(device: &Device, config: &GpuConfig) -> Result<Kernels> {
        let driver_version = probe::driver()?.version;
        let cache = KernelCache::new(config.kernel_cache.clone());
        let include = config.cuda_include.as_deref();
        let candidates = nvrtc_lib_candidates(config.nvrtc_lib.as_deref());
        let candidates = (!config.nvrtc_off).then_some(&candidates[..]);
        let search = Search {
            arch: device.arch(),
            driver_version,
            cache: &cache,
            include,
            candidates,
        };
        let module = |name| search.obtain(name, |img| Module::load(device, img));
        let (reduce_mod, reduce_origin) = module("reduce.cu")?;
        let (signal_mod, signal_origin) = module("signal.cu")?;
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
            origin: vec![reduce_origin, signal_origin],
        })
    }

    /// Compiles every kernel source for `arch` with `nvrtc` into `cache`
    /// (no GPU needed), e.g. to ship with a program for machines without
    /// NVRTC; returns the files written (or already there).
    pub fn precompile(
        nvrtc: &Nvrtc,
        arch: Arch,
        cache: &KernelCache,
        include: Option<&Path>,
    ) -> Result<Vec<PathBuf>> {
        let Some(dir) = cache.dir() else {
            return Err(Error::invalid("Kernels::precompile: no cache directory"));
        };
        let version = nvrtc.version()?;
        let mut files = Vec::new();
        for (name, _) in cuda::SOURCES {
            let (key, options) = key_of(name, arch, include)?;
            if cache.load(&key, version).is_none() {
                let cubin = compile(nvrtc, name, &options)?;
                cache.store(&key, version, &cubin)?;
            }
            files.push(dir.join(KernelCache::file_name(&key, version)));
        }
        Ok(files)
    }

    /// Where each kernel module came from, one line each, e.g.
    /// `reduce.cu: cached <file> (NVRTC 12.9)` or
    /// `signal.cu: compiled by NVRTC 12.9 (libnvrtc.so.12)`.
    pub fn origin(&self) -> &[String] {
        &self.origin
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
        // SAFETY: forwarded contract; no abort word.
        unsafe { self.reduce_copy_unless(stream, dtype, op, work, 0) }
    }

    /// [`Kernels::reduce_copy`] that first reads the 32-bit word at device
    /// address `abort` (0: none) when it runs, and touches no buffer if the
    /// word is non-zero: a reduction over other processes' memory that must
    /// not run once one of them may be gone.
    ///
    /// # Safety
    /// As [`Kernels::reduce_copy`]; `abort`, if not 0, must address a
    /// 4-aligned word valid while the kernel can run (host-registered
    /// memory, which the host may write at any time, included).
    pub unsafe fn reduce_copy_unless(
        &self,
        stream: &Stream,
        dtype: DataType,
        op: ReduceOp,
        work: &ReduceCopy<'_>,
        abort: CUdeviceptr,
    ) -> Result<()> {
        let ReduceCopy {
            srcs,
            dsts,
            count,
            avg_divisor,
        } = *work;
        if !abort.is_multiple_of(4) {
            return Err(Error::invalid(format!(
                "reduce_copy: abort word {abort:#x} is not 4-aligned"
            )));
        }
        let mut args = reduce_args(dtype, srcs, dsts, count, avg_divisor)?;
        args.abort = abort;
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

    fn scratch(tag: &str) -> KernelCache {
        let dir = std::env::temp_dir().join(format!(
            "sc-kernels-{tag}-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        KernelCache::new(Some(dir))
    }

    /// An image naming the NVRTC version that "made" it.
    fn image(v: (i32, i32)) -> Vec<u8> {
        format!("\x7fELF by {}.{}", v.0, v.1).into_bytes()
    }

    /// Runs `test` on a fresh scratch cache holding an image of `signal.cu`
    /// for sm_90 by each of these NVRTC versions, then removes the cache.
    fn with_filled_cache(tag: &str, versions: &[(i32, i32)], test: impl FnOnce(&KernelCache)) {
        let cache = scratch(tag);
        let (key, _) = key_of("signal.cu", Arch::SM90, None).unwrap();
        for &v in versions {
            cache.store(&key, v, &image(v)).unwrap();
        }
        test(&cache);
        std::fs::remove_dir_all(cache.dir().unwrap()).unwrap();
    }

    /// A search for sm_90 images under a driver of `driver_version`.
    fn search<'a>(
        driver_version: i32,
        cache: &'a KernelCache,
        candidates: Option<&'a [String]>,
    ) -> Search<'a> {
        Search {
            arch: Arch::SM90,
            driver_version,
            cache,
            include: None,
            candidates,
        }
    }

    fn refusal(code: u32) -> Error {
        Error::Driver {
            call: "cuModuleLoadData",
            code,
            name: "CUDA_ERROR_NO_BINARY_FOR_GPU",
        }
    }

    const MISSING: &[String] = &[];

    /// Any code a real driver may refuse an image with moves on to the next
    /// candidate; the context's own failures stop the search.
    #[test]
    fn every_refusal_but_a_failed_context_tries_the_next_image() {
        for code in [200, 209, 218, 221, 222, 300, 304, 801, 1, 999] {
            assert!(refused(&refusal(code)), "{code} tries the next image");
        }
        for code in [2, 3, 4, 201, 700, 719] {
            assert!(!refused(&refusal(code)), "{code} stops the search");
        }
        assert!(!refused(&Error::Unavailable("no NVRTC".into())));
    }

    /// A cached image is used without any NVRTC: none of the candidates
    /// exists here.
    #[test]
    fn a_cached_image_needs_no_nvrtc() {
        with_filled_cache("no-nvrtc", &[(12, 9)], |cache| {
            let missing = ["/nonexistent/libnvrtc.so.12".to_string()];
            let (img, origin) = search(12080, cache, Some(&missing))
                .obtain("signal.cu", |img| Ok(img.to_vec()))
                .unwrap();
            assert_eq!(img, image((12, 9)));
            assert!(
                origin.contains("cached") && origin.contains("NVRTC 12.9"),
                "{origin}"
            );
            // NVRTC off: the same.
            let (img, _) = search(12080, cache, None)
                .obtain("signal.cu", |img| Ok(img.to_vec()))
                .unwrap();
            assert_eq!(img, image((12, 9)));
        });
    }

    /// Images of an NVRTC newer than the driver are passed over, refused
    /// ones move on to the next, newest first.
    #[test]
    fn cached_images_are_tried_newest_first_within_the_driver() {
        with_filled_cache("order", &[(12, 4), (13, 0), (12, 9)], |cache| {
            let mut seen = Vec::new();
            let (img, _) = search(12080, cache, Some(MISSING))
                .obtain("signal.cu", |img| {
                    seen.push(String::from_utf8_lossy(img).into_owned());
                    if img == image((12, 9)) {
                        Err(refusal(209))
                    } else {
                        Ok(img.to_vec())
                    }
                })
                .unwrap();
            assert_eq!(img, image((12, 4)));
            assert_eq!(seen, ["\x7fELF by 12.9", "\x7fELF by 12.4"]);
            // On a CUDA 13 driver the NVRTC 13 image comes first.
            let (img, _) = search(13000, cache, Some(MISSING))
                .obtain("signal.cu", |img| Ok(img.to_vec()))
                .unwrap();
            assert_eq!(img, image((13, 0)));
        });
    }

    /// When nothing loads, the error says what each image and candidate was,
    /// and why it was passed over; other driver errors pass through as is.
    #[test]
    fn the_error_says_what_failed() {
        with_filled_cache("error", &[(13, 0), (12, 9)], |cache| {
            let candidates = [
                "/nonexistent/libnvrtc.so.12".to_string(),
                "libnvrtc.so.13".to_string(),
            ];
            let err = search(12080, cache, Some(&candidates))
                .obtain("signal.cu", |_| Err::<(), _>(refusal(209)))
                .unwrap_err();
            crate::test_support::assert_unavailable_saying(
                &err,
                &[
                    "signal.cu kernels for sm_90 did not load on the driver's CUDA 12.8",
                    "nvrtc13.0.cubin: NVRTC 13.0 is newer than the driver",
                    "nvrtc12.9.cubin: the driver refused it",
                    "CUDA_ERROR_NO_BINARY_FOR_GPU (209)",
                    "not loaded: /nonexistent/libnvrtc.so.12: cannot open",
                    "libnvrtc.so.13: CUDA 13 by its name, newer than the driver",
                    "STREAMCOMM_NVRTC_LIB",
                ],
            );
            let off = search(12080, &scratch("none"), None)
                .obtain("signal.cu", |_| Ok(()))
                .unwrap_err()
                .to_string();
            assert!(
                off.contains("no cached image") && off.contains("NVRTC is off"),
                "{off}"
            );
            let oom = search(12080, cache, Some(MISSING))
                .obtain("signal.cu", |_| Err::<(), _>(refusal(2)))
                .unwrap_err();
            assert_eq!(oom, refusal(2));
        });
    }
}
