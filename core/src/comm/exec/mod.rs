//! The one executor: every call that moves bytes through the connections'
//! slots (a collective's plan, a barrier run as messages, a point-to-point
//! group) is lowered into *items* and advanced here, by one loop with one
//! wait, one bound on the time without progress and one mapping of a wait
//! that ended to the error a user sees.
//!
//! An item moves as far as it can without waiting ([`Item::poll`]) and says
//! what it waits for when it cannot. A collective's plan is one item whose
//! steps go in order (`plan.rs`: the plan's steps are ordered across ranks
//! by construction); a group is one item per send or receive, those to one
//! peer in one direction forming a lane that runs in posting order, the
//! fronts of all lanes polled in turn (`comm::p2p::group`). Polling every
//! lane's front, never blocking on one, is what makes a group deadlock-free
//! whatever the order of its calls: a send waiting for credit never stops
//! a receive from draining the ring that would give the credit back. When
//! nothing can move, the thread waits (spin, yield, futex) on the first
//! waiting item's notifier until any item can, bounded by the
//! communicator's timeout without progress.
//!
//! The device backend's direct path is not an executor of this kind: the
//! GPU runs its steps, ordered by the stream, with no host thread in the
//! loop (`docs/design/architecture.md`, "Executors").

mod plan;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::comm::core::Core;
use crate::transport::Connection;
use crate::wait::{Notifier, WaitPolicy};
use crate::{Error, Result};

pub(crate) use plan::{run_plan, run_plan_on, run_plan_signed};

/// Something the executor advances: a collective's plan, or one send or
/// receive of a group. Its borrows (`'a`) are the connections it moves
/// bytes over.
pub(crate) trait Item<'a> {
    /// Moves as far as possible without waiting; whether anything moved.
    ///
    /// # Errors
    /// What the item's own rules find (a slot out of order, a call that is
    /// not the peer's, a rendezvous refused), named after its call.
    fn poll(&mut self) -> Result<bool>;
    /// Whether the item has nothing left to do.
    fn done(&self) -> bool;
    /// Whether a poll now could move it (read without side effects, so a
    /// waiter may ask as often as it spins).
    fn ready(&self) -> bool;
    /// The connection the item waits on and the notifier a thread waiting
    /// for it sleeps on; `None` where it waits for nothing (it can move).
    fn waits_on(&self) -> Option<(&'a Connection, &'a Notifier)>;
    /// What the item waits for, for a timeout's message ("data from rank 1
    /// over shm").
    fn waiting_for(&self) -> String;
    /// The signature of the collective call the item belongs to, so that a
    /// wait ended by a mismatch names both calls; `None` for a group.
    fn signature(&self) -> Option<u64> {
        None
    }
}

/// Runs one item to its end (a plan, or a group of one operation).
///
/// # Errors
/// The item's own, or the wait's (a timeout without progress, an abort),
/// named `name`.
pub(crate) fn drive<'a>(
    core: &Core,
    item: &mut impl Item<'a>,
    name: impl Fn() -> String,
) -> Result<()> {
    let mut stalled = Stalled::default();
    loop {
        let moved = item.poll().map_err(|e| rename(e, &name()))?;
        if item.done() {
            return Ok(());
        }
        if moved {
            stalled = Stalled::default();
            continue;
        }
        wait(
            core,
            &*item,
            &mut stalled,
            || item.ready(),
            || item.waits_on().into_iter().for_each(|(c, _)| c.poke()),
            &name,
            || item.waiting_for(),
        )?;
    }
}

/// Runs `lanes` to their ends: each lane's items in order, the lanes'
/// fronts polled in turn (see the module docs).
///
/// # Errors
/// As [`drive`]; a timeout names what every waiting lane waits for.
pub(crate) fn drive_lanes<'a, I: Item<'a>>(
    core: &Core,
    mut lanes: Vec<VecDeque<I>>,
    name: impl Fn() -> String,
) -> Result<()> {
    lanes.retain(|l| !l.is_empty());
    let mut stalled = Stalled::default();
    loop {
        let mut moved = false;
        for lane in &mut lanes {
            while let Some(item) = lane.front_mut() {
                moved |= item.poll().map_err(|e| rename(e, &name()))?;
                if !item.done() {
                    break;
                }
                lane.pop_front();
            }
        }
        lanes.retain(|l| !l.is_empty());
        let Some(first) = lanes.first().and_then(|l| l.front()) else {
            return Ok(());
        };
        if moved {
            stalled = Stalled::default();
            continue;
        }
        let fronts = || lanes.iter().filter_map(|l| l.front());
        wait(
            core,
            first,
            &mut stalled,
            || fronts().any(|i| i.ready()),
            || {
                fronts()
                    .filter_map(|i| i.waits_on())
                    .for_each(|(c, _)| c.poke())
            },
            &name,
            || {
                fronts()
                    .map(|i| i.waiting_for())
                    .collect::<Vec<_>>()
                    .join("; ")
            },
        )?;
    }
}

/// Waits until `ready` (sleeping on what `first` waits on, calling `poke`
/// at the pace of its connection while it spins, see
/// [`Connection::poke`]; at once where `first` waits for nothing),
/// bounded by the timeout counted from the last progress (see [`Stalled`]).
///
/// # Errors
/// On a timeout or an abort, the error of the call `name` that waited for
/// `waiting_for`, naming `first`'s peer ([`Core::wait_error_in_call`]).
fn wait<'a>(
    core: &Core,
    first: &impl Item<'a>,
    stalled: &mut Stalled,
    mut ready: impl FnMut() -> bool,
    mut poke: impl FnMut(),
    name: impl Fn() -> String,
    waiting_for: impl FnOnce() -> String,
) -> Result<()> {
    let Some((conn, notifier)) = first.waits_on() else {
        return Ok(());
    };
    let policy = WaitPolicy {
        timeout: stalled.remaining(core.config().timeout),
        ..core.policy()
    };
    let mut pace = conn.pace(&policy);
    notifier
        .wait_until(&policy, || {
            (ready() || {
                if pace.as_mut().is_some_and(|p| p.due()) {
                    poke();
                }
                ready()
            })
            .then_some(())
        })
        .map_err(|w| {
            core.wait_error_in_call(
                w,
                &name(),
                waiting_for(),
                Some(conn.peer()),
                first.signature(),
            )
        })
}

/// How long an item has gone without progress, read from the clock only
/// when a wait ended without the item moving (a clock read is a system
/// call on some machines, e.g. a VM on the HPET, ~2 µs: more than a small
/// message's software path). The first wait after progress gets the whole
/// timeout; later ones what is left of it, counted from the end of that
/// first wait, so an item that stops moving fails within twice the timeout
/// at most (within one timeout unless a wake-up was spurious).
#[derive(Debug, Default)]
struct Stalled {
    waits: u32,
    since: Option<Instant>,
}

impl Stalled {
    /// The timeout left for the next wait, out of `timeout`.
    fn remaining(&mut self, timeout: Duration) -> Duration {
        self.waits += 1;
        if self.waits == 1 {
            return timeout;
        }
        let since = *self.since.get_or_insert_with(Instant::now);
        timeout.saturating_sub(since.elapsed())
    }
}

/// Puts the call's name into an error an item raised for a peer's failure.
fn rename(e: Error, name: &str) -> Error {
    match e {
        Error::RemoteFailed { peer, cause, .. } => Error::RemoteFailed {
            peer,
            op: name.to_string(),
            cause,
        },
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::Stalled;
    use std::time::Duration;

    #[test]
    fn the_first_wait_gets_the_whole_timeout_and_later_ones_what_is_left() {
        let t = Duration::from_millis(200);
        let mut s = Stalled::default();
        assert_eq!(s.remaining(t), t);
        let second = s.remaining(t);
        assert!(second <= t);
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(s.remaining(t), Duration::ZERO);
    }
}
