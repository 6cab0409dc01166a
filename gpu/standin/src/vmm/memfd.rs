//! The physical memory behind a VMM handle: an anonymous, sealed memfd of
//! the allocation's size plus one page holding a header that names it a
//! stand-in allocation (see the parent module's docs), made at
//! `cuMemCreate` and checked at an import.

use super::*;

pub(super) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).unwrap_or(4096).max(1)
}

pub(super) fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// The header stored after the allocation's bytes.
pub(super) struct Header {
    pub(super) size: usize,
    /// The process that created the allocation.
    pub(super) pid: u32,
    pub(super) ordinal: u32,
    pub(super) handle_types: u32,
    /// Created GPUDirect RDMA capable.
    pub(super) gdr: bool,
}

impl Header {
    fn bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[..8].copy_from_slice(MAGIC);
        b[8..16].copy_from_slice(&(self.size as u64).to_le_bytes());
        b[16..20].copy_from_slice(&self.pid.to_le_bytes());
        b[20..24].copy_from_slice(&self.ordinal.to_le_bytes());
        b[24..28].copy_from_slice(&self.handle_types.to_le_bytes());
        b[28] = u8::from(self.gdr);
        b
    }

    fn parse(b: &[u8; HEADER_LEN]) -> Option<Header> {
        if &b[..8] != MAGIC {
            return None;
        }
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        Some(Header {
            size: usize::try_from(u64::from_le_bytes(b[8..16].try_into().expect("8 bytes")))
                .ok()?,
            pid: u32_at(16),
            ordinal: u32_at(20),
            handle_types: u32_at(24),
            gdr: b[28] == 1,
        })
    }
}

/// Makes the sealed memfd of a new allocation, header written, contents
/// poisoned unless configured otherwise.
pub(super) fn make_memfd(name: &str, header: &Header) -> Res<OwnedFd> {
    let fail = |what: &str| {
        say_once(
            format!("vmm:{name}:os:{what}"),
            &format!(
                "{name}: {what} failed ({}): CUDA_ERROR_OUT_OF_MEMORY",
                errno()
            ),
        );
        OUT_OF_MEMORY
    };
    let total = header
        .size
        .checked_add(HEADER_SPACE)
        .and_then(|t| libc::off_t::try_from(t).ok())
        .ok_or(OUT_OF_MEMORY)?;
    // SAFETY: a valid NUL-terminated name; the flags make a new memfd.
    let raw = unsafe {
        libc::memfd_create(
            MEMFD_NAME.as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if raw < 0 {
        return Err(fail("memfd_create"));
    }
    // SAFETY: a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: plain calls on our own descriptor and header buffer.
    unsafe {
        if libc::ftruncate(fd.as_raw_fd(), total) != 0 {
            return Err(fail("sizing the memfd"));
        }
        let bytes = header.bytes();
        let at = header.size as libc::off_t;
        let n = libc::pwrite(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len(), at);
        if n != bytes.len() as isize {
            return Err(fail("writing the memfd header"));
        }
        if libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, SEALS) != 0 {
            return Err(fail("sealing the memfd"));
        }
    }
    if config().poison {
        let seg = Segment::map_fd(fd.as_raw_fd(), 0, header.size)?;
        // SAFETY: the mapping holds `size` writable bytes.
        unsafe { std::ptr::write_bytes(seg.host(), 0xA5, header.size) };
    }
    Ok(fd)
}

/// Checks that `fd` is a stand-in VMM export and reads its header.
pub(super) fn check_export(name: &str, fd: c_int) -> Res<Header> {
    let not_ours = |why: String| {
        refuse(
            INVALID_VALUE,
            name,
            format!("descriptor {fd} is not a stand-in VMM export ({why})"),
        )
    };
    // SAFETY: fcntl on any integer is safe; a bad one fails with EBADF.
    let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
    if seals < 0 {
        return Err(not_ours(format!("no sealed memfd: {}", errno())));
    }
    if seals & SEALS != SEALS {
        return Err(not_ours(format!("its seals are {seals:#x}")));
    }
    // SAFETY: as above.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if fl < 0 || fl & libc::O_ACCMODE != libc::O_RDWR {
        return Err(not_ours("not open for reading and writing".into()));
    }
    // SAFETY: fstat fills the zeroed buffer or fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(not_ours(format!("fstat failed: {}", errno())));
    }
    let total = usize::try_from(st.st_size).unwrap_or(0);
    let size = total.saturating_sub(HEADER_SPACE);
    if size == 0 || !size.is_multiple_of(GRANULARITY) || total != size + HEADER_SPACE {
        return Err(not_ours(format!("its size is {total} bytes")));
    }
    let mut b = [0u8; HEADER_LEN];
    // SAFETY: reads into our buffer of HEADER_LEN bytes.
    let n = unsafe { libc::pread(fd, b.as_mut_ptr().cast(), HEADER_LEN, size as libc::off_t) };
    if n != HEADER_LEN as isize {
        return Err(not_ours("its header cannot be read".into()));
    }
    match Header::parse(&b) {
        Some(h) if h.size == size => Ok(h),
        _ => Err(not_ours("no stand-in header".into())),
    }
}
