//! Splitting a communicator into groups, as `MPI_Comm_split` and
//! `ncclCommSplit`: tensor-, data- and pipeline-parallel groups of one job.
//!
//! The parent carries the whole exchange, over its own connections, so a
//! split needs no new unique id and no launcher variables. Two small
//! all-gathers run in the parent's order of operations, signed as a split
//! (a rank that makes another call at that point gets
//! [`Error::Mismatch`](crate::Error::Mismatch) naming it):
//! 1. every rank's `(colour, key)`;
//! 2. the id of each new group, whose bootstrap root its first rank serves.
//!
//! Then each group's ranks create their communicator from that id, with
//! connections of its own (see `comm::child` for why).
//!
//! The exchange is the ring all-gather, in which rank `r` hears from
//! `r - 1, r - 2, …` in turn: a rank that never calls `split` is the first
//! not heard from, and a timeout names it.

use super::Communicator;
use super::child;
use super::exec;
use crate::host::JobMode;
use crate::plan::{self, Buffers, Collective, signature};
use crate::{DataType, Error, ReduceOp, Result};

/// The colour word of a rank that joins no group.
const NO_COLOUR: u64 = u64::MAX;
/// Marks a rank's first exchange word as written (an unwritten one is 0).
const HEARD: u64 = 1 << 63;

impl Communicator {
    /// Splits this communicator into groups: the ranks that pass the same
    /// `color` form one new communicator, ranked by `(key, rank here)`
    /// (`MPI_Comm_split`'s rules); `None` (NCCL's `NCCL_SPLIT_NOCOLOR`)
    /// joins none and returns `Ok(None)`.
    ///
    /// Collective over this communicator: every rank calls it, in the same
    /// place in its order of operations. A new communicator is a full one
    /// (every collective, point-to-point, barrier, stream and host form,
    /// [`CudaComm`](crate::cuda::CudaComm)), with connections of its own:
    /// it may be used at the same time as this one and its siblings, from
    /// other threads, and it outlives this one. It takes this one's
    /// configuration (a hosts override narrowed to its ranks, no fault rules).
    ///
    /// # Examples
    /// ```
    /// use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    ///
    /// let id = UniqueId::new()?;
    /// let ranks: Vec<_> = (0..4)
    ///     .map(|rank| std::thread::spawn(move || -> streamcomm::Result<_> {
    ///         let world = Communicator::init(&id, rank, 4)?;
    ///         // Two groups of two: {0, 2} and {1, 3}.
    ///         let group = world.split(Some(rank as u32 % 2), 0)?.expect("a colour");
    ///         let mut x = [rank as f32];
    ///         group.all_reduce_in_place_host(&mut x, ReduceOp::Sum)?;
    ///         Ok((group.rank(), group.size(), x[0]))
    ///     }))
    ///     .collect();
    /// let got: Vec<_> = ranks.into_iter().map(|r| r.join().unwrap()).collect::<Result<_, _>>()?;
    /// assert_eq!(got, [(0, 2, 2.0), (0, 2, 4.0), (1, 2, 2.0), (1, 2, 4.0)]);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As a collective of this communicator: its stored error if it has
    /// failed, [`Error::Timeout`] naming a rank that does not call `split`,
    /// [`Error::Mismatch`] naming a rank that makes another call instead;
    /// then as [`Communicator::init`] for the new communicator.
    pub fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Communicator>> {
        let _span = tracing::info_span!("split", rank = self.rank(), ?color, key).entered();
        let (rank, size) = (self.rank(), self.size());
        let mine = [
            HEARD | color.map_or(NO_COLOUR & !HEARD, u64::from),
            key as u32 as u64,
        ];
        let words = self.exchange(&mine)?;
        let colours: Vec<(Option<u32>, i32)> = words
            .chunks_exact(2)
            .map(|w| {
                let c = w[0] & !HEARD;
                let c = (c != NO_COLOUR & !HEARD).then_some(c as u32);
                (c, w[1] as u32 as i32)
            })
            .collect();
        let members_of = |c: u32| -> Vec<usize> {
            let mut m: Vec<usize> = (0..size).filter(|&r| colours[r].0 == Some(c)).collect();
            m.sort_by_key(|&r| (colours[r].1, r));
            m
        };
        if colours.iter().all(|c| c.0.is_none()) {
            return Ok(None);
        }
        // The first rank of each group serves its id; all take part.
        let members = color.map(members_of);
        let leader = members.as_ref().and_then(|m| m.first().copied());
        let served = (leader == Some(rank))
            .then(|| child::serve_id(&self.inner.recovery, self.inner.core.rank()));
        let ids = self.exchange(&child::id_words(served.as_ref()))?;
        let (Some(members), Some(leader)) = (members, leader) else {
            return Ok(None);
        };
        let words = &ids[leader * child::ID_WORDS..][..child::ID_WORDS];
        let id = child::id_from_words(words, leader)?;
        child::join(&self.inner.core, &id, &members).map(Some)
    }

    /// All-gathers `mine` (the same number of words on every rank) over
    /// this communicator in its order of operations, signed as a split.
    fn exchange(&self, mine: &[u64]) -> Result<Vec<u64>> {
        let inner = &self.inner;
        inner.core.failure().check()?;
        let plan = plan::build(
            Collective::AllGather,
            DataType::U64,
            ReduceOp::Sum,
            mine.len(),
            &inner.core.plan_params(),
        )?;
        let sig = signature::split(mine.len());
        let mut all = vec![0u64; mine.len() * inner.core.size()];
        let mut bufs = Buffers::Separate {
            send: bytemuck::cast_slice(mine),
            recv: bytemuck::cast_slice_mut(&mut all),
        };
        let started = std::time::Instant::now();
        let ticket = inner.core.turns().take();
        let result = inner.core.run_ticketed(ticket, JobMode::Run, "split", |c| {
            exec::run_plan_signed(c, &plan, sig, &mut bufs, ticket)
        });
        let e = match result {
            Ok(()) => return Ok(all),
            Err(e @ Error::Mismatch(_)) => return Err(e),
            Err(e) => e,
        };
        // The ring: the first rank before this one not heard from is one
        // that has not called (whichever rank timed out first and failed
        // the communicator, every rank names it).
        let silent = (1..inner.core.size())
            .map(|d| (inner.core.rank() + inner.core.size() - d) % inner.core.size())
            .find(|&r| all[r * mine.len()] & HEARD == 0);
        match (silent, e) {
            (Some(r), Error::Timeout { op, what, .. }) => Err(Error::Timeout {
                op,
                what: format!("{what}; rank {r} has not called split"),
                waited_ms: started.elapsed().as_millis() as u64,
            }),
            (Some(r), e @ (Error::RemoteFailed { .. } | Error::Aborted(_))) => {
                Err(Error::Timeout {
                    op: "split".into(),
                    what: format!("rank {r} has not called split ({e})"),
                    waited_ms: started.elapsed().as_millis() as u64,
                })
            }
            (_, e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::bootstrap::UniqueId;
    use crate::{Communicator, Config, ReduceOp, Result};

    /// Splits a communicator of `colours.len()` ranks (threads of this
    /// process), rank `r` passing `colours[r]` and key 0, with a 10 s
    /// timeout (a rank that waits for a member that never comes gives up
    /// then). By rank: its group as `(rank in it, size, sum of the parent
    /// ranks of its members)`, `None` for no group, or its error.
    fn split_on_threads(
        colours: &'static [Option<u32>],
    ) -> Vec<Result<Option<(usize, usize, f64)>>> {
        let id = UniqueId::new().unwrap();
        let n = colours.len();
        let ranks: Vec<_> = (0..n)
            .map(|rank| {
                std::thread::spawn(move || {
                    let world = Communicator::builder()
                        .unique_id(&id)
                        .rank(rank)
                        .size(n)
                        .config(Config {
                            timeout: Duration::from_secs(10),
                            ..Config::default()
                        })
                        .build()?;
                    let Some(group) = world.split(colours[rank], 0)? else {
                        return Ok(None);
                    };
                    let mut x = [rank as f64];
                    group.all_reduce_in_place_host(&mut x, ReduceOp::Sum)?;
                    Ok(Some((group.rank(), group.size(), x[0])))
                })
            })
            .collect();
        ranks
            .into_iter()
            .enumerate()
            .map(|(rank, t)| t.join().unwrap_or_else(|_| panic!("rank {rank} panicked")))
            .collect()
    }

    /// Rank 0 passes no colour, ranks 1 and 2 colour 0, rank 3 colour 1:
    /// colour 0's group is ranks 1 and 2 alone. Were rank 0 counted in
    /// colour 0, it would lead that group (the lowest key and rank) and
    /// serve no id, so ranks 1 and 2 fail at once instead of waiting.
    #[test]
    fn a_rank_with_no_colour_is_in_no_group_and_not_in_colour_0() {
        let got = split_on_threads(&[None, Some(0), Some(0), Some(1)]);
        let want = [
            None,
            Some((0, 2, 3.0)),
            Some((1, 2, 3.0)),
            Some((0, 1, 3.0)),
        ];
        for (rank, (got, want)) in got.into_iter().zip(want).enumerate() {
            match got {
                Ok(g) => assert_eq!(
                    g, want,
                    "rank {rank}: its group as (rank, size, sum of members' parent ranks); \
                     rank 0 passed no colour and belongs to none"
                ),
                Err(e) => panic!(
                    "rank {rank}: split failed: {e} (rank 0 passed no colour: \
                     was it counted among colour 0's members?)"
                ),
            }
        }
    }
}
