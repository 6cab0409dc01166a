//! Compiles every kernel of this crate for one architecture into a kernel
//! cache directory, with NVRTC only (no GPU, no driver): a machine without
//! NVRTC then loads them from that directory (`STREAMCOMM_KERNEL_CACHE`).
//!
//! `cargo run --release -p streamcomm-gpu --example kernel_cache -- [--arch sm_90] [--cuda 12] DIR`
//!
//! `--arch` (default `sm_90`) is the GPU architecture. `--cuda N` (default
//! 12) is the oldest driver major the images are for: an NVRTC newer than
//! CUDA N is passed over, since a driver of CUDA N could not load what it
//! makes (CUDA 12 images load on every CUDA 12 and 13 driver). NVRTC is
//! found as `Kernels::load` finds it: `STREAMCOMM_NVRTC_LIB`, then
//! `libnvrtc.so.13`, `.so.12`, `libnvrtc.so`. The images are compiled without
//! `STREAMCOMM_CUDA_INCLUDE`, as `Kernels::load` compiles them where it is
//! unset (the include directory is part of the cache key).
//!
//! Prints one line per file written. Exit status: 0 on success, 3 when no
//! usable NVRTC was found (the reason printed), 2 for a usage error, 1 for any
//! other failure.

use std::path::PathBuf;

use streamcomm_gpu::nvrtc::{Nvrtc, nvrtc_lib_candidates};
use streamcomm_gpu::{Arch, GpuConfig, KernelCache, Kernels};

const USAGE: &str = "usage: kernel_cache [--arch sm_XY] [--cuda MAJOR] DIR";

/// `sm_90` → 9.0, `sm_100` → 10.0, `sm_86` → 8.6.
fn parse_arch(s: &str) -> Option<Arch> {
    let digits = s.strip_prefix("sm_")?;
    if digits.len() < 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (major, minor) = digits.split_at(digits.len() - 1);
    Some(Arch {
        major: major.parse().ok()?,
        minor: minor.parse().ok()?,
    })
}

struct Args {
    arch: Arch,
    cuda: i32,
    dir: PathBuf,
}

fn parse_args() -> Result<Args, String> {
    let (mut arch, mut cuda, mut dir) = (Arch::SM90, 12, None);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--arch" => {
                let v = args.next().ok_or("--arch needs a value")?;
                arch = parse_arch(&v).ok_or_else(|| format!("--arch {v}: expected sm_XY"))?;
            }
            "--cuda" => {
                let v = args.next().ok_or("--cuda needs a value")?;
                cuda = v
                    .parse()
                    .ok()
                    .filter(|&m| m >= 12)
                    .ok_or_else(|| format!("--cuda {v}: expected a major version >= 12"))?;
            }
            "-h" | "--help" => return Err(String::new()),
            _ if dir.is_none() && !a.starts_with('-') => dir = Some(PathBuf::from(a)),
            _ => return Err(format!("unexpected argument {a:?}")),
        }
    }
    let dir = dir.ok_or("no DIR given")?;
    Ok(Args { arch, cuda, dir })
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("kernel_cache: {e}");
            }
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    let config = GpuConfig::from_env();
    let candidates = nvrtc_lib_candidates(config.nvrtc_lib.as_deref());
    let nvrtc = match Nvrtc::choose(&candidates, args.cuda * 1000) {
        Ok(n) if !config.nvrtc_off => n,
        Ok(_) => {
            eprintln!("kernel_cache: no NVRTC: STREAMCOMM_NVRTC_LIB=off");
            std::process::exit(3);
        }
        Err(e) => {
            eprintln!("kernel_cache: no NVRTC: {e}");
            std::process::exit(3);
        }
    };
    let version = match nvrtc.version() {
        Ok(v) => v,
        Err(e) => {
            eprintln!("kernel_cache: {}: {e}", nvrtc.loaded_from);
            std::process::exit(1);
        }
    };
    let cache = KernelCache::new(Some(args.dir.clone()));
    match Kernels::precompile(nvrtc, args.arch, &cache, None) {
        Ok(files) => {
            for f in files {
                let bytes = std::fs::metadata(&f).map(|m| m.len()).unwrap_or(0);
                println!("{} ({bytes} bytes)", f.display());
            }
            println!(
                "kernel_cache: {} for {} by NVRTC {}.{} ({})",
                args.dir.display(),
                args.arch,
                version.0,
                version.1,
                nvrtc.loaded_from
            );
        }
        Err(e) => {
            eprintln!("kernel_cache: {e}");
            std::process::exit(1);
        }
    }
}
