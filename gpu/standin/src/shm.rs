//! POSIX shared-memory segments backing device memory, so another process
//! can map an allocation (CUDA IPC). Each allocation is one segment named
//! `/sc-cuda-standin-<pid>-<serial>`, created 0600 and unlinked when freed or
//! at exit; segments of processes that died are removed at the next `cuInit`.
//! VMM allocations (module `vmm`) are anonymous, sealed memfds instead,
//! which [`Segment::map_fd`] maps: they have no name to unlink, and vanish
//! with their last descriptor and mapping.

use std::collections::BTreeSet;
use std::ffi::{CString, c_int};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once};

use crate::config::config;
use crate::context::lock;
use crate::error::{INVALID_VALUE, OUT_OF_MEMORY, Res};

const PREFIX: &str = "sc-cuda-standin-";

/// Names of the segments this process created and has not unlinked.
static LIVE: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// One mapped segment, unmapped on drop (and unlinked if this process made it).
pub(crate) struct Segment {
    name: String,
    host: *mut u8,
    len: usize,
    owner: bool,
}

// SAFETY: the mapping is plain shared memory; the pointer is only an address
// and the mapping lives as long as the value.
unsafe impl Send for Segment {}
// SAFETY: as above; no Rust-side state is mutated through `&Segment`.
unsafe impl Sync for Segment {}

fn name_of(pid: u32, serial: u64) -> String {
    format!("/{PREFIX}{pid}-{serial}")
}

fn page_round(len: usize) -> usize {
    len.div_ceil(4096).max(1) * 4096
}

/// Opens the shared-memory object `name` (`/`-prefixed) for reading and
/// writing, close-on-exec, with `flags` added (`O_CREAT` makes it 0600).
pub(crate) fn shm_open(name: &str, flags: c_int) -> std::io::Result<i32> {
    let c = CString::new(name)?;
    // SAFETY: a valid NUL-terminated name; opens or creates an object.
    let fd = unsafe { libc::shm_open(c.as_ptr(), libc::O_RDWR | flags, 0o600) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fd)
}

/// Maps `len` bytes at `offset` of the shared-memory object open as `fd`,
/// readable and writable, shared with every other mapping of it; `None`
/// where `mmap` fails.
fn map_shared(fd: i32, offset: libc::off_t, len: usize) -> Option<*mut u8> {
    // SAFETY: a fresh mapping at an address of the kernel's choosing (the
    // hint is NULL) touches no existing memory; failure is MAP_FAILED.
    let host = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            offset,
        )
    };
    (host != libc::MAP_FAILED).then_some(host.cast())
}

impl Segment {
    /// Creates and maps a new segment of `len` bytes; returns it with its serial.
    pub(crate) fn create(len: usize) -> Res<(Segment, u64)> {
        static SERIAL: AtomicU64 = AtomicU64::new(1);
        static AT_EXIT: Once = Once::new();
        AT_EXIT.call_once(|| {
            // SAFETY: registers a plain extern "C" function with no captures.
            unsafe { libc::atexit(unlink_all) };
        });
        let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
        let name = name_of(std::process::id(), serial);
        let len = page_round(len);
        let fd = shm_open(&name, libc::O_CREAT | libc::O_EXCL).map_err(|_| OUT_OF_MEMORY)?;
        lock(&LIVE).insert(name.clone());
        let seg = Segment::map(name, fd, len, true)?;
        if config().poison {
            // SAFETY: the mapping holds `len` writable bytes.
            unsafe { std::ptr::write_bytes(seg.host, 0xA5, len) };
        }
        Ok((seg, serial))
    }

    /// Maps the segment `serial` of process `pid` (an IPC import).
    pub(crate) fn open(pid: u32, serial: u64, len: usize) -> Res<Segment> {
        let name = name_of(pid, serial);
        let fd = shm_open(&name, 0).map_err(|_| INVALID_VALUE)?;
        Segment::map(name, fd, page_round(len), false)
    }

    /// Maps `len` bytes at `offset` of the shared-memory object open as `fd`
    /// (a VMM mapping, module `vmm`); `fd` stays open and the caller's. The
    /// mapping keeps the object's memory while it lives, whatever becomes of
    /// `fd`.
    pub(crate) fn map_fd(fd: i32, offset: usize, len: usize) -> Res<Segment> {
        let offset = libc::off_t::try_from(offset).map_err(|_| INVALID_VALUE)?;
        let host = map_shared(fd, offset, len).ok_or(OUT_OF_MEMORY)?;
        Ok(Segment {
            name: String::new(),
            host,
            len,
            owner: false,
        })
    }

    fn map(name: String, fd: i32, len: usize, owner: bool) -> Res<Segment> {
        // SAFETY: `fd` is an open shared-memory object we own.
        let sized = !owner || unsafe { libc::ftruncate(fd, len as libc::off_t) } == 0;
        let host = if sized { map_shared(fd, 0, len) } else { None };
        // SAFETY: the descriptor is ours; the mapping (if any) keeps the object.
        unsafe { libc::close(fd) };
        // Made even when mapping failed, so that dropping it unlinks a
        // segment this process created.
        let seg = Segment {
            name,
            host: host.unwrap_or(std::ptr::null_mut()),
            len,
            owner,
        };
        if host.is_none() {
            return Err(OUT_OF_MEMORY);
        }
        Ok(seg)
    }

    /// The host address of the mapping.
    pub(crate) fn host(&self) -> *mut u8 {
        self.host
    }

    /// Its length in bytes (page-rounded).
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if !self.host.is_null() {
            // SAFETY: unmaps exactly the mapping made in `map`.
            unsafe { libc::munmap(self.host.cast(), self.len) };
        }
        if self.owner {
            unlink(&self.name);
            lock(&LIVE).remove(&self.name);
        }
    }
}

fn unlink(name: &str) {
    if let Ok(c) = CString::new(name) {
        // SAFETY: valid NUL-terminated name.
        unsafe { libc::shm_unlink(c.as_ptr()) };
    }
}

extern "C" fn unlink_all() {
    if let Ok(live) = LIVE.try_lock() {
        for name in live.iter() {
            unlink(name);
        }
    }
}

/// The marker file saying that process `importer` has segment `serial` of
/// process `exporter` mapped through IPC (empty; its name is the record).
fn import_marker(exporter: u32, serial: u64, importer: u32) -> String {
    format!("/dev/shm/{PREFIX}imp-{exporter}-{serial}-{importer}")
}

/// Records that this process has mapped segment `serial` of `exporter`.
pub(crate) fn mark_import(exporter: u32, serial: u64) {
    let _ = std::fs::File::create(import_marker(exporter, serial, std::process::id()));
}

/// Records that this process no longer maps segment `serial` of `exporter`.
pub(crate) fn unmark_import(exporter: u32, serial: u64) {
    let _ = std::fs::remove_file(import_marker(exporter, serial, std::process::id()));
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let found = unsafe { libc::kill(pid, 0) } == 0;
    found || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// The live processes that still have this process's segment `serial`
/// mapped through IPC (a process that died has unmapped everything).
pub(crate) fn live_importers(serial: u64) -> Vec<u32> {
    let stem = format!("{PREFIX}imp-{}-{serial}-", std::process::id());
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix(&stem)?.parse::<u32>().ok()
        })
        .filter(|&pid| alive(pid as i32))
        .collect()
}

/// Unlinks segments whose creating process no longer exists, and import
/// markers whose importer or exporter no longer exists.
pub(crate) fn remove_stale() {
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    for entry in dir.flatten() {
        let file = entry.file_name();
        let Some(rest) = file.to_str().and_then(|f| f.strip_prefix(PREFIX)) else {
            continue;
        };
        if let Some(marker) = rest.strip_prefix("imp-") {
            let pids: Vec<i32> = marker.split('-').filter_map(|p| p.parse().ok()).collect();
            if let [exporter, _serial, importer] = pids[..]
                && (!alive(exporter) || !alive(importer))
            {
                let _ = std::fs::remove_file(entry.path());
            }
            continue;
        }
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        // SAFETY: signal 0 only checks that the process exists.
        let dead = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if dead {
            unlink(&format!("/{}", file.to_string_lossy()));
        }
    }
}

/// Why the segment `serial` of process `pid` (an IPC import) is no longer
/// the exporter's memory, if it is not: the exporter freed it (its name is
/// unlinked) or exited. Device work touching such a mapping faults, as on a
/// GPU, where the exporter's free or exit unmaps it from every importer.
pub(crate) fn exporter_gone(pid: u32, serial: u64) -> Option<String> {
    // SAFETY: signal 0 only checks that the process exists.
    let dead = unsafe { libc::kill(pid as i32, 0) } != 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    if dead {
        return Some(format!("its exporter, process {pid}, has exited"));
    }
    let path = format!("/dev/shm{}", name_of(pid, serial));
    if std::fs::symlink_metadata(path).is_err() {
        return Some(format!("its exporter, process {pid}, has freed it"));
    }
    None
}
