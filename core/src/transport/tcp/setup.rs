//! Where a rank listens for its tcp peers: one address, published in its
//! endpoint, kept for the communicator's life (peers connect on first use,
//! [`super::connector`]).

use std::net::{IpAddr, SocketAddr, TcpListener};

use crate::{Error, Result};

/// Starts listening on `ip` (any free port).
///
/// # Errors
/// [`Error::Os`] when the address cannot be bound.
pub(crate) fn listen(ip: IpAddr) -> Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(SocketAddr::new(ip, 0))
        .map_err(|e| Error::os(format!("bind tcp listener on {ip}"), e))?;
    crate::os_limits::widen_backlog(&listener);
    let addr = listener
        .local_addr()
        .map_err(|e| Error::os("getsockname(tcp listener)", e))?;
    Ok((listener, addr))
}

/// The first IPv4 (else IPv6) address of interface `name`.
///
/// # Errors
/// [`Error::InvalidArgument`] when the interface does not exist or has no address.
pub(crate) fn interface_addr(name: &str) -> Result<IpAddr> {
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut ifap) } != 0 {
        return Err(Error::os("getifaddrs", std::io::Error::last_os_error()));
    }
    let mut found: Option<IpAddr> = None;
    let mut cur = ifap;
    while !cur.is_null() {
        // SAFETY: cur is a node of the list getifaddrs returned.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let ifname = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }.to_string_lossy();
        if ifname != name {
            continue;
        }
        // SAFETY: ifa_addr is non-null; its family tells which sockaddr it is.
        let family = unsafe { (*ifa.ifa_addr).sa_family } as i32;
        if family == libc::AF_INET {
            // SAFETY: AF_INET means a sockaddr_in.
            let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            found = Some(IpAddr::from(
                u32::from_be(sin.sin_addr.s_addr).to_be_bytes(),
            ));
            break;
        } else if family == libc::AF_INET6 && found.is_none() {
            // SAFETY: AF_INET6 means a sockaddr_in6.
            let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
            found = Some(IpAddr::from(sin6.sin6_addr.s6_addr));
        }
    }
    // SAFETY: freeing the list getifaddrs allocated, once.
    unsafe { libc::freeifaddrs(ifap) };
    found.ok_or_else(|| {
        Error::invalid(format!(
            "STREAMCOMM_SOCKET_IFNAME={name:?}: no such interface with an address"
        ))
    })
}
