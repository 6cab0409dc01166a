//! The receiving side of one message, as a state machine that never blocks.
//!
//! The first slot says what the message is (its signature: eager or
//! rendezvous, element type, element count). A message larger than the
//! receive buffer, of another element type, or a slot from a collective is an
//! error naming both sides; a smaller message fills the front of the buffer.
//! For rendezvous the receiver grants its buffer's address in the mailbox and
//! waits for the done slot (with any streamed data before it).
//!
//! A device receive (GPUDirect RDMA, see `payload`) takes its bytes only
//! from the sender's RDMA write; bytes that arrive in slots (an eager
//! message, or a rendezvous streamed through the ring) are refused with an
//! error naming the cause, since the CPU cannot write device memory.

use crate::comm::p2p::P2pState;
use crate::comm::p2p::payload::Dst;
use crate::comm::p2p::stats::Stat;
use crate::comm::p2p::{cma, wire};
use crate::plan::signature::{self, P2pSlot};
use crate::transport::Connection;
use crate::transport::rendezvous::{Registration, forget_registration};
use crate::wait::Notifier;
use crate::{DataType, Error, Result};
use streamcomm_types::MismatchNote;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Waiting for the first slot.
    Header,
    /// Eager slots: `got` of `total` bytes so far, each slot signed `sig`.
    Eager {
        got: usize,
        total: usize,
        sig: u64,
    },
    /// Granted: `got` of `total` bytes so far (`placed` of them put in
    /// place by the progress engine), until the done slot.
    Granted {
        got: usize,
        placed: usize,
        total: usize,
    },
    Done,
}

impl Drop for RecvOp<'_> {
    fn drop(&mut self) {
        self.withdraw();
    }
}

/// One message on its way from `peer`.
pub(super) struct RecvOp<'a> {
    pub peer: usize,
    /// This rank.
    rank: usize,
    conn: &'a Connection,
    state_of_comm: &'a P2pState,
    dst: Dst<'a>,
    dtype: DataType,
    /// The grant given to the sender, until the message is complete.
    granted: Option<u64>,
    /// May pull part of a rendezvous message from the sender's memory.
    direct: bool,
    /// Over shared memory: the sending process never writes into `dst`
    /// (it could write after this receive failed, were it stopped and
    /// woken); a rendezvous grant asks it to write nothing, and this
    /// receive pulls the whole message itself (or takes it from the ring
    /// when it cannot).
    pull_only: bool,
    state: State,
    /// Over verbs, the receive buffer's registration while the peer's NIC
    /// may write it.
    reg: Option<Registration>,
}

impl<'a> RecvOp<'a> {
    /// A receive by `rank` into `dst` (elements of `dtype`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        rank: usize,
        peer: usize,
        conn: &'a Connection,
        state_of_comm: &'a P2pState,
        dst: Dst<'a>,
        dtype: DataType,
        direct: bool,
        pull_only: bool,
    ) -> RecvOp<'a> {
        RecvOp {
            peer,
            rank,
            conn,
            state_of_comm,
            dst,
            dtype,
            granted: None,
            direct,
            pull_only,
            state: State::Header,
            reg: None,
        }
    }

    /// True once the message is in the buffer.
    pub(super) fn done(&self) -> bool {
        self.state == State::Done
    }

    fn mismatch(&self, cause: String) -> Error {
        Error::RemoteFailed {
            peer: self.peer,
            op: "recv".into(),
            cause,
        }
    }

    /// Runs `f` on the bytes of `range`, write-locked for the copy by the
    /// CPU (and only for it: never across a wait for the sender); refused
    /// for device memory.
    fn with_host_bytes<R>(
        &self,
        range: std::ops::Range<usize>,
        how: &str,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R> {
        if range.is_empty() {
            return Ok(f(&mut []));
        }
        self.dst
            .write_host(|b| f(&mut b[range]))
            .ok_or_else(|| Error::RemoteFailed {
                peer: self.peer,
                op: "recv".into(),
                cause: format!(
                    "it sent {how}, but this receive is into device memory, which only an RDMA write can fill (send from a device buffer of a CudaComm, with direct writes on)"
                ),
            })
    }

    /// This receive's call as the peer's slot disagreed with it: an
    /// [`Error::Mismatch`] blaming the sender (a pair only: which side is
    /// wrong is the program's to say).
    fn call_mismatch(&self, theirs: u64) -> Error {
        let ours = signature::recv(self.dtype, self.dst.len() / self.dtype.size());
        let note = MismatchNote {
            suspect: self.peer,
            suspect_sig: theirs,
            witness: self.rank,
            witness_sig: ours,
        };
        signature::mismatch_error("recv", self.rank, note, Some(ours), false)
    }

    /// Consumes what has arrived without waiting; returns whether anything
    /// happened.
    ///
    /// # Errors
    /// [`Error::Mismatch`] when the peer sent something other than a
    /// message this receive can hold (naming both calls);
    /// [`Error::RemoteFailed`] when a message's slots do not follow the
    /// protocol; [`Error::Transport`] for a corrupted, lost, repeated or
    /// injected slot.
    pub(super) fn poll(&mut self) -> Result<bool> {
        let mut progressed = false;
        while self.state != State::Done {
            let Some((slot, sig)) = self
                .conn
                .try_acquire_recv()
                .map_err(|e| self.conn.slot_error(e, "recv"))?
            else {
                break;
            };
            self.state = self.consume(sig, slot)?;
            self.conn.release_recv();
            progressed = true;
        }
        Ok(progressed)
    }

    /// Applies one slot; returns the next state.
    fn consume(&mut self, sig: u64, slot: &[u8]) -> Result<State> {
        let stats = &self.state_of_comm.stats;
        match self.state {
            State::Header => {
                let Some((kind, dtype, count)) = signature::parse_p2p(sig) else {
                    return Err(self.call_mismatch(sig));
                };
                if dtype != Some(self.dtype) {
                    return Err(self.call_mismatch(sig));
                }
                let total = usize::try_from(count)
                    .ok()
                    .and_then(|c| c.checked_mul(self.dtype.size()))
                    .unwrap_or(usize::MAX);
                if total > self.dst.len() {
                    return Err(self.call_mismatch(sig));
                }
                match kind {
                    P2pSlot::Eager => self.eager(0, total, sig, slot),
                    P2pSlot::ReadyToSend => {
                        let grant = self.state_of_comm.next_grant(self.peer);
                        // This request is the slot at `head`; its data slots
                        // (if any travel through the ring) follow it.
                        let first_seq = self.conn.recv.head() + 1;
                        // Over shared memory we pull the whole message from
                        // the sender's buffer: its process never writes
                        // into ours (see `pull_only`).
                        let host = matches!(self.dst, Dst::Host(_));
                        let source = wire::Source::decode(slot)
                            .filter(|s| host && self.direct && s.len == total as u64);
                        let front = match source {
                            _ if self.pull_only => 0,
                            _ => total,
                        };
                        // Over verbs the grant carries the remote key of the
                        // registered buffer where `pid` goes.
                        let key = match self.conn.register_for_peer(&self.dst.place(), total)? {
                            Some((rkey, reg)) => {
                                self.reg = Some(reg);
                                rkey
                            }
                            None => std::process::id(),
                        };
                        self.conn
                            .grant(grant, self.dst.addr(), front as u64, key, first_seq);
                        if self.pull_only {
                            self.state_of_comm
                                .pull_only_grants
                                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        match (source, front < total) {
                            (Some(src), true) => {
                                let pulled = self.with_host_bytes(
                                    front..total,
                                    "a pulled rendezvous",
                                    |back| cma::pull(src.pid, src.addr + front as u64, back),
                                )?;
                                let ok = match pulled {
                                    Ok(()) => true,
                                    Err(e) => {
                                        self.state_of_comm.direct_refused(self.peer, &e);
                                        false
                                    }
                                };
                                self.conn.recv.mailbox().pulled(grant, ok);
                            }
                            // Pull-only without a source to pull from: the
                            // sender streams the message through the ring.
                            (None, true) => self.conn.recv.mailbox().pulled(grant, false),
                            _ => {}
                        }
                        self.granted = Some(grant);
                        Ok(State::Granted {
                            got: 0,
                            placed: 0,
                            total,
                        })
                    }
                    P2pSlot::Data | P2pSlot::Done | P2pSlot::Placed => Err(self.mismatch(format!(
                        "it sent {} before any request",
                        signature::describe(sig)
                    ))),
                }
            }
            State::Eager {
                got,
                total,
                sig: first,
            } => {
                if sig != first {
                    return Err(self.mismatch(format!(
                        "it sent {} in the middle of {}",
                        signature::describe(sig),
                        signature::describe(first)
                    )));
                }
                self.eager(got, total, sig, slot)
            }
            State::Granted { got, placed, total } => match signature::parse_p2p(sig) {
                Some((P2pSlot::Data, ..)) if got + slot.len() <= total => {
                    self.with_host_bytes(
                        got..got + slot.len(),
                        "rendezvous bytes through the ring",
                        |b| b.copy_from_slice(slot),
                    )?;
                    Ok(State::Granted {
                        got: got + slot.len(),
                        placed,
                        total,
                    })
                }
                // Already in place (tcp): nothing to copy.
                Some((P2pSlot::Placed, ..)) if got + slot.len() <= total => Ok(State::Granted {
                    got: got + slot.len(),
                    placed: placed + slot.len(),
                    total,
                }),
                Some((P2pSlot::Done, ..)) if got == 0 || got == total => {
                    // The peer's write landed before its done slot.
                    self.reg = None;
                    self.withdraw();
                    if got == 0 {
                        stats.add(Stat::RecvDirectBytes, total);
                    } else {
                        stats.add(Stat::RecvDirectBytes, placed);
                        stats.add(Stat::RecvStreamedBytes, total - placed);
                    }
                    Ok(State::Done)
                }
                _ => Err(self.mismatch(format!(
                    "it sent {} ({} bytes) after {got} of {total} rendezvous bytes",
                    signature::describe(sig),
                    slot.len()
                ))),
            },
            State::Done => Ok(State::Done),
        }
    }

    /// Copies one eager slot holding bytes `got..` of a `total`-byte message.
    fn eager(&mut self, got: usize, total: usize, sig: u64, slot: &[u8]) -> Result<State> {
        let expect = (total - got).min(self.conn.recv.shape().slot_bytes);
        if slot.len() != expect {
            return Err(self.mismatch(format!(
                "its slot holds {} bytes where {expect} were expected (byte {got} of {total})",
                slot.len()
            )));
        }
        self.with_host_bytes(got..got + expect, "an eager message", |b| {
            b.copy_from_slice(slot)
        })?;
        let got = got + expect;
        if got == total {
            self.state_of_comm.stats.add(Stat::RecvEagerBytes, total);
            Ok(State::Done)
        } else {
            Ok(State::Eager { got, total, sig })
        }
    }

    /// Withdraws the grant, waiting until the progress engine no longer
    /// writes into the buffer (on every exit, so that an operation that
    /// failed half-way never leaves a writer behind its buffer's lock).
    fn withdraw(&mut self) {
        if let Some(grant) = self.granted.take() {
            self.conn.recv.mailbox().revoke(grant);
        }
        // Ended before the message did: the peer's NIC may still write, so
        // the buffer's registration must not stay cached.
        if self.reg.take().is_some()
            && let Dst::Host(_) = &self.dst
        {
            forget_registration(self.dst.addr(), self.dst.len());
        }
    }

    /// True when [`RecvOp::poll`] could make progress now.
    pub(super) fn ready(&self) -> bool {
        self.state != State::Done && self.conn.recv.has_data()
    }

    /// The connection this operation moves bytes over.
    pub(super) fn connection(&self) -> &'a Connection {
        self.conn
    }

    /// What a thread waiting for this operation sleeps on.
    pub(super) fn notifier(&self) -> &'a Notifier {
        self.conn.recv.data_notifier()
    }

    /// What this operation waits for, for a timeout's message.
    pub(super) fn waiting_for(&self) -> String {
        let what = match self.state {
            State::Header => "a message",
            State::Eager { .. } => "the rest of an eager message",
            _ => "the end of a rendezvous message",
        };
        format!(
            "{what} from rank {} over {}",
            self.peer,
            self.conn.transport()
        )
    }
}
