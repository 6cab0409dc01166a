//! The executor of a group: lock its buffers, then move every operation along until all
//! are done, never blocking on any one of them.
//!
//! Operations to one peer in one direction form a lane and run in posting
//! order (so messages between a pair arrive in the order they were posted);
//! the fronts of all lanes are polled round-robin. That is what makes a group
//! deadlock-free whatever the order of its calls: a send waiting for credit
//! never stops a receive from draining the ring that would give the credit
//! back. When no lane can move, the thread waits (spin, yield, futex) until
//! any of them can, bounded by the communicator's timeout without progress.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::comm::p2p::P2p;
use crate::comm::p2p::payload::{Dst, Src};
use crate::comm::p2p::receiver::RecvOp;
use crate::comm::p2p::sender::SendOp;
use crate::comm::p2p::spec::{Dir, GroupBuf, GroupSpec, OpSpec};
use crate::transport::Connection;
use crate::wait::{Notifier, WaitPolicy};
use crate::{Error, Result};

/// A locked buffer of the group.
enum Locked<'a> {
    Read(&'a [u8]),
    Write(&'a mut [u8]),
}

/// The group's locked buffers, by index into [`GroupSpec::bufs`].
type LockedBufs<'a> = Vec<(usize, Locked<'a>)>;

/// Locks `bufs[order[..]]` one after another (address order, as every other
/// lock of a buffer in this crate, so two streams can never deadlock), then
/// runs `f` with all of them.
fn lock_in_order<'b, R>(
    bufs: &[GroupBuf],
    order: &[usize],
    acc: LockedBufs<'b>,
    f: &mut dyn for<'x> FnMut(LockedBufs<'x>) -> R,
) -> R {
    let Some((&i, rest)) = order.split_first() else {
        return f(acc);
    };
    let raw = bufs[i].view.raw();
    let mut acc: LockedBufs<'_> = acc;
    if bufs[i].written {
        let mut g = raw.write();
        acc.push((i, Locked::Write(raw.bytes_of_mut(&mut g))));
        lock_in_order(bufs, rest, acc, f)
    } else {
        let g = raw.read();
        acc.push((i, Locked::Read(raw.bytes_of(&g))));
        lock_in_order(bufs, rest, acc, f)
    }
}

/// An operation's operand: the bytes it reads or writes (locked host
/// bytes, or device memory).
enum Operand<'a> {
    Src(Src<'a>),
    Dst(Dst<'a>),
}

impl Operand<'_> {
    /// The operand of a device operation (nothing to lock), if `o` is one.
    fn of_device(o: &OpSpec) -> Option<Self> {
        let d = o.device.clone()?;
        Some(match o.dir {
            Dir::Send => Operand::Src(Src::Device(d)),
            Dir::Recv => Operand::Dst(Dst::Device(d)),
        })
    }
}

/// One operation in flight.
enum Op<'a> {
    Send(SendOp<'a>),
    Recv(RecvOp<'a>),
}

impl<'a> Op<'a> {
    fn poll(&mut self) -> Result<bool> {
        match self {
            Op::Send(s) => s.poll(),
            Op::Recv(r) => r.poll(),
        }
    }
    fn done(&self) -> bool {
        match self {
            Op::Send(s) => s.done(),
            Op::Recv(r) => r.done(),
        }
    }
    fn ready(&self) -> bool {
        match self {
            Op::Send(s) => s.ready(),
            Op::Recv(r) => r.ready(),
        }
    }
    fn notifier(&self) -> &'a Notifier {
        match self {
            Op::Send(s) => s.notifier(),
            Op::Recv(r) => r.notifier(),
        }
    }
    fn connection(&self) -> &'a Connection {
        match self {
            Op::Send(s) => s.connection(),
            Op::Recv(r) => r.connection(),
        }
    }
    fn peer(&self) -> usize {
        match self {
            Op::Send(s) => s.peer,
            Op::Recv(r) => r.peer,
        }
    }
    fn waiting_for(&self) -> String {
        match self {
            Op::Send(s) => s.waiting_for(),
            Op::Recv(r) => r.waiting_for(),
        }
    }
}

/// How long an operation has gone without progress, read from the clock
/// only when a wait ended without the operation moving (a clock read is a
/// system call on some machines, e.g. a VM on the HPET, ~2 µs: more than a
/// small message's software path). The first wait after progress gets the
/// whole timeout; later ones what is left of it, counted from the end of
/// that first wait, so an operation that stops moving fails within twice
/// the timeout at most (within one timeout unless a wake-up was spurious).
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

impl P2p {
    /// Executes the group `spec` as operation number `seq`.
    pub(crate) fn run_group(&self, spec: &GroupSpec, seq: u64) -> Result<()> {
        let _span = tracing::trace_span!("p2p", op = %spec.name, seq).entered();
        if let [o] = spec.ops.as_slice()
            && o.peer != self.core.rank()
        {
            return self.run_single(spec, seq);
        }
        let mut order: Vec<usize> = (0..spec.bufs.len()).collect();
        order.sort_by_key(|&i| spec.bufs[i].view.raw().addr());
        lock_in_order(&spec.bufs, &order, Vec::new(), &mut |locked| {
            self.run_locked(spec, seq, locked)
        })
    }

    /// One send or receive with another rank (the common case): the same
    /// operation and wait as a group's, without the group's bookkeeping.
    fn run_single(&self, spec: &GroupSpec, seq: u64) -> Result<()> {
        let o = &spec.ops[0];
        let name = || format!("{} #{seq}", spec.name);
        if let Some(operand) = Operand::of_device(o) {
            let op = self.new_op(spec, o, operand)?;
            return self.drive_one(op, name);
        }
        let raw = spec.bufs[o.buf].view.raw();
        let range = o.offset..o.offset + o.bytes();
        // A message of one slot first tries the immediate path (it is this
        // call's turn): no operation is built when it is done at once.
        let conn = self.core.connection(o.peer)?;
        let immediate = o.bytes() <= self.core.config().p2p_eager_limit
            && !(spec.rdma_rendezvous && conn.writes_remotely());
        match o.dir {
            Dir::Send => {
                let g = raw.read();
                let src = &raw.bytes_of(&g)[range];
                if immediate {
                    if self.send_eager_in_turn(conn, src, o.dtype, o.count) {
                        return Ok(());
                    }
                    // A slot a fault rule failed is the communicator's error.
                    self.core.failure().check()?;
                }
                let op = self.new_op(spec, o, Operand::Src(Src::Host(src)))?;
                self.drive_one(op, name)
            }
            Dir::Recv => {
                let mut g = raw.write();
                let dst = &mut raw.bytes_of_mut(&mut g)[range];
                if immediate && self.recv_eager_in_turn(conn, dst, o.dtype) {
                    return Ok(());
                }
                let op = self.new_op(spec, o, Operand::Dst(Dst::Host(dst)))?;
                self.drive_one(op, name)
            }
        }
    }

    /// The operation `o` of `spec` on its `operand`, over its connection.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for device memory on a connection that
    /// cannot write it by RDMA (never built so: `device::call` checks).
    fn new_op<'a>(&'a self, spec: &GroupSpec, o: &OpSpec, operand: Operand<'a>) -> Result<Op<'a>> {
        let conn = self.core.connection(o.peer)?;
        let direct = self.core.config().p2p_direct;
        let rdma = conn.writes_remotely();
        let device = matches!(
            operand,
            Operand::Src(Src::Device(_)) | Operand::Dst(Dst::Device(_))
        );
        if device && !(rdma && direct) {
            return Err(Error::invalid(format!(
                "{}: device memory can move only by RDMA writes, and rank {} is over {}{}",
                spec.name,
                o.peer,
                conn.transport(),
                if direct {
                    ""
                } else {
                    " with direct writes off"
                }
            )));
        }
        Ok(match operand {
            Operand::Src(data) => {
                let rendezvous = data.len() > self.core.config().p2p_eager_limit
                    || (spec.rdma_rendezvous && rdma && data.len() > 0);
                Op::Send(SendOp::new(
                    o.peer,
                    conn,
                    &self.state,
                    data,
                    o.dtype,
                    o.count,
                    rendezvous,
                    direct,
                ))
            }
            Operand::Dst(dst) => {
                // Over shared memory the sending process never writes into
                // a receive buffer: a sender stopped after reading a grant
                // could write after the receive failed and the buffer went
                // back to its owner (a rank shrunk away, then resumed). The
                // receiver pulls the message on its own thread instead.
                let pull_only = conn.peer_segment().is_some();
                Op::Recv(RecvOp::new(
                    self.core.rank(),
                    o.peer,
                    conn,
                    &self.state,
                    dst,
                    o.dtype,
                    direct,
                    pull_only,
                ))
            }
        })
    }

    /// Polls one operation until it is done, waiting when it cannot move.
    fn drive_one(&self, mut op: Op<'_>, name: impl Fn() -> String) -> Result<()> {
        let mut stalled = Stalled::default();
        loop {
            let progressed = op.poll().map_err(|e| rename(e, &name()))?;
            if op.done() {
                return Ok(());
            }
            if progressed {
                stalled = Stalled::default();
                continue;
            }
            let conn = op.connection();
            self.wait_for_progress(
                &op,
                &mut stalled,
                || op.ready(),
                || conn.poke(),
                || op.waiting_for(),
                &name,
            )?;
        }
    }

    /// Waits until `ready` (sleeping on `first`'s notifier, calling `poke`
    /// now and then while it spins: see [`Connection::poke`]), bounded by
    /// the timeout counted from the last progress (see [`Stalled`]); on
    /// timeout or abort, the error names the operation and what it waited for.
    fn wait_for_progress(
        &self,
        first: &Op<'_>,
        stalled: &mut Stalled,
        mut ready: impl FnMut() -> bool,
        mut poke: impl FnMut(),
        waiting_for: impl FnOnce() -> String,
        name: impl Fn() -> String,
    ) -> Result<()> {
        let policy = WaitPolicy {
            timeout: stalled.remaining(self.core.config().timeout),
            ..self.core.policy()
        };
        let mut pace = first.connection().pace(&policy);
        first
            .notifier()
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
                self.core
                    .wait_error(w, &name(), waiting_for(), Some(first.peer()))
            })
    }

    fn run_locked(&self, spec: &GroupSpec, seq: u64, locked: LockedBufs<'_>) -> Result<()> {
        let name = format!("{} #{seq}", spec.name);
        let n = spec.ops.len();
        let mut srcs: Vec<Option<&[u8]>> = vec![None; n];
        let mut dsts: Vec<Option<&mut [u8]>> = (0..n).map(|_| None).collect();
        // Device operations hold no buffer (`spec.bufs`): none is `mine`.
        for (b, l) in locked {
            let mut mine: Vec<usize> = (0..n).filter(|&k| spec.ops[k].buf == b).collect();
            match l {
                Locked::Read(bytes) => {
                    for k in mine {
                        let o = &spec.ops[k];
                        srcs[k] = Some(&bytes[o.offset..o.offset + o.bytes()]);
                    }
                }
                Locked::Write(mut rest) => {
                    // Receive regions are disjoint (GroupSpec::check): split
                    // them off in address order.
                    mine.sort_by_key(|&k| spec.ops[k].offset);
                    let mut base = 0;
                    for k in mine {
                        let o = &spec.ops[k];
                        let (_, tail) = std::mem::take(&mut rest).split_at_mut(o.offset - base);
                        let (bytes, tail) = tail.split_at_mut(o.bytes());
                        dsts[k] = Some(bytes);
                        rest = tail;
                        base = o.offset + o.bytes();
                    }
                }
            }
        }
        // A rank's messages to itself: plain copies, paired in order.
        let (self_sends, self_recvs) = spec.self_ops();
        for (s, r) in self_sends.into_iter().zip(self_recvs) {
            let src = srcs[s].take().unwrap_or_default();
            if let Some(dst) = dsts[r].take() {
                dst[..src.len()].copy_from_slice(src);
            }
        }
        let mut ops: Vec<Op<'_>> = Vec::with_capacity(n);
        let mut index: Vec<Option<usize>> = vec![None; n];
        for (k, o) in spec.ops.iter().enumerate() {
            if o.peer == self.core.rank() {
                continue;
            }
            let operand = Operand::of_device(o).unwrap_or_else(|| match o.dir {
                Dir::Send => Operand::Src(Src::Host(srcs[k].take().unwrap_or_default())),
                Dir::Recv => Operand::Dst(Dst::Host(dsts[k].take().unwrap_or_default())),
            });
            let op = self.new_op(spec, o, operand)?;
            index[k] = Some(ops.len());
            ops.push(op);
        }
        // Lanes: per (peer, direction), in posting order.
        let mut lanes: Vec<((usize, Dir), VecDeque<usize>)> = Vec::new();
        for (k, o) in spec.ops.iter().enumerate() {
            let Some(i) = index[k] else { continue };
            let key = (o.peer, o.dir);
            match lanes.iter_mut().find(|(kk, _)| *kk == key) {
                Some((_, lane)) => lane.push_back(i),
                None => lanes.push((key, VecDeque::from([i]))),
            }
        }
        let mut lanes: Vec<VecDeque<usize>> = lanes.into_iter().map(|(_, l)| l).collect();
        let mut stalled = Stalled::default();
        loop {
            let mut progressed = false;
            for lane in &mut lanes {
                while let Some(&i) = lane.front() {
                    progressed |= ops[i].poll().map_err(|e| rename(e, &name))?;
                    if !ops[i].done() {
                        break;
                    }
                    lane.pop_front();
                }
            }
            lanes.retain(|l| !l.is_empty());
            if lanes.is_empty() {
                return Ok(());
            }
            if progressed {
                stalled = Stalled::default();
                continue;
            }
            let first = &ops[lanes[0][0]];
            self.wait_for_progress(
                first,
                &mut stalled,
                || lanes.iter().any(|l| ops[l[0]].ready()),
                || lanes.iter().for_each(|l| ops[l[0]].connection().poke()),
                || {
                    lanes
                        .iter()
                        .map(|l| ops[l[0]].waiting_for())
                        .collect::<Vec<_>>()
                        .join("; ")
                },
                || name.clone(),
            )?;
        }
    }
}

/// Puts the group's name into an error raised by one of its operations.
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
