//! The direct path's windows: one device allocation per rank for data,
//! mapped by every other rank of the host, and one flag area per rank in
//! shared host memory, mapped and registered with the device by every rank.
//!
//! ```text
//! window of rank r (device memory, CUDA IPC):  data (capacity bytes)
//! flags of rank r (POSIX shared memory):
//!   ready[0..size] | reduced[0..size] | done[0..size]
//!                                      8-byte slots: arrival u32, release u32
//!   abort u32 | closed[0..size] u32 | awaited u32
//! ```
//! The arrival half of a slot `ready[p]`, `reduced[p]` or `done[p]` is
//! written by rank `p` (1 =
//! "arrived") and reset to 0 by rank `r` once its stream has waited on the
//! slot. The stream waits for the whole slot to be non-zero, so the release
//! half, which only the host raises (after a failure) and nobody resets,
//! lets every later wait pass at once: a failed stream drains without help.
//!
//! **Why the flags live in host memory.** A stream parked in a wait on a
//! dead peer's flag is released by raising the flag for it
//! ([`super::window_watch`]). A flag in device memory can only be raised
//! through another stream, and that stream may share a hardware queue with
//! the parked one (`CUDA_DEVICE_MAX_CONNECTIONS`, which Megatron sets to 1):
//! its write then waits behind the wait it should release, for ever. A flag
//! in host memory is raised by a plain store from the CPU, which no queue
//! can hold back. Writing a dead peer's flags also stays harmless: they are
//! this process's mapping of shared memory, not the dead process's device
//! memory. The cost is that stream waits poll host memory over PCIe instead
//! of device memory.

use std::any::Any;
use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use super::fd_post::FdPost;
use crate::comm::local_host_id;
use crate::config::MIN_CUDA_WINDOW as MIN_CAPACITY;
use crate::device::DevAddr;
use crate::device::device_queue::Signal;
use crate::host::{HostBuffer, HostStream};
use crate::transport::shm::ShmSegment;
use crate::{Communicator, Error, Result};

/// The value of the awaited word while a stream waits for `from`'s word
/// of `round` (0: it waits for nobody).
fn awaited_value(round: Round, from: usize) -> u32 {
    ((round as u32 + 1) << 24) | (from as u32 + 1)
}

/// The bit the watch sets in the awaited word to mark a wait it has seen
/// ([`Windows::mark_seen`]); the stream never writes it.
const SEEN: u32 = 1 << 31;

/// A wait of this rank's stream, as the host reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AwaitedWait {
    /// The awaited word as read (mark included).
    raw: u32,
    /// The peer waited for.
    pub(crate) from: usize,
    /// Which of its slots.
    pub(crate) round: Round,
    /// True when the watch had marked it already.
    pub(crate) seen: bool,
}

/// Which of a window's three flag arrays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Round {
    /// "My input is in my window."
    Ready = 0,
    /// "My share of the reduction is in my window" (two-shot all-reduce).
    Reduced = 1,
    /// "I have finished reading your window."
    Done = 2,
}

impl Round {
    /// Every round, in flag-array order.
    pub(crate) const ALL: [Round; 3] = [Round::Ready, Round::Reduced, Round::Done];

    /// The round's name in messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Round::Ready => "ready",
            Round::Reduced => "reduced",
            Round::Done => "done",
        }
    }
}

/// Bytes of one rank's exchange record:
///
/// ```text
/// 0 has a window | 1 exports a descriptor | 4..8 pid | 8..16 host hash
/// 16..24 capacity | 24..26 payload length | 26 flag-area name length
/// 27 socket name length | 28..32 device ordinal | 32..128 payload
/// 128..192 flag-area name | 192..256 descriptor socket name
/// ```
const RECORD: usize = 256;
/// Offset of the descriptor socket's name ([`FdPost`]) in a record.
const SOCKET_NAME: usize = 192;
/// Offset of the device's ordinal in a record.
const ORDINAL: usize = 28;
/// Offset of the device-specific payload in a record (at most 96 bytes).
const PAYLOAD: usize = 32;
/// Offset of the flag area's shared-memory name in a record.
const FLAG_NAME: usize = 128;

/// Why the direct path is off, alike on every rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Off {
    /// This rank's reason, or which ranks could not take part.
    pub(crate) reason: String,
    /// True where the ranks' placement rules the path out (a rank on
    /// another host, threads of one process on different devices): no
    /// fall-back from something that should have worked. Decided from the
    /// exchanged records alone, so every rank decides alike.
    pub(crate) by_design: bool,
}

/// A window allocation, as [`WindowDevice::alloc`] makes it.
pub(crate) struct Allocation {
    /// Its device address.
    pub(crate) addr: DevAddr,
    /// The bytes (at most `128 - 32`) another rank of this host opens it with.
    pub(crate) payload: Vec<u8>,
    /// What keeps it alive.
    pub(crate) keep: Box<dyn Any + Send + Sync>,
    /// A descriptor other processes map it through, where they do: then
    /// each mapping holds the memory, and the owner may free its allocation
    /// while peers still map it.
    pub(crate) fd: Option<OwnedFd>,
}

/// What a device offers to build windows.
pub(crate) trait WindowDevice {
    /// Which device of this host the windows live on.
    fn ordinal(&self) -> u32;

    /// A zeroed allocation of `bytes`.
    fn alloc(&self, bytes: usize) -> Result<Allocation>;

    /// Maps a peer's allocation from its payload, and its descriptor where
    /// it exports one. `same_process` is true when the peer is a thread of
    /// this process (then its address is usable as it is, where the device
    /// allows).
    fn open(
        &self,
        payload: &[u8],
        same_process: bool,
        fd: Option<OwnedFd>,
    ) -> Result<(DevAddr, Box<dyn Any + Send + Sync>)>;

    /// Makes `len` bytes of host memory at `host` addressable by device
    /// work (a registration): the device address, and what keeps it.
    ///
    /// # Safety
    /// The range must stay mapped while the returned value lives, and no
    /// other registration may cover it.
    unsafe fn map_host(
        &self,
        host: *mut u8,
        len: usize,
    ) -> Result<(DevAddr, Box<dyn Any + Send + Sync>)>;
}

/// One rank's flag area as this rank maps it: the shared memory and its
/// registration with the device.
struct FlagArea {
    // Dropped first: unregistered before it is unmapped.
    _registration: Box<dyn Any + Send + Sync>,
    segment: ShmSegment,
}

impl FlagArea {
    /// Bytes of a flag area for `size` ranks: the three slot arrays, the
    /// abort word, one "closed" word per rank, the "awaited" word, then
    /// the [`DONE_WORDS`] "done" words, in whole pages (a registration
    /// covers pages).
    fn bytes(size: usize) -> usize {
        (4 * FlagArea::done_index(size, DONE_WORDS)).div_ceil(4096) * 4096
    }

    /// Index of "done" word `k`: the stream writes call `seq`'s number
    /// into word `seq % DONE_WORDS` once it is past the call's last
    /// access to any window or flag area (see [`Windows::drained`]).
    fn done_index(size: usize, k: usize) -> usize {
        FlagArea::awaited_index(size) + 1 + k
    }

    /// Index of the word this rank's stream writes before each wait of a
    /// flag round, naming the round and the peer it waits for
    /// ([`awaited_value`]), and clears after the round: what the watch
    /// reads to tell a peer that will never come from one that is late.
    fn awaited_index(size: usize) -> usize {
        FlagArea::closed_index(size, size)
    }

    /// Index of the word rank `p` raises once it no longer maps this
    /// rank's window (see [`Windows`]'s `Drop`).
    fn closed_index(size: usize, p: usize) -> usize {
        FlagArea::abort_index(size) + 1 + p
    }

    /// Index of the abort word: after the slot arrays (two words a slot).
    fn abort_index(size: usize) -> usize {
        2 * Round::ALL.len() * size
    }

    /// Index of the arrival half of the slot that rank `from` raises in
    /// `round` (the release half is the next word).
    fn slot_index(size: usize, round: Round, from: usize) -> usize {
        2 * (round as usize * size + from)
    }

    /// Registers `segment` with `device`: the area and its device address.
    fn register(device: &dyn WindowDevice, segment: ShmSegment) -> Result<(FlagArea, DevAddr)> {
        let (base, len) = (segment.ring_base().cast_mut(), segment.len());
        // SAFETY: the segment's mapping outlives the registration (field
        // order), and each mapping is registered once.
        let (addr, registration) = unsafe { device.map_host(base, len) }?;
        Ok((
            FlagArea {
                _registration: registration,
                segment,
            },
            addr,
        ))
    }

    /// The 32-bit word at index `i`, as the host sees it.
    fn word(&self, i: usize) -> &AtomicU32 {
        assert!(
            4 * (i + 1) <= self.segment.len(),
            "flag word {i} out of the area"
        );
        // SAFETY: in bounds (checked), 4-aligned (page-aligned mapping), and
        // shared memory is only ever accessed atomically.
        unsafe { &*self.segment.ring_base().add(4 * i).cast::<AtomicU32>() }
    }
}

/// Windows of this process, by address: a rank that is a thread of the
/// process holding a window keeps it alive while it may write into it, even
/// after its owner has gone (between processes the driver's mapping does).
static IN_PROCESS: Mutex<Vec<(DevAddr, Weak<dyn Any + Send + Sync>)>> = Mutex::new(Vec::new());

/// Publishes `window` (at `addr`) to the other ranks of this process, and
/// returns what keeps it alive for its owner.
pub(crate) fn share_in_process(
    addr: DevAddr,
    window: Arc<dyn Any + Send + Sync>,
) -> Box<dyn Any + Send + Sync> {
    let mut live = IN_PROCESS.lock().unwrap_or_else(|p| p.into_inner());
    live.retain(|(_, w)| w.strong_count() > 0);
    live.push((addr, Arc::downgrade(&window)));
    Box::new(window)
}

/// The window of this process at `addr`, kept alive by the returned value,
/// if it still exists.
pub(crate) fn find_in_process(addr: DevAddr) -> Option<Box<dyn Any + Send + Sync>> {
    let live = IN_PROCESS.lock().unwrap_or_else(|p| p.into_inner());
    live.iter()
        .filter(|(a, _)| *a == addr)
        .find_map(|(_, w)| w.upgrade())
        .map(|w| Box::new(w) as Box<dyn Any + Send + Sync>)
}

/// The longest a dropped [`Windows`] waits for its peers to close their
/// CUDA IPC mappings of its window.
const LEAVE_WITHIN: Duration = Duration::from_secs(10);

/// "Done" words in a flag area: a drop checks the last this many calls,
/// which streams may finish in any order.
const DONE_WORDS: usize = 64;

/// The longest the window descriptors take to arrive at creation.
const EXCHANGE_WITHIN: Duration = Duration::from_secs(30);

/// Every rank's window, as this rank addresses it.
///
/// A window shared through a descriptor (the driver's virtual memory
/// management, where it has it) is held by every process that maps it: a
/// drop closes this rank's mappings and frees its own window at once. One
/// shared through CUDA IPC (the fall-back) must not be freed while another
/// process maps it, so a drop leaves in three steps, with no collective
/// call (none of the communicator's order of operations is spent): close
/// this rank's mappings of the peers' windows and say so in each peer's
/// flag area; wait until every peer has said the same in this rank's (or
/// its process is gone); free this rank's window. A peer that does not say
/// so within `leave_within` (at most 10 s) costs the window: it is leaked,
/// never freed under a mapping.
pub(crate) struct Windows {
    rank: usize,
    size: usize,
    bases: Vec<DevAddr>,
    flag_bases: Vec<DevAddr>,
    capacity: usize,
    pids: Vec<u32>,
    /// This rank's flag area, which the host raises after a failure.
    own_flags: Option<FlagArea>,
    /// This rank's window allocation: freed on drop only once no peer
    /// maps it any more (see [`Windows`]'s `Drop`).
    own_window: Option<Box<dyn Any + Send + Sync>>,
    /// Every peer's window and flag area as mapped here.
    peer_windows: Vec<Box<dyn Any + Send + Sync>>,
    peer_flags: Vec<FlagArea>,
    /// The longest a drop waits for the peers to close their mappings.
    leave_within: Duration,
    /// Calls enqueued on streams outside capture so far: call `n` (from
    /// 1) writes `n` into "done" word `n % DONE_WORDS` at its end.
    calls: AtomicU64,
    /// Peers map this rank's window through a descriptor, which holds the
    /// memory: it may be freed while they still map it.
    importers_hold: bool,
}

impl std::fmt::Debug for Windows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Windows")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("capacity", &self.capacity)
            .finish()
    }
}

/// A stable 64-bit hash of this host's identity (FNV-1a).
pub(crate) fn host_hash() -> u64 {
    local_host_id().bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

impl super::steps::WindowLayout for Windows {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn data(&self, owner: usize) -> DevAddr {
        self.bases[owner]
    }
}

impl Windows {
    /// Allocates this rank's window with `capacity` data bytes, exchanges
    /// records through `comm` (a collective call: every rank calls it) and
    /// maps every peer's window.
    ///
    /// Returns `Ok(Err(reason))`, on every rank alike, when any rank
    /// cannot take part (no `device`, another host, an allocation or a
    /// mapping that failed): this rank's own reason, or which ranks could
    /// not.
    pub(crate) fn establish(
        comm: &Communicator,
        device: Option<&dyn WindowDevice>,
        capacity: usize,
    ) -> Result<std::result::Result<Windows, Off>> {
        if capacity < MIN_CAPACITY {
            return Err(Error::invalid(format!(
                "direct-path window of {capacity} bytes: at least {MIN_CAPACITY} are needed"
            )));
        }
        let (rank, size) = (comm.rank(), comm.size());
        let flag_bytes = FlagArea::bytes(size);
        let mut own_window = None;
        let mut peer_windows = Vec::new();
        let mut record = vec![0u8; RECORD];
        // Why this rank cannot take part, if it cannot.
        let mut off: Option<String> = None;
        let mine = match device {
            Some(d) => d.alloc(capacity).and_then(|a| {
                let segment = ShmSegment::create(flag_bytes)?;
                let name = segment.name().as_bytes().to_vec();
                let (flags, flag_base) = FlagArea::register(d, segment)?;
                // Every rank with a window can receive descriptors.
                let post = FdPost::bind()?;
                Ok((a, flags, flag_base, name, post))
            }),
            None => Err(Error::Unavailable(
                "the reduce kernels did not load here (see the warning above)".into(),
            )),
        };
        let mut my_fd = None;
        let mut post = None;
        let (my_base, my_flag_base, mut own_flags) = match mine {
            Ok((a, flags, flag_base, name, p))
                if a.payload.len() <= FLAG_NAME - PAYLOAD
                    && name.len() < SOCKET_NAME - FLAG_NAME
                    && p.name().len() <= RECORD - SOCKET_NAME =>
            {
                own_window = Some(a.keep);
                record[0] = 1;
                record[1] = u8::from(a.fd.is_some());
                record[PAYLOAD..PAYLOAD + a.payload.len()].copy_from_slice(&a.payload);
                record[24..26].copy_from_slice(&(a.payload.len() as u16).to_le_bytes());
                record[26] = name.len() as u8;
                record[FLAG_NAME..FLAG_NAME + name.len()].copy_from_slice(&name);
                record[27] = p.name().len() as u8;
                record[SOCKET_NAME..SOCKET_NAME + p.name().len()].copy_from_slice(p.name());
                my_fd = a.fd;
                post = Some(p);
                (a.addr, flag_base, Some(flags))
            }
            Ok(_) => {
                off = Some("this rank's window record is too long to exchange".into());
                (0, 0, None)
            }
            Err(e) => {
                off = Some(format!("no window on this rank ({e})"));
                (0, 0, None)
            }
        };
        if let Some(d) = device {
            record[ORDINAL..ORDINAL + 4].copy_from_slice(&d.ordinal().to_le_bytes());
        }
        record[4..8].copy_from_slice(&std::process::id().to_le_bytes());
        record[8..16].copy_from_slice(&host_hash().to_le_bytes());
        record[16..24].copy_from_slice(&(capacity as u64).to_le_bytes());
        let all = gather_bytes(comm, &record)?;
        let by_design = placement_rules_out(&all, rank);
        // Descriptors go between the processes of this host, before any
        // rank maps: from each rank that exports one to every other
        // process's rank with a window.
        let mut fds = BTreeMap::new();
        if let Some(post) = &post {
            let peers: Vec<(usize, &[u8])> = all
                .chunks_exact(RECORD)
                .enumerate()
                .filter(|&(p, rec)| {
                    p != rank
                        && rec[0] == 1
                        && rec[8..16] == record[8..16]
                        && rec[4..8] != record[4..8]
                })
                .collect();
            let to: Vec<Vec<u8>> = peers
                .iter()
                .map(|(_, rec)| rec[SOCKET_NAME..SOCKET_NAME + rec[27] as usize].to_vec())
                .collect();
            let from: Vec<usize> = peers
                .iter()
                .filter(|(_, rec)| rec[1] == 1)
                .map(|&(p, _)| p)
                .collect();
            let within = comm.config().timeout.min(EXCHANGE_WITHIN);
            match post.exchange(rank, my_fd.as_ref().map(|f| f.as_fd()), &to, &from, within) {
                Ok(got) => fds = got,
                Err(e) => off = Some(format!("the window descriptors did not arrive ({e})")),
            }
        }
        drop(post);

        let mut bases = vec![0; size];
        let mut flag_bases = vec![0; size];
        let mut peer_flags = Vec::new();
        let mut pids = vec![0; size];
        let mut ok = record[0] == 1 && off.is_none();
        for (p, rec) in all.chunks_exact(RECORD).enumerate() {
            pids[p] = u32::from_le_bytes(rec[4..8].try_into().expect("4 bytes"));
            if p == rank {
                bases[p] = my_base;
                flag_bases[p] = my_flag_base;
                continue;
            }
            if !ok {
                continue;
            }
            let peer_capacity = u64::from_le_bytes(rec[16..24].try_into().expect("8 bytes"));
            let same_host = rec[8..16] == record[8..16];
            if rec[0] != 1 || !same_host || peer_capacity != capacity as u64 {
                off = Some(if !same_host {
                    format!("rank {p} is on another host")
                } else if peer_capacity != capacity as u64 {
                    format!(
                        "rank {p}'s window is {peer_capacity} bytes, this rank's {capacity} \
                         (set the same STREAMCOMM_CUDA_WINDOW everywhere)"
                    )
                } else {
                    format!("rank {p} has no window")
                });
                ok = false;
                continue;
            }
            let len = u16::from_le_bytes([rec[24], rec[25]]) as usize;
            let same_process = pids[p] == std::process::id();
            if same_process && rec[ORDINAL..ORDINAL + 4] != record[ORDINAL..ORDINAL + 4] {
                off = Some(format!(
                    "rank {p} is a thread of this process on another CUDA device (threads \
                     share windows only on one device)"
                ));
                ok = false;
                continue;
            }
            let Some(device) = device else { continue };
            let name = String::from_utf8_lossy(&rec[FLAG_NAME..FLAG_NAME + rec[26] as usize]);
            let mapped = device
                .open(&rec[PAYLOAD..PAYLOAD + len], same_process, fds.remove(&p))
                .and_then(|(base, owner)| {
                    let segment = ShmSegment::open(&name, flag_bytes)?;
                    let (flags, flag_base) = FlagArea::register(device, segment)?;
                    Ok((base, owner, flags, flag_base))
                });
            match mapped {
                Ok((base, owner, flags, flag_base)) => {
                    bases[p] = base;
                    flag_bases[p] = flag_base;
                    peer_windows.push(owner);
                    peer_flags.push(flags);
                }
                Err(e) => {
                    off = Some(format!("this rank cannot map rank {p}'s window ({e})"));
                    ok = false;
                }
            }
        }
        // Everyone or no one: a rank that failed tells the others. Every
        // peer that could map this rank's flag area has by now: its name
        // goes, so nothing is left in /dev/shm whatever happens later.
        let votes = gather_bytes(comm, &[u8::from(ok)])?;
        if let Some(flags) = own_flags.as_mut() {
            flags.segment.unlink();
        }
        if votes.iter().any(|&v| v != 1) {
            // Nobody uses the windows. Free this rank's only once no peer
            // maps it: close the mappings here, then one more exchange
            // (every rank has closed its own by then). If the exchange
            // fails, the window is leaked rather than freed under a mapping.
            drop(peer_windows);
            drop(peer_flags);
            let closed = gather_bytes(comm, &[1]);
            if closed.is_err() {
                std::mem::forget(own_window);
            }
            closed?;
            let unable: Vec<usize> = (0..size).filter(|&p| votes[p] != 1).collect();
            let reason = off.unwrap_or_else(|| {
                format!("rank(s) {unable:?} could not take part (each says why)")
            });
            return Ok(Err(Off { reason, by_design }));
        }
        Ok(Ok(Windows {
            rank,
            size,
            bases,
            flag_bases,
            capacity,
            pids,
            own_flags,
            own_window,
            peer_windows,
            peer_flags,
            leave_within: comm.config().timeout.min(LEAVE_WITHIN),
            importers_hold: record[1] == 1,
            calls: AtomicU64::new(0),
        }))
    }

    /// The flag slot in `owner`'s flag area that rank `from` raises in
    /// `round`: 8-byte aligned, its first 32-bit word the arrival half.
    pub(crate) fn flag(&self, owner: usize, round: Round, from: usize) -> DevAddr {
        self.flag_bases[owner] + 4 * FlagArea::slot_index(self.size, round, from) as u64
    }

    /// True when `addr` lies in a peer's data window (not this rank's).
    pub(crate) fn is_peer_data(&self, addr: DevAddr) -> bool {
        (0..self.size).filter(|&p| p != self.rank).any(|p| {
            let base = self.bases[p];
            addr >= base && addr < base + self.capacity as u64
        })
    }

    /// The device address of this rank's abort word: raised after a
    /// failure, when every kernel that reads peers' windows reads it first
    /// and does nothing.
    pub(crate) fn abort_word(&self) -> DevAddr {
        self.flag_bases[self.rank] + 4 * FlagArea::abort_index(self.size) as u64
    }

    /// The last write of a call enqueued outside capture: the next call's
    /// number into its "done" word (the call's stream is then past every
    /// access it makes to the windows and flag areas).
    pub(crate) fn next_done(&self) -> Signal {
        let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        let k = (n % DONE_WORDS as u64) as usize;
        let addr = self.flag_bases[self.rank] + 4 * FlagArea::done_index(self.size, k) as u64;
        Signal::Write(addr, n as u32)
    }

    /// True when every call enqueued outside capture has run to its end
    /// (its "done" word says so; the last [`DONE_WORDS`] calls are
    /// checked, so streams may finish them in any order).
    fn drained(&self) -> bool {
        let Some(flags) = &self.own_flags else {
            return true;
        };
        let n = self.calls.load(Ordering::Relaxed);
        (n.saturating_sub(DONE_WORDS as u64 - 1).max(1)..=n).all(|c| {
            let k = (c % DONE_WORDS as u64) as usize;
            flags
                .word(FlagArea::done_index(self.size, k))
                .load(Ordering::Acquire)
                == c as u32
        })
    }

    /// The device address of this rank's awaited word, and the value its
    /// stream writes there before waiting for `from`'s word of `round`
    /// (0 after the round).
    pub(crate) fn awaited_word(&self, round: Round, from: usize) -> (DevAddr, u32) {
        let addr = self.flag_bases[self.rank] + 4 * FlagArea::awaited_index(self.size) as u64;
        (addr, awaited_value(round, from))
    }

    /// The wait this rank's stream is in now, read from the host: the
    /// awaited word names a peer whose slot is not raised yet.
    pub(crate) fn current_wait(&self) -> Option<AwaitedWait> {
        let flags = self.own_flags.as_ref()?;
        let raw = flags
            .word(FlagArea::awaited_index(self.size))
            .load(Ordering::Acquire);
        let word = raw & !SEEN;
        let from = (word & 0xff_ffff).checked_sub(1)? as usize;
        let round = *Round::ALL.get(((word >> 24) as usize).checked_sub(1)?)?;
        if from >= self.size || from == self.rank {
            return None;
        }
        let slot = FlagArea::slot_index(self.size, round, from);
        let raised = flags.word(slot).load(Ordering::Acquire) != 0
            || flags.word(slot + 1).load(Ordering::Acquire) != 0;
        (!raised).then_some(AwaitedWait {
            raw,
            from,
            round,
            seen: raw & SEEN != 0,
        })
    }

    /// Marks `wait` as seen by the watch, unless the stream wrote the
    /// awaited word since it was read: true when marked. The stream's next
    /// write of the word (before its next wait, or 0 after the round)
    /// clears the mark, so a mark still there later means the stream has
    /// not moved since: the same fixed values recur at every call, and the
    /// mark is what tells one long wait from many short ones.
    pub(crate) fn mark_seen(&self, wait: &AwaitedWait) -> bool {
        let Some(flags) = &self.own_flags else {
            return false;
        };
        flags
            .word(FlagArea::awaited_index(self.size))
            .compare_exchange(
                wait.raw,
                wait.raw | SEEN,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }

    /// The peer this rank's stream waits for now, if it waits for one whose
    /// word is not raised yet and who has left: it closed its mapping of
    /// this rank's window (its communicator is gone, so it will never
    /// raise the word), or, with `alive` false for it, its process is gone.
    /// Read from the host, in that order (the closed word first: a peer
    /// raises its word before it can close).
    pub(crate) fn awaiting_departed(&self, alive: &dyn Fn(usize) -> bool) -> Option<usize> {
        let flags = self.own_flags.as_ref()?;
        let wait = self.current_wait()?;
        let closed = flags
            .word(FlagArea::closed_index(self.size, wait.from))
            .load(Ordering::Acquire)
            != 0;
        let gone = closed || !alive(wait.from);
        // Still the same wait, not raised meanwhile.
        let same = self
            .current_wait()
            .is_some_and(|now| now.raw & !SEEN == wait.raw & !SEEN);
        (gone && same).then_some(wait.from)
    }

    /// After a failure: raises this rank's abort word, then the release
    /// half of every slot in this rank's flag area, from the host, so every
    /// stream wait on them passes, now and at every later call or graph
    /// replay (the stream never resets a release half), and no kernel after
    /// them touches a peer's window (a dead peer's memory may be gone). The
    /// data the stream writes then is not to be trusted.
    pub(crate) fn abort_and_release(&self) {
        let Some(flags) = &self.own_flags else { return };
        // First, with release order: a wait that sees a slot raised below
        // lets a kernel run that must see the abort word too.
        flags
            .word(FlagArea::abort_index(self.size))
            .store(1, Ordering::Release);
        for p in (0..self.size).filter(|&p| p != self.rank) {
            for round in Round::ALL {
                let slot = FlagArea::slot_index(self.size, round, p);
                flags.word(slot + 1).store(1, Ordering::Release);
            }
        }
    }

    /// The process id of every rank (all on this host).
    pub(crate) fn pids(&self) -> &[u32] {
        &self.pids
    }
}

impl Drop for Windows {
    fn drop(&mut self) {
        let peer_windows = std::mem::take(&mut self.peer_windows);
        let peer_flags = std::mem::take(&mut self.peer_flags);
        let own = self.own_window.take();
        // Streams may still run calls that touch the windows and flag
        // areas: after a failure (an abort while work is queued: its
        // waits' release halves stay raised, so it drains), or where a
        // program drops the communicator before synchronizing. Nothing is
        // freed under them: wait until each call's "done" word says it
        // ran to its end, bounded, else leak.
        let start = Instant::now();
        if !self.drained() {
            // Calls still queued are abandoned: their waits are released
            // (the abort word stops their reads of peers' windows).
            self.abort_and_release();
        }
        while !self.drained() {
            if start.elapsed() >= self.leave_within {
                tracing::warn!(
                    "direct path: streams still run this communicator's calls after {:?}; \
                     its windows and flag areas are leaked rather than freed under them",
                    self.leave_within
                );
                std::mem::forget((peer_windows, peer_flags, own, self.own_flags.take()));
                return;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        self.leave(peer_windows, peer_flags, own);
    }
}

impl Windows {
    /// What a drop does: unmaps the peers' windows (telling each), then
    /// frees this rank's window once no peer maps it.
    fn leave(
        &self,
        peer_windows: Vec<Box<dyn Any + Send + Sync>>,
        peer_flags: Vec<FlagArea>,
        own: Option<Box<dyn Any + Send + Sync>>,
    ) {
        // 1. This rank's mappings of the peers' windows go, and each peer
        // hears so in its flag area (this rank's mapping of it, which goes
        // after).
        drop(peer_windows);
        for area in &peer_flags {
            area.word(FlagArea::closed_index(self.size, self.rank))
                .store(1, Ordering::Release);
        }
        drop(peer_flags);
        // 2. The peers' mappings of this rank's window must be gone first,
        // unless each holds the memory it maps (a descriptor's import).
        let Some(own) = own else {
            return;
        };
        if self.importers_hold {
            drop(own);
            return;
        }
        let Some(flags) = &self.own_flags else {
            return;
        };
        let me = std::process::id();
        let start = Instant::now();
        loop {
            // A peer thread of this process holds the window by reference
            // count, not by a mapping; a dead process maps nothing.
            let still: Vec<usize> = (0..self.size)
                .filter(|&q| q != self.rank && self.pids[q] != me)
                .filter(|&q| {
                    flags
                        .word(FlagArea::closed_index(self.size, q))
                        .load(Ordering::Acquire)
                        == 0
                })
                .filter(|&q| process_alive(self.pids[q]))
                .collect();
            if still.is_empty() {
                // 3. Nothing maps it: free it.
                drop(own);
                return;
            }
            if start.elapsed() >= self.leave_within {
                tracing::warn!(
                    ranks = ?still,
                    "direct path: peers still map this rank's window after {:?}; it is \
                     leaked rather than freed under their mappings",
                    self.leave_within
                );
                std::mem::forget(own);
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// True when the ranks' placement, read from every rank's record, rules the
/// direct path out: a rank on another host than `rank`'s, or two ranks of
/// one process on different devices.
fn placement_rules_out(all: &[u8], rank: usize) -> bool {
    let records: Vec<&[u8]> = all.chunks_exact(RECORD).collect();
    let host = |r: &[u8]| r[8..16].to_vec();
    let pid = |r: &[u8]| r[4..8].to_vec();
    let ordinal = |r: &[u8]| r[ORDINAL..ORDINAL + 4].to_vec();
    let another_host = records.iter().any(|r| host(r) != host(records[rank]));
    let split_process = records.iter().any(|a| {
        records
            .iter()
            .any(|b| a[0] == 1 && b[0] == 1 && pid(a) == pid(b) && ordinal(a) != ordinal(b))
    });
    another_host || split_process
}

/// True unless process `pid` (of this host) is known to be gone.
pub(crate) fn process_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let found = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0;
    found || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Every rank's `bytes` (all the same length), in rank order, through a
/// host all_gather on `comm`.
pub(crate) fn gather_bytes(comm: &Communicator, bytes: &[u8]) -> Result<Vec<u8>> {
    let stream = HostStream::new()?;
    let send = HostBuffer::from_slice(bytes);
    let mut recv = HostBuffer::<u8>::zeroed(bytes.len() * comm.size());
    comm.all_gather(&send, &mut recv, &stream)?;
    stream.synchronize()?;
    Ok(recv.to_vec())
}
