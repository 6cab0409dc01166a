//! Compiling CUDA C to a CUBIN for one architecture with NVRTC.

use std::ffi::{CString, c_char};
use std::fmt;
use std::path::Path;

use crate::error::{Error, Result};

use super::sys::{Nvrtc, NvrtcProgram, check};

/// A GPU architecture (`sm_<major><minor>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Arch {
    /// Compute capability major (8 for A100, 9 for H100/H200).
    pub major: u32,
    /// Compute capability minor.
    pub minor: u32,
}

impl Arch {
    /// `sm_80` (A100).
    pub const SM80: Arch = Arch { major: 8, minor: 0 };
    /// `sm_90` (H100, H200).
    pub const SM90: Arch = Arch { major: 9, minor: 0 };

    /// The `--gpu-architecture` value, e.g. `sm_90`.
    pub fn sm(&self) -> String {
        format!("sm_{}{}", self.major, self.minor)
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.sm())
    }
}

/// The output of one compilation.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The CUBIN image, loadable with `cuModuleLoadData`.
    pub cubin: Vec<u8>,
    /// NVRTC's log (warnings; empty when clean).
    pub log: String,
}

/// The options every kernel is compiled with for `arch` (part of the cache key).
pub fn compile_options(arch: Arch, include: Option<&Path>) -> Vec<String> {
    let mut opts = vec![
        format!("--gpu-architecture={}", arch.sm()),
        "--std=c++17".to_string(),
        "--device-as-default-execution-space".to_string(),
    ];
    if let Some(dir) = include {
        opts.push(format!("--include-path={}", dir.display()));
    }
    opts
}

/// Compiles `source` (named `name` in messages) with `options` to a CUBIN;
/// `headers` are `(include name, text)` pairs it may `#include`.
/// A compile error returns [`Error::Compile`] with NVRTC's log.
pub fn compile_cubin(
    nvrtc: &Nvrtc,
    name: &str,
    source: &str,
    headers: &[(&str, &str)],
    options: &[String],
) -> Result<Compiled> {
    let c_src =
        CString::new(source).map_err(|_| Error::invalid(format!("{name}: NUL in source")))?;
    let c_name = CString::new(name).map_err(|_| Error::invalid(format!("NUL in name {name:?}")))?;
    let c_opts = options
        .iter()
        .map(|o| CString::new(o.as_str()))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|_| Error::invalid("NUL in an NVRTC option"))?;
    let opt_ptrs: Vec<*const c_char> = c_opts.iter().map(|o| o.as_ptr()).collect();
    let nul = |_| Error::invalid("NUL in a header");
    let h_names = headers
        .iter()
        .map(|(n, _)| CString::new(*n).map_err(nul))
        .collect::<Result<Vec<_>>>()?;
    let h_texts = headers
        .iter()
        .map(|(_, t)| CString::new(*t).map_err(nul))
        .collect::<Result<Vec<_>>>()?;
    let h_name_ptrs: Vec<*const c_char> = h_names.iter().map(|h| h.as_ptr()).collect();
    let h_text_ptrs: Vec<*const c_char> = h_texts.iter().map(|h| h.as_ptr()).collect();

    let mut prog: NvrtcProgram = std::ptr::null_mut();
    // SAFETY: source, name and both header arrays hold NUL-terminated strings
    // that outlive the call; the arrays have `headers.len()` entries each.
    let r = unsafe {
        (nvrtc.create_program)(
            &mut prog,
            c_src.as_ptr(),
            c_name.as_ptr(),
            headers.len() as i32,
            h_text_ptrs.as_ptr(),
            h_name_ptrs.as_ptr(),
        )
    };
    check("nvrtcCreateProgram", r)?;
    let result = compile_program(nvrtc, prog, name, options, &opt_ptrs);
    // SAFETY: `prog` was created above and is destroyed exactly once.
    unsafe { (nvrtc.destroy_program)(&mut prog) };
    result
}

fn compile_program(
    nvrtc: &Nvrtc,
    prog: NvrtcProgram,
    name: &str,
    options: &[String],
    opt_ptrs: &[*const c_char],
) -> Result<Compiled> {
    // SAFETY: `prog` is a live program; the option pointers are valid C strings
    // for the duration of the call.
    let r = unsafe { (nvrtc.compile_program)(prog, opt_ptrs.len() as i32, opt_ptrs.as_ptr()) };
    let log = program_log(nvrtc, prog)?;
    if r != 0 {
        return Err(Error::Compile {
            source: name.to_string(),
            options: options.join(" "),
            log: if log.is_empty() {
                format!("nvrtcResult {r}")
            } else {
                log
            },
        });
    }
    let mut size = 0usize;
    // SAFETY: `prog` compiled successfully; `size` is a valid out-pointer.
    check("nvrtcGetCUBINSize", unsafe {
        (nvrtc.get_cubin_size)(prog, &mut size)
    })?;
    let mut cubin = vec![0u8; size];
    // SAFETY: `cubin` has exactly the size NVRTC reported.
    check("nvrtcGetCUBIN", unsafe {
        (nvrtc.get_cubin)(prog, cubin.as_mut_ptr().cast())
    })?;
    Ok(Compiled { cubin, log })
}

fn program_log(nvrtc: &Nvrtc, prog: NvrtcProgram) -> Result<String> {
    let mut size = 0usize;
    // SAFETY: `prog` is live; `size` is a valid out-pointer.
    check("nvrtcGetProgramLogSize", unsafe {
        (nvrtc.get_program_log_size)(prog, &mut size)
    })?;
    let mut buf = vec![0u8; size.max(1)];
    // SAFETY: `buf` holds the reported size (which includes the NUL).
    check("nvrtcGetProgramLog", unsafe {
        (nvrtc.get_program_log)(prog, buf.as_mut_ptr().cast())
    })?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).trim().to_string())
}
