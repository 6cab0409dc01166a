//! Surviving a failure: the ranks still alive shrink the communicator to
//! themselves and go on, as ULFM's `MPIX_Comm_shrink` and NCCL's
//! `ncclCommShrink` let them.
//!
//! # How the survivors agree
//! Every rank listens on a *recovery listener* from creation on (its
//! address travels in the endpoints). A failed communicator's connections
//! cannot be trusted, so the survivors meet there instead, with no fixed
//! coordinator:
//! 1. Each survivor tries the ranks in order, from rank 0: the first one it
//!    reaches that answers (or itself) coordinates. A refused connection
//!    means that rank's process is gone; a rank that accepts nothing within
//!    the timeout (`STREAMCOMM_TIMEOUT`) is stuck (stopped, or not calling
//!    shrink), and counts as dead too.
//! 2. The coordinator takes in the survivors that join it, and probes the
//!    others: a refused or reset probe is a death. It waits until every
//!    rank has joined or died, or the timeout has passed.
//! 3. It decides the new membership (itself and the joiners, in parent
//!    order), serves the new communicator's bootstrap root, and sends every
//!    joiner the membership and the id. All create the new communicator
//!    from that id, with connections of its own.
//!
//! Every member of a new communicator got its membership from the same
//! coordinator, so no two survivors go on with different memberships. If
//! a member dies during the creation, the others' creation fails and they
//! start over without it; the coordinator dying is the same as any other
//! rank dying. A rank declared dead that later wakes (a stopped process
//! resumed) finds nobody to join: it gets an error or a communicator of
//! its own, never a place among the survivors.
//!
//! # What survives of the parent
//! Nothing: the failed parent stays failed, and dropping it releases its
//! resources without waiting for the dead rank.

mod negotiate;
mod wire;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::Communicator;
use super::child;
use super::core::Core;
use super::recovery_point::RecoveryPoint;
use crate::{Error, Result};

/// What a shrink runs on: the communicator's core and its recovery point.
pub(crate) struct Meeting<'a> {
    pub(crate) core: &'a Core,
    pub(crate) recovery: &'a RecoveryPoint,
}

/// How many times the survivors start over when a member dies while they
/// create the new communicator.
const ATTEMPTS: usize = 3;

impl Communicator {
    /// The ranks still alive, as a new communicator: called by every
    /// survivor after a failure ([`Error::RemoteFailed`],
    /// [`Error::Transport`], [`Error::Timeout`], an abort), as ULFM's
    /// `MPIX_Comm_shrink`. The survivors find the dead themselves: a rank
    /// whose process is gone, or that does not take part within the
    /// timeout (`STREAMCOMM_TIMEOUT`: a stopped or stuck rank), is left
    /// out. Every survivor gets the same membership, ranked in this
    /// communicator's order, or every survivor gets an error. On a healthy
    /// communicator where every rank calls it, it leaves nobody out.
    ///
    /// This communicator stays as it was (a failed one stays failed);
    /// dropping it does not wait for the dead.
    ///
    /// # Examples
    /// ```
    /// use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    ///
    /// let id = UniqueId::new()?;
    /// let ranks: Vec<_> = (0..3)
    ///     .map(|rank| std::thread::spawn(move || -> streamcomm::Result<_> {
    ///         let world = Communicator::init(&id, rank, 3)?;
    ///         world.abort(); // as if a peer had died: every later call fails
    ///         let alive = world.shrink()?; // here all three are alive
    ///         let mut x = [1.0f32];
    ///         alive.all_reduce_in_place_host(&mut x, ReduceOp::Sum)?;
    ///         Ok((alive.rank(), alive.size(), x[0]))
    ///     }))
    ///     .collect();
    /// for (rank, r) in ranks.into_iter().enumerate() {
    ///     assert_eq!(r.join().unwrap()?, (rank, 3, 3.0));
    /// }
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Timeout`] or [`Error::Bootstrap`] when the survivors could
    /// not agree (more ranks died while they tried, 3 times), then
    /// as [`Communicator::init`] for the new communicator.
    pub fn shrink(&self) -> Result<Communicator> {
        self.shrink_excluding(&[])
    }

    /// [`Communicator::shrink`], leaving out the ranks in `exclude` as
    /// well as the dead, as `ncclCommShrink`'s exclusion list: the
    /// excluded ranks do not call it (one that does gets
    /// [`Error::InvalidUsage`]), and every caller passes the same list.
    ///
    /// # Examples
    /// ```
    /// use streamcomm::{bootstrap::UniqueId, Communicator};
    ///
    /// let id = UniqueId::new()?;
    /// let ranks: Vec<_> = (0..3)
    ///     .map(|rank| std::thread::spawn(move || -> streamcomm::Result<_> {
    ///         let world = Communicator::init(&id, rank, 3)?;
    ///         if rank == 1 {
    ///             return Ok(None); // rank 1 leaves
    ///         }
    ///         let rest = world.shrink_excluding(&[1])?;
    ///         Ok(Some((rest.rank(), rest.size())))
    ///     }))
    ///     .collect();
    /// let got: Vec<_> = ranks.into_iter().map(|r| r.join().unwrap()).collect::<Result<_, _>>()?;
    /// assert_eq!(got, [Some((0, 2)), None, Some((1, 2))]);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a rank out of range in `exclude`;
    /// [`Error::InvalidUsage`] when this rank is excluded; otherwise as
    /// [`Communicator::shrink`].
    pub fn shrink_excluding(&self, exclude: &[usize]) -> Result<Communicator> {
        let inner = &self.inner;
        let _span = tracing::info_span!("shrink", rank = inner.core.rank(), ?exclude).entered();
        if let Some(r) = exclude.iter().find(|&&r| r >= inner.core.size()) {
            return Err(Error::invalid(format!(
                "shrink: rank {r} in the exclusion list is out of range for size {}",
                inner.core.size()
            )));
        }
        let excluded: BTreeSet<usize> = exclude.iter().copied().collect();
        if excluded.contains(&inner.core.rank()) {
            return Err(Error::InvalidUsage(format!(
                "shrink: rank {} is on the exclusion list; excluded ranks do not call shrink",
                inner.core.rank()
            )));
        }
        let started = Instant::now();
        let mut last = None;
        for attempt in 0..ATTEMPTS {
            let meeting = Meeting {
                core: &inner.core,
                recovery: &inner.recovery,
            };
            let (members, id) = negotiate::negotiate(&meeting, &excluded)?;
            tracing::debug!(attempt, ?members, "shrink: membership decided");
            match child::join(&inner.core, &id, &members) {
                Ok(c) => {
                    let since_failure = inner.core.failure().failure().map(|f| f.at.elapsed());
                    tracing::info!(
                        rank = inner.core.rank(),
                        size = members.len(),
                        took_ms = started.elapsed().as_millis() as u64,
                        ?since_failure,
                        "shrink: new communicator"
                    );
                    return Ok(c);
                }
                Err(e) => {
                    tracing::warn!(attempt, error = %e, "shrink: creating the new communicator failed; starting over");
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| Error::Bootstrap("shrink: no attempt made".into())))
    }
}

/// How long a rank waits for a peer's part in the shrink.
fn patience(core: &Core) -> Duration {
    core.config().timeout
}
