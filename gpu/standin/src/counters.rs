//! What the stand-in counts in each process, for tests that hold the CUDA
//! path to ceilings: driver calls (each entry point the process called),
//! and the bytes device work (copies and kernels) read through imported
//! CUDA IPC mappings and VMM mappings of allocations other processes
//! exported (`cuMemImportFromShareableHandle`), i.e. from other processes'
//! device memory, which is what crosses NVLink on a GPU node.
//!
//! A test reads them with [`streamcomm_standin_counters`] (found with
//! `dlsym` in the loaded libcuda), and clears them with
//! [`streamcomm_standin_reset_counters`]; `STREAMCOMM_STANDIN_COUNTS=1`
//! prints them on stderr when the process exits.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::guard::say;
use crate::memory::Mapped;

/// Driver calls made by this process.
static CALLS: AtomicU64 = AtomicU64::new(0);
/// Bytes device work read through imported IPC mappings.
static IMPORTED_READ: AtomicU64 = AtomicU64::new(0);
/// Calls per entry point, printed at exit.
static BY_NAME: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());

/// Counts one call of `name`.
pub(crate) fn call(name: &'static str) {
    CALLS.fetch_add(1, Ordering::Relaxed);
    *BY_NAME
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(name)
        .or_default() += 1;
}

/// Counts `bytes` read from `source` by device work, if it is an imported
/// IPC or VMM mapping.
pub(crate) fn read(source: &Mapped, bytes: usize) {
    if source.imported() {
        IMPORTED_READ.fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

/// Writes up to `len` counts to `out`, in this order: driver calls, bytes
/// read through imported IPC mappings. Returns how many it wrote.
///
/// # Safety
/// `out` must be valid for `len` writes of `u64` (or null with `len` 0).
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn streamcomm_standin_counters(out: *mut u64, len: usize) -> usize {
    let counts = [
        CALLS.load(Ordering::Relaxed),
        IMPORTED_READ.load(Ordering::Relaxed),
    ];
    let n = len.min(counts.len());
    for (i, c) in counts.iter().take(n).enumerate() {
        // SAFETY: the caller guarantees `len` writable slots.
        unsafe { out.add(i).write(*c) };
    }
    n
}

/// Sets every count to zero.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn streamcomm_standin_reset_counters() {
    CALLS.store(0, Ordering::Relaxed);
    IMPORTED_READ.store(0, Ordering::Relaxed);
    BY_NAME.lock().unwrap_or_else(|p| p.into_inner()).clear();
}

/// Prints the counts (at exit, under `STREAMCOMM_STANDIN_COUNTS=1`).
extern "C" fn print_at_exit() {
    let by_name = BY_NAME.lock().unwrap_or_else(|p| p.into_inner());
    let calls: Vec<String> = by_name.iter().map(|(n, c)| format!("{n} {c}")).collect();
    say(&format!(
        "counts of process {}: {} driver calls, {} bytes read through imported IPC mappings; by entry point: {}",
        std::process::id(),
        CALLS.load(Ordering::Relaxed),
        IMPORTED_READ.load(Ordering::Relaxed),
        calls.join(", ")
    ));
}

/// Arranges for the counts to be printed at exit (once per process).
pub(crate) fn print_at_exit_once() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a plain extern "C" function with no arguments.
        unsafe { libc::atexit(print_at_exit) };
    });
}
