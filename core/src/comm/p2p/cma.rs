//! Cross-memory attach: one copy from another process's memory into ours.
//!
//! The rendezvous protocol on shared memory has the receiver read a large
//! message straight from the sender's buffer into its own (Open MPI's
//! `vader` and MPICH's `nemesis` copy once with cross-memory attach too), so
//! the data is copied once instead of twice through a slot ring. Only the
//! receiver copies: no process ever writes into another's memory, so a
//! sender that stops and wakes after its receive failed writes nothing. The
//! kernel checks that the reader may ptrace the target (same user, and
//! Yama's `ptrace_scope` permitting); when it refuses, the sender streams
//! the data through the ring instead.

use std::io;

/// Messages from this size on are pulled by two threads of the receiving
/// process at once (below it, starting a thread costs more than it saves).
pub(crate) const TWO_THREADS_MIN: usize = 4 << 20;

/// Reads a whole message, `dst.len()` bytes at `remote_addr` in process
/// `pid`, into `dst`: from [`TWO_THREADS_MIN`] on, the back half on a
/// second thread while this one reads the front half, so that two cores
/// copy (as when the sender used to write half), and every write into
/// `dst` is still this process's own, finished when this returns.
///
/// # Errors
/// As [`read_from`], for either half.
pub(crate) fn pull(pid: u32, remote_addr: u64, dst: &mut [u8]) -> io::Result<()> {
    if dst.len() < TWO_THREADS_MIN {
        return read_from(pid, remote_addr, dst);
    }
    let half = (dst.len() / 2) & !4095;
    let (front, back) = dst.split_at_mut(half);
    std::thread::scope(|s| {
        // Without a second thread (none could start) the message comes
        // through the ring instead.
        let second = std::thread::Builder::new()
            .name("streamcomm-pull".into())
            .spawn_scoped(s, move || read_from(pid, remote_addr + half as u64, back))?;
        let first = read_from(pid, remote_addr, front);
        let second = second
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the pulling thread panicked")));
        first.and(second)
    })
}

/// Reads `dst.len()` bytes at `remote_addr` in process `pid` into `dst`.
///
/// # Errors
/// The OS error when the kernel refuses (`EPERM` without ptrace rights,
/// `ENOSYS` where cross-memory attach is compiled out, `EFAULT` for a bad
/// address) or makes no progress.
pub(crate) fn read_from(pid: u32, remote_addr: u64, dst: &mut [u8]) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("pid {pid}")))?;
    let mut done = 0usize;
    while done < dst.len() {
        let rest = &mut dst[done..];
        let local = libc::iovec {
            iov_base: rest.as_mut_ptr() as *mut libc::c_void,
            iov_len: rest.len(),
        };
        let remote = libc::iovec {
            iov_base: (remote_addr as usize).wrapping_add(done) as *mut libc::c_void,
            iov_len: rest.len(),
        };
        // SAFETY: `local` describes `rest`, valid for writes for the call;
        // the kernel validates the remote range (EFAULT if unmapped) and
        // writes only within `local`.
        let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        match n {
            n if n > 0 => done += n as usize,
            0 => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "process_vm_readv made no progress",
                ));
            }
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_our_own_memory_and_refuses_bad_addresses() {
        let src: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
        let mut back = vec![0u8; src.len()];
        read_from(std::process::id(), src.as_ptr() as u64, &mut back).unwrap();
        assert_eq!(back, src);
        let e = read_from(std::process::id(), 8, &mut back).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT), "{e}");
        // Two threads from TWO_THREADS_MIN on, every byte in its place.
        let big: Vec<u8> = (0..3 * TWO_THREADS_MIN + 4097)
            .map(|i| (i * 13 % 251) as u8)
            .collect();
        let mut got = vec![0u8; big.len()];
        pull(std::process::id(), big.as_ptr() as u64, &mut got).unwrap();
        assert!(got == big, "a two-thread pull lost bytes");
        assert!(pull(std::process::id(), 8, &mut got).is_err());
    }
}
