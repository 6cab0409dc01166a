//! Compute modes across processes (`STREAMCOMM_STANDIN_COMPUTE_MODE`).
//!
//! Under EXCLUSIVE_PROCESS, a process holds an exclusive `flock` on
//! `/dev/shm/sc-cuda-standin-excl-<uid>-<machine>-<ordinal>` (machine:
//! `STREAMCOMM_STANDIN_MACHINE_ID`) while it has a context on
//! the device; another process's first context on that device then fails
//! with `CUDA_ERROR_DEVICE_UNAVAILABLE`, as on a GPU in that mode. The lock
//! goes with the process's last context on the device, and with the process
//! (the kernel drops a dead process's locks), so a crashed owner never
//! blocks the device. The file itself is left in place: unlinking a locked
//! file would let two processes lock two different files of one name.
//! Threads of one process share the lock (it is taken once per process).
//! Under PROHIBITED, every context creation fails with 46.

use crate::config::{COMPUTE_EXCLUSIVE_PROCESS, COMPUTE_PROHIBITED, config};
use crate::error::{DEVICE_UNAVAILABLE, Res};
use crate::guard::say_once;
use crate::shm::shm_open;

/// The right to create contexts on one device; dropping it releases the
/// device to other processes.
pub(crate) struct Claim {
    /// The locked file's descriptor (-1 when no lock is needed).
    fd: i32,
}

impl Drop for Claim {
    fn drop(&mut self) {
        if self.fd >= 0 {
            // SAFETY: the descriptor is ours; closing it drops its flock.
            unsafe { libc::close(self.fd) };
        }
    }
}

/// Claims device `ordinal` for this process's first context on it, or fails
/// with `CUDA_ERROR_DEVICE_UNAVAILABLE` as the compute mode demands.
pub(crate) fn claim(ordinal: usize) -> Res<Claim> {
    match config().compute_mode {
        COMPUTE_PROHIBITED => {
            say_once(
                "mode:prohibited".into(),
                "compute mode PROHIBITED: no context can be created: CUDA_ERROR_DEVICE_UNAVAILABLE",
            );
            Err(DEVICE_UNAVAILABLE)
        }
        COMPUTE_EXCLUSIVE_PROCESS => exclusive(ordinal),
        _ => Ok(Claim { fd: -1 }),
    }
}

fn exclusive(ordinal: usize) -> Res<Claim> {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let machine = &config().machine_id;
    let name = format!("/sc-cuda-standin-excl-{uid}-{machine}-{ordinal}");
    let fd = shm_open(&name, libc::O_CREAT).map_err(|e| {
        say_once(
            format!("mode:open:{ordinal}"),
            &format!(
                "compute mode EXCLUSIVE_PROCESS: cannot open /dev/shm{name} ({e}): CUDA_ERROR_DEVICE_UNAVAILABLE"
            ),
        );
        DEVICE_UNAVAILABLE
    })?;
    let claim = Claim { fd };
    // SAFETY: `fd` is an open descriptor; a non-blocking exclusive lock.
    if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        say_once(
            format!("mode:busy:{ordinal}"),
            &format!(
                "compute mode EXCLUSIVE_PROCESS: device {ordinal} has a context in another process: CUDA_ERROR_DEVICE_UNAVAILABLE"
            ),
        );
        return Err(DEVICE_UNAVAILABLE);
    }
    Ok(claim)
}
