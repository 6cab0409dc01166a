//! What ranks check barriers with: words in a file every process maps
//! shared, and a stream barrier between a counting and a checking task.

use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use streamcomm::Communicator;
use streamcomm::host::HostStream;

/// `n` 64-bit words, each alone in a cache line, of a file that every
/// process maps shared (created if missing).
pub(crate) struct SharedWords {
    ptr: *const u8,
    n: usize,
}

// SAFETY: the mapping is only accessed through AtomicU64s.
unsafe impl Send for SharedWords {}
// SAFETY: as above.
unsafe impl Sync for SharedWords {}

impl SharedWords {
    /// Maps `n` words of the file at `path`.
    pub(crate) fn map(path: &str, n: usize) -> SharedWords {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .unwrap();
        let bytes = (n * 64).next_multiple_of(4096);
        if file.metadata().unwrap().len() < bytes as u64 {
            file.set_len(bytes as u64).unwrap();
        }
        // SAFETY: mapping `bytes` of a file we hold open, shared; the mapping
        // outlives the descriptor, and the process uses it to the end.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        SharedWords {
            ptr: ptr as *const u8,
            n,
        }
    }

    /// Word `i`.
    pub(crate) fn word(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.n, "word {i} of {}", self.n);
        // SAFETY: in bounds, 64-byte aligned inside a page-aligned mapping
        // that lives for the process; AtomicU64 is valid for any bits.
        unsafe { &*(self.ptr.add(i * 64) as *const AtomicU64) }
    }
}

/// Enqueues one checked stream barrier on `s`: a task counting this
/// rank's arrival in `arrived`, the barrier, and a task checking, as the
/// `done`-th barrier this rank passed, that all `n` ranks had arrived.
pub(crate) fn checked_stream_barrier(
    comm: &Communicator,
    s: &HostStream,
    n: usize,
    arrived: &Arc<AtomicUsize>,
    done: &Arc<AtomicUsize>,
) {
    let rank = comm.rank();
    let a = arrived.clone();
    s.host_fn(move || {
        a.fetch_add(1, Ordering::SeqCst);
    })
    .unwrap();
    comm.barrier(s).unwrap();
    let (a, d) = (arrived.clone(), done.clone());
    s.host_fn(move || {
        let k = d.fetch_add(1, Ordering::SeqCst);
        let seen = a.load(Ordering::SeqCst);
        assert!(
            seen >= n * (k + 1),
            "rank {rank} passed stream barrier {k} after {seen} arrivals"
        );
    })
    .unwrap();
}
