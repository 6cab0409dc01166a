//! How rank 0 reaches rank 1: the transport the library chose.
//!
//! Ranks of one host talk through shared memory, ranks of different hosts
//! (or network namespaces, or any ranks with `STREAMCOMM_TRANSPORT=tcp`)
//! over tcp, striped over `nchannels` sockets per peer. The figures of a
//! run mean different things for each, so the header says which it was.

use std::fmt;

use streamcomm::{Communicator, Transport};

/// The transport from rank 0 to rank 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Link {
    /// `"shm"` or `"tcp"`; `None` with a single rank.
    pub transport_to_rank1: Option<&'static str>,
    /// Sockets per tcp peer (tcp only).
    pub tcp_sockets: Option<usize>,
}

impl Link {
    /// The link as `comm` (rank 0's communicator) sees it.
    pub(crate) fn of(comm: &Communicator) -> Link {
        let transport = comm.transport_to(1);
        Link {
            transport_to_rank1: transport.map(Transport::as_str),
            tcp_sockets: (transport == Some(Transport::Tcp)).then_some(comm.config().nchannels),
        }
    }
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.transport_to_rank1, self.tcp_sockets) {
            (None, _) => write!(f, "none (a single rank)"),
            (Some(t), Some(1)) => write!(f, "{t} (1 socket)"),
            (Some(t), Some(n)) => write!(f, "{t} ({n} sockets)"),
            (Some(t), None) => write!(f, "{t}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_like_the_header() {
        let tcp = Link {
            transport_to_rank1: Some("tcp"),
            tcp_sockets: Some(2),
        };
        assert_eq!(tcp.to_string(), "tcp (2 sockets)");
        let shm = Link {
            transport_to_rank1: Some("shm"),
            tcp_sockets: None,
        };
        assert_eq!(shm.to_string(), "shm");
    }
}
