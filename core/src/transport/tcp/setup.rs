//! Forming the tcp connections of a communicator.
//!
//! Each rank listens on one address (published in its endpoint). For every
//! pair of ranks that talk over tcp, the lower rank opens `nsockets`
//! connections to the higher one and says hello (secret, ranks, socket
//! index); the higher rank accepts them, drops anything that is not an
//! expected hello (strangers, wrong secret, duplicates) and stops waiting
//! at the deadline. Connecting first and accepting second never deadlocks:
//! a connection completes in the listener's backlog before it is accepted.

use std::collections::HashMap;
use std::io::Read;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use super::frame::{HELLO_BYTES, Hello};
use crate::{Error, Result};

/// How long an accepted connection may take to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(2);

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

/// What one rank needs to connect its tcp peers.
pub(crate) struct ConnectPlan<'a> {
    /// This rank.
    pub rank: usize,
    /// Peers reached over tcp, with their listening addresses.
    pub peers: &'a [(usize, SocketAddr)],
    /// Sockets per peer.
    pub nsockets: usize,
    /// The communicator's secret.
    pub secret: [u8; 16],
    /// Give up after this long.
    pub timeout: Duration,
}

/// Opens and accepts every socket; returns them per peer, indexed by socket.
///
/// # Errors
/// [`Error::Transport`] naming the peer that could not be reached, or
/// [`Error::Timeout`] when expected connections did not arrive.
pub(crate) fn connect_all(
    plan: &ConnectPlan<'_>,
    listener: &TcpListener,
) -> Result<HashMap<usize, Vec<TcpStream>>> {
    let deadline = Instant::now() + plan.timeout;
    let mut out: HashMap<usize, Vec<Option<TcpStream>>> = plan
        .peers
        .iter()
        .map(|&(p, _)| (p, (0..plan.nsockets).map(|_| None).collect()))
        .collect();
    for &(peer, addr) in plan.peers.iter().filter(|(p, _)| *p > plan.rank) {
        for socket in 0..plan.nsockets {
            let stream = connect_retrying(addr, deadline).map_err(|cause| Error::Transport {
                transport: "tcp",
                peer,
                cause: format!("cannot connect to {addr}: {cause}"),
            })?;
            let hello = Hello {
                secret: plan.secret,
                from: plan.rank as u32,
                to: peer as u32,
                socket: socket as u32,
            };
            std::io::Write::write_all(&mut &stream, &hello.encode()).map_err(|e| {
                Error::Transport {
                    transport: "tcp",
                    peer,
                    cause: format!("hello to {addr}: {e}"),
                }
            })?;
            if let Some(slot) = out.get_mut(&peer) {
                slot[socket] = Some(stream);
            }
        }
    }
    let mut missing = plan.peers.iter().filter(|(p, _)| *p < plan.rank).count() * plan.nsockets;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::os("set_nonblocking(tcp listener)", e))?;
    while missing > 0 {
        match listener.accept() {
            Ok((stream, from)) => match read_hello(&stream, &plan.secret) {
                Ok(h) => {
                    let ok = h.to as usize == plan.rank
                        && (h.from as usize) < plan.rank
                        && (h.socket as usize) < plan.nsockets;
                    match out.get_mut(&(h.from as usize)).filter(|_| ok) {
                        Some(slots) if slots[h.socket as usize].is_none() => {
                            slots[h.socket as usize] = Some(stream);
                            missing -= 1;
                        }
                        _ => {
                            tracing::warn!(%from, ?h.from, ?h.socket, "tcp: unexpected or duplicate connection dropped")
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(%from, error = %e, "tcp: connection without a valid hello dropped")
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    let waiting: Vec<usize> = out
                        .iter()
                        .filter(|(p, s)| **p < plan.rank && s.iter().any(|x| x.is_none()))
                        .map(|(p, _)| *p)
                        .collect();
                    return Err(Error::Timeout {
                        op: "tcp connect".into(),
                        what: format!("connections from ranks {waiting:?}"),
                        waited_ms: plan.timeout.as_millis() as u64,
                    });
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) if crate::os_limits::exhausted(&e) => {
                if crate::os_limits::raise().is_none() {
                    return Err(Error::Unavailable(crate::os_limits::advice(
                        "this process",
                        "accepting its tcp peers' connections",
                    )));
                }
            }
            Err(e) => return Err(Error::os("accept(tcp listener)", e)),
        }
    }
    let mut done = HashMap::new();
    for (peer, slots) in out {
        let mut socks = Vec::with_capacity(slots.len());
        for s in slots {
            let s = s.ok_or_else(|| Error::Transport {
                transport: "tcp",
                peer,
                cause: "a socket is missing".into(),
            })?;
            s.set_nonblocking(true)
                .map_err(|e| Error::os("set_nonblocking(tcp)", e))?;
            let _ = s.set_nodelay(true);
            set_buffers(&s, SOCKET_BUFFER);
            socks.push(s);
        }
        done.insert(peer, socks);
    }
    Ok(done)
}

/// Socket send and receive buffer size asked of the kernel (it may cap it).
const SOCKET_BUFFER: libc::c_int = 4 << 20;

fn set_buffers(s: &TcpStream, bytes: libc::c_int) {
    use std::os::fd::AsRawFd;
    for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
        // SAFETY: setsockopt with a valid fd and a pointer to a c_int of the right size.
        unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                &bytes as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
}

fn read_hello(stream: &TcpStream, secret: &[u8; 16]) -> Result<Hello> {
    stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_read_timeout(Some(HELLO_TIMEOUT)))
        .map_err(|e| Error::os("configure accepted tcp socket", e))?;
    let mut b = [0u8; HELLO_BYTES];
    (&*stream)
        .read_exact(&mut b)
        .map_err(|e| Error::Bootstrap(format!("tcp hello: {e}")))?;
    Hello::decode(&b, secret)
}

fn connect_retrying(addr: SocketAddr, deadline: Instant) -> std::result::Result<TcpStream, String> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("timed out".into());
        }
        match TcpStream::connect_timeout(&addr, left.min(Duration::from_secs(5))) {
            Ok(s) => return Ok(s),
            Err(e) if crate::os_limits::exhausted(&e) => {
                if crate::os_limits::raise().is_none() {
                    return Err(crate::os_limits::advice("this process", "connecting to it"));
                }
            }
            Err(e) if Instant::now() >= deadline => return Err(e.to_string()),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::Ipv4Addr;

    /// A stranger that reaches rank 1's listener first, with rank 0's hello
    /// but another secret, is dropped: rank 0's own connection takes the
    /// slot (the bytes rank 0 writes arrive on it).
    #[test]
    fn a_stranger_with_another_secret_is_dropped() {
        let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let (l0, a0) = listen(ip).unwrap();
        let (l1, a1) = listen(ip).unwrap();
        let secret = [7u8; 16];
        let mut stranger = TcpStream::connect(a1).unwrap();
        let forged = Hello {
            secret: [8; 16],
            from: 0,
            to: 1,
            socket: 0,
        };
        stranger.write_all(&forged.encode()).unwrap();
        let rank0 = std::thread::spawn(move || {
            let peers = [(1usize, a1)];
            let plan = ConnectPlan {
                rank: 0,
                peers: &peers,
                nsockets: 1,
                secret,
                timeout: Duration::from_secs(10),
            };
            let mut socks = connect_all(&plan, &l0).unwrap();
            let mut s = socks.remove(&1).unwrap().remove(0);
            s.set_nonblocking(false).unwrap();
            s.write_all(b"rank 0").unwrap();
        });
        let peers = [(0usize, a0)];
        let plan = ConnectPlan {
            rank: 1,
            peers: &peers,
            nsockets: 1,
            secret,
            timeout: Duration::from_secs(10),
        };
        let mut socks = connect_all(&plan, &l1).unwrap();
        rank0.join().unwrap();
        let mut s = socks.remove(&0).unwrap().remove(0);
        s.set_nonblocking(false).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut got = [0u8; 6];
        s.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"rank 0", "the slot holds the stranger's connection");
        drop(stranger);
    }
}
