//! `streamcomm-run --cuda-stand-in`: the ranks load the CPU stand-in for the
//! CUDA driver (crate `streamcomm-cuda-standin`, `gpu/standin`) instead of
//! NVIDIA's `libcuda`, so that a program's CUDA path runs on a machine
//! without a GPU.
//!
//! The stand-in is built as `libstreamcomm_cuda_standin.so`; a program finds
//! a driver by the names `libcuda.so.1` and `libcuda.so` (cudarc and
//! streamcomm-gpu open it with `dlopen`), so [`StandIn::prepare`] makes a
//! private temporary directory holding links by those names to the
//! stand-in, and [`StandIn::apply`] puts that directory first on the ranks'
//! `LD_LIBRARY_PATH` (`LD_PRELOAD` would not do: `dlopen` of `libcuda.so.1`
//! looks the name up on the path). The directory is removed when the
//! [`StandIn`] drops.
//!
//! Where the library comes from, first found first:
//! 1. `STREAMCOMM_STANDIN_LIB`, the library's path;
//! 2. `libstreamcomm_cuda_standin.so` beside the `streamcomm-run` executable,
//!    or in its `deps/` (where cargo puts it: `target/<profile>/`);
//! 3. inside a cargo workspace that has the crate (a `Cargo.toml` in the
//!    current directory or above it), `cargo build -p
//!    streamcomm-cuda-standin`, and the library it built.
//!
//! Otherwise [`Error::Unavailable`] says how to build it.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use streamcomm::{Error, Result};

use crate::local::LocalLauncher;

/// The stand-in library's file name, as cargo builds it.
pub const LIBRARY: &str = "libstreamcomm_cuda_standin.so";

/// The variable that names the stand-in library's path.
pub const LIBRARY_VAR: &str = "STREAMCOMM_STANDIN_LIB";

/// The stand-in's cargo package.
pub const PACKAGE: &str = "streamcomm-cuda-standin";

/// The names a program looks the CUDA driver up by.
pub const DRIVER_NAMES: [&str; 2] = ["libcuda.so", "libcuda.so.1"];

/// A private directory with `libcuda.so` and `libcuda.so.1` linking to the
/// stand-in library; removed on drop.
#[derive(Debug)]
pub struct StandIn {
    dir: PathBuf,
    library: PathBuf,
}

impl StandIn {
    /// Finds the stand-in library ([`find_library`]) and makes the
    /// directory of links to it. `var` looks up an environment variable;
    /// `exe` is the launcher's own executable, if known.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] when no library is found (saying how to build
    /// one); [`Error::Os`] when the directory or a link cannot be made.
    pub fn prepare(var: &dyn Fn(&str) -> Option<OsString>, exe: Option<&Path>) -> Result<StandIn> {
        let library = find_library(var, exe)?;
        StandIn::with_library(&library)
    }

    /// The directory of links to `library`, which must exist.
    ///
    /// # Errors
    ///
    /// [`Error::Os`] when `library` cannot be found or the directory or a
    /// link cannot be made.
    pub fn with_library(library: &Path) -> Result<StandIn> {
        let library = library
            .canonicalize()
            .map_err(|e| Error::os(format!("find {}", library.display()), e))?;
        let dir = private_temp_dir()?;
        let standin = StandIn { dir, library };
        for name in DRIVER_NAMES {
            let link = standin.dir.join(name);
            std::os::unix::fs::symlink(&standin.library, &link)
                .map_err(|e| Error::os(format!("link {}", link.display()), e))?;
        }
        Ok(standin)
    }

    /// The stand-in library the links point to.
    pub fn library(&self) -> &Path {
        &self.library
    }

    /// The directory holding `libcuda.so` and `libcuda.so.1`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `LD_LIBRARY_PATH` with the directory first, then `current`.
    pub fn ld_library_path(&self, current: Option<&OsStr>) -> OsString {
        let mut path = self.dir.clone().into_os_string();
        if let Some(current) = current.filter(|c| !c.is_empty()) {
            path.push(":");
            path.push(current);
        }
        path
    }

    /// The launcher with the directory first on its ranks' `LD_LIBRARY_PATH`
    /// (before `current`, the launcher's own).
    pub fn apply(&self, launcher: LocalLauncher, current: Option<&OsStr>) -> LocalLauncher {
        launcher.env("LD_LIBRARY_PATH", self.ld_library_path(current))
    }

    /// The line the launcher prints once, on stderr.
    pub fn notice(&self) -> String {
        format!(
            "--cuda-stand-in: the ranks run on the CPU stand-in for the CUDA driver ({}), \
             not a GPU: it checks driver API use and ordering, not GPU timing or kernels",
            self.library.display()
        )
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            tracing::warn!("cannot remove {}: {e}", self.dir.display());
        }
    }
}

/// Where the stand-in library is (see the module's documentation for the
/// order): `var` looks up an environment variable, `exe` is the launcher's
/// own executable. May run `cargo build`.
///
/// # Errors
///
/// [`Error::Unavailable`] when none is found, saying how to build one, or
/// when `STREAMCOMM_STANDIN_LIB` names a file that does not exist.
pub fn find_library(var: &dyn Fn(&str) -> Option<OsString>, exe: Option<&Path>) -> Result<PathBuf> {
    if let Some(path) = var(LIBRARY_VAR).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        if path.is_file() {
            return Ok(path);
        }
        return Err(Error::Unavailable(format!(
            "{LIBRARY_VAR}={} is not a file",
            path.display()
        )));
    }
    if let Some(dir) = exe.and_then(Path::parent) {
        for candidate in [dir.join(LIBRARY), dir.join("deps").join(LIBRARY)] {
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    let cwd = std::env::current_dir().ok();
    if let Some(manifest) = cwd.as_deref().and_then(cargo_manifest_above) {
        let cargo = var("CARGO").unwrap_or_else(|| "cargo".into());
        return build_with_cargo(&cargo, manifest.parent().unwrap_or(Path::new(".")));
    }
    Err(Error::Unavailable(how_to_build("no cargo workspace here")))
}

/// The message for a stand-in that cannot be found or built.
fn how_to_build(why: &str) -> String {
    format!(
        "--cuda-stand-in: no {LIBRARY} ({why}); build it in streamcomm's workspace with \
         `cargo build -p {PACKAGE}` and set {LIBRARY_VAR} to the built \
         target/debug/{LIBRARY}, or put it beside streamcomm-run"
    )
}

/// The nearest `Cargo.toml` in `dir` or a directory above it.
fn cargo_manifest_above(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .map(|d| d.join("Cargo.toml"))
        .find(|m| m.is_file())
}

/// Runs `cargo build -p streamcomm-cuda-standin` (`cargo` is `$CARGO`, or
/// the one on `PATH`) in `dir` and returns the
/// library it built.
fn build_with_cargo(cargo: &OsStr, dir: &Path) -> Result<PathBuf> {
    eprintln!("streamcomm-run: --cuda-stand-in: cargo build -p {PACKAGE}");
    let out = Command::new(cargo)
        .args([
            "build",
            "-p",
            PACKAGE,
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    let out = match out {
        Ok(out) => out,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(Error::Unavailable(how_to_build("cargo is not on PATH")));
        }
        Err(e) => return Err(Error::os("run cargo build", e)),
    };
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
        return Err(Error::Unavailable(how_to_build(&format!(
            "`cargo build -p {PACKAGE}` in {} failed: {}",
            dir.display(),
            last.unwrap_or("no message")
        ))));
    }
    built_library(&out.stdout)
        .ok_or_else(|| Error::Unavailable(how_to_build("cargo built no library of that name")))
}

/// The path of the stand-in library in cargo's JSON messages: the
/// `filenames` entry that ends in its name.
fn built_library(messages: &[u8]) -> Option<PathBuf> {
    let end = format!("/{LIBRARY}\"");
    messages
        .split(|&b| b == b'\n')
        .filter_map(|line| {
            let at = line.windows(end.len()).position(|w| w == end.as_bytes())?;
            let start = line[..at].iter().rposition(|&b| b == b'"')? + 1;
            let path = Path::new(OsStr::from_bytes(&line[start..at + end.len() - 1]));
            Some(path.to_path_buf())
        })
        .find(|p| p.is_file())
}

/// A new directory only this user may enter, under the temporary directory.
fn private_temp_dir() -> Result<PathBuf> {
    let mut template = std::env::temp_dir()
        .join("streamcomm-standin.XXXXXX")
        .into_os_string()
        .into_vec();
    template.push(0);
    // SAFETY: `template` is a writable, NUL-terminated buffer ending in
    // XXXXXX, as mkdtemp requires; it makes the directory with mode 0700.
    let made = unsafe { libc::mkdtemp(template.as_mut_ptr().cast()) };
    if made.is_null() {
        return Err(Error::os(
            "make a temporary directory",
            io::Error::last_os_error(),
        ));
    }
    template.pop();
    Ok(PathBuf::from(OsString::from_vec(template)))
}

#[cfg(test)]
#[path = "standin_tests.rs"]
mod tests;
