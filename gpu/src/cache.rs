//! The on-disk cache of compiled kernels.
//!
//! A kernel's key is its name, architecture and a stable hash of its sources
//! and compile options ([`cache_key`]): what the image is compiled from. The
//! NVRTC that made an image is not part of the key but of the file name,
//! `<key>-nvrtc<major>.<minor>.cubin`, so that a cached image is found
//! without loading NVRTC at all ([`KernelCache::images`] lists every image
//! of a key, newest NVRTC first) while the caller can still pass over an
//! image the driver cannot load (one from an NVRTC newer than the driver).
//!
//! An image is stale only when what it was compiled from changed — the
//! sources, the options or the architecture — and then its key changes. An
//! image from an older NVRTC than the one at hand is not stale: CUBINs of
//! CUDA N.x load on every driver of CUDA N.0 and newer, so it is used as it
//! is rather than compiled again.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::nvrtc::Arch;

/// FNV-1a, 64-bit: stable across Rust versions and platforms (unlike
/// `DefaultHasher`), which a file name on disk needs.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        // Separator, so ("ab","c") and ("a","bc") differ.
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The cache key: `<name>-<sm_XY>-<hash of sources and options>`; the files
/// of its images add the NVRTC version ([`KernelCache::file_name`]).
pub fn cache_key(name: &str, arch: Arch, texts: &[&str], options: &[String]) -> String {
    let mut parts: Vec<&[u8]> = texts.iter().map(|t| t.as_bytes()).collect();
    parts.extend(options.iter().map(|o| o.as_bytes()));
    let stem = name.trim_end_matches(".cu");
    format!("{stem}-{}-{:016x}", arch.sm(), fnv1a(&parts))
}

/// One cached image of a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedImage {
    /// The `(major, minor)` version of the NVRTC that made it.
    pub nvrtc: (i32, i32),
    /// Its file.
    pub path: PathBuf,
    /// The CUBIN.
    pub image: Vec<u8>,
}

/// A directory of compiled kernels (or no cache at all).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelCache {
    dir: Option<PathBuf>,
}

impl KernelCache {
    /// A cache in `dir` (created on first store), or none for `None`.
    pub fn new(dir: Option<PathBuf>) -> KernelCache {
        KernelCache { dir }
    }

    /// The directory, if caching.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The file name of `key`'s image made by NVRTC `nvrtc`.
    pub fn file_name(key: &str, nvrtc: (i32, i32)) -> String {
        format!("{key}-nvrtc{}.{}.cubin", nvrtc.0, nvrtc.1)
    }

    /// The NVRTC version in a file name of `key`'s images.
    fn version_of(key: &str, file: &str) -> Option<(i32, i32)> {
        let rest = file.strip_prefix(key)?.strip_prefix("-nvrtc")?;
        let (major, minor) = rest.strip_suffix(".cubin")?.split_once('.')?;
        Some((major.parse().ok()?, minor.parse().ok()?))
    }

    /// The image of `key` made by NVRTC `nvrtc`, if present and a plausible
    /// CUBIN.
    pub fn load(&self, key: &str, nvrtc: (i32, i32)) -> Option<Vec<u8>> {
        let path = self.dir.as_ref()?.join(Self::file_name(key, nvrtc));
        read_cubin(&path)
    }

    /// Every plausible image of `key`, whichever NVRTC made it, newest NVRTC
    /// first. Needs no NVRTC.
    pub fn images(&self, key: &str) -> Vec<CachedImage> {
        let Some(dir) = &self.dir else {
            return Vec::new();
        };
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut found: Vec<CachedImage> = entries
            .filter_map(|e| {
                let e = e.ok()?;
                let nvrtc = Self::version_of(key, e.file_name().to_str()?)?;
                let image = read_cubin(&e.path())?;
                Some(CachedImage {
                    nvrtc,
                    path: e.path(),
                    image,
                })
            })
            .collect();
        found.sort_by_key(|i| std::cmp::Reverse(i.nvrtc));
        found
    }

    /// Stores `image`, made by NVRTC `nvrtc`, under `key` atomically (write
    /// to a temporary, rename), so concurrent processes never see a partial
    /// file. Returns its path (`None` without a cache).
    pub fn store(&self, key: &str, nvrtc: (i32, i32), image: &[u8]) -> Result<Option<PathBuf>> {
        let Some(dir) = &self.dir else {
            return Ok(None);
        };
        let io =
            |what: &str, e: std::io::Error| Error::Io(format!("{what} {}: {e}", dir.display()));
        std::fs::create_dir_all(dir).map_err(|e| io("creating", e))?;
        let file = Self::file_name(key, nvrtc);
        // One temporary per store, not per process: threads of one process
        // (ranks as threads on a cold cache) store the same key at once,
        // and a shared name lets one rename the other's half-written file.
        static STORES: AtomicU64 = AtomicU64::new(0);
        let n = STORES.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{file}.{}.{n}.tmp", std::process::id()));
        let path = dir.join(&file);
        let written = std::fs::write(&tmp, image)
            .map_err(|e| io("writing into", e))
            .and_then(|()| std::fs::rename(&tmp, &path).map_err(|e| io("renaming in", e)));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written.map(|()| Some(path))
    }
}

/// The file at `path` if it is a plausible CUBIN (an ELF image).
fn read_cubin(path: &Path) -> Option<Vec<u8>> {
    let bytes = std::fs::read(path).ok()?;
    bytes.starts_with(b"\x7fELF").then_some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_changes_with_every_input_and_names_the_arch() {
        let opts = vec!["-a".to_string()];
        let key = |arch, texts: &[&str], opts: &[String]| cache_key("reduce.cu", arch, texts, opts);
        let k = key(Arch::SM90, &["src", "hdr"], &opts);
        assert!(k.starts_with("reduce-sm_90-"), "{k}");
        assert_eq!(k, key(Arch::SM90, &["src", "hdr"], &opts));
        assert_ne!(k, key(Arch::SM80, &["src", "hdr"], &opts));
        assert_ne!(k, key(Arch::SM90, &["src2", "hdr"], &opts));
        assert_ne!(k, key(Arch::SM90, &["sr", "chdr"], &opts));
        assert_ne!(k, key(Arch::SM90, &["src", "hdr"], &[]));
        // The NVRTC version is in the file name, not the key.
        assert_eq!(
            KernelCache::file_name(&k, (12, 9)),
            format!("{k}-nvrtc12.9.cubin")
        );
        assert_eq!(
            KernelCache::version_of(&k, &format!("{k}-nvrtc13.0.cubin")),
            Some((13, 0))
        );
        assert_eq!(KernelCache::version_of(&k, &format!("{k}.cubin")), None);
        assert_eq!(KernelCache::version_of(&k, "other-nvrtc12.9.cubin"), None);
        assert_eq!(fnv1a(&[]), 0xcbf2_9ce4_8422_2325);
    }

    fn scratch(tag: &str) -> PathBuf {
        std::env::temp_dir().join(format!(
            "sc-kcache-{tag}-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ))
    }

    /// The images of a key are found without knowing which NVRTC made them,
    /// newest first; other keys, garbage and temporaries are not.
    #[test]
    fn images_of_a_key_are_listed_newest_nvrtc_first() {
        let dir = scratch("images");
        let cache = KernelCache::new(Some(dir.clone()));
        assert!(cache.images("k").is_empty());
        cache.store("k", (12, 4), b"\x7fELF 12.4").unwrap();
        cache.store("k", (13, 0), b"\x7fELF 13.0").unwrap();
        cache.store("k", (12, 9), b"\x7fELF 12.9").unwrap();
        cache.store("k2", (12, 9), b"\x7fELF other").unwrap();
        std::fs::write(dir.join("k-nvrtc12.8.cubin"), b"not elf").unwrap();
        std::fs::write(dir.join(".k-nvrtc12.7.cubin.1.2.tmp"), b"\x7fELF").unwrap();
        let got: Vec<_> = cache.images("k").into_iter().map(|i| i.nvrtc).collect();
        assert_eq!(got, [(13, 0), (12, 9), (12, 4)]);
        assert_eq!(cache.images("k")[1].image, b"\x7fELF 12.9");
        assert_eq!(
            cache.load("k", (12, 4)).as_deref(),
            Some(&b"\x7fELF 12.4"[..])
        );
        assert_eq!(cache.load("k", (12, 8)), None);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Ranks as threads on a cold cache store the same kernel at once: a
    /// reader must see the whole image or none, never a truncated one.
    #[test]
    fn threads_storing_one_key_never_expose_a_partial_image() {
        let dir = scratch("race");
        let cache = KernelCache::new(Some(dir.clone()));
        let mut image = b"\x7fELF".to_vec();
        image.resize(4 << 20, 0xAB);
        let image = std::sync::Arc::new(image);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writers: Vec<_> = (0..3)
            .map(|_| {
                let (cache, image) = (cache.clone(), image.clone());
                std::thread::spawn(move || {
                    for _ in 0..20 {
                        cache.store("k", (12, 9), &image).unwrap();
                    }
                })
            })
            .collect();
        let reader = {
            let (cache, image, stop) = (cache.clone(), image.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut partial = 0;
                while !stop.load(Ordering::Relaxed) {
                    if let Some(got) = cache.load("k", (12, 9)) {
                        partial += usize::from(got.len() != image.len());
                    }
                }
                partial
            })
        };
        for w in writers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        let partial = reader.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(partial, 0, "a reader saw a truncated image {partial} times");
    }

    #[test]
    fn store_then_load_and_garbage_is_ignored() {
        let dir = scratch("store");
        let cache = KernelCache::new(Some(dir.clone()));
        assert_eq!(cache.load("k", (12, 9)), None);
        let image = b"\x7fELF and the rest".to_vec();
        let path = cache.store("k", (12, 9), &image).unwrap().unwrap();
        assert_eq!(path, dir.join("k-nvrtc12.9.cubin"));
        assert_eq!(cache.load("k", (12, 9)), Some(image));
        std::fs::write(dir.join("bad-nvrtc12.9.cubin"), b"not elf").unwrap();
        assert_eq!(cache.load("bad", (12, 9)), None);
        let none = KernelCache::new(None);
        assert_eq!(none.store("k", (12, 9), b"\x7fELF").unwrap(), None);
        assert_eq!(none.load("k", (12, 9)), None);
        assert!(none.images("k").is_empty());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
