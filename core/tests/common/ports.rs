//! Ports for a test's bootstrap root, chosen where the kernel never picks.
//!
//! A port the kernel handed out for `bind(0)` and that was released again
//! sits in the ephemeral range (`ip_local_port_range`, 32768–60999 by
//! default), the range from which the kernel also picks the local port of
//! every `connect` and every other `bind(0)`. Between the release and the
//! root's bind, any other test's socket may take it: CI saw
//! "Address already in use" that way. The ports here come from below that
//! range, where only an explicit bind lands; each call in a process takes
//! the next one, starting at an offset drawn from the process id, and skips
//! any that is bound right now.

use std::net::{Ipv4Addr, TcpListener};
use std::sync::atomic::{AtomicU16, Ordering};

/// The first port handed out (above the registered ports most services use).
const FIRST: u16 = 20_000;
/// How many ports there are to hand out (ending below the ephemeral range).
const SPAN: u16 = 9_000;

/// A TCP port below the ephemeral range that nothing is bound to right now,
/// a different one on each call in this process.
pub(crate) fn unused_port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(u16::MAX);
    let seed = (std::process::id() % u32::from(SPAN)) as u16;
    let _ = NEXT.compare_exchange(u16::MAX, seed, Ordering::SeqCst, Ordering::SeqCst);
    for _ in 0..SPAN {
        let port = FIRST + NEXT.fetch_add(1, Ordering::SeqCst) % SPAN;
        let bindable = |ip: Ipv4Addr| TcpListener::bind((ip, port)).is_ok();
        if bindable(Ipv4Addr::LOCALHOST) && bindable(Ipv4Addr::UNSPECIFIED) {
            return port;
        }
    }
    panic!("no port from {FIRST} to {} is free", FIRST + SPAN - 1);
}
