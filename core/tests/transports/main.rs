//! One transport at a time: tcp on loopback, verbs on an RDMA device (the
//! Soft-RoCE guest of `scripts/verbs-check.sh`), and shared memory inside
//! hosts with tcp between them (network namespaces). The map of all test
//! binaries is in `threads/main.rs`.

#[path = "../common/mod.rs"]
mod common;
#[path = "../harness/mod.rs"]
mod harness;
#[path = "../netns/mod.rs"]
mod netns;

mod across_hosts;
mod multicast;
mod tcp;
mod verbs;
