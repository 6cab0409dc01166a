//! A collective's plan as one item of the executor: its steps in order,
//! each taking its input slot and its output credit as they come, then
//! applied and published. The buffers are locked only while a step moves
//! their bytes, never across a wait for a peer.

use crate::comm::buffer::Binding;
use crate::comm::core::{Core, no_connection};
use crate::plan::{Buffers, DataStep, Interpreter, Plan, signature};
use crate::transport::Connection;
use crate::wait::Notifier;
use crate::{Error, Result};

use super::Item;

/// Executes every step of `plan` on `binding`, as call number `seq`.
///
/// # Errors
/// A slot out of order or signed by another call, a peer's failure, or a
/// wait without progress past the communicator's timeout.
pub(crate) fn run_plan(core: &Core, plan: &Plan, binding: &Binding, seq: u64) -> Result<()> {
    let _span = tracing::trace_span!("plan", op = plan.collective.name(), seq).entered();
    // Working memory lives for the whole plan (see `Plan::work_count`).
    let mut work = Binding::work_buffer(plan);
    let interp = Interpreter::new(plan);
    run(
        core,
        plan,
        plan.signature,
        seq,
        |step, slot_in, slot_out| {
            if step.src.is_none() && step.dst.is_none() {
                let mut none = Buffers::Separate {
                    send: &[],
                    recv: &mut [],
                };
                interp.apply(step, &mut none, slot_in, slot_out)
            } else {
                binding.with_buffers(plan, &mut work, |bufs| {
                    interp.apply(step, bufs, slot_in, slot_out)
                })
            }
        },
    )
}

/// Executes every step of `plan` on the caller's own memory, `bufs`: the
/// host-blocking collectives' path, with no buffer handle, lock or working
/// memory between the call and its slices (`plan` must need none:
/// [`Plan::work_count`] is for calls without a receive buffer).
///
/// # Errors
/// As [`run_plan`].
pub(crate) fn run_plan_on(
    core: &Core,
    plan: &Plan,
    bufs: &mut Buffers<'_>,
    seq: u64,
) -> Result<()> {
    run_plan_signed(core, plan, plan.signature, bufs, seq)
}

/// [`run_plan_on`] with the slots signed `sig` instead of the plan's own
/// signature: for a call built from another's plan (the split's exchange
/// is an all-gather), so that a peer making that other call is told apart.
///
/// # Errors
/// As [`run_plan`].
pub(crate) fn run_plan_signed(
    core: &Core,
    plan: &Plan,
    sig: u64,
    bufs: &mut Buffers<'_>,
    seq: u64,
) -> Result<()> {
    let _span = tracing::trace_span!("plan", op = plan.collective.name(), seq).entered();
    let interp = Interpreter::new(plan);
    run(core, plan, sig, seq, |step, slot_in, slot_out| {
        interp.apply(step, bufs, slot_in, slot_out)
    })
}

/// Runs `plan`'s steps signed `sig` through the executor, `apply`
/// combining each step's slots with the call's memory.
#[inline]
fn run<F>(core: &Core, plan: &Plan, sig: u64, seq: u64, apply: F) -> Result<()>
where
    F: FnMut(&DataStep, Option<&[u8]>, Option<&mut [u8]>) -> Result<usize>,
{
    let mut item = PlanItem {
        core,
        peers: core.peers(),
        steps: &plan.steps,
        sig,
        seq,
        next: 0,
        inbound: None,
        outbound: None,
        waiting: None,
        apply,
    };
    super::drive(core, &mut item, || item_name(sig, seq))
}

/// The name of call number `seq` signed `sig` in an error.
fn item_name(sig: u64, seq: u64) -> String {
    format!("{} #{seq}", signature::call(sig).op)
}

/// What a step waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Want {
    /// Its input slot.
    Data,
    /// A free output slot (the peer's credit).
    Credit,
}

impl Want {
    /// What the step waits for, as a timeout's message says it.
    fn words(self) -> &'static str {
        match self {
            Want::Data => "data",
            Want::Credit => "a free slot (credit)",
        }
    }
}

/// A plan under way: the step `next`, the slots it holds so far (each
/// with the connection it is returned to), and what it waits for.
struct PlanItem<'a, F> {
    core: &'a Core,
    /// The communicator's connections, by rank (`None` for this rank).
    peers: &'a [Option<Connection>],
    steps: &'a [DataStep],
    sig: u64,
    seq: u64,
    next: usize,
    inbound: Option<(&'a Connection, &'a [u8])>,
    outbound: Option<(&'a Connection, &'a mut [u8])>,
    waiting: Option<(&'a Connection, Want)>,
    apply: F,
}

impl<'a, F> PlanItem<'a, F>
where
    F: FnMut(&DataStep, Option<&[u8]>, Option<&mut [u8]>) -> Result<usize>,
{
    /// The error of a failed slot operation on `c` while the step wanted
    /// `want`.
    #[cold]
    fn slot_error(
        &self,
        e: crate::transport::ring::RingError,
        c: &Connection,
        want: Want,
    ) -> Error {
        let what = item_name(self.sig, self.seq);
        self.core
            .ring_error(e, &what, c, want.words(), Some(self.sig))
    }

    /// Takes what the step wants (`want`) from `peer`'s connection (its input
    /// slot, or its output slot once credit came) if it is there; whether
    /// it was. A slot signed by another call is a mismatch.
    #[inline]
    fn take(&mut self, peer: usize, want: Want) -> Result<bool> {
        let c = self.peers.get(peer).and_then(Option::as_ref);
        let c = c.ok_or_else(|| no_connection(peer))?;
        let took = match want {
            Want::Data => match c
                .try_acquire_recv()
                .map_err(|e| self.slot_error(e, c, want))?
            {
                Some((_, theirs)) if theirs != self.sig => {
                    let what = item_name(self.sig, self.seq);
                    return Err(self.core.mismatch(&what, peer, theirs, self.sig));
                }
                Some((slot, _)) => {
                    self.inbound = Some((c, slot));
                    true
                }
                None => false,
            },
            Want::Credit => {
                self.outbound = c
                    .try_acquire_send()
                    .map_err(|e| self.slot_error(e, c, want))?
                    .map(|slot| (c, slot));
                self.outbound.is_some()
            }
        };
        if !took {
            self.waiting = Some((c, want));
        }
        Ok(took)
    }
}

impl<'a, F> Item<'a> for PlanItem<'a, F>
where
    F: FnMut(&DataStep, Option<&[u8]>, Option<&mut [u8]>) -> Result<usize>,
{
    #[inline]
    fn poll(&mut self) -> Result<bool> {
        let mut moved = false;
        while let Some(step) = self.steps.get(self.next) {
            if let Some(p) = step.recv_from
                && self.inbound.is_none()
                && !self.take(p, Want::Data)?
            {
                return Ok(moved);
            }
            if let Some(p) = step.send_to
                && self.outbound.is_none()
                && !self.take(p, Want::Credit)?
            {
                return Ok(moved);
            }
            self.waiting = None;
            let (from, slot_in) = self.inbound.take().unzip();
            let (to, slot_out) = self.outbound.take().unzip();
            let written = (self.apply)(step, slot_in, slot_out)?;
            if let Some(c) = to {
                c.commit_send(written, self.sig)
                    .map_err(|e| self.slot_error(e, c, Want::Credit))?;
            }
            if let Some(c) = from {
                c.release_recv();
            }
            self.next += 1;
            moved = true;
        }
        Ok(moved)
    }

    fn done(&self) -> bool {
        self.next == self.steps.len()
    }

    fn ready(&self) -> bool {
        match self.waiting {
            Some((c, Want::Data)) => c.recv.has_data(),
            Some((c, Want::Credit)) => c.send.has_credit(),
            None => true,
        }
    }

    fn waits_on(&self) -> Option<(&'a Connection, &'a Notifier)> {
        self.waiting.map(|(c, want)| {
            let n = match want {
                Want::Data => c.recv.data_notifier(),
                Want::Credit => c.send.credit_notifier(),
            };
            (c, n)
        })
    }

    fn waiting_for(&self) -> String {
        match self.waiting {
            Some((c, want)) => format!(
                "{} from rank {} over {}",
                want.words(),
                c.peer(),
                c.transport()
            ),
            None => "nothing".into(),
        }
    }

    fn signature(&self) -> Option<u64> {
        Some(self.sig)
    }
}
