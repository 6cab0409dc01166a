//! The executor of a group: move every operation along until all are done,
//! never blocking on any one of them. A buffer is locked only while an
//! operation moves its bytes (a slot's copy, a pull), never across a wait
//! for a peer: the lock policy of a collective's step.
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
use crate::comm::p2p::payload::{Dst, HostBytes, Src};
use crate::comm::p2p::receiver::RecvOp;
use crate::comm::p2p::sender::SendOp;
use crate::comm::p2p::spec::{Dir, GroupSpec, OpSpec};
use crate::host::RawBuffer;
use crate::transport::Connection;
use crate::wait::{Notifier, WaitPolicy};
use crate::{Error, Result};

/// An operation's operand: the bytes it reads or writes (host bytes,
/// locked while moved, or device memory).
enum Operand<'a> {
    Src(Src<'a>),
    Dst(Dst<'a>),
}

impl<'a> Operand<'a> {
    /// The operand of `o` of `spec`: its device memory, or its region of
    /// one of the group's host buffers.
    fn of(spec: &'a GroupSpec, o: &OpSpec) -> Self {
        if let Some(d) = o.device.clone() {
            return match o.dir {
                Dir::Send => Operand::Src(Src::Device(d)),
                Dir::Recv => Operand::Dst(Dst::Device(d)),
            };
        }
        let bytes = HostBytes::new(spec.bufs[o.buf].view.raw(), o.offset, o.bytes());
        match o.dir {
            Dir::Send => Operand::Src(Src::Host(bytes)),
            Dir::Recv => Operand::Dst(Dst::Host(bytes)),
        }
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
        self.run_ops(spec, seq)
    }

    /// One send or receive with another rank (the common case): the same
    /// operation and wait as a group's, without the group's bookkeeping.
    fn run_single(&self, spec: &GroupSpec, seq: u64) -> Result<()> {
        let o = &spec.ops[0];
        let name = || format!("{} #{seq}", spec.name);
        let operand = Operand::of(spec, o);
        // A host message of one slot first tries the immediate path (it is
        // this call's turn), its buffer locked for that attempt only: no
        // operation is built when it is done at once.
        let conn = self.core.connection(o.peer)?;
        let immediate = o.bytes() <= self.core.config().p2p_eager_limit
            && !(spec.rdma_rendezvous && conn.writes_remotely());
        match &operand {
            Operand::Src(Src::Host(src)) if immediate => {
                if src.read(|src| self.send_eager_in_turn(conn, src, o.dtype, o.count)) {
                    return Ok(());
                }
                // A slot a fault rule failed is the communicator's error.
                self.core.failure().check()?;
            }
            Operand::Dst(Dst::Host(dst))
                if immediate && dst.write(|dst| self.recv_eager_in_turn(conn, dst, o.dtype)) =>
            {
                return Ok(());
            }
            _ => {}
        }
        let op = self.new_op(spec, o, operand)?;
        self.drive_one(op, name)
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

    /// Runs a group's operations, each peer's in posting order, all at once.
    fn run_ops(&self, spec: &GroupSpec, seq: u64) -> Result<()> {
        let name = format!("{} #{seq}", spec.name);
        let n = spec.ops.len();
        // A rank's messages to itself: plain copies, paired in order.
        let (self_sends, self_recvs) = spec.self_ops();
        for (s, r) in self_sends.into_iter().zip(self_recvs) {
            copy_to_self(spec, &spec.ops[s], &spec.ops[r]);
        }
        let mut ops: Vec<Op<'_>> = Vec::with_capacity(n);
        let mut index: Vec<Option<usize>> = vec![None; n];
        for (k, o) in spec.ops.iter().enumerate() {
            if o.peer == self.core.rank() {
                continue;
            }
            let op = self.new_op(spec, o, Operand::of(spec, o))?;
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

/// Copies a message to this rank itself: `send`'s region into `recv`'s
/// (the receive region may be larger), both buffers locked for the copy
/// (`RawBuffer::read_write`; one lock when they are one buffer: the
/// regions are apart, `GroupSpec::check`).
fn copy_to_self(spec: &GroupSpec, send: &OpSpec, recv: &OpSpec) {
    let (from, to) = (
        spec.bufs[send.buf].view.raw(),
        spec.bufs[recv.buf].view.raw(),
    );
    let n = send.bytes().min(recv.bytes());
    if from.same_as(to) {
        let mut g = to.write();
        to.bytes_of_mut(&mut g)
            .copy_within(send.offset..send.offset + n, recv.offset);
        return;
    }
    RawBuffer::read_write(from, to, |src, dst| {
        dst[recv.offset..recv.offset + n].copy_from_slice(&src[send.offset..send.offset + n]);
    });
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
