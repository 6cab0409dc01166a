//! The sending side of one message, as a state machine that never blocks.
//!
//! Eager: the bytes go through the peer's slot ring, one slot-sized piece
//! per slot, each slot taken only when the receiver has returned its credit
//! (so nothing unread is ever overwritten). A zero-byte message is one empty
//! slot, so it still pairs with its receive.
//!
//! Rendezvous over shared memory: a ready-to-send slot carrying this
//! buffer's address; the receiver answers in the ring header's mailbox
//! (clear-to-send), pulls the bytes with one cross-memory copy and says so,
//! and the sender sends a done slot. This process never writes into the
//! receiver's memory. If the kernel refuses the copy, the bytes follow the
//! request through the ring instead, then the done slot.
//!
//! Over verbs the grant carries the receive buffer's remote key: the bytes
//! go by one RDMA WRITE from the send buffer (see `transport::rendezvous`), then the done slot.
//!
//! A device payload (GPUDirect RDMA, see `payload`) always goes by
//! rendezvous over verbs: the NIC writes it from device memory.
//!
//! Over tcp, rendezvous data follows the request through the ring at once;
//! the receiver's progress engine reads it from the socket straight into the
//! receive buffer once the receiver has granted it (so one copy, by the
//! kernel, on the receiving side).

use crate::comm::p2p::P2pState;
use crate::comm::p2p::payload::Src;
use crate::comm::p2p::stats::Stat;
use crate::plan::signature::{self, P2pSlot};
use crate::transport::Connection;
use crate::transport::rendezvous::Registration;
use crate::wait::Notifier;
use crate::{DataType, Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Sending eager slots; `sent` bytes so far, `slots` slots so far.
    Eager {
        sent: usize,
        slots: u64,
    },
    /// The rendezvous request is still to be sent.
    Request,
    /// Waiting for the receiver's grant number `grant`.
    AwaitGrant {
        grant: u64,
    },
    /// Waiting for the receiver to finish pulling the message from our
    /// buffer (`pullable`: it is a host buffer we let it read).
    AwaitPull {
        grant: u64,
        pullable: bool,
    },
    /// Our RDMA WRITE (work request `wr`) of the message into the granted
    /// buffer is in flight; our buffer is read until it completes.
    AwaitWrite {
        wr: u64,
    },
    /// Streaming the bytes through the ring (direct copy refused).
    Stream {
        sent: usize,
    },
    /// The done slot is still to be sent.
    Finish,
    Done,
}

/// One message on its way to `peer`.
pub(super) struct SendOp<'a> {
    pub peer: usize,
    conn: &'a Connection,
    state_of_comm: &'a P2pState,
    data: Src<'a>,
    dtype: DataType,
    count: usize,
    /// May write into the receiver's memory directly.
    direct: bool,
    /// The rendezvous number of this message (once requested), modulo 2^36.
    rdv: u64,
    state: State,
    /// The send buffer's registration while the NIC reads it.
    reg: Option<Registration>,
}

impl<'a> SendOp<'a> {
    /// A send of `count` elements of `dtype` held in `data`; `rendezvous`
    /// when the message is above the eager limit on a transport that has it
    /// (always, for a non-empty device payload: the caller checked that the
    /// connection writes by RDMA).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        peer: usize,
        conn: &'a Connection,
        state_of_comm: &'a P2pState,
        data: Src<'a>,
        dtype: DataType,
        count: usize,
        rendezvous: bool,
        direct: bool,
    ) -> SendOp<'a> {
        let device = matches!(data, Src::Device(_)) && data.len() > 0;
        let state = if rendezvous || device {
            State::Request
        } else {
            State::Eager { sent: 0, slots: 0 }
        };
        SendOp {
            peer,
            conn,
            state_of_comm,
            data,
            dtype,
            count,
            direct,
            rdv: 0,
            state,
            reg: None,
        }
    }

    /// True once the receiver has (or will have, in order) the whole message.
    pub(super) fn done(&self) -> bool {
        self.state == State::Done
    }

    fn sig(&self, slot: P2pSlot) -> u64 {
        match (slot, self.state) {
            // Data slots carry the rendezvous number instead of the count,
            // so a proxy on the receiving side can tell whose they are.
            (P2pSlot::Data, _) => signature::p2p(slot, self.dtype, self.rdv as usize),
            _ => signature::p2p(slot, self.dtype, self.count),
        }
    }

    /// Fills and publishes slots from `data[*sent..]` while credit lasts;
    /// returns whether any slot went out. At least one slot is sent even for
    /// an empty message when `min_one`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a device payload, which the CPU
    /// cannot read (never reached: device sends take the RDMA path); a
    /// slot's failure to publish ([`Connection::commit_send`]).
    fn push(
        &self,
        sent: &mut usize,
        slots: &mut u64,
        kind: P2pSlot,
        min_one: bool,
    ) -> Result<bool> {
        // The send buffer is read-locked while slots are filled, never
        // while this operation waits for credit.
        let pushed = self.data.read_host(|data| -> Result<bool> {
            let mut progressed = false;
            while *sent < data.len() || (min_one && *slots == 0) {
                let Some(slot) = self.acquire()? else {
                    break;
                };
                let n = slot.len().min(data.len() - *sent);
                slot[..n].copy_from_slice(&data[*sent..*sent + n]);
                self.commit(n, kind)?;
                *sent += n;
                *slots += 1;
                progressed = true;
            }
            Ok(progressed)
        });
        pushed.unwrap_or_else(|| {
            Err(Error::invalid(format!(
                "send to {}: device memory can only be sent by RDMA, not through slots",
                self.peer
            )))
        })
    }

    /// The next outbound slot, if credit allows.
    ///
    /// # Errors
    /// As [`Connection::try_acquire_send`], as the error of this send.
    #[allow(clippy::mut_from_ref)] // the credit protocol gives the slot to one writer
    fn acquire(&self) -> Result<Option<&mut [u8]>> {
        self.conn
            .try_acquire_send()
            .map_err(|e| self.conn.slot_error(e, "send"))
    }

    /// Publishes the slot just filled with `len` bytes, signed as a slot
    /// of `kind`.
    ///
    /// # Errors
    /// As [`Connection::commit_send`], as the error of this send.
    fn commit(&self, len: usize, kind: P2pSlot) -> Result<()> {
        self.conn
            .commit_send(len, self.sig(kind))
            .map_err(|e| self.conn.slot_error(e, "send"))
    }

    /// Sends one empty control slot, if credit allows.
    ///
    /// # Errors
    /// As [`SendOp::commit`].
    fn control(&self, kind: P2pSlot) -> Result<bool> {
        self.control_with(kind, &[])
    }

    /// Sends one control slot carrying `payload`, if credit allows.
    ///
    /// # Errors
    /// As [`SendOp::commit`].
    fn control_with(&self, kind: P2pSlot, payload: &[u8]) -> Result<bool> {
        let Some(slot) = self.acquire()? else {
            return Ok(false);
        };
        slot[..payload.len()].copy_from_slice(payload);
        self.commit(payload.len(), kind)?;
        Ok(true)
    }

    /// Moves the message along as far as it can without waiting; returns
    /// whether anything happened.
    ///
    /// # Errors
    /// [`Error::RemoteFailed`] when the receiver granted a buffer too small
    /// (it disagrees about the message).
    pub(super) fn poll(&mut self) -> Result<bool> {
        let stats = &self.state_of_comm.stats;
        match self.state {
            State::Eager {
                mut sent,
                mut slots,
            } => {
                let p = self.push(&mut sent, &mut slots, P2pSlot::Eager, true)?;
                self.state = if sent == self.data.len() && slots > 0 {
                    stats.add(Stat::SentEagerMessages, 1);
                    stats.add(Stat::SentEagerBytes, self.data.len());
                    State::Done
                } else {
                    State::Eager { sent, slots }
                };
                Ok(p)
            }
            State::Request => {
                // Over shared memory the request says where our data is, so
                // the receiver can pull the back part while we write the
                // front part: one copy per byte, both cores copying.
                let sent = match (self.conn.peer_segment(), self.data.host_span()) {
                    (Some(_), Some(span)) => self.control_with(
                        P2pSlot::ReadyToSend,
                        &super::wire::Source::of(span).encode(),
                    )?,
                    _ => self.control(P2pSlot::ReadyToSend)?,
                };
                if !sent {
                    return Ok(false);
                }
                let grant = self.state_of_comm.next_request(self.peer);
                self.rdv = grant & ((1 << 36) - 1);
                stats.add(Stat::SentRendezvousMessages, 1);
                // Over tcp the data follows at once: the receiver's network
                // thread places it straight into the granted buffer (or in
                // slots while the grant is not there yet). Over shared memory
                // and verbs the sender waits for the grant and writes it
                // directly.
                // (Over verbs only with direct writes allowed; else the
                // bytes stream through the slots.)
                let by_rdma = self.direct && self.conn.writes_remotely();
                self.state = if self.conn.peer_segment().is_some() || by_rdma {
                    State::AwaitGrant { grant }
                } else {
                    State::Stream { sent: 0 }
                };
                Ok(true)
            }
            State::AwaitGrant { grant } => {
                let Some((addr, len, pid)) = self.conn.send.mailbox().granted(grant) else {
                    return Ok(false);
                };
                // The receiver asks us to write the first `len` bytes: all of
                // them (over verbs, or through the ring), or none over
                // shared memory, where it pulls the message itself.
                let front = usize::try_from(len).unwrap_or(usize::MAX);
                if front > self.data.len() {
                    return Err(Error::RemoteFailed {
                        peer: self.peer,
                        op: "send".into(),
                        cause: format!(
                            "it granted {len} bytes for a message of {} bytes",
                            self.data.len()
                        ),
                    });
                }
                if self.direct && self.conn.writes_remotely() {
                    // `pid` carries the receive buffer's remote key.
                    let Some(wr) = self.conn.write_remote(
                        &self.data.place(),
                        front,
                        (addr, pid),
                        &mut self.reg,
                    )?
                    else {
                        return Ok(false);
                    };
                    self.state = State::AwaitWrite { wr };
                    return Ok(true);
                }
                // Over shared memory (`front` is 0) this process never writes
                // into the receiver's memory: it waits for the pull. Any
                // other grant: through the ring.
                self.state = if front < self.data.len() {
                    State::AwaitPull {
                        grant,
                        pullable: self.pullable(),
                    }
                } else {
                    State::Stream { sent: 0 }
                };
                Ok(true)
            }
            State::AwaitPull { grant, pullable } => {
                let Some(pulled) = self.conn.send.mailbox().pull_done(grant) else {
                    return Ok(false);
                };
                // Our buffer is no longer read: finish, or stream it all if
                // the pull failed (the receiver then copies every slot).
                self.state = if pullable && pulled {
                    stats.add(Stat::SentDirectBytes, self.data.len());
                    State::Finish
                } else {
                    State::Stream { sent: 0 }
                };
                Ok(true)
            }
            State::AwaitWrite { wr } => {
                if !self.conn.remote_write_done(wr) {
                    return Ok(false);
                }
                self.reg = None;
                stats.add(Stat::SentDirectBytes, self.data.len());
                self.state = State::Finish;
                Ok(true)
            }
            State::Stream { mut sent } => {
                let mut slots = 0;
                let p = self.push(&mut sent, &mut slots, P2pSlot::Data, false)?;
                self.state = if sent == self.data.len() {
                    stats.add(Stat::SentStreamedBytes, self.data.len());
                    State::Finish
                } else {
                    State::Stream { sent }
                };
                Ok(p)
            }
            State::Finish => {
                if !self.control(P2pSlot::Done)? {
                    return Ok(false);
                }
                self.state = State::Done;
                Ok(true)
            }
            State::Done => Ok(false),
        }
    }

    /// Whether the receiver may pull the message from our memory: a host
    /// buffer, with direct copies allowed.
    fn pullable(&self) -> bool {
        self.direct && self.data.host_span().is_some()
    }

    /// True when [`SendOp::poll`] could make progress now.
    pub(super) fn ready(&self) -> bool {
        match self.state {
            State::AwaitGrant { grant } => self.conn.send.mailbox().granted(grant).is_some(),
            State::AwaitPull { grant, .. } => self.conn.send.mailbox().pull_done(grant).is_some(),
            State::AwaitWrite { wr } => self.conn.remote_write_done(wr),
            State::Done => false,
            _ => self.conn.send.has_credit(),
        }
    }

    /// The connection this operation moves bytes over.
    pub(super) fn connection(&self) -> &'a Connection {
        self.conn
    }

    /// What a thread waiting for this operation sleeps on.
    pub(super) fn notifier(&self) -> &'a Notifier {
        match self.state {
            State::AwaitGrant { .. } | State::AwaitPull { .. } => {
                self.conn.send.mailbox().notifier()
            }
            _ => self.conn.send.credit_notifier(),
        }
    }

    /// What this operation waits for, for a timeout's message.
    pub(super) fn waiting_for(&self) -> String {
        let what = match self.state {
            State::AwaitGrant { .. } => "a clear-to-send (it has not posted the matching recv)",
            State::AwaitPull { .. } => "the receiver to finish pulling the message",
            State::AwaitWrite { .. } => "the RDMA write of the message to complete",
            _ => "a free slot (credit)",
        };
        format!(
            "{what} from rank {} over {}",
            self.peer,
            self.conn.transport()
        )
    }
}
