//! The host's IP-level membership of a multicast group, which the
//! multicast barrier's UD queue pairs need besides their attach
//! ([`super::multicast`]).

/// This host's IP-level membership of the group: a UDP socket that joined
/// it (`IP_ADD_MEMBERSHIP` on the interface of the port's address), left
/// when dropped. RoCE needs it besides the QP's attach: it sends the IGMP
/// report that snooping switches forward by (as rdma_cm's join does), and
/// the kernel loops a multicast datagram back to this host only for a
/// group the host is a member of, which is how ranks on one host, and
/// every rank of the Soft-RoCE guest, hear each other.
pub(crate) struct IpMembership {
    _socket: std::os::fd::OwnedFd,
}

impl IpMembership {
    /// Joins `group` on the interface whose address is `interface`.
    ///
    /// # Errors
    /// What failed (the call) and why.
    pub(crate) fn join(
        group: [u8; 4],
        interface: [u8; 4],
    ) -> std::result::Result<IpMembership, (String, std::io::Error)> {
        use std::os::fd::FromRawFd;
        // SAFETY: plain socket call; the descriptor is owned below.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err((
                "socket (multicast membership)".into(),
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: fd is a fresh descriptor nobody else owns.
        let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        let mreq = libc::ip_mreq {
            imr_multiaddr: libc::in_addr {
                s_addr: u32::from_ne_bytes(group),
            },
            imr_interface: libc::in_addr {
                s_addr: u32::from_ne_bytes(interface),
            },
        };
        // SAFETY: fd is a UDP socket; mreq is a valid ip_mreq of the size given.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::IPPROTO_IP,
                libc::IP_ADD_MEMBERSHIP,
                (&mreq as *const libc::ip_mreq).cast(),
                std::mem::size_of::<libc::ip_mreq>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            let [a, b, c, d] = group;
            return Err((
                format!("joining {a}.{b}.{c}.{d} (IP_ADD_MEMBERSHIP)"),
                std::io::Error::last_os_error(),
            ));
        }
        Ok(IpMembership { _socket: owned })
    }
}
