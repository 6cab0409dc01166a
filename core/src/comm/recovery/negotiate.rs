//! One round of the survivors' agreement (see [`super`]): find the
//! coordinator, or be it, and come out with the membership and the id.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{ErrorKind, Read};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::Meeting;
use super::patience;
use super::wire::{Frame, Kind};
use crate::bootstrap::UniqueId;
use crate::comm::child;
use crate::comm::failure::Learned;
use crate::{Error, Result};

/// How long a connection attempt to a rank's listener may take.
const CONNECT: Duration = Duration::from_secs(2);
/// How long an accepted connection has to say who it is.
const HELLO: Duration = Duration::from_secs(2);
/// The coordinator's pause between looks at its listener and probes.
const TICK: Duration = Duration::from_millis(2);

/// The membership (parent ranks, in new rank order) and the id of the new
/// communicator, as this rank's coordinator decided them.
///
/// # Errors
/// [`Error::InvalidUsage`] when the coordinator refuses this rank (it is
/// excluded there); [`Error::Os`] when this rank cannot listen.
pub(super) fn negotiate(
    inner: &Meeting<'_>,
    excluded: &BTreeSet<usize>,
) -> Result<(Vec<usize>, UniqueId)> {
    let mut dead: BTreeSet<usize> = excluded.clone();
    // A peer whose process the watch saw exit is not tried.
    if let Some(f) = inner.core.failure().failure()
        && f.learned == Learned::PeerWatch
        && f.culprit != inner.core.rank()
    {
        dead.insert(f.culprit);
    }
    for c in 0..inner.core.size() {
        if dead.contains(&c) {
            continue;
        }
        if c == inner.core.rank() {
            return coordinate(inner, excluded, dead);
        }
        match join(inner, c, &dead)? {
            Some(decided) => return Ok(decided),
            None => {
                tracing::debug!(
                    rank = inner.core.rank(),
                    coordinator = c,
                    "shrink: rank did not answer; counted dead"
                );
                dead.insert(c);
            }
        }
    }
    // Unreachable: this rank is never in `dead`, so the loop ends at it.
    coordinate(inner, excluded, dead)
}

/// Asks rank `c` to take this rank in; `None` when `c` is dead (refused,
/// reset, or silent for the timeout).
fn join(
    inner: &Meeting<'_>,
    c: usize,
    dead: &BTreeSet<usize>,
) -> Result<Option<(Vec<usize>, UniqueId)>> {
    let rp = &inner.recovery;
    let Some(addr) = rp.addr(c) else {
        return Ok(None);
    };
    let Ok(mut s) = TcpStream::connect_timeout(&addr, CONNECT) else {
        return Ok(None);
    };
    let _ = s.set_nodelay(true);
    let hello = Frame {
        kind: Kind::Join,
        rank: inner.core.rank(),
        ranks: dead.iter().copied().collect(),
        id: None,
    };
    if hello.send(&mut s, rp.secret()).is_err() {
        return Ok(None);
    }
    // It may not have called shrink yet: up to the timeout for the answer,
    // then as long again for the decision (it waits for the others).
    let wait = patience(inner.core);
    let read = |s: &mut TcpStream, within: Duration| {
        s.set_read_timeout(Some(within.max(Duration::from_millis(1))))
            .ok()?;
        Frame::read(s, rp.secret(), inner.core.size()).ok()
    };
    match read(&mut s, wait) {
        Some(f) if f.kind == Kind::Ack => {}
        Some(f) if f.kind == Kind::Refuse => {
            return Err(Error::InvalidUsage(format!(
                "shrink: rank {c} coordinates and has rank {} on its exclusion list",
                inner.core.rank()
            )));
        }
        _ => return Ok(None),
    }
    match read(&mut s, wait + CONNECT + HELLO) {
        Some(Frame {
            kind: Kind::Decision,
            ranks,
            id: Some(id),
            ..
        }) if ranks.contains(&inner.core.rank()) => Ok(Some((ranks, id))),
        _ => Ok(None),
    }
}

/// Coordinates: takes in the joiners, probes the rest, decides.
fn coordinate(
    inner: &Meeting<'_>,
    excluded: &BTreeSet<usize>,
    mut dead: BTreeSet<usize>,
) -> Result<(Vec<usize>, UniqueId)> {
    let rp = &inner.recovery;
    let size = inner.core.size();
    let mut joined: BTreeMap<usize, TcpStream> = BTreeMap::new();
    let mut probes: BTreeMap<usize, TcpStream> = BTreeMap::new();
    let deadline = Instant::now() + patience(inner.core);
    if let Some(l) = rp.listener() {
        l.set_nonblocking(true)
            .map_err(|e| Error::os("set the recovery listener non-blocking", e))?;
    }
    loop {
        // Joiners (and stale probes or joins, which are dropped).
        while let Some(l) = rp.listener() {
            let mut s = match l.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::os("accept on the recovery listener", e)),
            };
            let _ = s.set_nonblocking(false);
            let _ = s.set_nodelay(true);
            let _ = s.set_read_timeout(Some(HELLO));
            let Ok(f) = Frame::read(&mut s, rp.secret(), size) else {
                continue;
            };
            if f.kind != Kind::Join || f.rank == inner.core.rank() {
                continue;
            }
            if excluded.contains(&f.rank) {
                let _ = Frame::bare(Kind::Refuse, inner.core.rank()).send(&mut s, rp.secret());
                continue;
            }
            // A join left in the backlog by an earlier attempt, whose
            // sender has closed it (a rank holds one join open at a time):
            // the live one is kept, whichever came first.
            if closed(&mut s) || joined.get_mut(&f.rank).is_some_and(|old| !closed(old)) {
                continue;
            }
            if Frame::bare(Kind::Ack, inner.core.rank())
                .send(&mut s, rp.secret())
                .is_ok()
            {
                // What it found dead on its way (the ranks before this one).
                dead.extend(f.ranks.iter().filter(|&&r| r != inner.core.rank()));
                dead.remove(&f.rank);
                probes.remove(&f.rank);
                joined.insert(f.rank, s);
            }
        }
        // The others: a refused or reset probe is a death.
        for r in 0..size {
            if r == inner.core.rank() || dead.contains(&r) || joined.contains_key(&r) {
                continue;
            }
            if let Some(p) = probes.get_mut(&r) {
                if closed(p) {
                    dead.insert(r);
                    probes.remove(&r);
                }
                continue;
            }
            match probe(inner, r) {
                Some(s) => {
                    probes.insert(r, s);
                }
                None => {
                    dead.insert(r);
                }
            }
        }
        let settled = (0..size)
            .all(|r| r == inner.core.rank() || dead.contains(&r) || joined.contains_key(&r));
        if settled || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(TICK);
    }
    // A joiner that died since it joined is left out now.
    joined.retain(|_, s| !closed(s));
    let mut members: Vec<usize> = joined.keys().copied().collect();
    members.push(inner.core.rank());
    members.sort_unstable();
    let id = child::serve_id(inner.recovery, inner.core.rank())?;
    let decision = Frame {
        kind: Kind::Decision,
        rank: inner.core.rank(),
        ranks: members.clone(),
        id: Some(id),
    };
    for s in joined.values_mut() {
        // One that cannot be told fails the creation; all start over.
        let _ = decision.send(s, rp.secret());
    }
    Ok((members, id))
}

/// A connection to `r`'s listener, kept open to see it reset if `r` dies;
/// `None` when `r` refuses (its process is gone) or cannot be reached.
fn probe(inner: &Meeting<'_>, r: usize) -> Option<TcpStream> {
    let addr = inner.recovery.addr(r)?;
    let mut s = TcpStream::connect_timeout(&addr, CONNECT).ok()?;
    Frame::bare(Kind::Probe, inner.core.rank())
        .send(&mut s, inner.recovery.secret())
        .ok()?;
    s.set_nonblocking(true).ok()?;
    Some(s)
}

/// True when the peer of `s` has closed it or reset it (a dead process),
/// or sent what no one should (a joiner says nothing after its join).
fn closed(s: &mut TcpStream) -> bool {
    let _ = s.set_nonblocking(true);
    let mut b = [0u8; 1];
    let gone = match s.read(&mut b) {
        Ok(_) => true,
        Err(e) => e.kind() != ErrorKind::WouldBlock,
    };
    let _ = s.set_nonblocking(false);
    gone
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Communicator, Config};

    /// The tests' bound on every wait: the coordinator's patience (the
    /// communicators' timeout) and each read of a stand-in joiner.
    const BOUND: Duration = Duration::from_secs(10);

    /// `n` ranks (threads of this process) of one communicator, by rank,
    /// with [`BOUND`] as their timeout.
    fn ranks(n: usize) -> Vec<Communicator> {
        let config = Config {
            timeout: BOUND,
            ..Config::default()
        };
        crate::comm::blocking::tests::on_ranks_with(n, config, Ok)
    }

    /// Plays `comm`'s rank joining rank 0's shrink, as `join` does it: a
    /// join on rank 0's recovery listener, then rank 0's ack. Returns the
    /// connection, on which the decision comes (dropping it is the joiner
    /// dying).
    fn join_rank_0(comm: &Communicator) -> TcpStream {
        let (rank, rp) = (comm.inner.core.rank(), &comm.inner.recovery);
        let addr = rp.addr(0).expect("rank 0 has a recovery listener");
        let mut s = TcpStream::connect_timeout(&addr, CONNECT)
            .unwrap_or_else(|e| panic!("rank {rank}: connect to rank 0's listener: {e}"));
        s.set_read_timeout(Some(BOUND)).unwrap();
        Frame::bare(Kind::Join, rank)
            .send(&mut s, rp.secret())
            .unwrap_or_else(|e| panic!("rank {rank}: send the join: {e}"));
        let ack = Frame::read(&mut s, rp.secret(), comm.inner.core.size())
            .unwrap_or_else(|e| panic!("rank {rank}: no answer to its join: {e}"));
        assert_eq!(
            ack.kind,
            Kind::Ack,
            "rank {rank}: rank 0's answer to its join"
        );
        s
    }

    /// Rank 1 joins rank 0's shrink and dies (closes its connection) while
    /// rank 2 has not joined yet, so rank 0 cannot decide before rank 1 is
    /// gone; then rank 2 joins. The membership is ranks 0 and 2, on rank 0
    /// and in the decision rank 2 reads: a joiner that died is left out
    /// here, not by the retry after the new communicator's creation fails.
    #[test]
    fn a_joiner_that_died_before_the_decision_is_left_out() {
        let comms = ranks(3);
        std::thread::scope(|sc| {
            let coordinator = sc.spawn(|| {
                let meeting = Meeting {
                    core: &comms[0].inner.core,
                    recovery: &comms[0].inner.recovery,
                };
                negotiate(&meeting, &BTreeSet::new())
            });
            drop(join_rank_0(&comms[1]));
            let mut two = join_rank_0(&comms[2]);
            let decision = Frame::read(&mut two, comms[2].inner.recovery.secret(), 3)
                .unwrap_or_else(|e| panic!("rank 2: no decision after its ack: {e}"));
            let (members, id) = coordinator
                .join()
                .expect("rank 0 panicked")
                .unwrap_or_else(|e| panic!("rank 0 could not coordinate: {e}"));
            assert_eq!(
                members,
                [0, 2],
                "rank 0's membership keeps rank 1, which died after it joined"
            );
            assert_eq!(
                decision.kind,
                Kind::Decision,
                "what rank 2 read after its ack"
            );
            assert_eq!(
                decision.ranks,
                [0, 2],
                "the decision sent to rank 2 keeps rank 1, which died after it joined"
            );
            assert_eq!(decision.id, Some(id), "the decision's id is rank 0's");
        });
    }
}
