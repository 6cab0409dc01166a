//! One communicator operation on a device stream: its staging buffers, its
//! host task and the five steps it enqueues (see the module docs).

use std::any::Any;
use std::sync::Arc;

use super::device_queue::{CompletionSignal, DevAddr, DeviceQueue, HostCallback, StagingMemory};
use super::direct::{DirectExchange, enqueue_direct, enqueue_direct_exchange};
use super::pool::{DeviceShared, Pool};
use super::runner::Runner;
use crate::comm::failure::{FailureState, Learned};
use crate::comm::p2p::{Dir, GroupMemory};
use crate::comm::submit::Submit;
use crate::comm::{Binding, BufView};
use crate::host::{Job, Task};
use crate::plan::{Collective, Lens, count_from};
use crate::transport::device_span::{DeviceSpan, NicAccess};
use crate::{DataType, Error, ReduceOp, Result};

/// `len` elements at a device address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DeviceRange {
    /// First element.
    pub addr: DevAddr,
    /// Number of elements.
    pub len: usize,
}

/// The device buffers of one call.
#[derive(Clone, Copy, Debug)]
pub(crate) enum DeviceBuffers {
    /// Distinct input and output.
    Separate {
        /// Input.
        send: DeviceRange,
        /// Output.
        recv: DeviceRange,
    },
    /// One buffer at NCCL's in-place offsets.
    InPlace(DeviceRange),
    /// No data (a barrier).
    None,
}

/// A communicator operation as a device stream issues it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DeviceCall {
    /// What to run (`Collective::Barrier` for a barrier).
    pub collective: Collective,
    /// Element type of the buffers.
    pub dtype: DataType,
    /// Reduction (ignored where nothing is reduced).
    pub op: ReduceOp,
    /// The buffers.
    pub buffers: DeviceBuffers,
}

/// One send or receive of a device group (a whole buffer).
#[derive(Clone, Copy, Debug)]
pub(crate) struct DeviceP2p {
    /// Send or receive.
    pub dir: Dir,
    /// The other rank.
    pub peer: usize,
    /// Element type.
    pub dtype: DataType,
    /// The buffer.
    pub range: DeviceRange,
}

/// Refuses what [`crate::Communicator::group`] refuses for host buffers but
/// staging would hide: a receive buffer that overlaps another operation's.
fn check_device_group(ops: &[DeviceP2p]) -> Result<()> {
    let span = |o: &DeviceP2p| {
        (
            o.range.addr,
            o.range.addr + (o.range.len * o.dtype.size()) as u64,
        )
    };
    for (i, a) in ops.iter().enumerate() {
        for b in &ops[i + 1..] {
            let ((a0, a1), (b0, b1)) = (span(a), span(b));
            // An empty range touches nothing (an all_to_allv's zero counts
            // may point anywhere).
            let empty = a0 == a1 || b0 == b1;
            let overlap = !empty && a0 < b1 && b0 < a1;
            if overlap && (a.dir == Dir::Recv || b.dir == Dir::Recv) {
                return Err(Error::invalid(
                    "group: a receive buffer overlaps another operation's buffer in one group",
                ));
            }
        }
    }
    Ok(())
}

/// One staging buffer and the device copies around the host task.
struct Stage<S> {
    mem: S,
    bytes: usize,
    copy_in: Option<DevAddr>,
    copy_out: Option<DevAddr>,
}

/// Everything the device may still touch until the operation can no longer
/// run: dropped (through the graveyard) only after that, when the staging
/// buffers and the completion word go back to the pool.
struct Resources<S: StagingMemory, G: CompletionSignal> {
    callback: Option<Arc<HostCallback>>,
    callback_token: Option<Box<dyn Any + Send>>,
    stages: Vec<Stage<S>>,
    signal: Option<Arc<G>>,
    pool: Arc<Pool<S, G>>,
}

impl<S: StagingMemory, G: CompletionSignal> Drop for Resources<S, G> {
    fn drop(&mut self) {
        // The callback holds the task (views of the staging memory) and a
        // handle to the signal: gone first.
        drop(self.callback.take());
        drop(self.callback_token.take());
        for stage in self.stages.drain(..) {
            self.pool.put_staging(stage.mem);
        }
        // The runner may hold the signal a moment longer (it raises, then
        // lets go): the pool hands it out again only after that.
        if let Some(signal) = self.signal.take() {
            self.pool.put_signal(signal);
        }
    }
}

/// Elements the host task reads from `send` and writes to `recv`, for `count`.
pub(crate) fn stage_lens(
    collective: Collective,
    count: usize,
    size: usize,
) -> Result<(usize, usize)> {
    let all = count.checked_mul(size).ok_or_else(|| {
        Error::invalid(format!(
            "{}: {count} elements × {size} ranks overflow",
            collective.name()
        ))
    })?;
    Ok(match collective {
        Collective::AllGather => (count, all),
        Collective::ReduceScatter => (all, count),
        Collective::AllToAll => (all, all),
        _ => (count, count),
    })
}

/// Checks a call's separate buffers: not one buffer passed as both, and
/// long enough for `send_len` / `recv_len` elements where this rank reads or
/// writes them. Returns whether it reads `send` and writes `recv`.
pub(crate) fn check_separate(
    call: &DeviceCall,
    rank: usize,
    send: DeviceRange,
    recv: DeviceRange,
    send_len: usize,
    recv_len: usize,
) -> Result<(bool, bool)> {
    let name = call.collective;
    if send.addr == recv.addr && send.len > 0 && recv.len > 0 {
        return Err(Error::invalid(format!(
            "{name}: send and recv are the same buffer; use the in-place call"
        )));
    }
    let reads = !matches!(call.collective, Collective::Broadcast { root } if root != rank);
    let writes = !matches!(call.collective, Collective::Reduce { root } if root != rank);
    let need = |what: &str, have: usize, want: usize| {
        if have < want {
            return Err(Error::invalid(format!(
                "{name}: {what} holds {have} elements, the call needs {want}"
            )));
        }
        Ok(())
    };
    if reads {
        need("send", send.len, send_len)?;
    }
    if writes {
        need("recv", recv.len, recv_len)?;
    }
    Ok((reads, writes))
}

impl DeviceCall {
    /// A barrier: no buffers.
    pub(crate) const fn barrier() -> DeviceCall {
        DeviceCall {
            collective: Collective::Barrier,
            dtype: DataType::U8,
            op: ReduceOp::Sum,
            buffers: DeviceBuffers::None,
        }
    }

    /// The element count of the collective, derived from the buffers by
    /// the rule every face shares ([`crate::plan::count_from`]).
    pub(crate) fn count(&self, size: usize) -> Result<usize> {
        let lens = match self.buffers {
            DeviceBuffers::None => return Ok(0),
            DeviceBuffers::InPlace(b) => Lens::InPlace(b.len),
            DeviceBuffers::Separate { send, recv } => Lens::Separate {
                send: send.len,
                recv: recv.len,
            },
        };
        Ok(count_from(self.collective, lens, size)?.0)
    }
}

/// Enqueues `call` on `queue`: by the direct path where the
/// communicator has one that takes the call ([`super::direct`]), else
/// copy in, host callback, wait, copy out, release (module docs). The host task is built and checked here, so
/// bad arguments fail now, before anything is enqueued.
pub(crate) fn enqueue_device<Q: DeviceQueue>(
    comm: &dyn Submit,
    queue: &Q,
    shared: &DeviceShared<Q::Staging, Q::Signal>,
    call: &DeviceCall,
) -> Result<()> {
    queue.bury(&shared.graveyard);
    comm.failure().check()?;
    if let Some(direct) = shared.direct.get()
        && enqueue_direct(comm, queue, direct, &shared.graveyard, call)?
    {
        return Ok(());
    }
    let (task, stages) = device_task(comm, queue, &shared.pool, call)?;
    enqueue_staged(comm, queue, shared, task, stages)
}

/// Enqueues the sends and receives of an exchange (a collective made of
/// them) on `queue`: by the direct path where it is on and the exchange
/// has a direct form (`direct_form`: device copies through the windows),
/// else as [`enqueue_device_group`]. Checked as a group first, whichever
/// path runs it.
pub(crate) fn enqueue_device_exchange<Q: DeviceQueue>(
    comm: &dyn Submit,
    queue: &Q,
    shared: &DeviceShared<Q::Staging, Q::Signal>,
    ops: &[DeviceP2p],
    direct_form: Option<(DataType, DirectExchange<'_>)>,
) -> Result<()> {
    if let (Some(direct), Some((dtype, x))) = (shared.direct.get(), direct_form) {
        queue.bury(&shared.graveyard);
        check_device_group(ops)?;
        comm.failure().check()?;
        if enqueue_direct_exchange(comm, queue, direct, &shared.graveyard, dtype, &x)? {
            return Ok(());
        }
    }
    enqueue_device_group(comm, queue, shared, ops)
}

/// Enqueues a group of sends and receives on `queue` (nothing for an
/// empty group).
///
/// With GPUDirect RDMA ([`DeviceShared::gpudirect`]), the non-empty
/// operations with peers over verbs name the device memory itself: the
/// NIC reads and writes it, and the host task flushes the NIC's writes
/// to the device before it raises the completion word. Every other
/// operation is staged, receive buffers both ways, so that elements past
/// a shorter message keep their contents (the NIC writes only the
/// message's bytes). Every non-empty message over verbs goes by
/// rendezvous, staged or not, since the peer may receive into device
/// memory.
pub(crate) fn enqueue_device_group<Q: DeviceQueue>(
    comm: &dyn Submit,
    queue: &Q,
    shared: &DeviceShared<Q::Staging, Q::Signal>,
    ops: &[DeviceP2p],
) -> Result<()> {
    queue.bury(&shared.graveyard);
    check_device_group(ops)?;
    let mut stages = Vec::with_capacity(ops.len());
    let mut mems = Vec::with_capacity(ops.len());
    let mut flush = None;
    for o in ops {
        let bytes = o.range.len * o.dtype.size();
        if let Some(nic) = shared.gpudirect.get()
            && bytes > 0
            && comm.moves_by_rdma(o.peer)
            && nic.reaches(o.range.addr)
        {
            let span = DeviceSpan {
                addr: o.range.addr,
                len: bytes,
                nic: nic.clone(),
            };
            if o.dir == Dir::Recv {
                flush = Some(nic.clone());
            }
            let (dtype, count) = (o.dtype, o.range.len);
            mems.push((o.dir, o.peer, GroupMemory::Device { span, dtype, count }));
            continue;
        }
        let mem = shared.pool.staging(bytes, |b| queue.alloc_staging(b))?;
        let view = BufView::new(mem.host_buffer(bytes), o.dtype, o.range.len);
        mems.push((o.dir, o.peer, GroupMemory::Host(view)));
        stages.push(Stage {
            mem,
            bytes,
            copy_in: Some(o.range.addr),
            copy_out: (o.dir == Dir::Recv).then_some(o.range.addr),
        });
    }
    let Some(task) = comm.group_task(&mems, true)? else {
        return Ok(());
    };
    drop(mems);
    let task = match flush {
        Some(nic) => Arc::new(FlushAfter { task, nic }) as Arc<dyn Task>,
        None => task,
    };
    enqueue_staged(comm, queue, shared, task, stages)
}

/// The five steps of one operation (module docs) around `task`.
fn enqueue_staged<Q: DeviceQueue>(
    comm: &dyn Submit,
    queue: &Q,
    shared: &DeviceShared<Q::Staging, Q::Signal>,
    task: Arc<dyn Task>,
    stages: Vec<Stage<Q::Staging>>,
) -> Result<()> {
    let signal = shared.pool.signal(|| queue.alloc_signal())?;
    let callback: Arc<HostCallback> = {
        let (task, signal) = (task.clone(), signal.clone());
        let (runner, failure) = (shared.runner.clone(), comm.failure().clone());
        Arc::new(move || hand_over(task.as_ref(), &signal, &runner, &failure))
    };
    let mut token = None;
    let mut steps = || -> Result<()> {
        for s in stages.iter().filter(|s| s.bytes > 0) {
            if let Some(src) = s.copy_in {
                // SAFETY: `src` is the caller's device buffer, valid for
                // `bytes` (lengths checked in `device_task`) until the
                // operation has run, as every stream API requires; the
                // staging memory lives in `Resources` until released.
                unsafe { queue.enqueue_copy(s.mem.dev_addr(), src, s.bytes)? };
            }
        }
        // SAFETY: `callback` is kept in `Resources`, released only
        // after the operation's last step.
        token = Some(unsafe { queue.enqueue_callback(&callback)? });
        queue.enqueue_wait(&signal)?;
        for s in stages.iter().filter(|s| s.bytes > 0) {
            if let Some(dst) = s.copy_out {
                // SAFETY: as for the copy in.
                unsafe { queue.enqueue_copy(dst, s.mem.dev_addr(), s.bytes)? };
            }
        }
        Ok(())
    };
    let result = steps();
    if let Err(e) = &result {
        // Part of the operation may be on the stream: this rank's place
        // in the communicator's sequence is no longer known, so fail it
        // (peers then stop waiting for it) rather than drift.
        comm.failure().fail(e, Learned::Call);
    }
    let owner = Box::new(Resources {
        callback: Some(callback),
        callback_token: token,
        stages,
        signal: Some(signal),
        pool: shared.pool.clone(),
    });
    // Released even when a step failed: what was enqueued may still run.
    let released = queue.enqueue_release(owner, &shared.graveyard);
    result.and(released)
}

/// The host task of `call` over fresh staging buffers, and the stages.
#[allow(clippy::type_complexity)]
fn device_task<Q: DeviceQueue>(
    comm: &dyn Submit,
    queue: &Q,
    pool: &Pool<Q::Staging, Q::Signal>,
    call: &DeviceCall,
) -> Result<(Arc<dyn Task>, Vec<Stage<Q::Staging>>)> {
    if call.collective == Collective::Barrier {
        let none = Binding::Separate {
            send: None,
            recv: None,
        };
        let task = comm.collective_task(call.collective, call.dtype, call.op, 0, none)?;
        return Ok((task, Vec::new()));
    }
    let ((rank, size), dsize) = (comm.place(), call.dtype.size());
    let count = call.count(size)?;
    let (send_len, recv_len) = stage_lens(call.collective, count, size)?;
    let stage = |len: usize, copy_in, copy_out| -> Result<(Stage<Q::Staging>, BufView)> {
        let bytes = len * dsize;
        let mem = pool.staging(bytes, |b| queue.alloc_staging(b))?;
        let view = BufView::new(mem.host_buffer(bytes), call.dtype, len);
        Ok((
            Stage {
                mem,
                bytes,
                copy_in,
                copy_out,
            },
            view,
        ))
    };
    let (binding, stages) = match call.buffers {
        DeviceBuffers::None => (
            Binding::Separate {
                send: None,
                recv: None,
            },
            Vec::new(),
        ),
        DeviceBuffers::InPlace(b) => {
            let (s, v) = stage(b.len, Some(b.addr), Some(b.addr))?;
            (Binding::InPlace(v), vec![s])
        }
        DeviceBuffers::Separate { send, recv } => {
            let (reads, writes) = check_separate(call, rank, send, recv, send_len, recv_len)?;
            let mut stages = Vec::new();
            let send_view = if reads {
                let (s, v) = stage(send_len, Some(send.addr), None)?;
                stages.push(s);
                Some(v)
            } else {
                None
            };
            let recv_view = if writes {
                let (s, v) = stage(recv_len, None, Some(recv.addr))?;
                stages.push(s);
                Some(v)
            } else {
                None
            };
            (
                Binding::Separate {
                    send: send_view,
                    recv: recv_view,
                },
                stages,
            )
        }
    };
    let task = comm.collective_task(call.collective, call.dtype, call.op, count, binding)?;
    Ok((task, stages))
}

/// A device group's task whose receives the NIC wrote into device memory:
/// once it has run, the writes are flushed to the device, so the stream
/// work after the completion word sees them (NCCL's GDR flush).
struct FlushAfter {
    task: Arc<dyn Task>,
    nic: Arc<dyn NicAccess>,
}

impl Task for FlushAfter {
    fn prepare(&self) -> Job {
        let job = self.task.prepare();
        let nic = self.nic.clone();
        Box::new(move |mode| {
            job(mode)?;
            nic.flush()
        })
    }

    fn name(&self) -> &str {
        self.task.name()
    }
}

/// The host callback: prepares the task (taking its ticket now, in device
/// order) and hands it to the runner; raises `signal` once it has run, or at
/// once if it cannot be handed over. Never blocks.
fn hand_over<G: CompletionSignal>(
    task: &dyn Task,
    signal: &Arc<G>,
    runner: &Runner,
    failure: &FailureState,
) {
    let job = task.prepare();
    let raise = signal.clone();
    let wrapped = Box::new(move |mode| {
        let result = job(mode);
        raise.raise();
        result
    });
    if let Err(e) = runner.submit(wrapped) {
        failure.fail(&e, Learned::Call);
        signal.raise();
    }
}
