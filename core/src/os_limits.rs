//! The operating system's limits that grow with a job's ranks: open file
//! descriptors, and the backlog of connections a listener queues.
//!
//! What a communicator holds grows with its ranks: the bootstrap root one
//! socket per rank, a rank of a tcp mesh two per peer. Many Linux
//! distributions start processes with a soft limit of 1,024 descriptors
//! under a hard limit hundreds of times larger, so a job of a thousand
//! ranks would fail on the soft limit alone. As Go's runtime and most
//! servers do, streamcomm raises the soft limit to the hard one, but only
//! when it runs out (`EMFILE`), never at start: a program that keeps its
//! descriptors below 1,024 (for `select(2)`) is left as it was. Past the
//! hard limit the caller fails with an error naming it.

use std::io;
use std::net::TcpListener;
use std::os::fd::AsRawFd;

/// Connections a listener of many ranks queues before accepting them
/// (the kernel caps it at `net.core.somaxconn`, 4,096 on Linux 5.4 on).
/// The standard library listens with 128: a thousand ranks connecting at
/// once would overflow it, and each connection dropped there waits a
/// second or more for its retransmission.
const BACKLOG: libc::c_int = 4096;

/// Lets `listener` queue [`BACKLOG`] connections (Linux changes the
/// backlog of a listening socket on a second `listen`). Best effort.
pub(crate) fn widen_backlog(listener: &TcpListener) {
    // SAFETY: listen on a valid, listening socket only changes its backlog.
    let _ = unsafe { libc::listen(listener.as_raw_fd(), BACKLOG) };
}

/// True when `e` says this process has no descriptor left.
pub(crate) fn exhausted(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EMFILE)
}

/// The soft and hard limits now.
pub(crate) fn limits() -> (u64, u64) {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `l` is a valid rlimit for getrlimit to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } != 0 {
        return (0, 0);
    }
    (l.rlim_cur, l.rlim_max)
}

/// Raises the soft limit to the hard one; returns the new limit, or `None`
/// when it was already there (or the kernel refused).
pub(crate) fn raise() -> Option<u64> {
    let (soft, hard) = limits();
    if soft >= hard {
        return None;
    }
    let l = libc::rlimit {
        rlim_cur: hard,
        rlim_max: hard,
    };
    // SAFETY: `l` is a valid rlimit; raising the soft limit up to the hard
    // one needs no privilege.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) } != 0 {
        return None;
    }
    tracing::info!(
        from = soft,
        to = hard,
        "raised the open file descriptor limit"
    );
    Some(hard)
}

/// What to tell a user whose process (`who`: "this process", "the
/// bootstrap root's process") ran out of descriptors while `doing`.
pub(crate) fn advice(who: &str, doing: &str) -> String {
    let (soft, hard) = limits();
    format!(
        "{who} ran out of file descriptors {doing} (limit {soft}, hard limit {hard}): \
         raise the hard limit (`ulimit -Hn`, or LimitNOFILE= for a systemd service) above the \
         number of ranks plus a few dozen"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limits_are_read_and_the_soft_one_never_exceeds_the_hard_one() {
        let (soft, hard) = limits();
        assert!(soft > 0 && soft <= hard, "{soft} {hard}");
        let e = io::Error::from_raw_os_error(libc::EMFILE);
        assert!(exhausted(&e));
        assert!(!exhausted(&io::Error::from_raw_os_error(libc::EAGAIN)));
        assert!(advice("this process", "accepting").contains(&format!("limit {soft}")));
    }
}
