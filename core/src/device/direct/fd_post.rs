//! File descriptors between the processes of one host, for windows that
//! other processes map through a descriptor (the driver's virtual memory
//! management): each rank that exports one binds a Unix datagram socket
//! with an abstract name (nothing is left in the file system, whatever
//! happens), publishes the name in its window record, and sends its
//! descriptor to every peer process with `SCM_RIGHTS`. NCCL passes its
//! cuMem handles the same way.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::{Error, Result};

/// Longest abstract socket name this module makes (it fits a record).
pub(crate) const MAX_NAME: usize = 48;

/// One rank's socket.
pub(crate) struct FdPost {
    sock: OwnedFd,
    name: Vec<u8>,
}

/// `sockaddr_un` for the abstract `name`, and its length.
fn address(name: &[u8]) -> (libc::sockaddr_un, libc::socklen_t) {
    // SAFETY: sockaddr_un is plain data; all-zero is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    // sun_path[0] stays 0: the abstract namespace.
    for (dst, &b) in addr.sun_path[1..].iter_mut().zip(name) {
        *dst = b as libc::c_char;
    }
    let len = std::mem::offset_of!(libc::sockaddr_un, sun_path) + 1 + name.len();
    (addr, len as libc::socklen_t)
}

fn os_error(what: &str) -> Error {
    Error::Unavailable(format!("{what}: {}", std::io::Error::last_os_error()))
}

impl FdPost {
    /// A socket bound to a fresh abstract name.
    pub(crate) fn bind() -> Result<FdPost> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!(
            "streamcomm-fd-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        )
        .into_bytes();
        debug_assert!(name.len() <= MAX_NAME);
        // SAFETY: plain socket creation; the descriptor is owned below.
        let raw = unsafe {
            libc::socket(
                libc::AF_UNIX,
                libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if raw < 0 {
            return Err(os_error("a Unix socket for window descriptors"));
        }
        // SAFETY: a new descriptor, owned from here.
        let sock = unsafe { OwnedFd::from_raw_fd(raw) };
        let (addr, len) = address(&name);
        // SAFETY: a valid address of `len` bytes.
        if unsafe { libc::bind(sock.as_raw_fd(), (&raw const addr).cast(), len) } != 0 {
            return Err(os_error("binding the window-descriptor socket"));
        }
        Ok(FdPost { sock, name })
    }

    /// The socket's abstract name.
    pub(crate) fn name(&self) -> &[u8] {
        &self.name
    }

    /// Sends `fd`, tagged with `rank`, to the socket of each of `to`, and
    /// receives one descriptor from each rank of `from`, within `within`:
    /// the descriptors by sender.
    pub(crate) fn exchange(
        &self,
        rank: usize,
        fd: Option<BorrowedFd<'_>>,
        to: &[Vec<u8>],
        from: &[usize],
        within: Duration,
    ) -> Result<BTreeMap<usize, OwnedFd>> {
        let start = Instant::now();
        let mut unsent: Vec<&Vec<u8>> = if fd.is_some() {
            to.iter().collect()
        } else {
            vec![]
        };
        let mut got = BTreeMap::new();
        while !unsent.is_empty() || from.iter().any(|p| !got.contains_key(p)) {
            let mut moved = false;
            if let Some(fd) = fd {
                let before = unsent.len();
                let mut kept = Vec::new();
                for name in unsent {
                    if !self.send(name, rank, fd)? {
                        kept.push(name);
                    }
                }
                unsent = kept;
                moved |= unsent.len() < before;
            }
            while let Some(datagram) = self.receive()? {
                // A datagram that is not one of ours is dropped (its
                // descriptor, if any, with it).
                if let Some((sender, received)) = datagram
                    && from.contains(&sender)
                {
                    got.insert(sender, received);
                }
                moved = true;
            }
            if !moved {
                if start.elapsed() > within {
                    let missing: Vec<usize> = from
                        .iter()
                        .copied()
                        .filter(|p| !got.contains_key(p))
                        .collect();
                    return Err(Error::Timeout {
                        op: "the direct path's window exchange".into(),
                        what: format!(
                            "window descriptors from ranks {missing:?}, {} of this rank's \
                             not delivered (a Unix socket between the ranks' processes)",
                            unsent.len()
                        ),
                        waited_ms: start.elapsed().as_millis() as u64,
                    });
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Ok(got)
    }

    /// One datagram with `fd` to `name`: false when the peer's queue is
    /// full for now.
    fn send(&self, name: &[u8], rank: usize, fd: BorrowedFd<'_>) -> Result<bool> {
        let (addr, addr_len) = address(name);
        let mut tag = (rank as u32).to_le_bytes();
        let mut iov = libc::iovec {
            iov_base: tag.as_mut_ptr().cast(),
            iov_len: tag.len(),
        };
        // Room for one descriptor, aligned as cmsghdr wants.
        let mut control = [0u64; 4];
        // SAFETY: msghdr is plain data; all-zero is valid.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&raw const addr).cast_mut().cast();
        msg.msg_namelen = addr_len;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE is a pure size computation.
        msg.msg_controllen = unsafe { libc::CMSG_SPACE(size_of::<libc::c_int>() as u32) } as _;
        // SAFETY: the control buffer holds one cmsghdr with one int (its
        // size was given above); the macros stay inside it.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<libc::c_int>() as u32) as _;
            libc::CMSG_DATA(cmsg)
                .cast::<libc::c_int>()
                .write_unaligned(fd.as_raw_fd());
        }
        // SAFETY: every pointer in `msg` is valid for the call.
        let sent = unsafe { libc::sendmsg(self.sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if sent >= 0 {
            return Ok(true);
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EAGAIN | libc::ENOBUFS | libc::EINTR) => Ok(false),
            _ => Err(os_error("sending a window descriptor")),
        }
    }

    /// The next datagram received, if one is waiting: its sender's rank
    /// and descriptor (`None` for a datagram that is not one of ours).
    fn receive(&self) -> Result<Option<Option<(usize, OwnedFd)>>> {
        let mut tag = [0u8; 4];
        let mut iov = libc::iovec {
            iov_base: tag.as_mut_ptr().cast(),
            iov_len: tag.len(),
        };
        let mut control = [0u64; 4];
        // SAFETY: plain data; all-zero is valid.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: every pointer in `msg` is valid for the call.
        let n = unsafe { libc::recvmsg(self.sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            return match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EAGAIN | libc::EINTR) => Ok(None),
                _ => Err(os_error("receiving a window descriptor")),
            };
        }
        // SAFETY: the kernel filled `msg`'s control part; the macros stay
        // inside the buffer it reports.
        let fd = unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            if cmsg.is_null()
                || (*cmsg).cmsg_level != libc::SOL_SOCKET
                || (*cmsg).cmsg_type != libc::SCM_RIGHTS
            {
                None
            } else {
                Some(OwnedFd::from_raw_fd(
                    libc::CMSG_DATA(cmsg).cast::<libc::c_int>().read_unaligned(),
                ))
            }
        };
        let sender = u32::from_le_bytes(tag) as usize;
        Ok(Some(
            fd.filter(|_| n as usize == tag.len())
                .map(|fd| (sender, fd)),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};

    /// Three posts in one process pass descriptors among themselves: each
    /// receives the others', which refer to the same open files.
    #[test]
    fn descriptors_reach_every_peer_with_their_sender() {
        let posts: Vec<FdPost> = (0..3).map(|_| FdPost::bind().unwrap()).collect();
        let files: Vec<std::fs::File> = (0..3)
            .map(|r| {
                let mut f = tempfile_with(&format!("rank {r}"));
                f.rewind().unwrap();
                f
            })
            .collect();
        let names: Vec<Vec<u8>> = posts.iter().map(|p| p.name().to_vec()).collect();
        let got: Vec<BTreeMap<usize, OwnedFd>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..3)
                .map(|r| {
                    let (posts, files, names) = (&posts, &files, &names);
                    s.spawn(move || {
                        use std::os::fd::AsFd;
                        let to: Vec<Vec<u8>> = (0..3)
                            .filter(|&p| p != r)
                            .map(|p| names[p].clone())
                            .collect();
                        let from: Vec<usize> = (0..3).filter(|&p| p != r).collect();
                        posts[r]
                            .exchange(
                                r,
                                Some(files[r].as_fd()),
                                &to,
                                &from,
                                Duration::from_secs(10),
                            )
                            .unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (r, fds) in got.into_iter().enumerate() {
            assert_eq!(fds.len(), 2, "rank {r}");
            for (p, fd) in fds {
                let mut text = String::new();
                let mut f = std::fs::File::from(fd);
                f.rewind().unwrap();
                f.read_to_string(&mut text).unwrap();
                assert_eq!(text, format!("rank {p}"), "rank {r} from {p}");
            }
        }
    }

    /// A peer that never sends is a timeout naming it.
    #[test]
    fn a_missing_descriptor_times_out_naming_its_rank() {
        let post = FdPost::bind().unwrap();
        let err = post
            .exchange(0, None, &[], &[3], Duration::from_millis(50))
            .unwrap_err();
        assert!(err.to_string().contains("[3]"), "{err}");
    }

    fn tempfile_with(text: &str) -> std::fs::File {
        let path = std::env::temp_dir().join(format!(
            "streamcomm-fd-post-{}-{}",
            std::process::id(),
            text.replace(' ', "-")
        ));
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }
}
