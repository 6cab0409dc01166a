//! Cross-memory attach: one copy between this process's memory and another's.
//!
//! The rendezvous protocol on shared memory writes a large message straight
//! from the sender's buffer into the receiver's (Open MPI's `vader` and
//! MPICH's `nemesis` do the same with `process_vm_writev`), so the data is
//! copied once instead of twice through a slot ring. The kernel checks that
//! the writer may ptrace the target (same user, and Yama's `ptrace_scope`
//! permitting); when it refuses, the caller streams the data through the ring
//! instead.

use std::io;

/// Writes `data` at `remote_addr` in process `pid`.
///
/// # Errors
/// The OS error when the kernel refuses (`EPERM` without ptrace rights,
/// `ENOSYS` where cross-memory attach is compiled out, `EFAULT` for a bad
/// address) or makes no progress.
pub(crate) fn write_to(pid: u32, remote_addr: u64, data: &[u8]) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("pid {pid}")))?;
    let mut done = 0usize;
    while done < data.len() {
        let rest = &data[done..];
        let local = libc::iovec {
            iov_base: rest.as_ptr() as *mut libc::c_void,
            iov_len: rest.len(),
        };
        let remote = libc::iovec {
            iov_base: (remote_addr as usize).wrapping_add(done) as *mut libc::c_void,
            iov_len: rest.len(),
        };
        // SAFETY: `local` describes `rest`, valid for reads for the call; the
        // kernel validates the remote range against the target's mappings
        // (EFAULT if unmapped) and never touches our memory beyond `local`.
        let n = unsafe { libc::process_vm_writev(pid, &local, 1, &remote, 1, 0) };
        match n {
            n if n > 0 => done += n as usize,
            0 => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "process_vm_writev made no progress",
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

/// Reads `dst.len()` bytes at `remote_addr` in process `pid` into `dst`.
///
/// # Errors
/// As [`write_to`].
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
    fn writes_into_our_own_memory_and_refuses_bad_addresses() {
        let src: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        write_to(std::process::id(), dst.as_mut_ptr() as u64, &src).unwrap();
        assert_eq!(dst, src);
        let e = write_to(std::process::id(), 8, &src).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT), "{e}");
        let mut back = vec![0u8; src.len()];
        read_from(std::process::id(), dst.as_ptr() as u64, &mut back).unwrap();
        assert_eq!(back, src);
        assert!(read_from(std::process::id(), 8, &mut back).is_err());
    }
}
