//! The on-disk cache of compiled kernels: one file per (source, options, NVRTC
//! version, architecture), named by a stable hash.

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

/// The cache key: `<name>-<sm_XY>-<hash of sources, options, NVRTC version>`.
pub fn cache_key(
    name: &str,
    arch: Arch,
    texts: &[&str],
    options: &[String],
    nvrtc: (i32, i32),
) -> String {
    let version = format!("{}.{}", nvrtc.0, nvrtc.1);
    let mut parts: Vec<&[u8]> = texts.iter().map(|t| t.as_bytes()).collect();
    parts.extend(options.iter().map(|o| o.as_bytes()));
    parts.push(version.as_bytes());
    let stem = name.trim_end_matches(".cu");
    format!("{stem}-{}-{:016x}.cubin", arch.sm(), fnv1a(&parts))
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

    /// The cached image for `key`, if present and a plausible CUBIN.
    pub fn load(&self, key: &str) -> Option<Vec<u8>> {
        let bytes = std::fs::read(self.dir.as_ref()?.join(key)).ok()?;
        bytes.starts_with(b"\x7fELF").then_some(bytes)
    }

    /// Stores `image` under `key` atomically (write to a temporary, rename), so
    /// concurrent processes never see a partial file.
    pub fn store(&self, key: &str, image: &[u8]) -> Result<()> {
        let Some(dir) = &self.dir else { return Ok(()) };
        let io =
            |what: &str, e: std::io::Error| Error::Io(format!("{what} {}: {e}", dir.display()));
        std::fs::create_dir_all(dir).map_err(|e| io("creating", e))?;
        // One temporary per store, not per process: threads of one process
        // (ranks as threads on a cold cache) store the same key at once,
        // and a shared name lets one rename the other's half-written file.
        static STORES: AtomicU64 = AtomicU64::new(0);
        let n = STORES.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{key}.{}.{n}.tmp", std::process::id()));
        let written = std::fs::write(&tmp, image)
            .map_err(|e| io("writing into", e))
            .and_then(|()| std::fs::rename(&tmp, dir.join(key)).map_err(|e| io("renaming in", e)));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_changes_with_every_input_and_names_the_arch() {
        let opts = vec!["-a".to_string()];
        let k = cache_key("reduce.cu", Arch::SM90, &["src", "hdr"], &opts, (12, 9));
        assert!(
            k.starts_with("reduce-sm_90-") && k.ends_with(".cubin"),
            "{k}"
        );
        assert_eq!(
            k,
            cache_key("reduce.cu", Arch::SM90, &["src", "hdr"], &opts, (12, 9))
        );
        assert_ne!(
            k,
            cache_key("reduce.cu", Arch::SM80, &["src", "hdr"], &opts, (12, 9))
        );
        assert_ne!(
            k,
            cache_key("reduce.cu", Arch::SM90, &["src2", "hdr"], &opts, (12, 9))
        );
        assert_ne!(
            k,
            cache_key("reduce.cu", Arch::SM90, &["sr", "chdr"], &opts, (12, 9))
        );
        assert_ne!(
            k,
            cache_key("reduce.cu", Arch::SM90, &["src", "hdr"], &[], (12, 9))
        );
        assert_ne!(
            k,
            cache_key("reduce.cu", Arch::SM90, &["src", "hdr"], &opts, (13, 0))
        );
        // FNV-1a reference value for "a" alone (then our separator byte).
        assert_eq!(fnv1a(&[]), 0xcbf2_9ce4_8422_2325);
    }

    /// Ranks as threads on a cold cache store the same kernel at once: a
    /// reader must see the whole image or none, never a truncated one.
    #[test]
    fn threads_storing_one_key_never_expose_a_partial_image() {
        let dir = std::env::temp_dir().join(format!(
            "sc-kcache-race-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
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
                        cache.store("k.cubin", &image).unwrap();
                    }
                })
            })
            .collect();
        let reader = {
            let (cache, image, stop) = (cache.clone(), image.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut partial = 0;
                while !stop.load(Ordering::Relaxed) {
                    if let Some(got) = cache.load("k.cubin") {
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
        let dir = std::env::temp_dir().join(format!(
            "sc-kcache-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        let cache = KernelCache::new(Some(dir.clone()));
        assert_eq!(cache.load("k.cubin"), None);
        let image = b"\x7fELF and the rest".to_vec();
        cache.store("k.cubin", &image).unwrap();
        assert_eq!(cache.load("k.cubin"), Some(image));
        std::fs::write(dir.join("bad.cubin"), b"not elf").unwrap();
        assert_eq!(cache.load("bad.cubin"), None);
        let none = KernelCache::new(None);
        none.store("k.cubin", b"\x7fELF").unwrap();
        assert_eq!(none.load("k.cubin"), None);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
