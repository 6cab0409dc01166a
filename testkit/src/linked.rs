//! What a built binary needs from the system at load time: its ELF
//! `NEEDED` entries, as `readelf -d` lists them.

use std::path::Path;
use std::process::Command;

/// The shared libraries that every Rust program on Linux may need: the C
/// runtime (libc and the parts glibc once shipped apart), the unwinder and
/// the dynamic loader. Anything else is a system dependency.
pub const C_RUNTIME: &[&str] = &[
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "libpthread.so.0",
    "librt.so.1",
    "libutil.so.1",
    "libgcc_s.so.1",
];

/// True for the dynamic loader's names (`ld-linux-x86-64.so.2`,
/// `ld-linux-aarch64.so.1`, ...).
pub fn is_loader(lib: &str) -> bool {
    lib.starts_with("ld-linux") || lib.starts_with("ld64.so")
}

/// The `NEEDED` entries of the ELF file `path`, in order.
///
/// # Errors
/// `readelf` (binutils, which comes with the C compiler) cannot be run, or
/// fails on the file.
///
/// ```no_run
/// let needed = streamcomm_testkit::needed_libraries(std::path::Path::new("/bin/true"))?;
/// assert!(needed.iter().any(|l| l == "libc.so.6"));
/// # Ok::<(), String>(())
/// ```
pub fn needed_libraries(path: &Path) -> Result<Vec<String>, String> {
    let out = Command::new("readelf")
        .arg("-d")
        .arg(path)
        .output()
        .map_err(|e| format!("cannot run readelf ({e}; `apt-get install binutils`)"))?;
    if !out.status.success() {
        return Err(format!(
            "readelf -d {} failed: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    // Lines such as ` 0x0000000000000001 (NEEDED)  Shared library: [libc.so.6]`.
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| Some(l.split_once('[')?.1.split_once(']')?.0.to_string()))
        .collect())
}

/// The linker flags (`-lNAME`) for the libraries a shared library `so` was
/// linked against, the loader left out: what a static library built from
/// the same crates with the same features needs beside it. Rust computes
/// this list when it links the shared library (it is what `rustc --print
/// native-static-libs` prints for the static one); reading it back from the
/// result keeps no list by hand.
///
/// # Errors
/// As [`needed_libraries`], or an entry that is not a `lib*.so*` name.
///
/// ```no_run
/// let flags = streamcomm_testkit::link_flags_of(std::path::Path::new("libstreamcomm_ffi.so"))?;
/// assert!(flags.contains(&"-lc".to_string()));
/// # Ok::<(), String>(())
/// ```
pub fn link_flags_of(so: &Path) -> Result<Vec<String>, String> {
    needed_libraries(so)?
        .into_iter()
        .filter(|lib| !is_loader(lib))
        .map(|lib| {
            lib.strip_prefix("lib")
                .and_then(|rest| rest.split_once(".so"))
                .map(|(name, _)| format!("-l{name}"))
                .ok_or_else(|| {
                    format!(
                        "{}: NEEDED entry {lib} is not a lib*.so* name",
                        so.display()
                    )
                })
        })
        .collect()
}

/// True when `path` starts with the ELF magic number.
pub fn is_elf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| magic == *b"\x7fELF")
}
