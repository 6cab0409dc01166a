//! The second phase of the bootstrap root: relaying all-gather rounds.
//!
//! Once every rank has joined, each round the root waits (with `poll(2)`)
//! for one frame from every rank, then sends every rank all frames in rank
//! order: the ranks of other processes first, its own process's last (see
//! [`super::local`]). A rank that closes its connection between rounds has simply left;
//! one that is missing while a round is in flight, sends an oversized frame
//! or cannot be written to ends the communicator's bootstrap, and the others
//! are told which rank to blame.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::root::{
    FRAME_TIMEOUT, Joined, RootOptions, fail_all, millis, missing_ranks, poll, pollfd,
    remote_failed,
};
use super::wire::{self, FrameRead, MAX_BLOB};
use crate::{Error, Result};

/// Serves all-gather rounds until every rank has disconnected.
pub(super) fn serve_rounds(mut ranks: Vec<Joined>, opts: &RootOptions) -> Result<()> {
    let n = ranks.len();
    // Every rank has joined, so this process's own have recorded themselves.
    let order = answer_order(&ranks);
    let mut alive = vec![true; n];
    let mut have: Vec<Option<Vec<u8>>> = vec![None; n];
    let mut got = 0usize;
    let mut started: Option<Instant> = None;
    let mut round = 0u64;
    loop {
        let gone = alive.iter().position(|a| !a);
        if let (Some(rank), true) = (gone, got > 0) {
            let reason = format!("rank {rank} left the bootstrap during all_gather round {round}");
            return Err(abandon(&mut ranks, &alive, Some(rank), reason));
        }
        if !alive.iter().any(|&a| a) {
            tracing::debug!(rounds = round, "all ranks left; bootstrap root exits");
            return Ok(());
        }
        if got == n {
            if let Err((rank, reason)) = broadcast(&mut ranks, &order, &have) {
                alive[rank] = false;
                return Err(abandon(&mut ranks, &alive, Some(rank), reason));
            }
            have.iter_mut().for_each(|h| *h = None);
            (got, started, round) = (0, None, round + 1);
            continue;
        }
        let now = Instant::now();
        let left = started.map(|s| (s + opts.timeout).saturating_duration_since(now));
        if left == Some(Duration::ZERO) {
            let missing = missing_ranks(have.iter().map(Option::is_some));
            let reason =
                format!("bootstrap all_gather round {round} timed out waiting for {missing}");
            let waited_ms = millis(opts.timeout);
            abandon(&mut ranks, &alive, None, reason);
            return Err(Error::Timeout {
                op: format!("bootstrap all_gather round {round}"),
                what: format!("frames from {missing}"),
                waited_ms,
            });
        }
        let waiting: Vec<usize> = (0..n).filter(|&r| alive[r] && have[r].is_none()).collect();
        let mut fds: Vec<libc::pollfd> = waiting
            .iter()
            .map(|&r| pollfd(ranks[r].stream.as_raw_fd()))
            .collect();
        poll(&mut fds, left)?;
        for (k, &rank) in waiting.iter().enumerate() {
            if fds[k].revents == 0 {
                continue;
            }
            let stream = &mut ranks[rank].stream;
            match wire::read_frame(stream, MAX_BLOB, Some(Instant::now() + FRAME_TIMEOUT)) {
                Ok(FrameRead::Frame(blob)) => {
                    have[rank] = Some(blob);
                    got += 1;
                    started.get_or_insert_with(Instant::now);
                }
                Ok(FrameRead::Eof) => {
                    tracing::debug!(rank, "rank left the bootstrap");
                    alive[rank] = false;
                }
                Ok(FrameRead::TooLarge(len)) => {
                    let reason = format!("rank {rank} sent a {len}-byte frame (limit {MAX_BLOB})");
                    alive[rank] = false;
                    return Err(abandon(&mut ranks, &alive, Some(rank), reason));
                }
                Err(e) => {
                    let reason = format!("reading rank {rank}'s all_gather frame failed: {e}");
                    alive[rank] = false;
                    return Err(abandon(&mut ranks, &alive, Some(rank), reason));
                }
            }
        }
    }
}

/// The ranks in the order they are answered: those of other processes
/// first, then this process's own, each part in rank order.
fn answer_order(ranks: &[Joined]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..ranks.len()).collect();
    order.sort_by_key(|&r| super::local::is_ours(ranks[r].peer));
    order
}

/// Sends every rank (in `order`) all blobs of the round in rank order; on
/// failure names the rank whose connection broke. The frames are encoded
/// once: the root holds the round's blobs twice (O(n)), and writes them
/// to every rank (O(n²) bytes, the root's limit: 260 MB per round of
/// 256-byte blobs at 1,000 ranks).
fn broadcast(
    ranks: &mut [Joined],
    order: &[usize],
    have: &[Option<Vec<u8>>],
) -> std::result::Result<(), (usize, String)> {
    let mut frames = Vec::with_capacity(have.iter().flatten().map(|b| b.len() + 5).sum());
    for blob in have {
        // Writing to a vector cannot fail.
        let _ = wire::write_data(&mut frames, blob.as_deref().unwrap_or_default());
    }
    for &rank in order {
        if let Err(e) = (&ranks[rank].stream).write_all(&frames) {
            return Err((
                rank,
                format!("sending the all_gather result to rank {rank} failed: {e}"),
            ));
        }
    }
    Ok(())
}

/// Tells the ranks still connected why the root gives up; returns the error.
fn abandon(ranks: &mut [Joined], alive: &[bool], peer: Option<usize>, reason: String) -> Error {
    tracing::warn!("bootstrap root gives up: {reason}");
    let streams = ranks
        .iter_mut()
        .zip(alive)
        .filter(|&(_, &a)| a)
        .map(|(j, _)| &mut j.stream);
    fail_all(streams, peer, &reason);
    match peer {
        Some(rank) => remote_failed(rank, reason),
        None => Error::Bootstrap(reason),
    }
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
        (Joined { stream, peer }, client)
    }

    #[test]
    fn this_processs_ranks_are_answered_last() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        // Ranks 0 and 2 are this process's, 1 and 3 another's.
        let made: Vec<(Joined, TcpStream)> = [true, false, true, false]
            .into_iter()
            .map(|ours| joined(&listener, ours))
            .collect();
        let (ranks, clients): (Vec<Joined>, Vec<TcpStream>) = made.into_iter().unzip();
        assert_eq!(answer_order(&ranks), [1, 3, 0, 2]);
        for j in &ranks {
            super::super::local::remove(j.peer);
        }
        assert_eq!(answer_order(&ranks), [0, 1, 2, 3]);
        drop(clients);
    }
}
