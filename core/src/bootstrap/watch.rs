//! The second phase of the bootstrap root: watching the ranks.
//!
//! Once every rank has joined (and been told where its all-gather peers
//! listen), the ranks exchange their records among themselves
//! ([`super::gather`]); the root relays nothing. It keeps each rank's
//! connection for one job: a rank that finds a peer gone tells the root,
//! and the root tells every rank the first such report, so that all of
//! them blame the same rank (a rank that stops because its own peer failed
//! looks gone to the next). A rank that closes its connection has simply
//! left; the root ends when they all have, or after the first report.

use std::os::fd::AsRawFd;
use std::time::Instant;

use super::root::{FRAME_TIMEOUT, Joined, fail_all, poll, pollfd, remote_failed};
use super::wire::{self, FrameRead, MAX_REPLY, Reply};
use crate::{Error, Result};

/// Watches the ranks until every one has disconnected, or relays the
/// first failure one of them reports to all of them (then returns it).
pub(super) fn watch_ranks(mut ranks: Vec<Joined>) -> Result<()> {
    let n = ranks.len();
    let mut alive = vec![true; n];
    loop {
        let waiting: Vec<usize> = (0..n).filter(|&r| alive[r]).collect();
        if waiting.is_empty() {
            tracing::debug!("all ranks left; bootstrap root exits");
            return Ok(());
        }
        let mut fds: Vec<libc::pollfd> = waiting
            .iter()
            .map(|&r| pollfd(ranks[r].stream.as_raw_fd()))
            .collect();
        poll(&mut fds, None)?;
        for (k, &rank) in waiting.iter().enumerate() {
            if fds[k].revents == 0 {
                continue;
            }
            let stream = &mut ranks[rank].stream;
            let deadline = Some(Instant::now() + FRAME_TIMEOUT);
            let (peer, reason) = match wire::read_frame(stream, MAX_REPLY, deadline) {
                Ok(FrameRead::Eof) => {
                    tracing::debug!(rank, "rank left the bootstrap");
                    alive[rank] = false;
                    continue;
                }
                Ok(FrameRead::Frame(body)) => match Reply::decode(body) {
                    Ok(Reply::Failure {
                        peer: Some(peer),
                        reason,
                    }) if peer < n => (peer, reason),
                    Ok(other) => (rank, format!("rank {rank} sent the root {other:?}")),
                    Err(what) => (
                        rank,
                        format!("rank {rank} sent the root a bad frame: {what}"),
                    ),
                },
                Ok(FrameRead::TooLarge(len)) => (
                    rank,
                    format!("rank {rank} sent a {len}-byte frame (limit {MAX_REPLY})"),
                ),
                // A rank that exits while the root reads it: gone, whatever
                // it had begun to say.
                Err(e) => {
                    tracing::debug!(rank, "rank left the bootstrap: {e}");
                    alive[rank] = false;
                    continue;
                }
            };
            return Err(relay(&mut ranks, &alive, peer, reason));
        }
    }
}

/// Tells every rank still connected that `peer` failed (`reason`), and
/// returns the error.
fn relay(ranks: &mut [Joined], alive: &[bool], peer: usize, reason: String) -> Error {
    tracing::warn!("bootstrap: {reason}");
    let streams = ranks
        .iter_mut()
        .zip(alive)
        .filter(|&(_, &a)| a)
        .map(|(j, _)| &mut j.stream);
    fail_all(streams, Some(peer), &reason);
    remote_failed(peer, reason)
}
