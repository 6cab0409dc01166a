//! POSIX shared-memory segments holding the slot rings of one rank.
//!
//! Each rank creates one segment with room for the inbound ring of every
//! peer (a ring lives in its receiver's memory; `docs/design/architecture.md`);
//! memory is allocated for the rings of peers on this host only, and pages
//! become resident as rings are used (a rank's ring neighbours' at creation). The name is
//! unpredictable (`/streamcomm-<pid>-<random>`), the mode 0600, and the owner
//! unlinks it as soon as every peer has mapped it, so nothing is left in
//! `/dev/shm` even if a process is killed later. One segment per rank, rather
//! than one per connection, keeps the number of mappings linear in the rank
//! count.

use std::ffi::CString;
use std::ptr::NonNull;

use std::sync::Arc;

use crate::config::Transport;
use crate::transport::ring::{RingEnd, RingShape};
use crate::transport::{Carrier, Segment};
use crate::{Error, Result};

/// The shared-memory link to one peer: the stream copies into the peer's
/// inbound ring itself, so nothing is left to do at the seam and data
/// lands without anyone's help.
#[derive(Debug)]
pub(crate) struct ShmLink {
    /// The peer's segment, where our send ring lies (kept alive here).
    pub peer_segment: Arc<Segment>,
}

impl Carrier for ShmLink {
    #[inline]
    fn kind(&self) -> Transport {
        Transport::Shm
    }
    #[inline]
    fn after_send(&self) {}
    #[inline]
    fn after_recv(&self, _inbound: &RingEnd) {}
    #[inline]
    fn after_grant(&self) {}
    #[inline]
    fn poke(&self) {}
    #[inline]
    fn poke_period(&self) -> Option<u32> {
        None
    }
    fn peer_segment(&self) -> Option<&Arc<Segment>> {
        Some(&self.peer_segment)
    }
}

/// A mapped shared-memory segment.
#[derive(Debug)]
pub(crate) struct ShmSegment {
    name: String,
    ptr: NonNull<u8>,
    len: usize,
    owner: bool,
    unlinked: bool,
    /// The owner's descriptor, kept until the name is removed, for
    /// reserving the memory of rings as their peers become known.
    fd: Option<std::os::fd::OwnedFd>,
}

// SAFETY: the mapping is process-wide; access to its contents goes through
// atomics and the ring protocol.
unsafe impl Send for ShmSegment {}
// SAFETY: as above.
unsafe impl Sync for ShmSegment {}

impl ShmSegment {
    /// Creates and maps a new zeroed segment of `len` bytes with a fresh
    /// name, its memory allocated now ([`ShmSegment::create_reserving`]
    /// all of it).
    ///
    /// # Errors
    /// As [`ShmSegment::create_reserving`].
    pub(crate) fn create(len: usize) -> Result<ShmSegment> {
        Self::create_reserving(len, len)
    }

    /// Creates and maps a new zeroed segment of `len` bytes with a fresh
    /// name, allocating the memory of its first `reserved` bytes now
    /// (`posix_fallocate`), the rest as [`ShmSegment::reserve`] asks.
    ///
    /// Memory is allocated before it is used, not page by page on first
    /// touch: a /dev/shm too small for it fails with an error where it is
    /// reserved, instead of a SIGBUS mid-collective (NCCL does the same).
    /// What is never reserved (the rings of peers on other hosts) costs
    /// nothing.
    ///
    /// # Errors
    /// [`Error::Os`] when `shm_open`, `ftruncate`, `posix_fallocate` or
    /// `mmap` fail (e.g. /dev/shm full).
    pub(crate) fn create_reserving(len: usize, reserved: usize) -> Result<ShmSegment> {
        let name = format!(
            "/streamcomm-{}-{:016x}",
            std::process::id(),
            rand::random::<u64>()
        );
        let cname = CString::new(name.clone()).map_err(|_| Error::invalid("shm name"))?;
        // SAFETY: cname is a valid NUL-terminated string; flags create a new
        // object exclusively with mode 0600.
        let fd = unsafe {
            libc::shm_open(
                cname.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
                0o600,
            )
        };
        if fd < 0 {
            return Err(Error::os(
                format!("shm_open({name})"),
                std::io::Error::last_os_error(),
            ));
        }
        let mut seg = ShmSegment {
            name,
            ptr: NonNull::dangling(),
            len,
            owner: true,
            unlinked: false,
            fd: None,
        };
        // SAFETY: fd is an open shm descriptor we own.
        let r = unsafe { libc::ftruncate(fd, len as libc::off_t) };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            // SAFETY: closing our own descriptor once.
            unsafe { libc::close(fd) };
            seg.unlink();
            return Err(Error::os(format!("ftruncate({}, {len})", seg.name), e));
        }
        // SAFETY: `fd` is the descriptor shm_open returned, owned from here on.
        let owned = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        seg.fd = Some(owned);
        if let Err(e) = seg.reserve(0, reserved) {
            seg.unlink();
            return Err(e);
        }
        let mapped = map(fd, len, &seg.name);
        match mapped {
            Ok(ptr) => {
                seg.ptr = ptr;
                Ok(seg)
            }
            Err(e) => {
                seg.unlink();
                Err(e)
            }
        }
    }

    /// Maps an existing segment created by a peer.
    ///
    /// # Errors
    /// [`Error::Os`] when it cannot be opened or mapped;
    /// [`Error::InvalidUsage`] when it is smaller than `len`.
    pub(crate) fn open(name: &str, len: usize) -> Result<ShmSegment> {
        let cname = CString::new(name).map_err(|_| Error::invalid(format!("shm name {name:?}")))?;
        // SAFETY: valid C string; opening read-write without creating.
        let fd = unsafe { libc::shm_open(cname.as_ptr(), libc::O_RDWR, 0) };
        if fd < 0 {
            return Err(Error::os(
                format!("shm_open({name})"),
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: fstat on our descriptor into a zeroed stat buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fd is open; st is a valid out-pointer.
        let r = unsafe { libc::fstat(fd, &mut st) };
        if r != 0 || (st.st_size as usize) < len {
            // SAFETY: closing our own descriptor once.
            unsafe { libc::close(fd) };
            return Err(Error::InvalidUsage(format!(
                "shared memory segment {name} is {} bytes, expected {len}",
                st.st_size
            )));
        }
        let mapped = map(fd, len, name);
        // SAFETY: the mapping keeps its own reference.
        unsafe { libc::close(fd) };
        Ok(ShmSegment {
            name: name.to_string(),
            ptr: mapped?,
            len,
            owner: false,
            unlinked: true,
            fd: None,
        })
    }

    /// Allocates the memory of `len` bytes at `offset` of the owner's
    /// segment now (see [`ShmSegment::create_reserving`]); nothing where
    /// the file system cannot (pages then come on first touch).
    ///
    /// # Errors
    /// [`Error::Os`] naming /dev/shm when the memory is not there;
    /// [`Error::InvalidUsage`] on a segment this process did not create, or
    /// after its name was removed.
    pub(crate) fn reserve(&self, offset: usize, len: usize) -> Result<()> {
        use std::os::fd::AsRawFd;
        let fd = self.fd.as_ref().ok_or_else(|| {
            Error::InvalidUsage(format!(
                "{}: only its owner reserves memory, before unlinking",
                self.name
            ))
        })?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: an open descriptor of ours; returns an error number
        // instead of setting errno.
        let r = unsafe {
            libc::posix_fallocate(fd.as_raw_fd(), offset as libc::off_t, len as libc::off_t)
        };
        // EINVAL/EOPNOTSUPP: a file system without fallocate.
        if r != 0 && r != libc::EINVAL && r != libc::EOPNOTSUPP {
            return Err(Error::os(
                format!(
                    "posix_fallocate({}, {offset}, {len}) (is /dev/shm large enough?)",
                    self.name
                ),
                std::io::Error::from_raw_os_error(r),
            ));
        }
        Ok(())
    }

    /// The segment's name (to send to peers).
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Removes the name (the memory stays mapped); idempotent, owner only.
    pub(crate) fn unlink(&mut self) {
        self.fd = None;
        if self.owner && !self.unlinked {
            if let Ok(cname) = CString::new(self.name.clone()) {
                // SAFETY: valid C string; failure (already gone) is harmless.
                unsafe { libc::shm_unlink(cname.as_ptr()) };
            }
            self.unlinked = true;
        }
    }

    /// Bytes mapped.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Start of the mapping.
    pub(crate) fn ring_base(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// The ring at byte `offset` of this segment.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the ring would not fit or is misaligned.
    pub(crate) fn ring(&self, offset: usize, shape: RingShape) -> Result<RingEnd> {
        if !offset.is_multiple_of(64) || offset + shape.ring_bytes() > self.len {
            return Err(Error::invalid(format!(
                "ring at {offset} (+{}) does not fit segment {} of {} bytes",
                shape.ring_bytes(),
                self.name,
                self.len
            )));
        }
        // SAFETY: in bounds and 64-aligned (mmap is page-aligned); the
        // segment was zeroed by ftruncate; the caller keeps `self` alive as long
        // as the RingEnd (Connection holds both).
        Ok(unsafe { RingEnd::new(self.ptr.as_ptr().add(offset), shape) })
    }
}

/// Maps `len` bytes of `fd` shared. The page tables are filled as pages are
/// used, not now: a rank maps every local peer's segment, and filling them
/// all made each rank's resident shared memory grow with the square of
/// the local ranks (4 GB per rank at 32) whatever the program used. The
/// rings a rank uses most, its ring neighbours', are filled at creation
/// instead ([`populate`]): the first pass of data through a ring otherwise
/// takes a page fault per 4 KiB in both processes (measured: a 2-rank
/// 256 KiB ring all-reduce timed over its first 5 calls took 113–136 µs,
/// over calls 21–70 22–62 µs).
fn map(fd: libc::c_int, len: usize, name: &str) -> Result<NonNull<u8>> {
    // SAFETY: mapping a shared object we hold open; the kernel picks the address.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len.max(1),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Error::os(
            format!("mmap({name}, {len})"),
            std::io::Error::last_os_error(),
        ));
    }
    NonNull::new(p as *mut u8).ok_or_else(|| Error::Unavailable("mmap returned null".into()))
}

/// The system's page size (4096 where it cannot be read).
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p)
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096)
}

/// The whole pages around the `len` bytes at `addr`: their start and
/// length, as `madvise` takes them.
fn whole_pages(addr: *const u8, len: usize) -> (*mut libc::c_void, usize) {
    let page = page_size();
    let start = addr as usize / page * page;
    let end = (addr as usize + len).div_ceil(page) * page;
    (start as *mut libc::c_void, end - start)
}

/// `MADV_POPULATE_WRITE` (not in every libc crate version).
const MADV_POPULATE_WRITE: libc::c_int = 23;

/// Allocates the memory of the `len` bytes at `addr` (whole pages around
/// them) and fills their page tables, keeping their contents:
/// `MADV_POPULATE_WRITE` (Linux 5.14 on). Where the memory is not there
/// (a full /dev/shm), an error instead of the SIGBUS a first touch would
/// raise.
///
/// # Errors
/// The kernel's: `ENOMEM` or `EFAULT` where the memory is not there,
/// `EINVAL` where the kernel lacks `MADV_POPULATE_WRITE`.
pub(crate) fn reserve_pages(addr: *const u8, len: usize) -> std::io::Result<()> {
    let (start, bytes) = whole_pages(addr, len);
    // SAFETY: the range covers whole pages of a live mapping (the caller's
    // ring or header); populating changes no byte of it.
    let r = unsafe { libc::madvise(start, bytes, MADV_POPULATE_WRITE) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// [`reserve_pages`], then drops this process's mappings of the pages
/// (`MADV_DONTNEED`: a shared mapping's pages stay allocated in /dev/shm,
/// contents and all): the memory is there, and this process's resident
/// figure grows only as it touches the pages again.
///
/// # Errors
/// As [`reserve_pages`].
pub(crate) fn reserve_unmapped(addr: *const u8, len: usize) -> std::io::Result<()> {
    reserve_pages(addr, len)?;
    let (start, bytes) = whole_pages(addr, len);
    // SAFETY: whole pages of a live shared mapping of a /dev/shm file:
    // dropping their page-table entries keeps the file's pages and their
    // contents (the next touch maps them again).
    unsafe { libc::madvise(start, bytes, libc::MADV_DONTNEED) };
    Ok(())
}

/// [`reserve_pages`], best effort: where it fails, pages come on first
/// touch.
pub(crate) fn populate(addr: *const u8, len: usize) {
    if let Err(e) = reserve_pages(addr, len) {
        tracing::debug!(error = %e, "MADV_POPULATE_WRITE refused; pages come on first touch");
    }
}

impl Drop for ShmSegment {
    fn drop(&mut self) {
        self.unlink();
        // SAFETY: ptr/len describe a mapping we created and nobody uses after
        // drop (RingEnds are dropped first by their owner).
        unsafe { libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.len.max(1)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_open_unlink() {
        let shape = RingShape {
            nsteps: 2,
            slot_bytes: 64,
        };
        let mut a = ShmSegment::create(shape.ring_bytes()).unwrap();
        let b = ShmSegment::open(a.name(), shape.ring_bytes()).unwrap();
        let path = format!("/dev/shm{}", a.name());
        assert!(std::path::Path::new(&path).exists());
        a.unlink();
        assert!(!std::path::Path::new(&path).exists());
        let policy = crate::wait::WaitPolicy::new(10, std::time::Duration::from_secs(1));
        let tx = b.ring(0, shape).unwrap();
        let rx = a.ring(0, shape).unwrap();
        tx.acquire_send(&policy).unwrap()[..3].copy_from_slice(b"abc");
        tx.commit_send(3, 1, None);
        assert_eq!(rx.acquire_recv(&policy).unwrap(), b"abc");
        assert!(ShmSegment::open(a.name(), 64).is_err());
        assert!(a.ring(8, shape).is_err());
    }
}
