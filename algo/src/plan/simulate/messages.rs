//! The message simulator: runs the data-step plans of all ranks of one
//! call together over modelled slot rings.
//!
//! Algorithms are where collective libraries hide their subtlest bugs: a
//! block sent to the wrong peer, an element reduced twice, a schedule that
//! deadlocks only when a connection has one free slot. The simulator runs
//! every rank's plan in one thread, round-robin, over modelled connections
//! (a FIFO of `nsteps` slots of `slot_bytes` per directed pair, `docs/design/architecture.md`),
//! interpreting each step with the same `Interpreter` the real backends use.
//! It reports deadlocks and undelivered slots with the ranks and steps
//! involved, so a failing algorithm is diagnosed, not just detected.

use std::collections::VecDeque;
use std::fmt;

pub(super) use crate::barrier::simulate::Schedule;

use super::list;
use crate::Error;
use crate::barrier::simulate::schedule::{Acting, SplitMix, round_robin};
use crate::plan::apply::{Buffers, Interpreter};
use crate::plan::layout::InPlaceLayout;
use crate::plan::step::{DataStep, Plan};

/// Why a simulation failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum MessageSimError {
    /// The plans or inputs do not describe one call of `plans.len()` ranks
    /// (wrong count of inputs, wrong input length, inconsistent ranks).
    #[error("invalid simulation setup: {0}")]
    Setup(String),

    /// A step failed when interpreted (for instance a mismatched peer).
    #[error("rank {rank} step {index} ({step:?}) failed: {source}")]
    Step {
        /// The rank whose step failed.
        rank: usize,
        /// Index of the step in the rank's plan.
        index: usize,
        /// The step (boxed to keep the error small).
        step: Box<DataStep>,
        /// What `Interpreter::apply` reported.
        #[source]
        source: Error,
    },

    /// A step would put more bytes into a slot than a slot holds.
    #[error("rank {rank} step {index} writes {bytes} bytes into a slot of {slot_bytes}")]
    SlotOverflow {
        /// The rank.
        rank: usize,
        /// Index of the step in the rank's plan.
        index: usize,
        /// Bytes the step writes.
        bytes: usize,
        /// Size of a slot.
        slot_bytes: usize,
    },

    /// No rank could make progress while some had steps left.
    #[error("deadlock: {}", list(stuck))]
    Deadlock {
        /// Every rank that still had steps, with what it waited for.
        stuck: Vec<StuckMessageRank>,
    },

    /// Every rank finished but slots were left unread.
    #[error("undelivered slots at the end: {}", list(slots))]
    Undelivered {
        /// The connections that still held slots.
        slots: Vec<Leftover>,
    },
}

/// A rank stuck in a deadlock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StuckMessageRank {
    /// The rank.
    pub rank: usize,
    /// Index of the step it cannot run.
    pub index: usize,
    /// The step.
    pub step: DataStep,
    /// Why it cannot run (`no slot from rank 2`, `ring to rank 3 is full`).
    pub waiting_for: String,
}

impl fmt::Display for StuckMessageRank {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rank {} at step {} ({:?}) waits: {}",
            self.rank, self.index, self.step, self.waiting_for
        )
    }
}

/// Slots left on one directed connection after every rank finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    /// The sending rank.
    pub from: usize,
    /// The receiving rank.
    pub to: usize,
    /// Slots still queued.
    pub slots: usize,
}

impl fmt::Display for Leftover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} slot(s) from rank {} to rank {}",
            self.slots, self.from, self.to
        )
    }
}

/// Everything [`simulate_with`] needs besides the plans and inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageSimConfig {
    /// Run each rank on one buffer laid out by `InPlaceLayout::of`.
    pub in_place: bool,
    /// Slots per directed connection (at least 1).
    pub nsteps: usize,
    /// Bytes per slot.
    pub slot_bytes: usize,
    /// Which rank runs next.
    pub schedule: Schedule,
}

/// Runs the plans of all ranks of one call and returns each rank's output.
///
/// `plans[r]` must be rank `r`'s plan (all for `plans.len()` ranks) and
/// `inputs[r]` its send buffer, exactly `send_count * dtype.size()` bytes.
/// Receive buffers start filled with `0xA5` bytes, so an element a plan
/// forgets to write shows up. With `in_place`, each rank gets one buffer laid
/// out by `InPlaceLayout::of`, its input copied at the send offset and the
/// rest poisoned. Either way the result for rank `r` is its receive buffer:
/// `recv_count` elements (taken at the receive offset when in place).
///
/// Connections are FIFOs of `nsteps` slots of `slot_bytes` bytes. Ranks take
/// turns running one step each ([`Schedule::RoundRobin`]); a step runs only
/// when its incoming slot has arrived and its outgoing FIFO has room.
///
/// # Errors
///
/// [`MessageSimError::Setup`] for inconsistent arguments, [`MessageSimError::Step`] when a
/// step fails (e.g. mismatched counts between peers),
/// [`MessageSimError::SlotOverflow`], [`MessageSimError::Deadlock`] when no rank can move,
/// [`MessageSimError::Undelivered`] when slots remain after all ranks finished.
///
/// # Examples
///
/// ```
/// use streamcomm_algo::plan::{build, simulate, PlanParams};
/// use streamcomm_types::Collective;
/// use streamcomm_types::{DataType, ReduceOp};
///
/// let plans: Vec<_> = (0..3)
///     .map(|rank| {
///         let p = PlanParams { rank, nranks: 3, slot_bytes: 2, nsteps: 1 };
///         build(Collective::AllGather, DataType::U8, ReduceOp::Sum, 3, &p)
///     })
///     .collect::<Result<_, _>>()?;
/// let inputs = vec![vec![1, 2, 3], vec![4, 5, 6], vec![7, 8, 9]];
/// let out = simulate(&plans, inputs, false, 1, 2).unwrap();
/// assert!(out.iter().all(|o| o == &[1, 2, 3, 4, 5, 6, 7, 8, 9]));
/// # Ok::<(), streamcomm_types::Error>(())
/// ```
pub fn simulate(
    plans: &[Plan],
    inputs: Vec<Vec<u8>>,
    in_place: bool,
    nsteps: usize,
    slot_bytes: usize,
) -> Result<Vec<Vec<u8>>, MessageSimError> {
    let config = MessageSimConfig {
        in_place,
        nsteps,
        slot_bytes,
        schedule: Schedule::RoundRobin,
    };
    simulate_with(plans, inputs, &config)
}

/// [`simulate`] with a choice of [`Schedule`].
///
/// # Errors
///
/// As [`simulate`].
pub fn simulate_with(
    plans: &[Plan],
    inputs: Vec<Vec<u8>>,
    config: &MessageSimConfig,
) -> Result<Vec<Vec<u8>>, MessageSimError> {
    let n = plans.len();
    let nsteps = config.nsteps;
    check_setup(plans, &inputs, nsteps)?;
    if let Err(msg) = config.schedule.check(n) {
        return Err(MessageSimError::Setup(msg));
    }
    let ranks = inputs
        .into_iter()
        .zip(plans)
        .map(|(input, plan)| RankState::new(plan, input, config.in_place))
        .collect::<Result<Vec<_>, _>>()?;
    let mut sim = Sim {
        plans,
        ranks,
        fifos: vec![VecDeque::new(); n * n],
        scratch: vec![0u8; config.slot_bytes],
        nsteps,
    };
    match config.schedule.random() {
        None => round_robin(&mut sim, n)?,
        Some((seed, laggard)) => {
            let mut rng = SplitMix(seed);
            let mut ready = Vec::with_capacity(n);
            loop {
                ready.clear();
                ready.extend((0..n).filter(|&r| sim.can_act(r)));
                if ready.is_empty() {
                    break;
                }
                // The laggard is held back only before its first step.
                let held = laggard
                    .filter(|&l| sim.ranks[l].pc == 0)
                    .and_then(|l| ready.iter().position(|&r| r == l));
                sim.act(ready[rng.pick(ready.len(), held)])?;
            }
        }
    }
    sim.finish()
}

/// The state of one simulation.
struct Sim<'p> {
    plans: &'p [Plan],
    ranks: Vec<RankState>,
    /// `fifos[from * n + to]`: slots in flight, oldest first.
    fifos: Vec<VecDeque<Vec<u8>>>,
    /// Where a step writes its outgoing slot (`slot_bytes` long).
    scratch: Vec<u8>,
    nsteps: usize,
}

impl Sim<'_> {
    fn n(&self) -> usize {
        self.plans.len()
    }

    /// Nobody can move: either all finished (check the FIFOs are empty and
    /// return the outputs) or a deadlock.
    fn finish(self) -> Result<Vec<Vec<u8>>, MessageSimError> {
        let n = self.n();
        let stuck: Vec<StuckMessageRank> = self
            .ranks
            .iter()
            .zip(self.plans)
            .enumerate()
            .filter_map(|(r, (s, p))| {
                let step = p.steps.get(s.pc)?;
                Some(StuckMessageRank {
                    rank: r,
                    index: s.pc,
                    step: *step,
                    waiting_for: blocked(step, r, n, self.nsteps, &self.fifos).unwrap_or_default(),
                })
            })
            .collect();
        if !stuck.is_empty() {
            return Err(MessageSimError::Deadlock { stuck });
        }
        let slots: Vec<Leftover> = self
            .fifos
            .iter()
            .enumerate()
            .filter(|(_, q)| !q.is_empty())
            .map(|(i, q)| Leftover {
                from: i / n,
                to: i % n,
                slots: q.len(),
            })
            .collect();
        if !slots.is_empty() {
            return Err(MessageSimError::Undelivered { slots });
        }
        Ok(self.ranks.into_iter().map(RankState::into_output).collect())
    }
}

impl Acting for Sim<'_> {
    type Error = MessageSimError;

    /// Rank `r` has a next step and nothing blocks it.
    fn can_act(&self, r: usize) -> bool {
        match self.plans[r].steps.get(self.ranks[r].pc) {
            Some(step) => blocked(step, r, self.n(), self.nsteps, &self.fifos).is_none(),
            None => false,
        }
    }

    /// Runs the next step of rank `r` (which [can](Acting::can_act)).
    fn act(&mut self, r: usize) -> Result<(), MessageSimError> {
        let n = self.n();
        let plan = &self.plans[r];
        let state = &mut self.ranks[r];
        let index = state.pc;
        let step = plan.steps[index];
        let slot_bytes = self.scratch.len();
        let bytes = step.count.saturating_mul(plan.dtype.size());
        if step.send_to.is_some() && bytes > slot_bytes {
            return Err(MessageSimError::SlotOverflow {
                rank: r,
                index,
                bytes,
                slot_bytes,
            });
        }
        let slot_in = step
            .recv_from
            .and_then(|from| self.fifos[from * n + r].pop_front());
        let mut bufs = state.buffers();
        let written = Interpreter::new(plan)
            .apply(
                &step,
                &mut bufs,
                slot_in.as_deref(),
                Some(&mut self.scratch),
            )
            .map_err(|source| MessageSimError::Step {
                rank: r,
                index,
                step: Box::new(step),
                source,
            })?;
        if let Some(to) = step.send_to {
            self.fifos[r * n + to].push_back(self.scratch[..written].to_vec());
        }
        state.pc += 1;
        Ok(())
    }
}

/// Why `step` of rank `r` cannot run now, or `None` when it can.
fn blocked(
    step: &DataStep,
    r: usize,
    n: usize,
    nsteps: usize,
    fifos: &[VecDeque<Vec<u8>>],
) -> Option<String> {
    if let Some(from) = step.recv_from
        && fifos[from * n + r].is_empty()
    {
        return Some(format!("no slot from rank {from}"));
    }
    if let Some(to) = step.send_to
        && fifos[r * n + to].len() >= nsteps
    {
        return Some(format!("ring to rank {to} is full ({nsteps} slots)"));
    }
    None
}

/// Plans and inputs describe one call; peers are in range.
fn check_setup(plans: &[Plan], inputs: &[Vec<u8>], nsteps: usize) -> Result<(), MessageSimError> {
    let n = plans.len();
    let setup = |msg: String| Err(MessageSimError::Setup(msg));
    if nsteps == 0 {
        return setup("nsteps must be at least 1".into());
    }
    if inputs.len() != n {
        return setup(format!("{} inputs for {n} plans", inputs.len()));
    }
    for (r, (plan, input)) in plans.iter().zip(inputs).enumerate() {
        if plan.rank != r || plan.nranks != n {
            return setup(format!(
                "plans[{r}] is for rank {} of {}, expected rank {r} of {n}",
                plan.rank, plan.nranks
            ));
        }
        let want = plan.send_count.saturating_mul(plan.dtype.size());
        if input.len() != want {
            return setup(format!(
                "input of rank {r} is {} bytes, its plan sends {want}",
                input.len()
            ));
        }
        for (i, s) in plan.steps.iter().enumerate() {
            if s.recv_from.iter().chain(&s.send_to).any(|&p| p >= n) {
                return setup(format!("rank {r} step {i} ({s:?}) names a rank beyond {n}"));
            }
        }
    }
    Ok(())
}

/// One rank's buffers and progress.
struct RankState {
    /// Index of the next step to run.
    pc: usize,
    /// The send buffer (separate) or the whole in-place buffer.
    send: Vec<u8>,
    /// The receive buffer (separate only).
    recv: Vec<u8>,
    /// In place: the layout, in elements.
    layout: Option<InPlaceLayout>,
    /// Bytes of the receive side to return.
    recv_bytes: usize,
    /// Element size.
    esize: usize,
}

const POISON: u8 = 0xA5;

impl RankState {
    fn new(plan: &Plan, input: Vec<u8>, in_place: bool) -> Result<RankState, MessageSimError> {
        let esize = plan.dtype.size();
        let recv_bytes = plan.recv_count * esize;
        // As the runtime does: a rank whose call has no receive buffer but
        // whose plan needs working memory gets a temporary one, and reads its
        // input (even an in-place one) as a separate send buffer.
        let work_bytes = if plan.recv_count == 0 {
            plan.work_count * esize
        } else {
            0
        };
        if !in_place || work_bytes > 0 {
            return Ok(RankState {
                pc: 0,
                send: input,
                recv: vec![POISON; recv_bytes.max(work_bytes)],
                layout: None,
                recv_bytes,
                esize,
            });
        }
        let layout = InPlaceLayout::of(plan)
            .map_err(|e| MessageSimError::Setup(format!("rank {}: {e}", plan.rank)))?;
        let mut buf = vec![POISON; layout.len * esize];
        let at = layout.send_offset * esize;
        buf[at..at + input.len()].copy_from_slice(&input);
        Ok(RankState {
            pc: 0,
            send: buf,
            recv: Vec::new(),
            layout: Some(layout),
            recv_bytes,
            esize,
        })
    }

    fn buffers(&mut self) -> Buffers<'_> {
        match self.layout {
            None => Buffers::Separate {
                send: &self.send,
                recv: &mut self.recv,
            },
            Some(l) => Buffers::InPlace {
                buf: &mut self.send,
                send_offset: l.send_offset,
                recv_offset: l.recv_offset,
            },
        }
    }

    fn into_output(self) -> Vec<u8> {
        match self.layout {
            None => {
                let mut recv = self.recv;
                recv.truncate(self.recv_bytes);
                recv
            }
            Some(l) => {
                let at = l.recv_offset * self.esize;
                self.send[at..at + self.recv_bytes].to_vec()
            }
        }
    }
}
