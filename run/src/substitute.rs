//! Libraries the launcher puts in the place of a program's:
//! `--cuda-stand-in` ([`CUDA_STAND_IN`]), the CPU stand-in for the CUDA
//! driver (crate `streamcomm-cuda-standin`, `gpu/standin`) instead of
//! NVIDIA's `libcuda`, so that a program's CUDA path runs on a machine
//! without a GPU; and `--nccl` ([`NCCL`]), streamcomm's `libnccl.so.2`
//! (crate `streamcomm-nccl`) instead of NVIDIA's NCCL.
//!
//! A program finds each by name (`libcuda.so.1`, `libnccl.so.2`: through
//! `dlopen`, or its `NEEDED` entries), so [`Substitute::prepare`] makes a
//! private temporary directory holding links by those names to the library,
//! and the launcher puts that directory first on the ranks'
//! `LD_LIBRARY_PATH` ([`Substitute::ld_library_path`]) (`LD_PRELOAD` would not do: `dlopen` of
//! `libcuda.so.1` looks the name up on the path). A program whose binary
//! carries a `DT_RPATH` (not `DT_RUNPATH`) searches that first, and there
//! the path does not win. The directory is removed when the
//! [`Substitute`] drops.
//!
//! Where a library comes from, first found first:
//! 1. its variable (`STREAMCOMM_STANDIN_LIB`, `STREAMCOMM_NCCL_LIB`), the
//!    library's path;
//! 2. its file beside the `streamcomm-run` executable, or in its `deps/`
//!    (where cargo puts it: `target/<profile>/`), the newer of the two;
//! 3. inside a cargo workspace that has the crate (a `Cargo.toml` in the
//!    current directory or above it), `cargo build -p <crate>`, and the
//!    library it built.
//!
//! Otherwise [`Error::Unavailable`] says how to build it.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use streamcomm::{Error, Result};

/// A library the launcher can put in a program's place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Library {
    /// The launcher option that asks for it.
    pub option: &'static str,
    /// Its file name, as cargo builds it.
    pub file: &'static str,
    /// The variable that names its path.
    pub var: &'static str,
    /// Its cargo package.
    pub package: &'static str,
    /// The names a program looks it up by.
    pub names: &'static [&'static str],
    /// What the ranks run on, for the launcher's notice.
    pub what: &'static str,
}

/// The CPU stand-in for the CUDA driver (`--cuda-stand-in`).
pub const CUDA_STAND_IN: Library = Library {
    option: "--cuda-stand-in",
    file: "libstreamcomm_cuda_standin.so",
    var: "STREAMCOMM_STANDIN_LIB",
    package: "streamcomm-cuda-standin",
    names: &["libcuda.so", "libcuda.so.1"],
    what: "the ranks run on the CPU stand-in for the CUDA driver ({}), not a GPU: it checks \
           driver API use and ordering, not GPU timing or kernels",
};

/// streamcomm's NCCL-compatible library (`--nccl`).
pub const NCCL: Library = Library {
    option: "--nccl",
    file: "libnccl.so",
    var: "STREAMCOMM_NCCL_LIB",
    package: "streamcomm-nccl",
    names: &["libnccl.so", "libnccl.so.2"],
    what: "the ranks load streamcomm's libnccl.so.2 ({}) in place of NVIDIA's NCCL",
};

/// A private directory with links by a [`Library`]'s names to it; removed
/// on drop.
#[derive(Debug)]
pub struct Substitute {
    kind: Library,
    dir: PathBuf,
    library: PathBuf,
}

impl Substitute {
    /// Finds `kind`'s library ([`find_library`]) and makes the directory
    /// of links to it. `var` looks up an environment variable; `exe` is
    /// the launcher's own executable, if known.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] when no library is found (saying how to build
    /// one); [`Error::Os`] when the directory or a link cannot be made.
    pub fn prepare(
        kind: Library,
        var: &dyn Fn(&str) -> Option<OsString>,
        exe: Option<&Path>,
    ) -> Result<Substitute> {
        let library = find_library(kind, var, exe)?;
        Substitute::with_library(kind, &library)
    }

    /// The directory of links by `kind`'s names to `library`, which must
    /// exist.
    ///
    /// # Errors
    ///
    /// [`Error::Os`] when `library` cannot be found or the directory or a
    /// link cannot be made.
    pub fn with_library(kind: Library, library: &Path) -> Result<Substitute> {
        let library = library
            .canonicalize()
            .map_err(|e| Error::os(format!("find {}", library.display()), e))?;
        let dir = private_temp_dir()?;
        let substitute = Substitute { kind, dir, library };
        for name in kind.names {
            let link = substitute.dir.join(name);
            std::os::unix::fs::symlink(&substitute.library, &link)
                .map_err(|e| Error::os(format!("link {}", link.display()), e))?;
        }
        Ok(substitute)
    }

    /// The library the links point to.
    pub fn library(&self) -> &Path {
        &self.library
    }

    /// The directory holding the links.
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

    /// The line the launcher prints once, on stderr.
    pub fn notice(&self) -> String {
        let library = self.library.display().to_string();
        format!(
            "{}: {}",
            self.kind.option,
            self.kind.what.replacen("{}", &library, 1)
        )
    }
}

impl Drop for Substitute {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            tracing::warn!("cannot remove {}: {e}", self.dir.display());
        }
    }
}

/// Where `kind`'s library is (see the module's documentation for the
/// order): `var` looks up an environment variable, `exe` is the launcher's
/// own executable. May run `cargo build`.
///
/// # Errors
///
/// [`Error::Unavailable`] when none is found, saying how to build one, or
/// when the library's variable names a file that does not exist.
pub fn find_library(
    kind: Library,
    var: &dyn Fn(&str) -> Option<OsString>,
    exe: Option<&Path>,
) -> Result<PathBuf> {
    if let Some(path) = var(kind.var).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        if path.is_file() {
            return Ok(path);
        }
        return Err(Error::Unavailable(format!(
            "{}={} is not a file",
            kind.var,
            path.display()
        )));
    }
    if let Some(dir) = exe.and_then(Path::parent) {
        // Both where they are both: `cargo test` rebuilds only `deps/`'s
        // copy, `cargo build` both, so the newer one is the current build.
        let newest = [dir.join(kind.file), dir.join("deps").join(kind.file)]
            .into_iter()
            .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
            .filter(|(_, p)| p.is_file())
            .max_by_key(|(when, _)| *when);
        if let Some((_, found)) = newest {
            return Ok(found);
        }
    }
    let cwd = std::env::current_dir().ok();
    if let Some(manifest) = cwd.as_deref().and_then(cargo_manifest_above) {
        let cargo = var("CARGO").unwrap_or_else(|| "cargo".into());
        return build_with_cargo(kind, &cargo, manifest.parent().unwrap_or(Path::new(".")));
    }
    Err(Error::Unavailable(how_to_build(
        kind,
        "no cargo workspace here",
    )))
}

/// The message for a library that cannot be found or built.
fn how_to_build(kind: Library, why: &str) -> String {
    let Library {
        option,
        file,
        var,
        package,
        ..
    } = kind;
    format!(
        "{option}: no {file} ({why}); build it in streamcomm's workspace with \
         `cargo build -p {package}` and set {var} to the built \
         target/debug/{file}, or put it beside streamcomm-run"
    )
}

/// The nearest `Cargo.toml` in `dir` or a directory above it.
fn cargo_manifest_above(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .map(|d| d.join("Cargo.toml"))
        .find(|m| m.is_file())
}

/// Runs `cargo build -p <kind's package>` (`cargo` is `$CARGO`, or the one
/// on `PATH`) in `dir` and returns the library it built.
fn build_with_cargo(kind: Library, cargo: &OsStr, dir: &Path) -> Result<PathBuf> {
    eprintln!(
        "streamcomm-run: {}: cargo build -p {}",
        kind.option, kind.package
    );
    let out = Command::new(cargo)
        .args([
            "build",
            "-p",
            kind.package,
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    let out = match out {
        Ok(out) => out,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(Error::Unavailable(how_to_build(
                kind,
                "cargo is not on PATH",
            )));
        }
        Err(e) => return Err(Error::os("run cargo build", e)),
    };
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
        return Err(Error::Unavailable(how_to_build(
            kind,
            &format!(
                "`cargo build -p {}` in {} failed: {}",
                kind.package,
                dir.display(),
                last.unwrap_or("no message")
            ),
        )));
    }
    built_library(kind, &out.stdout).ok_or_else(|| {
        Error::Unavailable(how_to_build(kind, "cargo built no library of that name"))
    })
}

/// The path of `kind`'s library in cargo's JSON messages: the `filenames`
/// entry that ends in its name.
fn built_library(kind: Library, messages: &[u8]) -> Option<PathBuf> {
    let end = format!("/{}\"", kind.file);
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
        .join("streamcomm-run-libs.XXXXXX")
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
#[path = "substitute_tests.rs"]
mod tests;
