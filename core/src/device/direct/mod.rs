//! The *direct* device path: collectives between ranks of one host moved and
//! reduced by the device itself, with no host thread in the data path.
//!
//! Each rank owns a *window*, device memory that every other rank of the host
//! maps (CUDA IPC between processes, the plain address between threads of
//! one process, several ranks on one GPU included), and a *flag area* in
//! shared host memory that every rank maps and registers with its device
//! ([`window`] says why the flags live in host memory). A collective is a
//! list of [`DirectStep`]s enqueued on the caller's stream, per chunk of at most
//! a window:
//!
//! 1. copy this rank's input into its own window;
//! 2. *ready* round: raise this rank's word in every peer's flag area
//!    (`cuStreamWriteValue32`, which first makes the copy visible), then wait
//!    for every peer's slot in its own flag area (`cuStreamWaitValue64`)
//!    and, once every wait has passed, reset their arrival halves (a write
//!    of 0, so a graph replay behaves like the first run; [`window`] says
//!    why a slot has two halves);
//! 3. read the peers' windows: the NVRTC reduce kernel (NCCL's
//!    `reduceCopy` shape, one source per rank; a copy out of a peer's
//!    window is the kernel with one source), which first reads this rank's
//!    abort word and does nothing once a failure raised it;
//! 4. *done* round, the same way: no rank overwrites its window with the
//!    next chunk before every peer has read it.
//!
//! Why fixed values suffice: a rank raises a peer's word of a round only
//! after its own previous round, which needs that peer's word of that
//! previous round, which the peer raises only after it reset its word of
//! the round's last use (stream order; no plan repeats a round back to
//! back). The two-shot all-reduce, pipelined over the windows' two halves,
//! alternates *ready* and *reduced* rounds, one a chunk, before its *done*
//! ([`steps`] says why no write overtakes a read).
//!
//! Every step is a copy, a stream memory operation or a kernel: capturable,
//! and no host function runs per call (a captured graph keeps the windows
//! alive until it is destroyed). Reductions read at most
//! [`steps::MAX_SOURCES`] windows, so reducing collectives over more ranks
//! take the staged path; so does any call when a rank cannot map every
//! window (ranks on other hosts, `STREAMCOMM_CUDA_WINDOW=0`). Every rank
//! decides alike, when the windows are set up.
//!
//! A [`window_watch::WindowWatch`] turns a dead peer, or one that left while
//! this rank's stream waits for it, into an error instead of a hang.

pub(crate) mod fd_post;
pub(crate) mod steps;
pub(crate) mod window;
pub(crate) mod window_watch;

use std::sync::Arc;
use std::time::Duration;

use super::DeviceCall;
use super::device_queue::{DevAddr, DeviceQueue, Reduction, Signal};
use super::graveyard::Graveyard;
use crate::comm::failure::Learned;
use crate::comm::submit::Submit;
use crate::{Communicator, DataType, ReduceOp, Result};
pub(crate) use steps::{DirectExchange, GathervLayout, ScatterLayout};
use steps::{DirectStep, WindowLayout, direct_steps, exchange_steps};
use window::{Off, WindowDevice, Windows};
use window_watch::{Liveness, WindowWatch};

/// The direct path of one communicator on one device.
pub(crate) struct Direct {
    windows: Arc<Windows>,
    // Stopped before the windows can go.
    _watch: WindowWatch,
}

impl Direct {
    /// Sets up the direct path of `comm` (a collective call: every rank
    /// makes it): windows of `capacity` data bytes from `source`, mapped by
    /// every rank, and their watch. `Err(off)`, on every rank alike,
    /// where the path cannot be used (a rank without `source` still joins
    /// the exchange so that every rank decides alike).
    pub(crate) fn establish(
        comm: &Communicator,
        source: Option<&dyn WindowDevice>,
        capacity: usize,
        alive: Liveness,
        period: Duration,
    ) -> Result<std::result::Result<Direct, Off>> {
        let windows = match Windows::establish(comm, source, capacity)? {
            Ok(w) => Arc::new(w),
            Err(off) => return Ok(Err(off)),
        };
        let watch = WindowWatch::start(comm, windows.clone(), alive, period)?;
        Ok(Ok(Direct {
            windows,
            _watch: watch,
        }))
    }
}

/// Enqueues `call` on `queue` by the direct path. `Ok(false)`, with
/// nothing enqueued, when the path does not take this call.
pub(crate) fn enqueue_direct<Q: DeviceQueue>(
    comm: &dyn Submit,
    queue: &Q,
    direct: &Direct,
    graveyard: &Arc<Graveyard>,
    call: &DeviceCall,
) -> Result<bool> {
    let Some(steps) = direct_steps(call, &*direct.windows)? else {
        return Ok(false);
    };
    enqueue_plan(
        comm,
        queue,
        direct,
        graveyard,
        (call.dtype, call.op),
        &steps,
    )?;
    Ok(true)
}

/// Enqueues the exchange `x` (elements of `dtype`) on `queue` by the
/// direct path. `Ok(false)`, with nothing enqueued, when the path does not
/// take it (every rank decides alike: the windows are the same size).
pub(crate) fn enqueue_direct_exchange<Q: DeviceQueue>(
    comm: &dyn Submit,
    queue: &Q,
    direct: &Direct,
    graveyard: &Arc<Graveyard>,
    dtype: DataType,
    x: &DirectExchange<'_>,
) -> Result<bool> {
    let Some(steps) = exchange_steps(&*direct.windows, x) else {
        return Ok(false);
    };
    enqueue_plan(
        comm,
        queue,
        direct,
        graveyard,
        (dtype, ReduceOp::Sum),
        &steps,
    )?;
    Ok(true)
}

/// Enqueues `steps`, reducing (where they do) `dtype` elements with `op`,
/// and keeps the windows alive for as long as the stream (or a graph that
/// captured it) may run them.
fn enqueue_plan<Q: DeviceQueue>(
    comm: &dyn Submit,
    queue: &Q,
    direct: &Direct,
    graveyard: &Arc<Graveyard>,
    reduce: (DataType, ReduceOp),
    steps: &[DirectStep],
) -> Result<()> {
    let w = &direct.windows;
    // Outside capture the call ends by writing its number where a drop of
    // the windows can see that the stream is past it (a graph's replays
    // keep the windows alive instead, below).
    let result = queue.batched(|| {
        let done = (!queue.capturing()?).then(|| w.next_done());
        enqueue_steps(queue, w, reduce, steps, done)
    });
    if let Err(e) = &result {
        // Part of the call may be on the stream: the peers' flag rounds
        // no longer line up with this rank's, so fail rather than drift.
        comm.failure().fail(e, Learned::Call);
    }
    let kept = queue.enqueue_keep(|| Box::new(w.clone()), graveyard);
    result.and(kept)
}

/// The stream operations of one flag round of rank `me` of `size`, as one
/// batch: raise this rank's word in every peer's area (`flag(owner,
/// from)`: the slot in `owner`'s area that `from` raises); then, per peer,
/// announce the wait in the awaited word (`awaited(from)`: its address and
/// value, so the watch can tell a peer that left, or never comes, from one
/// that is late) and wait; clear the word; only then reset the arrival
/// halves (each slot's low 32-bit word). While the awaited word names a
/// peer, that peer's slot is either not raised yet (a wait) or still
/// raised (passed): a reset before the word moved on would show the watch
/// a wait for a peer that has arrived, and may have exited since.
fn round_signals(
    me: usize,
    size: usize,
    flag: impl Fn(usize, usize) -> DevAddr,
    awaited: impl Fn(usize) -> (DevAddr, u32),
) -> Vec<Signal> {
    let peers = (0..size).filter(|&p| p != me);
    let mut signals: Vec<Signal> = peers.clone().map(|p| Signal::Raise(flag(p, me))).collect();
    for p in peers.clone() {
        let (word, value) = awaited(p);
        signals.push(Signal::Write(word, value));
        signals.push(Signal::WaitFlag(flag(me, p)));
    }
    signals.push(Signal::Write(awaited(me).0, 0));
    signals.extend(peers.map(|p| Signal::Write(flag(me, p), 0)));
    signals
}

/// Enqueues `steps` in order, then `done` (in the last flag round's batch
/// where the steps end with one, as they do: no driver call of its own).
fn enqueue_steps<Q: DeviceQueue>(
    queue: &Q,
    w: &Windows,
    (dtype, op): (DataType, ReduceOp),
    steps: &[DirectStep],
    mut done: Option<Signal>,
) -> Result<()> {
    let (me, size) = (w.rank(), w.size());
    for (i, step) in steps.iter().enumerate() {
        let last = i + 1 == steps.len();
        match step {
            DirectStep::Copy { dst, src, bytes } if w.is_peer_data(*src) => {
                // A read of a peer's window: a kernel that first checks
                // the abort word (a copy engine transfer cannot), so that
                // nothing reads the window of a peer that may be gone.
                // SAFETY: (and below) the caller's buffers were checked
                // against the call (`direct_steps`) and stay valid until the
                // stream has run it, as every stream API requires; window
                // addresses stay mapped while the communicator lives, or
                // while a graph that captured them does (`enqueue_keep`).
                unsafe {
                    queue.enqueue_reduce(&Reduction {
                        dtype: DataType::U8,
                        op: ReduceOp::Sum,
                        srcs: &[*src],
                        dsts: &[*dst],
                        count: *bytes,
                        avg_divisor: 1,
                        abort: w.abort_word(),
                    })?
                }
            }
            DirectStep::Copy { dst, src, bytes } => {
                // SAFETY: as above.
                unsafe { queue.enqueue_copy(*dst, *src, *bytes)? }
            }
            DirectStep::Arrive(round) => {
                let mut signals = round_signals(
                    me,
                    size,
                    |owner, from| w.flag(owner, *round, from),
                    |from| w.awaited_word(*round, from),
                );
                if last {
                    signals.extend(done.take());
                }
                // SAFETY: as above.
                unsafe { queue.enqueue_signals(&signals)? };
            }
            DirectStep::Reduce { srcs, dsts, count } => {
                // SAFETY: as above.
                unsafe {
                    queue.enqueue_reduce(&Reduction {
                        dtype,
                        op,
                        srcs,
                        dsts,
                        count: *count,
                        avg_divisor: size as u32,
                        abort: w.abort_word(),
                    })?
                }
            }
        }
    }
    if let Some(done) = done {
        // SAFETY: the word is this rank's own flag area's, mapped while
        // the windows live.
        unsafe { queue.enqueue_signals(&[done])? };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rank 1 of 4: slots at `owner * 0x100 + from * 8`, the awaited word
    /// at 0x1000 (value `from + 1`).
    fn signals() -> Vec<Signal> {
        round_signals(
            1,
            4,
            |owner, from| (owner * 0x100 + from * 8) as DevAddr,
            |from| (0x1000, from as u32 + 1),
        )
    }

    #[test]
    fn the_awaited_word_moves_on_before_any_arrival_half_is_reset() {
        let s = signals();
        let cleared = s
            .iter()
            .position(|&x| x == Signal::Write(0x1000, 0))
            .expect("the awaited word is cleared");
        for p in [0, 2, 3] {
            let slot = (0x100 + p * 8) as DevAddr;
            let wait = s.iter().position(|&x| x == Signal::WaitFlag(slot)).unwrap();
            let reset = s.iter().position(|&x| x == Signal::Write(slot, 0)).unwrap();
            let announce = s
                .iter()
                .position(|&x| x == Signal::Write(0x1000, p as u32 + 1))
                .unwrap();
            assert!(
                announce < wait && wait < cleared && cleared < reset,
                "{s:?}"
            );
        }
        // Every peer's word raised first, in the peers' areas.
        assert_eq!(&s[..3], &[0x008, 0x208, 0x308].map(Signal::Raise), "{s:?}");
        assert_eq!(s.len(), 3 + 2 * 3 + 1 + 3);
    }
}
