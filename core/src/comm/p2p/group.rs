//! A group lowered into items of the one executor (`comm::exec`): each
//! send or receive with another rank is an item (a state machine of its
//! own, `sender.rs`, `receiver.rs`), those to one peer in one direction a
//! lane in posting order (so messages between a pair arrive in the order
//! they were posted); a rank's messages to itself are plain copies. A
//! buffer is locked only while an operation moves its bytes (a slot's copy,
//! a pull), never across a wait for a peer: the lock policy of a
//! collective's step.

use std::collections::VecDeque;

use crate::comm::exec::{self, Item};
use crate::comm::p2p::P2p;
use crate::comm::p2p::payload::{Dst, HostBytes, Src};
use crate::comm::p2p::receiver::RecvOp;
use crate::comm::p2p::sender::SendOp;
use crate::comm::p2p::spec::{Dir, GroupSpec, OpSpec};
use crate::host::RawBuffer;
use crate::transport::Connection;
use crate::wait::Notifier;
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

impl<'a> Item<'a> for Op<'a> {
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
    fn waits_on(&self) -> Option<(&'a Connection, &'a Notifier)> {
        Some(match self {
            Op::Send(s) => (s.connection(), s.notifier()),
            Op::Recv(r) => (r.connection(), r.notifier()),
        })
    }
    fn waiting_for(&self) -> String {
        match self {
            Op::Send(s) => s.waiting_for(),
            Op::Recv(r) => r.waiting_for(),
        }
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
        let mut op = self.new_op(spec, o, operand)?;
        exec::drive(&self.core, &mut op, name)
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

    /// Runs a group's operations, each peer's in posting order, all at once.
    fn run_ops(&self, spec: &GroupSpec, seq: u64) -> Result<()> {
        let name = format!("{} #{seq}", spec.name);
        // A rank's messages to itself: plain copies, paired in order.
        let (self_sends, self_recvs) = spec.self_ops();
        for (s, r) in self_sends.into_iter().zip(self_recvs) {
            copy_to_self(spec, &spec.ops[s], &spec.ops[r]);
        }
        // Lanes: per (peer, direction), in posting order.
        let mut lanes: Vec<((usize, Dir), VecDeque<Op<'_>>)> = Vec::new();
        for o in &spec.ops {
            if o.peer == self.core.rank() {
                continue;
            }
            let op = self.new_op(spec, o, Operand::of(spec, o))?;
            let key = (o.peer, o.dir);
            match lanes.iter_mut().find(|(k, _)| *k == key) {
                Some((_, lane)) => lane.push_back(op),
                None => lanes.push((key, VecDeque::from([op]))),
            }
        }
        let lanes = lanes.into_iter().map(|(_, lane)| lane).collect();
        exec::drive_lanes(&self.core, lanes, || name.clone())
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
