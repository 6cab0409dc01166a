//! One tcp peer's transfer state: moves slots between local rings and sockets.
//!
//! For each tcp peer, the stream fills a local *staging* ring and reads a
//! local *inbound* ring. The progress engine ([`super::source`]), or a
//! stream that would otherwise wait for it ([`super::inline`]), writes staged slots to the peer's
//! sockets (slot `k` on socket `k % nsockets`) and reads frames from them
//! straight into free inbound slots, publishing slots in order. There are no
//! separate credit messages: a reader stops reading a socket while its
//! inbound ring is full, and TCP's own flow control holds the sender back, so
//! memory is bounded by the rings and the socket buffers, whatever the
//! message size.
//!
//! A socket that closes or fails puts the communicator in its error state
//! (naming the peer), which releases every wait, and the abort is told to
//! every other peer, so they fail promptly too.

use std::io::{ErrorKind, IoSlice, Write};
use std::net::TcpStream;

use super::frame::{ABORT_LEN, CLOSE_LEN, FrameHeader, HEADER_BYTES, NOTE_LEN};
use super::read_ahead::ReadAhead;
use crate::Error;
use crate::transport::placement::Placement;
use crate::transport::ring::RingEnd;
use streamcomm_types::MismatchNote;

/// One socket's transfer state.
pub(super) struct Sock {
    pub(super) stream: TcpStream,
    /// Next staged slot this socket carries, and bytes of it already written
    /// (header included).
    tx_next: u64,
    tx_done: usize,
    /// Next inbound slot this socket carries; header bytes read so far; the
    /// decoded header once complete, and payload bytes read.
    rx_next: u64,
    rx_hdr: [u8; HEADER_BYTES],
    rx_hdr_got: usize,
    rx_len: Option<usize>,
    rx_got: usize,
    /// Signature of the frame being read.
    rx_sig: u64,
    /// Where the frame's payload goes instead of its slot: rendezvous data
    /// the receiver has granted, as `(grant, address)`.
    rx_place: Option<(u64, u64)>,
    /// The peer said goodbye on this socket: nothing more will arrive.
    rx_closed: bool,
    /// The signatures of a note frame, for the abort frame that follows it.
    rx_note: Option<(u64, u64)>,
    /// Bytes read from the socket ahead of the frame being read.
    rx: ReadAhead,
}

/// Where a peer's connection stands: made on first use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LinkState {
    /// Never used: no socket.
    Unused,
    /// A stream staged a slot for the peer or waits for one: the engine
    /// is to start making the connection.
    Wanted,
    /// The engine is making it (dialing, or accepting the peer's).
    Opening,
    /// Connected: the sockets are attached.
    Up,
}

/// One tcp peer as the engine sees it.
pub(crate) struct PeerIo {
    /// The peer's rank.
    pub peer: usize,
    /// Staging ring, receiver end (we drain it).
    pub staging: RingEnd,
    /// Inbound ring, sender end (we fill it).
    pub inbound: RingEnd,
    pub(super) socks: Vec<Sock>,
    /// Whether the peer is connected, or wanted ([`PeerIo::attach`]).
    pub(super) link: LinkState,
    /// Staged slots fully written, not yet released (by slot % nsteps).
    sent: Vec<bool>,
    staging_head: u64,
    /// Inbound slots fully read, not yet published.
    arrived: Vec<bool>,
    inbound_tail: u64,
    /// The peer sent a frame that breaks the protocol (lost, repeated or
    /// corrupt): its sockets still work, so it is told of the abort.
    pub(super) bad_frame: bool,
    /// The peer sent its abort notice: it still reads its sockets, so it is
    /// told of ours (whose mismatch record may hold a call it lacks).
    pub(super) peer_aborted: bool,
    /// The poll events the engine last went to sleep with, so that
    /// a stream moving bytes itself knows when to wake it ([`PeerIo::needs_net`]).
    pub(super) polled: Vec<libc::c_short>,
    /// The engine gave up on this peer (it failed): nobody moves
    /// its bytes any more.
    pub(super) dead: bool,
    /// Which arriving slots may be written straight into a receive buffer.
    placement: Placement,
    /// An error a stream met while moving this peer's bytes, for the
    /// engine to report (it owns failure handling).
    pub(super) inline_error: Option<Error>,
    /// Reads by waiting streams so far ([`PeerIo::stream_read`]), and the
    /// count when the engine last armed its poll ([`PeerIo::streams_reading`]).
    stream_reads: u64,
    stream_reads_seen: u64,
}

impl std::fmt::Debug for PeerIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PeerIo(rank {}, {} sockets)",
            self.peer,
            self.socks.len()
        )
    }
}

impl PeerIo {
    /// Wraps a peer's rings, not connected yet ([`PeerIo::attach`]
    /// connects it, on first use).
    pub(crate) fn new(
        peer: usize,
        staging: RingEnd,
        inbound: RingEnd,
        placement: Placement,
    ) -> PeerIo {
        let nsteps = staging.shape().nsteps;
        PeerIo {
            peer,
            staging,
            inbound,
            socks: Vec::new(),
            link: LinkState::Unused,
            sent: vec![false; nsteps],
            staging_head: 0,
            arrived: vec![false; nsteps],
            inbound_tail: 0,
            bad_frame: false,
            peer_aborted: false,
            polled: Vec::new(),
            dead: false,
            placement,
            inline_error: None,
            stream_reads: 0,
            stream_reads_seen: 0,
        }
    }

    /// Connects the peer: its sockets, in order (slot `k` travels on
    /// socket `k % sockets.len()`), ready for I/O ([`super::connector`]
    /// made them, on first use).
    pub(crate) fn attach(&mut self, sockets: Vec<TcpStream>) {
        self.socks = sockets
            .into_iter()
            .enumerate()
            .map(|(j, stream)| Sock {
                stream,
                tx_next: j as u64,
                tx_done: 0,
                rx_next: j as u64,
                rx_hdr: [0; HEADER_BYTES],
                rx_hdr_got: 0,
                rx_len: None,
                rx_got: 0,
                rx_sig: 0,
                rx_place: None,
                rx_closed: false,
                rx_note: None,
                rx: ReadAhead::new(),
            })
            .collect();
        self.polled.clear();
        self.link = LinkState::Up;
    }

    /// Marks the link wanted if it was never used: a stream has staged a
    /// slot for the peer or waits for one from it.
    fn first_use(&mut self) {
        if self.link == LinkState::Unused {
            self.link = LinkState::Wanted;
        }
    }

    /// True when a stream wants the link and the engine has yet to start
    /// making it.
    pub(super) fn wants_link(&self) -> bool {
        self.link == LinkState::Wanted
    }

    /// A waiting stream read this peer's sockets itself ([`super::inline`]).
    pub(super) fn stream_read(&mut self) {
        self.stream_reads = self.stream_reads.wrapping_add(1);
    }

    /// True when a stream sleeps on one of this peer's rings (for a slot,
    /// for credit or for a grant): it no longer reads the sockets itself.
    pub(super) fn has_sleepers(&self) -> bool {
        self.inbound.stream_sleeps_on(&self.staging)
    }

    /// True when streams read this peer's sockets since the last call: the
    /// engine then leaves reading to them rather than be woken by every
    /// frame (a third thread on the rank's cores, each wake-up a context
    /// switch) and only looks at the sockets on a short timer
    /// ([`super::source`]).
    pub(super) fn streams_reading(&mut self) -> bool {
        let reading = self.stream_reads != self.stream_reads_seen;
        self.stream_reads_seen = self.stream_reads;
        reading
    }

    /// Moves whatever can move now on every socket, both ways, without
    /// blocking: what the engine does after `poll`, done by a
    /// stream that would otherwise wait for it ([`super::inline`]).
    ///
    /// # Errors
    /// The first socket or protocol error, naming the peer.
    pub(crate) fn pump(&mut self) -> Result<(), Error> {
        self.first_use();
        for j in 0..self.socks.len() {
            self.send_on(j)?;
            self.recv_on(j)?;
        }
        self.advance();
        Ok(())
    }

    /// Writes what is staged to the sockets, without reading: what a
    /// stream that has just staged a slot does (its next wait reads).
    ///
    /// # Errors
    /// The first socket error, naming the peer.
    pub(crate) fn pump_out(&mut self) -> Result<(), Error> {
        self.first_use();
        for j in 0..self.socks.len() {
            self.send_on(j)?;
        }
        self.advance();
        Ok(())
    }

    /// True when the engine must look again: a socket now needs
    /// an event it did not poll for (a slot left half sent, room again in
    /// the inbound ring), or a finished frame waits for a slot.
    pub(crate) fn needs_net(&self) -> bool {
        // Socket by socket, without collecting: a stream calls this after
        // every pump, and an allocation here was most of a host call's.
        self.wants_link()
            || self.socks.len() != self.polled.len()
            || (0..self.socks.len()).any(|j| self.interest_of(j) & !self.polled[j] != 0)
            || (0..self.socks.len()).any(|j| self.completable(j))
    }

    /// True once the engine has given up on this peer, or a stream met an
    /// error on it that the engine has yet to report: either way, nobody
    /// moves its bytes any more (a second pass would read on from the
    /// middle of the frame that failed, and could report a different error
    /// than the first).
    pub(crate) fn is_failed(&self) -> bool {
        self.dead || self.inline_error.is_some()
    }

    /// Keeps an error met by a stream for the engine to report
    /// (the first one only).
    pub(crate) fn set_inline_error(&mut self, e: Error) {
        self.inline_error.get_or_insert(e);
    }

    fn nsocks(&self) -> u64 {
        self.socks.len() as u64
    }

    fn fail(&self, cause: String) -> Error {
        Error::Transport {
            transport: "tcp",
            peer: self.peer,
            cause,
        }
    }

    /// Writes staged slots to socket `j` until it would block; true if anything moved.
    pub(super) fn send_on(&mut self, j: usize) -> Result<bool, Error> {
        let nsteps = self.sent.len() as u64;
        let s = self.nsocks();
        let mut moved = false;
        {
            loop {
                let k = self.socks[j].tx_next;
                let slot = match self.staging.slot_for_read(k) {
                    Ok(Some(slot)) => slot,
                    Ok(None) => break,
                    Err(e) => return Err(self.fail(format!("staging ring corrupted: {e:?}"))),
                };
                // The frame carries the slot's own sequence number (its index,
                // unless a fault was injected): the receiver checks it.
                let header = FrameHeader {
                    len: slot.len() as u32,
                    seq: self.staging.slot_seq(k),
                    sig: self.staging.slot_sig(k),
                }
                .encode();
                let sock = &mut self.socks[j];
                let done = sock.tx_done;
                let total = HEADER_BYTES + slot.len();
                let r = if done < HEADER_BYTES {
                    sock.stream
                        .write_vectored(&[IoSlice::new(&header[done..]), IoSlice::new(slot)])
                } else {
                    sock.stream.write(&slot[done - HEADER_BYTES..])
                };
                match r {
                    Ok(0) => return Err(self.fail("connection closed while sending".into())),
                    Ok(n) => {
                        moved = true;
                        sock.tx_done += n;
                        if sock.tx_done == total {
                            sock.tx_done = 0;
                            sock.tx_next += s;
                            self.sent[(k % nsteps) as usize] = true;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) => return Err(self.fail(format!("send failed: {e}"))),
                }
            }
        }
        Ok(moved)
    }

    /// Releases fully sent staging slots and publishes fully received
    /// inbound slots, in order.
    pub(super) fn advance(&mut self) {
        let nsteps = self.sent.len() as u64;
        let start = self.staging_head;
        while self.sent[(self.staging_head % nsteps) as usize] {
            self.sent[(self.staging_head % nsteps) as usize] = false;
            self.staging_head += 1;
        }
        if self.staging_head != start {
            self.staging.release_to(self.staging_head);
        }
        let start = self.inbound_tail;
        while self.arrived[(self.inbound_tail % nsteps) as usize] {
            self.arrived[(self.inbound_tail % nsteps) as usize] = false;
            self.inbound_tail += 1;
        }
        if self.inbound_tail != start {
            self.inbound.publish(self.inbound_tail);
        }
    }

    /// Reads frames from socket `j` until it would block or the inbound ring
    /// is full; true if anything moved.
    pub(super) fn recv_on(&mut self, j: usize) -> Result<bool, Error> {
        let nsteps = self.arrived.len() as u64;
        let s = self.nsocks();
        let max = self.inbound.shape().slot_bytes;
        let mut moved = false;
        self.socks[j].rx.new_pass();
        {
            loop {
                let sock = &mut self.socks[j];
                let k = sock.rx_next;
                if sock.rx_closed {
                    break;
                }
                if sock.rx_len.is_none() {
                    match sock
                        .rx
                        .read(&mut sock.stream, &mut sock.rx_hdr[sock.rx_hdr_got..])
                    {
                        Ok(0) => return Err(self.fail("connection closed by the peer".into())),
                        Ok(n) => {
                            moved = true;
                            sock.rx_hdr_got += n;
                            if sock.rx_hdr_got < HEADER_BYTES {
                                continue;
                            }
                            let h = match FrameHeader::decode(&sock.rx_hdr, max, k) {
                                Ok(h) => h,
                                Err(cause) => {
                                    self.bad_frame = true;
                                    return Err(self.fail(cause));
                                }
                            };
                            if h.len == CLOSE_LEN {
                                sock.rx_closed = true;
                                break;
                            }
                            if h.len == NOTE_LEN {
                                sock.rx_note = Some((h.seq, h.sig));
                                sock.rx_hdr_got = 0;
                                continue;
                            }
                            if h.len == ABORT_LEN {
                                sock.rx_closed = true;
                                self.peer_aborted = true;
                                if let Some(e) = noted_mismatch(sock.rx_note, h.sig) {
                                    return Err(e);
                                }
                                return Err(Error::RemoteFailed {
                                    // The rank comes from the network: only
                                    // believe a plausible one.
                                    peer: usize::try_from(h.seq)
                                        .ok()
                                        .filter(|&r| r < crate::bootstrap::MAX_RANKS)
                                        .unwrap_or(self.peer),
                                    op: "communicator".into(),
                                    cause: format!(
                                        "it failed, and rank {} aborted the communicator",
                                        self.peer
                                    ),
                                });
                            }
                            sock.rx_len = Some(h.len as usize);
                            sock.rx_sig = h.sig;
                            sock.rx_got = 0;
                            sock.rx_place = None;
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                        Err(e) => return Err(self.fail(format!("receive failed: {e}"))),
                    }
                }
                let len = self.socks[j].rx_len.unwrap_or(0);
                let Some(slot) = self.inbound.slot_for_write(k) else {
                    break; // inbound ring full: TCP holds the sender back
                };
                let sock = &mut self.socks[j];
                if sock.rx_got == 0 && len > 0 {
                    // Decided when the slot is free, as late as possible, so
                    // that a grant given meanwhile is used.
                    sock.rx_place = (self.placement.grant_key)(sock.rx_sig).and_then(|rdv| {
                        self.inbound.mailbox().placement(
                            k,
                            rdv,
                            len,
                            self.inbound.shape().slot_bytes,
                        )
                    });
                }
                if sock.rx_got < len {
                    let place = match sock.rx_place {
                        Some((grant, addr)) if self.inbound.mailbox().begin_place(grant) => {
                            Some(addr)
                        }
                        Some(_) => {
                            // Withdrawn (the receive failed): finish the
                            // frame in its slot; nobody will read it.
                            sock.rx_place = None;
                            None
                        }
                        None => None,
                    };
                    let r = match place {
                        Some(addr) => {
                            // SAFETY: the receiver granted `len` bytes at
                            // the placement address inside its locked receive
                            // buffer and touches no byte of this slot's range
                            // until it has consumed the slot (published only
                            // after this read completes); `begin_place` holds
                            // it from withdrawing (and so from releasing the
                            // buffer) until `end_place`.
                            let dst = unsafe {
                                std::slice::from_raw_parts_mut(
                                    (addr as usize + sock.rx_got) as *mut u8,
                                    len - sock.rx_got,
                                )
                            };
                            let r = sock.rx.read(&mut sock.stream, dst);
                            self.inbound.mailbox().end_place();
                            r
                        }
                        None => sock.rx.read(&mut sock.stream, &mut slot[sock.rx_got..len]),
                    };
                    match r {
                        Ok(0) => return Err(self.fail("connection closed by the peer".into())),
                        Ok(n) => {
                            moved = true;
                            sock.rx_got += n;
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                        Err(e) => return Err(self.fail(format!("receive failed: {e}"))),
                    }
                }
                if sock.rx_got == len {
                    let sig = match sock.rx_place.take() {
                        Some(_) => (self.placement.placed)(sock.rx_sig),
                        None => sock.rx_sig,
                    };
                    self.inbound.set_header(k, len, sig, k);
                    sock.rx_len = None;
                    sock.rx_hdr_got = 0;
                    sock.rx_next += s;
                    self.arrived[(k % nsteps) as usize] = true;
                    moved = true;
                }
            }
        }
        Ok(moved)
    }

    /// True when every staged slot has been written out.
    pub(super) fn flushed(&self) -> bool {
        self.socks.iter().all(|s| s.tx_done == 0)
            && self
                .staging
                .slot_for_read(self.staging_head)
                .map_or(true, |s| s.is_none())
    }

    /// Says goodbye on every socket (best effort, bounded), so the peer
    /// knows the end of the stream is not a crash.
    pub(super) fn goodbye(&mut self) {
        for j in 0..self.socks.len() {
            let seq = self.socks[j].tx_next;
            self.control_frame(
                j,
                FrameHeader {
                    len: CLOSE_LEN,
                    seq,
                    sig: 0,
                },
            );
            let _ = self.socks[j].stream.shutdown(std::net::Shutdown::Write);
        }
    }

    /// Tells the peer, on every socket, that `failed` made this
    /// communicator fail, so its pending operations fail now rather than at
    /// their timeout. Best effort, bounded.
    pub(super) fn abort_notice(&mut self, failed: u64, note: Option<MismatchNote>) {
        // The ranks of the record go in the abort frame, its signatures in
        // a note frame before it.
        let ranks = note.and_then(|n| {
            let (s, w) = (
                u32::try_from(n.suspect).ok()?,
                u32::try_from(n.witness).ok()?,
            );
            Some(u64::from(s.checked_add(1)?) | u64::from(w.checked_add(1)?) << 32)
        });
        for j in 0..self.socks.len() {
            if let (Some(n), Some(_)) = (note, ranks) {
                self.control_frame(
                    j,
                    FrameHeader {
                        len: NOTE_LEN,
                        seq: n.suspect_sig,
                        sig: n.witness_sig,
                    },
                );
            }
            self.control_frame(
                j,
                FrameHeader {
                    len: ABORT_LEN,
                    seq: failed,
                    sig: ranks.unwrap_or(0),
                },
            );
        }
    }

    /// Finishes the frame in progress on socket `j` (frames never
    /// interleave), then writes a control frame; gives up after 2 s.
    fn control_frame(&mut self, j: usize, header: FrameHeader) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let mut pending: Vec<u8> = Vec::new();
        let sock = &self.socks[j];
        if sock.tx_done > 0
            && let Ok(Some(slot)) = self.staging.slot_for_read(sock.tx_next)
        {
            let mut whole = FrameHeader {
                len: slot.len() as u32,
                seq: self.staging.slot_seq(sock.tx_next),
                sig: self.staging.slot_sig(sock.tx_next),
            }
            .encode()
            .to_vec();
            whole.extend_from_slice(slot);
            pending.extend_from_slice(&whole[sock.tx_done.min(whole.len())..]);
        }
        pending.extend_from_slice(&header.encode());
        let sock = &mut self.socks[j];
        let mut done = 0;
        while done < pending.len() && std::time::Instant::now() < deadline {
            match sock.stream.write(&pending[done..]) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e)
                    if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted =>
                {
                    std::thread::sleep(std::time::Duration::from_micros(100))
                }
                Err(_) => break,
            }
        }
        sock.tx_done = 0;
    }

    /// True when socket `j` has a frame read to its end (a zero-length one),
    /// or bytes read ahead, that can move now (a header to decode, or a
    /// free inbound slot for the frame): no byte left in the socket may
    /// make it readable, so poll would never report it.
    pub(super) fn completable(&self, j: usize) -> bool {
        let s = &self.socks[j];
        let slot_free = || self.inbound.slot_for_write(s.rx_next).is_some();
        !s.rx_closed
            && (s.rx_len.is_some_and(|len| s.rx_got == len) && slot_free()
                || s.rx.buffered() > 0 && (s.rx_len.is_none() || slot_free()))
    }

    /// The poll events each socket needs now.
    pub(super) fn interest(&self) -> Vec<libc::c_short> {
        (0..self.socks.len()).map(|j| self.interest_of(j)).collect()
    }

    /// The poll events socket `j` needs now.
    fn interest_of(&self, j: usize) -> libc::c_short {
        let sock = &self.socks[j];
        let mut ev = 0;
        if sock.tx_done > 0 || matches!(self.staging.slot_for_read(sock.tx_next), Ok(Some(_))) {
            ev |= libc::POLLOUT;
        }
        if !sock.rx_closed
            && (sock.rx_len.is_none() || self.inbound.slot_for_write(sock.rx_next).is_some())
        {
            ev |= libc::POLLIN;
        }
        ev
    }
}

/// The mismatch an abort frame reports, from the signatures of the note
/// frame before it and the ranks packed in its `sig` field (only plausible
/// ranks and signed calls are believed: they come from the network).
fn noted_mismatch(note: Option<(u64, u64)>, ranks: u64) -> Option<Error> {
    let (suspect_sig, witness_sig) = note?;
    let rank = |v: u64| {
        usize::try_from(v.checked_sub(1)?)
            .ok()
            .filter(|&r| r < crate::bootstrap::MAX_RANKS)
    };
    let (suspect, witness) = (rank(ranks & 0xffff_ffff)?, rank(ranks >> 32)?);
    if suspect_sig >> 63 == 0 || witness_sig >> 63 == 0 {
        return None;
    }
    Some(crate::plan::signature::mismatch_error(
        "communicator",
        witness,
        MismatchNote {
            suspect,
            suspect_sig,
            witness,
            witness_sig,
        },
        None,
        false,
    ))
}
