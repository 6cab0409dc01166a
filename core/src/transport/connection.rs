//! The slot seam: where a stream fills, publishes, reads and returns the
//! slots of one peer, whatever the transport.
//!
//! Every writer of slots (a collective's step, a point-to-point message,
//! the immediate path of a small host call) goes through the same few
//! calls on a [`Connection`]: acquire a slot ([`Connection::acquire_send`],
//! [`Connection::try_acquire_send`]), publish it
//! ([`Connection::commit_send`]), take an arrived one with its signature
//! ([`Connection::try_acquire_recv`]) and return it
//! ([`Connection::release_recv`]). Publishing and taking are where fault
//! injection acts ([`super::fault`]), on a connection some rule names;
//! publishing and returning are where a proxied transport gets the bytes
//! moving (a tcp write, an RDMA write or a credit): each transport says
//! what it does there by implementing [`Carrier`], and [`Link`] dispatches
//! to it in one `match`, statically. Shared memory needs nothing there and
//! is not asked: its slots' path is the ring's own words.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::fault::{SendFault, SlotFaults};
use super::ring::{RingEnd, RingError};
use super::shm::ShmLink;
use super::tcp::TcpLink;
#[cfg(feature = "verbs")]
use super::verbs::VerbsLink;
use super::{Segment, tcp};
use crate::Error;
use crate::config::Transport;
use crate::wait::{WaitError, WaitPolicy};

/// What one transport does at the slot seam: the work after the stream
/// published, returned or granted a slot, and the moving of bytes a
/// waiting stream does itself. Implemented in each transport's module.
pub(crate) trait Carrier {
    /// The transport.
    fn kind(&self) -> Transport;

    /// After the stream published a slot in the send ring: gets it moving
    /// (over tcp it is written out, over verbs posted, without a read).
    /// Asked of proxied transports only ([`Connection::proxied`]).
    fn after_send(&self);

    /// After the stream returned a slot of `inbound`: whatever is now due
    /// (over verbs the credit, if the peer ran out; over tcp a wake-up of
    /// the engine, if it stopped reading for want of room). Asked of
    /// proxied transports only.
    fn after_recv(&self, inbound: &RingEnd);

    /// After the receiver granted a rendezvous in its inbound ring's
    /// mailbox: over verbs the grant is written to the sender.
    fn after_grant(&self);

    /// Moves this connection's bytes on the calling thread while it waits
    /// (reads and writes the sockets, polls the completion queue). Cheap
    /// when another thread is already at it.
    fn poke(&self);

    /// How often a spinning waiter pokes (every n-th check); `None` when
    /// data lands without anyone's help and poking does nothing.
    fn poke_period(&self) -> Option<u32>;

    /// True once the link carries bytes: always, except a tcp or verbs
    /// peer not used yet (tcp sockets, and verbs rings' registrations, are
    /// made on first use).
    fn connected(&self) -> bool {
        true
    }

    /// True once the link's connection is made, whether or not it carried
    /// bytes yet: always, except a tcp peer whose sockets, or a verbs peer
    /// whose queue pairs, are made on first use (by either side).
    fn made(&self) -> bool {
        self.connected()
    }

    /// Sends `payload` as one slot signed `sig` straight from the caller's
    /// bytes, where the transport can and nothing is queued before it (over
    /// verbs, one inline RDMA write); false (nothing done) elsewhere.
    fn send_unstaged(&self, payload: &[u8], sig: u64) -> bool {
        let _ = (payload, sig);
        false
    }

    /// The peer's segment, when it shares memory with this rank.
    fn peer_segment(&self) -> Option<&Arc<Segment>> {
        None
    }

    /// The verbs peer, when rendezvous data and barrier flags go by RDMA.
    #[cfg(feature = "verbs")]
    fn rdma(&self) -> Option<&Arc<super::verbs::progress::SharedPeer>> {
        None
    }

    /// The peer's barrier area, where this rank writes the peer's barrier
    /// flags itself (by RDMA); `None` where flags travel otherwise.
    fn remote_area(&self) -> Option<Arc<dyn crate::barrier::area::RemoteArea>> {
        None
    }
}

/// Which transport a connection uses, and its state.
#[derive(Debug)]
pub(crate) enum Link {
    /// Shared memory: the send ring lies in the peer's segment.
    Shm(ShmLink),
    /// tcp: both rings are local; the slots cross sockets.
    Tcp(TcpLink),
    /// verbs: both rings are local; the slots cross by RDMA writes.
    #[cfg(feature = "verbs")]
    Verbs(VerbsLink),
}

/// Runs `$body` with `$l` bound to the link's [`Carrier`]: the one `match`
/// on [`Link`].
macro_rules! on_carrier {
    ($link:expr, $l:ident => $body:expr) => {
        match $link {
            Link::Shm($l) => $body,
            Link::Tcp($l) => $body,
            #[cfg(feature = "verbs")]
            Link::Verbs($l) => $body,
        }
    };
}

impl Carrier for Link {
    #[inline]
    fn kind(&self) -> Transport {
        on_carrier!(self, l => l.kind())
    }
    #[inline]
    fn after_send(&self) {
        on_carrier!(self, l => l.after_send())
    }
    #[inline]
    fn after_recv(&self, inbound: &RingEnd) {
        on_carrier!(self, l => l.after_recv(inbound))
    }
    #[inline]
    fn after_grant(&self) {
        on_carrier!(self, l => l.after_grant())
    }
    #[inline]
    fn poke(&self) {
        on_carrier!(self, l => l.poke())
    }
    #[inline]
    fn poke_period(&self) -> Option<u32> {
        on_carrier!(self, l => l.poke_period())
    }
    fn connected(&self) -> bool {
        on_carrier!(self, l => l.connected())
    }
    fn made(&self) -> bool {
        on_carrier!(self, l => l.made())
    }
    #[inline]
    fn send_unstaged(&self, payload: &[u8], sig: u64) -> bool {
        on_carrier!(self, l => l.send_unstaged(payload, sig))
    }
    #[inline]
    fn peer_segment(&self) -> Option<&Arc<Segment>> {
        on_carrier!(self, l => l.peer_segment())
    }
    #[cfg(feature = "verbs")]
    #[inline]
    fn rdma(&self) -> Option<&Arc<super::verbs::progress::SharedPeer>> {
        on_carrier!(self, l => l.rdma())
    }
    fn remote_area(&self) -> Option<Arc<dyn crate::barrier::area::RemoteArea>> {
        on_carrier!(self, l => l.remote_area())
    }
}

/// Both directions between this rank and one peer: its two rings, the
/// transport behind them, and the fault rules that apply to them.
#[derive(Debug)]
pub(crate) struct Connection {
    /// The peer's rank.
    peer: usize,
    /// Ring we fill (the peer's inbound ring, or our staging ring). Read
    /// it freely; fill it only through the seam.
    pub send: RingEnd,
    /// Ring we read (our inbound ring). Read it freely; take and return
    /// its slots only through the seam.
    pub recv: RingEnd,
    /// The transport behind the rings (keeps their memory alive).
    link: Link,
    /// Fault injection at the seam: `None` unless some rule names this
    /// connection (always without the feature), so that an unarmed
    /// connection's slots never enter the fault hooks.
    faults: Option<SlotFaults>,
    /// The transport needs a thread to move its bytes (tcp, verbs):
    /// [`Connection::proxied`], fixed by the transport's kind.
    proxied: bool,
    /// The send ring's memory is to be allocated at its first use (a
    /// shared-memory ring in the peer's segment, not a ring neighbour's).
    unreserved: AtomicBool,
}

impl Connection {
    /// The connection to `peer` over `link`, filling `send` and reading `recv`.
    pub(crate) fn new(peer: usize, send: RingEnd, recv: RingEnd, link: Link) -> Connection {
        Connection {
            peer,
            send,
            recv,
            proxied: link.poke_period().is_some(),
            link,
            faults: None,
            unreserved: AtomicBool::new(false),
        }
    }

    /// Allocates the send ring's memory at its first use rather than now
    /// (see [`Connection::reserve_send`]).
    pub(crate) fn reserving_on_first_send(self) -> Connection {
        self.unreserved.store(true, Ordering::Relaxed);
        self
    }

    /// Before the first slot is written into the peer's ring: allocates
    /// the ring's memory, so that a full /dev/shm is this error, not a
    /// SIGBUS at the write (creation reserved only the rings' headers and
    /// the ring neighbours' rings). One load once it is there.
    ///
    /// # Errors
    /// [`RingError::Reserve`] where the memory is not there.
    #[inline]
    fn reserve_send(&self) -> Result<(), RingError> {
        if !self.unreserved.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.reserve_send_now()
    }

    #[cold]
    fn reserve_send_now(&self) -> Result<(), RingError> {
        self.send
            .reserve_unmapped()
            .map_err(|e| RingError::Reserve(e.raw_os_error().unwrap_or(libc::ENOMEM)))?;
        self.unreserved.store(false, Ordering::Relaxed);
        Ok(())
    }

    /// Applies `faults` at this connection's seam from now on.
    #[cfg(feature = "fault-injection")]
    pub(crate) fn arm(&mut self, faults: SlotFaults) {
        self.faults = Some(faults);
    }

    /// The peer's rank.
    pub(crate) fn peer(&self) -> usize {
        self.peer
    }

    /// The transport behind the rings.
    pub(crate) fn kind(&self) -> Transport {
        self.link.kind()
    }

    /// Name of the transport, for errors.
    pub(crate) fn transport(&self) -> &'static str {
        self.kind().as_str()
    }

    /// True when the peer's data reaches this rank only if some thread
    /// moves it (tcp, verbs): a waiter pokes, or wakes the progress engine
    /// before it sleeps. False over shared memory, where it lands unaided.
    #[inline]
    pub(crate) fn proxied(&self) -> bool {
        self.proxied
    }

    /// Moves this connection's bytes on the calling thread ([`Carrier::poke`]).
    #[inline]
    pub(crate) fn poke(&self) {
        self.link.poke()
    }

    /// A pacer for waits on this connection that poke it; `None` when
    /// poking does nothing.
    pub(crate) fn pace(&self, policy: &WaitPolicy<'_>) -> Option<tcp::inline::Pace> {
        self.link
            .poke_period()
            .map(|n| tcp::inline::Pace::every(policy, n))
    }

    /// True once the link carries bytes ([`Carrier::connected`]).
    pub(crate) fn connected(&self) -> bool {
        self.link.connected()
    }

    /// True once the link's connection is made ([`Carrier::made`]).
    pub(crate) fn made(&self) -> bool {
        self.link.made()
    }

    /// The peer's segment, when it shares memory with us.
    pub(crate) fn peer_segment(&self) -> Option<&Arc<Segment>> {
        self.link.peer_segment()
    }

    /// The verbs peer, when rendezvous data goes by RDMA.
    #[cfg(feature = "verbs")]
    pub(crate) fn rdma(&self) -> Option<&Arc<super::verbs::progress::SharedPeer>> {
        self.link.rdma()
    }

    /// The peer's barrier area, where this rank writes its flags itself.
    pub(crate) fn remote_area(&self) -> Option<Arc<dyn crate::barrier::area::RemoteArea>> {
        self.link.remote_area()
    }

    /// Waits for a free outbound slot, poking the connection meanwhile;
    /// fill it, then [`Connection::commit_send`].
    ///
    /// # Errors
    /// [`RingError::Wait`] when no credit came back in time.
    #[allow(clippy::mut_from_ref)] // the credit protocol gives the slot to one writer
    pub(crate) fn acquire_send(&self, policy: &WaitPolicy<'_>) -> Result<&mut [u8], RingError> {
        self.reserve_send()?;
        match self.pace(policy) {
            Some(mut pace) => self.send.acquire_send_with(policy, || {
                if pace.due() {
                    self.poke()
                }
            }),
            None => self.send.acquire_send(policy),
        }
    }

    /// The next outbound slot if the receiver has returned credit for it,
    /// without waiting; fill it, then [`Connection::commit_send`].
    ///
    /// # Errors
    /// [`RingError::Reserve`] where the ring's memory, allocated at its
    /// first use, is not there.
    #[allow(clippy::mut_from_ref)] // the credit protocol gives the slot to one writer
    #[inline]
    pub(crate) fn try_acquire_send(&self) -> Result<Option<&mut [u8]>, RingError> {
        self.reserve_send()?;
        Ok(self.send.try_acquire_send())
    }

    /// Publishes the slot just acquired, holding `len` bytes and signed
    /// `sig` ([`crate::plan::signature`]), then has a proxied transport
    /// move it ([`Carrier::after_send`]). A fault rule may delay, drop, repeat or
    /// fail it here.
    ///
    /// # Errors
    /// [`RingError::Injected`] for an injected error; [`RingError::Wait`]
    /// when repeating a slot found no credit for the copy.
    #[inline]
    pub(crate) fn commit_send(&self, len: usize, sig: u64) -> Result<(), RingError> {
        if let Some(faults) = &self.faults
            && let Some(fault) = faults.on_send(&self.send)
        {
            self.commit_faulty(faults, fault, len, sig)?;
        } else {
            self.send.commit_send(len, sig, None);
        }
        if self.proxied {
            self.link.after_send();
        }
        Ok(())
    }

    /// [`Connection::commit_send`] of a slot a fault rule hits.
    #[cold]
    #[inline(never)]
    fn commit_faulty(
        &self,
        faults: &SlotFaults,
        fault: SendFault,
        len: usize,
        sig: u64,
    ) -> Result<(), RingError> {
        match fault {
            SendFault::Renumber(seq) => self.send.commit_send(len, sig, Some(seq)),
            SendFault::Delay(d, seq) => {
                faults.pause(d);
                self.send.commit_send(len, sig, Some(seq));
            }
            // The slot stays unpublished and is overwritten by the next
            // one, which carries the following number.
            SendFault::Drop => {}
            SendFault::Duplicate(seq) => {
                let copy = self
                    .send
                    .slot_for_write(self.send.tail())
                    .map(|s| s[..len].to_vec())
                    .unwrap_or_default();
                self.send.commit_send(len, sig, Some(seq));
                if self.proxied {
                    self.link.after_send();
                }
                let again = self.acquire_send(&faults.policy())?;
                again[..copy.len()].copy_from_slice(&copy);
                self.send.commit_send(copy.len(), sig, Some(seq));
            }
            SendFault::Fail(rule) => return Err(RingError::Injected(rule)),
        }
        Ok(())
    }

    /// Sends `payload` as one slot signed `sig` straight from the caller's
    /// bytes, where the transport can and nothing is queued before it
    /// ([`Carrier::send_unstaged`]); false (nothing done) elsewhere, and
    /// wherever a fault rule may hit this connection's slots: the caller
    /// then stages the slot.
    #[inline]
    pub(crate) fn send_unstaged(&self, payload: &[u8], sig: u64) -> bool {
        self.faults.as_ref().is_none_or(SlotFaults::sends_plain)
            && self.link.send_unstaged(payload, sig)
    }

    /// The next inbound slot and the signature it was published with, if
    /// one was published, without waiting (a fault rule may delay or fail
    /// it); return it with [`Connection::release_recv`].
    ///
    /// # Errors
    /// As [`RingEnd::try_acquire_recv`]; [`RingError::Injected`] for an
    /// injected error.
    #[inline]
    pub(crate) fn try_acquire_recv(&self) -> Result<Option<(&[u8], u64)>, RingError> {
        let slot = self.recv.try_acquire_recv()?;
        if slot.is_some()
            && let Some(faults) = &self.faults
        {
            faults.before_recv(&self.recv)?;
        }
        Ok(slot)
    }

    /// Returns the slot taken by [`Connection::try_acquire_recv`] to the
    /// sender, then does what the transport needs, if it is proxied
    /// ([`Carrier::after_recv`]).
    #[inline]
    pub(crate) fn release_recv(&self) {
        self.recv.release_recv();
        if self.proxied {
            self.link.after_recv(&self.recv);
        }
    }

    /// Receiver: grants rendezvous number `grant` in the inbound ring's
    /// mailbox ([`super::mailbox::Mailbox::grant`]) and has the transport
    /// deliver it ([`Carrier::after_grant`]).
    pub(crate) fn grant(&self, grant: u64, addr: u64, len: u64, pid: u32, first_seq: u64) {
        self.recv.mailbox().grant(grant, addr, len, pid, first_seq);
        self.link.after_grant();
    }

    /// The error a slot fault on this connection makes in the call `what`:
    /// a corrupted, lost, repeated or injected slot, or a wait that ended.
    pub(crate) fn slot_error(&self, e: RingError, what: &str) -> Error {
        let peer = self.peer;
        let transport = self.transport();
        let cause = match e {
            RingError::BadLength(len) => {
                format!("{what}: slot header claims {len} bytes (corrupted ring)")
            }
            RingError::OutOfOrder { expected, got } => format!(
                "{what}: slot {got} arrived where slot {expected} was due ({})",
                if got > expected {
                    "a slot was lost"
                } else {
                    "a slot came twice"
                }
            ),
            RingError::Injected(rule) => {
                format!("{what}: injected fault `{rule}` (STREAMCOMM_FAULTS)")
            }
            RingError::Reserve(errno) => {
                // This host's shortage, not the peer's fault. The kernel
                // says EFAULT or ENOMEM where /dev/shm is full.
                let errno = match errno {
                    libc::EFAULT | libc::ENOMEM => libc::ENOSPC,
                    e => e,
                };
                return Error::os(
                    format!(
                        "{what}: allocating the shared-memory ring to rank {peer} at its first \
                         use (is /dev/shm large enough? STREAMCOMM_SHM_BUDGET shrinks the rings)"
                    ),
                    std::io::Error::from_raw_os_error(errno),
                );
            }
            RingError::Wait(WaitError::Timeout(d)) => {
                return Error::Timeout {
                    op: what.to_string(),
                    what: format!("a slot of rank {peer} over {transport}"),
                    waited_ms: d.as_millis() as u64,
                };
            }
            RingError::Wait(WaitError::Aborted) => {
                return Error::Aborted(format!(
                    "{what} (waiting for a slot of rank {peer} over {transport})"
                ));
            }
        };
        Error::Transport {
            transport,
            peer,
            cause,
        }
    }
}
