//! The second phase of the bootstrap root: making each round all or
//! nothing.
//!
//! Once every rank has joined (and been told where its all-gather peers
//! listen), the ranks exchange their records among themselves
//! ([`super::gather`]); the root relays none of them. It keeps each
//! rank's connection for two jobs:
//! - **Releasing a round:** a rank that has every record of a round says
//!   so, and when every rank has, the root releases them all (the ranks of
//!   other processes first, its own process's last: see [`super::local`]).
//!   So a round ends for every rank or for none: a rank that leaves or
//!   fails before all have arrived fails the round for everyone (a shrink
//!   relies on it: its survivors start over together).
//! - **Naming a failure:** a rank that finds a peer gone tells the root,
//!   and the root tells every rank the first such report, so that all of
//!   them blame the same rank (a rank that stops because its own peer
//!   failed looks gone to the next).
//!
//! A rank that closes its connection between rounds has left (as every
//! rank does once its communicator exists); one that is missing when a
//! round is under way ends the bootstrap, naming it. The root ends when
//! every rank has left, or after a failure.

use std::os::fd::AsRawFd;
use std::time::Instant;

use super::root::{FRAME_TIMEOUT, Joined, fail_all, poll, pollfd, remote_failed};
use super::wire::{self, FrameRead, MAX_REPLY, Reply};
use crate::{Error, Result};

/// Watches the ranks until every one has disconnected, releasing each
/// round once every rank has arrived; relays the first failure one of
/// them reports (or a rank missing from a round) to all, then returns it.
pub(super) fn watch_ranks(mut ranks: Vec<Joined>) -> Result<()> {
    let n = ranks.len();
    let order = release_order(&ranks);
    let mut alive = vec![true; n];
    let mut arrived = vec![false; n];
    let mut count = 0usize;
    let mut round = 0u64;
    loop {
        let left = alive.iter().position(|a| !a);
        if let (Some(rank), true) = (left, count > 0) {
            let reason = format!("rank {rank} left the bootstrap during all_gather round {round}");
            return Err(relay(&mut ranks, &alive, rank, reason));
        }
        if count == n {
            release(&mut ranks, &order);
            arrived.iter_mut().for_each(|a| *a = false);
            (count, round) = (0, round + 1);
            continue;
        }
        let waiting: Vec<usize> = (0..n).filter(|&r| alive[r]).collect();
        if waiting.is_empty() {
            tracing::debug!(rounds = round, "all ranks left; bootstrap root exits");
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
                    Ok(Reply::Arrived) if !arrived[rank] => {
                        arrived[rank] = true;
                        count += 1;
                        continue;
                    }
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

/// The ranks in the order they are released: those of other processes
/// first, then this process's own, each part in rank order.
fn release_order(ranks: &[Joined]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..ranks.len()).collect();
    order.sort_by_key(|&r| super::local::is_ours(ranks[r].peer));
    order
}

/// Releases every rank from the round, in `order` (one that cannot be
/// written to has left, and learns nothing more).
fn release(ranks: &mut [Joined], order: &[usize]) {
    for &rank in order {
        if let Err(e) = Reply::Release.write_to(&mut ranks[rank].stream) {
            tracing::debug!(rank, "releasing a rank failed: {e}");
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    /// A joined rank whose connection comes from a socket of this process,
    /// recorded as ours or not.
    fn joined(listener: &TcpListener, ours: bool) -> (Joined, TcpStream) {
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (stream, peer) = listener.accept().unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        if ours {
            super::super::local::add(peer);
        }
        let gather = peer;
        (
            Joined {
                stream,
                peer,
                gather,
            },
            client,
        )
    }

    #[test]
    fn this_processs_ranks_are_released_last() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        // Ranks 0 and 2 are this process's, 1 and 3 another's.
        let made: Vec<(Joined, TcpStream)> = [true, false, true, false]
            .into_iter()
            .map(|ours| joined(&listener, ours))
            .collect();
        let (ranks, clients): (Vec<Joined>, Vec<TcpStream>) = made.into_iter().unzip();
        assert_eq!(release_order(&ranks), [1, 3, 0, 2]);
        for j in &ranks {
            super::super::local::remove(j.peer);
        }
        assert_eq!(release_order(&ranks), [0, 1, 2, 3]);
        drop(clients);
    }
}
