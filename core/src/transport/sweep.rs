//! Removing shared-memory segments that dead processes left behind.
//!
//! A rank unlinks its segment as soon as every peer has mapped it, but a
//! process killed between creating the segment and that moment leaves it in
//! `/dev/shm`, holding memory until reboot. So whenever a communicator
//! creates its segment, it first looks for `streamcomm-{pid}-{random}`
//! entries whose creator is gone and removes them.
//!
//! "Gone" must be certain, since removing the name of a live rank's segment
//! before its peers open it would break that rank's communicator. A pid only
//! means something inside its pid namespace, and containers may share
//! `/dev/shm` without sharing pids, so an entry is removed only when all of
//! these hold: its header is a streamcomm segment of this layout version,
//! created by the pid in its name, in this process's pid namespace (the
//! header records it), and `kill(pid, 0)` says no such process (`ESRCH`;
//! `EPERM` means it lives under another user). A file whose header was
//! never written (its creator died while sizing it) goes too, once it has
//! been untouched for a minute and its pid is dead. Anything else is left
//! alone.
//! Each removal is logged (`tracing` at info level, shown by `STREAMCOMM_DEBUG`).

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::{MAGIC, SegmentHeader, VERSION};

/// Where POSIX shared-memory objects live on Linux.
const SHM_DIR: &str = "/dev/shm";
const PREFIX: &str = "streamcomm-";

/// This process's pid namespace (the inode of `/proc/self/ns/pid`; 0 if unknown).
pub(crate) fn pid_namespace() -> u64 {
    std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| m.ino())
}

/// The pid in a segment name `streamcomm-{pid}-{16 hex digits}`.
fn pid_of(name: &str) -> Option<u32> {
    let (digits, random) = name.strip_prefix(PREFIX)?.split_once('-')?;
    let valid_random = random.len() == 16 && random.bytes().all(|b| b.is_ascii_hexdigit());
    let pid: u32 = digits.parse().ok()?;
    let canonical = pid.to_string() == digits;
    (valid_random && canonical && pid > 0 && pid <= i32::MAX as u32).then_some(pid)
}

/// True when no process `pid` exists in this pid namespace.
fn is_dead(pid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence and permission; pid is in
    // 1..=i32::MAX (checked by pid_of), so it names one process, never a group.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// The header fields of a segment file that decide whether it can go.
struct HeaderFacts {
    owner_pid: u32,
    pid_ns: u64,
}

/// What a segment file's header says.
enum Header {
    /// A streamcomm header of this version.
    Written(HeaderFacts),
    /// All zero, and the file untouched for [`UNWRITTEN_AGE`]: its creator
    /// died between creating it and writing the header (sizing a large
    /// segment takes milliseconds; a live creator, in any pid namespace,
    /// writes its header long before this age).
    Abandoned,
    /// Anything else: not ours to judge.
    Other,
}

/// How old an all-zero segment file must be to count as abandoned.
const UNWRITTEN_AGE: std::time::Duration = std::time::Duration::from_secs(60);

fn read_header(path: &Path) -> Header {
    const N: usize = std::mem::size_of::<SegmentHeader>();
    let mut b = [0u8; N];
    let Some(mut file) = std::fs::File::open(path).ok() else {
        return Header::Other;
    };
    if file.read_exact(&mut b).is_err() {
        return Header::Other;
    }
    let u64_at = |i: usize| u64::from_ne_bytes(b[i..i + 8].try_into().unwrap_or_default());
    let u32_at = |i: usize| u32::from_ne_bytes(b[i..i + 4].try_into().unwrap_or_default());
    if u64_at(0) == MAGIC && u32_at(8) == VERSION {
        return Header::Written(HeaderFacts {
            owner_pid: u32_at(12),
            pid_ns: u64_at(24),
        });
    }
    let old = file
        .metadata()
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age > UNWRITTEN_AGE);
    if b.iter().all(|&x| x == 0) && old {
        Header::Abandoned
    } else {
        Header::Other
    }
}

/// Removes every segment in `/dev/shm` left by a dead process of this pid
/// namespace (see the module doc); returns the names removed. Never fails:
/// what cannot be read or removed is skipped (and logged at debug level).
pub(crate) fn sweep_stale_segments() -> Vec<String> {
    sweep_in(Path::new(SHM_DIR), pid_namespace())
}

fn sweep_in(dir: &Path, my_ns: u64) -> Vec<String> {
    let mut removed = Vec::new();
    if my_ns == 0 {
        tracing::debug!("no /proc/self/ns/pid: not sweeping stale segments");
        return removed;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return removed;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(pid) = pid_of(name) else { continue };
        if pid == std::process::id() || !is_dead(pid) {
            continue;
        }
        let path = entry.path();
        match read_header(&path) {
            Header::Written(h) if h.owner_pid == pid && h.pid_ns == my_ns => {}
            Header::Abandoned => {}
            Header::Written(_) => {
                tracing::debug!(
                    name,
                    "stale-looking segment of another pid namespace: left alone"
                );
                continue;
            }
            Header::Other => {
                tracing::debug!(
                    name,
                    "segment without a readable streamcomm header: left alone"
                );
                continue;
            }
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {
                tracing::info!(
                    name,
                    pid,
                    "removed a shared-memory segment left by a dead process"
                );
                removed.push(name.to_string());
            }
            Err(e) => tracing::debug!(name, error = %e, "could not remove a stale segment"),
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_parsed_strictly() {
        assert_eq!(pid_of("streamcomm-123-00112233aabbccdd"), Some(123));
        for bad in [
            "streamcomm-0-00112233aabbccdd",
            "streamcomm-+12-00112233aabbccdd",
            "streamcomm-012-00112233aabbccdd",
            "streamcomm-12-00112233aabbccd",
            "streamcomm-12-00112233aabbccdx",
            "streamcomm-4294967295-00112233aabbccdd",
            "streamcomm-12",
            "other-12-00112233aabbccdd",
        ] {
            assert_eq!(pid_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn only_dead_same_namespace_streamcomm_segments_go() {
        let dir = std::env::temp_dir().join(format!("sc-sweep-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let live = std::process::id();
        let header = |pid: u32, ns: u64| {
            let mut b = vec![0u8; 4096];
            b[0..8].copy_from_slice(&MAGIC.to_ne_bytes());
            b[8..12].copy_from_slice(&VERSION.to_ne_bytes());
            b[12..16].copy_from_slice(&pid.to_ne_bytes());
            b[24..32].copy_from_slice(&ns.to_ne_bytes());
            b
        };
        let files = [
            (
                format!("streamcomm-{dead}-00000000000000a1"),
                header(dead, 7),
                true,
            ),
            (
                format!("streamcomm-{dead}-00000000000000a2"),
                header(dead, 8),
                false,
            ),
            (
                format!("streamcomm-{dead}-00000000000000a3"),
                header(dead + 1, 7),
                false,
            ),
            (
                format!("streamcomm-{dead}-00000000000000a4"),
                vec![0u8; 16],
                false,
            ),
            (
                format!("streamcomm-{live}-00000000000000a5"),
                header(live, 7),
                false,
            ),
            // Never written (its creator died sizing it): old enough, gone.
            (
                format!("streamcomm-{dead}-00000000000000a6"),
                vec![0u8; 4096],
                true,
            ),
            // Never written, but new: its creator may be at work.
            (
                format!("streamcomm-{dead}-00000000000000a7"),
                vec![0u8; 4096],
                false,
            ),
            // Never written and old, but its pid lives.
            (
                format!("streamcomm-{live}-00000000000000a8"),
                vec![0u8; 4096],
                false,
            ),
        ];
        for (name, bytes, _) in &files {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
        let long_ago = std::time::SystemTime::now() - 2 * UNWRITTEN_AGE;
        for suffix in ["a6", "a8"] {
            let (name, ..) = files.iter().find(|f| f.0.ends_with(suffix)).unwrap();
            let f = std::fs::File::options()
                .write(true)
                .open(dir.join(name))
                .unwrap();
            f.set_modified(long_ago).unwrap();
        }
        let removed = sweep_in(&dir, 7);
        for (name, _, gone) in &files {
            assert_eq!(!dir.join(name).exists(), *gone, "{name}");
            assert_eq!(removed.contains(name), *gone, "{name}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
