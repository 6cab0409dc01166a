//! Modules and launches: `cuModuleLoadData` reads the entry names of a CUBIN
//! (ELF: FUNC symbols and `.text.<name>` sections) or NUL-terminated PTX
//! (`.entry <name>`), refusing images newer than the reported driver or
//! device (PTX whose `.version` the driver does not know:
//! `CUDA_ERROR_UNSUPPORTED_PTX_VERSION`; a CUBIN from a toolkit of a newer
//! major version: `CUDA_ERROR_INVALID_IMAGE`; code for a newer `sm_XX`:
//! `CUDA_ERROR_NO_BINARY_FOR_GPU`), and naming the reason on stderr; `cuLaunchKernel` checks the launch configuration and argument
//! passing like the driver, then enqueues the kernel's CPU implementation
//! ([`crate::kernels`]). A kernel without one is refused at launch, naming it.

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::Arc;

use crate::config::config;
use crate::device::{current, out};
use crate::error::{
    INVALID_IMAGE, INVALID_PTX, INVALID_VALUE, LAUNCH_OUT_OF_RESOURCES, NO_BINARY_FOR_GPU,
    NOT_FOUND, Res, UNSUPPORTED_PTX_VERSION,
};
use crate::exec::Work;
use crate::guard::{entry, say_once, unsupported};
use crate::handles::Registry;
use crate::kernels::{Kernel, Launch};
use crate::stream::{stream_of, submit};

/// The device's compute capability as an `sm_XX` number.
const SM: u32 = 90;

/// A loaded module: its entry names.
pub(crate) struct Module {
    entries: Vec<String>,
}

/// A kernel of a module.
pub(crate) struct Function {
    name: String,
    _module: Arc<Module>,
}

static MODULES: Registry<Module> = Registry::new(0x17);
static FUNCTIONS: Registry<Function> = Registry::new(0x18);

/// The newest PTX ISA the reported driver version accepts.
fn max_ptx_isa() -> (u32, u32) {
    match config().driver_version {
        v if v >= 13000 => (9, 0),
        v if v >= 12090 => (8, 8),
        v if v >= 12080 => (8, 7),
        v if v >= 12050 => (8, 5),
        v => (8, ((v.max(12000) - 12000) / 10) as u32),
    }
}

/// Entry names of an image, or the driver's error for it.
fn parse_image(image: *const u8) -> Res<Vec<String>> {
    // SAFETY: the caller passes a readable image; we read the 4-byte magic.
    let magic = unsafe { std::slice::from_raw_parts(image, 4) };
    if magic == b"\x7fELF" {
        return parse_elf(image);
    }
    if magic == [0x50, 0xed, 0x55, 0xba] {
        return Err(unsupported("cuModuleLoadData of a fatbin"));
    }
    // SAFETY: not ELF or fatbin, so the driver requires NUL-terminated PTX.
    let text = unsafe { CStr::from_ptr(image.cast::<c_char>()) };
    parse_ptx(&text.to_string_lossy())
}

fn parse_ptx(text: &str) -> Res<Vec<String>> {
    let directive = |name: &str| {
        text.split_whitespace()
            .skip_while(|w| *w != name)
            .nth(1)
            .map(str::to_string)
    };
    let (Some(version), Some(target)) = (directive(".version"), directive(".target")) else {
        return Err(INVALID_IMAGE);
    };
    let (major, minor) = version.split_once('.').ok_or(INVALID_PTX)?;
    let isa = (
        major.parse::<u32>().map_err(|_| INVALID_PTX)?,
        minor.parse::<u32>().map_err(|_| INVALID_PTX)?,
    );
    if isa > max_ptx_isa() {
        let (max, driver) = (max_ptx_isa(), config().driver_version);
        say_once(
            format!("ptx-isa:{version}"),
            &format!(
                "cuModuleLoadData: PTX .version {version} is newer than driver {driver} accepts ({}.{}): CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
                max.0, max.1
            ),
        );
        return Err(UNSUPPORTED_PTX_VERSION);
    }
    let sm: u32 = target
        .trim_end_matches(',')
        .strip_prefix("sm_")
        .map(|s| s.trim_end_matches(|c: char| c.is_ascii_alphabetic()))
        .and_then(|s| s.parse().ok())
        .ok_or(INVALID_PTX)?;
    if sm > SM {
        return Err(NO_BINARY_FOR_GPU);
    }
    let mut entries = Vec::new();
    let mut words = text.split(|c: char| c.is_whitespace() || c == '(');
    while let Some(w) = words.next() {
        if w == ".entry"
            && let Some(name) = words.by_ref().find(|w| !w.is_empty())
        {
            entries.push(name.to_string());
        }
    }
    Ok(entries)
}

fn parse_elf(image: *const u8) -> Res<Vec<String>> {
    // SAFETY: an ELF image starts with a 64-byte header (checked class below).
    let hdr = unsafe { std::slice::from_raw_parts(image, 64) };
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as usize;
    let u32_at =
        |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes")) as usize;
    let u64_at =
        |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes")) as usize;
    if hdr[4] != 2 || hdr[5] != 1 || u16_at(hdr, 18) != 190 {
        return Err(INVALID_IMAGE);
    }
    check_toolkit(u32_at(hdr, 20) as u32)?;
    let sm = elf_sm(u32_at(hdr, 48) as u32);
    if sm > SM {
        return Err(NO_BINARY_FOR_GPU);
    }
    let (shoff, shentsize, shnum, shstrndx) = (
        u64_at(hdr, 40),
        u16_at(hdr, 58),
        u16_at(hdr, 60),
        u16_at(hdr, 62),
    );
    if shentsize < 64 || shnum == 0 || shstrndx >= shnum {
        return Err(INVALID_IMAGE);
    }
    // SAFETY: the section header table lies inside the image (ELF layout).
    let sh = |i: usize| unsafe { std::slice::from_raw_parts(image.add(shoff + i * shentsize), 64) };
    // SAFETY: sections lie inside the image (ELF layout).
    let bytes = |off: usize, len: usize| unsafe { std::slice::from_raw_parts(image.add(off), len) };
    let section = |i: usize| {
        let s = sh(i);
        (
            u32_at(s, 4),
            u64_at(s, 24),
            u64_at(s, 32),
            u32_at(s, 40),
            u64_at(s, 56),
        )
    };
    let name_in = |strtab: &[u8], at: usize| -> String {
        let rest = strtab.get(at..).unwrap_or_default();
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        String::from_utf8_lossy(&rest[..end]).into_owned()
    };
    let (_, shstr_off, shstr_len, _, _) = section(shstrndx);
    let shstr = bytes(shstr_off, shstr_len);
    let mut entries = Vec::new();
    for i in 0..shnum {
        let (kind, off, len, link, entsize) = section(i);
        let name = name_in(shstr, u32_at(sh(i), 0));
        if let Some(f) = name.strip_prefix(".text.") {
            entries.push(f.to_string());
        }
        if kind == 2 && entsize >= 24 && link < shnum {
            let (_, str_off, str_len, _, _) = section(link);
            let strtab = bytes(str_off, str_len);
            let syms = bytes(off, len);
            for sym in syms.chunks_exact(entsize) {
                let info = sym[4];
                if info & 0xf == 2 && info >> 4 != 0 {
                    entries.push(name_in(strtab, u32_at(sym, 0)));
                }
            }
        }
    }
    entries.sort();
    entries.dedup();
    Ok(entries)
}

/// Refuses a CUBIN made by a toolkit whose major version is newer than the
/// driver's. A CUBIN's ELF header field `e_version` holds the version of the
/// toolkit that made it, as major × 10 + minor (NVRTC 12.9 writes 129,
/// `0x81`; NVRTC's CUBINs carry no `.note.nv.tkinfo` section, which nvcc adds).
/// A newer minor version loads (CUDA's minor-version compatibility); a newer
/// major one is `CUDA_ERROR_INVALID_IMAGE`, what a driver answers for an
/// image it cannot read.
fn check_toolkit(e_version: u32) -> Res<()> {
    let (major, minor) = (e_version / 10, e_version % 10);
    let driver = config().driver_version;
    if major as i32 > driver / 1000 {
        say_once(
            format!("cubin-toolkit:{e_version}"),
            &format!(
                "cuModuleLoadData: a CUBIN made by CUDA {major}.{minor} (ELF e_version {e_version}) needs a CUDA {major} driver; the driver is {driver}: CUDA_ERROR_INVALID_IMAGE"
            ),
        );
        return Err(INVALID_IMAGE);
    }
    Ok(())
}

/// The `sm_XX` of a CUBIN's `e_flags`: bits 8..16 in the CUDA 12.8+ ELF ABI
/// (`EF_CUDA_VIRTUAL_SM`-style), else the low byte (older ABI).
fn elf_sm(flags: u32) -> u32 {
    let low = flags & 0xff;
    let high = (flags >> 8) & 0xff;
    if (20..=200).contains(&low) { low } else { high }
}

fn load(pmod: *mut usize, image: *const c_void) -> Res<()> {
    current()?;
    if pmod.is_null() || image.is_null() {
        return Err(INVALID_VALUE);
    }
    let entries = parse_image(image.cast())?;
    out(pmod, MODULES.insert(Arc::new(Module { entries })))
}

/// `cuModuleLoadData`: a CUBIN (ELF) or NUL-terminated PTX; fatbins are not
/// implemented.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuModuleLoadData(pmod: *mut usize, image: *const c_void) -> u32 {
    entry("cuModuleLoadData", || load(pmod, image))
}

/// `cuModuleLoadDataEx`: as `cuModuleLoadData`; JIT options are ignored.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuModuleLoadDataEx(
    pmod: *mut usize,
    image: *const c_void,
    num_options: c_uint,
    _options: *mut c_int,
    _values: *mut *mut c_void,
) -> u32 {
    entry("cuModuleLoadDataEx", || {
        if num_options > 0 {
            say_once(
                "jit-options".into(),
                "cuModuleLoadDataEx: JIT options are ignored",
            );
        }
        load(pmod, image)
    })
}

/// `cuModuleUnload`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuModuleUnload(hmod: usize) -> u32 {
    entry("cuModuleUnload", || {
        current()?;
        MODULES.remove(hmod).map(|_| ())
    })
}

/// `cuModuleGetFunction`: `CUDA_ERROR_NOT_FOUND` for a name the image lacks.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuModuleGetFunction(
    pf: *mut usize,
    hmod: usize,
    name: *const c_char,
) -> u32 {
    entry("cuModuleGetFunction", || {
        current()?;
        let m = MODULES.get(hmod)?;
        if pf.is_null() || name.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: non-null, NUL-terminated by the C contract.
        let name = unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned();
        if !m.entries.contains(&name) {
            return Err(NOT_FOUND);
        }
        out(
            pf,
            FUNCTIONS.insert(Arc::new(Function { name, _module: m })),
        )
    })
}

/// `cuFuncGetAttribute`: `MAX_THREADS_PER_BLOCK` (0) only.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuFuncGetAttribute(pi: *mut c_int, attrib: c_int, hfunc: usize) -> u32 {
    entry("cuFuncGetAttribute", || {
        current()?;
        let f = FUNCTIONS.get(hfunc)?;
        match (attrib, Kernel::lookup(&f.name)) {
            (0, Some(k)) => out(pi, k.max_threads() as c_int),
            (0, None) => out(pi, 1024),
            _ => Err(unsupported(
                "cuFuncGetAttribute (attributes other than MAX_THREADS_PER_BLOCK)",
            )),
        }
    })
}

/// Reads the argument bytes from `kernelParams` (one pointer per parameter)
/// or from `extra` (`CU_LAUNCH_PARAM_BUFFER_POINTER` / `_SIZE`).
fn arguments(size: usize, params: *mut *mut c_void, extra: *mut *mut c_void) -> Res<Vec<u8>> {
    match (params.is_null(), extra.is_null()) {
        (false, false) | (true, true) => Err(INVALID_VALUE),
        (false, true) => {
            // SAFETY: kernelParams holds one pointer per kernel parameter.
            let p0 = unsafe { *params };
            if p0.is_null() {
                return Err(INVALID_VALUE);
            }
            // SAFETY: the parameter pointer addresses `size` bytes (the
            // kernel's parameter type).
            Ok(unsafe { std::slice::from_raw_parts(p0.cast::<u8>(), size) }.to_vec())
        }
        (true, false) => {
            let (mut buf, mut len) = (std::ptr::null::<u8>(), None);
            for i in (0..64).step_by(2) {
                // SAFETY: `extra` is a CU_LAUNCH_PARAM_END-terminated list of pairs.
                let (key, value) = unsafe { (*extra.add(i) as usize, *extra.add(i + 1)) };
                match key {
                    0 => break,
                    1 => buf = value.cast(),
                    // SAFETY: BUFFER_SIZE's value points to a size_t.
                    2 if !value.is_null() => len = Some(unsafe { *value.cast::<usize>() }),
                    _ => return Err(INVALID_VALUE),
                }
            }
            match len {
                Some(n) if !buf.is_null() && n >= size => {
                    // SAFETY: the buffer holds `n >= size` bytes.
                    Ok(unsafe { std::slice::from_raw_parts(buf, size) }.to_vec())
                }
                _ => Err(INVALID_VALUE),
            }
        }
    }
}

/// `cuLaunchKernel`: block ≤ 1024 threads and (1024, 1024, 64), grid x < 2³¹,
/// y and z ≤ 65535, shared memory ≤ 48 KiB, `kernelParams` xor `extra`
/// (else `CUDA_ERROR_INVALID_VALUE`); more threads than the kernel's launch
/// bounds is `CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuLaunchKernel(
    f: usize,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shared: c_uint,
    stream: usize,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> u32 {
    entry("cuLaunchKernel", || {
        current()?;
        let func = FUNCTIONS.get(f)?;
        let s = stream_of(stream)?;
        let dims_ok = [gx, gy, gz, bx, by, bz].iter().all(|&d| d > 0)
            && gx <= i32::MAX as u32
            && gy <= 65535
            && gz <= 65535
            && bx <= 1024
            && by <= 1024
            && bz <= 64
            && u64::from(bx) * u64::from(by) * u64::from(bz) <= 1024
            && shared <= 49152;
        if !dims_ok {
            return Err(INVALID_VALUE);
        }
        let Some(kernel) = Kernel::lookup(&func.name) else {
            say_once(
                format!("kernel:{}", func.name),
                &format!(
                    "kernel {} has no CPU implementation in the stand-in: CUDA_ERROR_NOT_SUPPORTED",
                    func.name
                ),
            );
            return Err(crate::error::NOT_SUPPORTED);
        };
        if bx * by * bz > kernel.max_threads() {
            return Err(LAUNCH_OUT_OF_RESOURCES);
        }
        let params = arguments(kernel.param_size(), params, extra)?;
        let launch = Arc::new(Launch { kernel, params });
        submit(&s, Work::Kernel(launch), Vec::new(), "cuLaunchKernel").map(|_| ())
    })
}
