//! The direct path's windows: one device allocation per rank, mapped by
//! every other rank of the host, holding flag words then a data area.
//!
//! ```text
//! window of rank r:  ready[0..size] u32 | done[0..size] u32 | pad | data (capacity bytes)
//! ```
//! `ready[p]` / `done[p]` are written by rank `p` (1 = "arrived") and reset
//! to 0 by rank `r` once it has waited on them.

use std::any::Any;
use std::sync::{Arc, Mutex, Weak};

use crate::comm::local_host_id;
use crate::config::MIN_CUDA_WINDOW as MIN_CAPACITY;
use crate::device::DevAddr;
use crate::host::{HostBuffer, HostStream};
use crate::{Communicator, Error, Result};

/// Which of a window's two flag arrays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Round {
    /// "My input is in my window."
    Ready,
    /// "I have finished reading your window."
    Done,
}

/// Bytes of one rank's exchange record.
const RECORD: usize = 128;
/// Offset of the device-specific payload in a record.
const PAYLOAD: usize = 32;
/// Alignment of the data area (wide vector loads and copies).
const DATA_ALIGN: usize = 256;

/// What a device offers to build windows.
pub(crate) trait WindowDevice {
    /// A zeroed allocation of `bytes`: its device address, the bytes
    /// (at most `128 - 32`) another process of this host opens it with, and
    /// what keeps it alive.
    fn alloc(&self, bytes: usize) -> Result<(DevAddr, Vec<u8>, Box<dyn Any + Send + Sync>)>;

    /// Maps a peer's allocation from its payload. `same_process` is true
    /// when the peer is a thread of this process (then its address is
    /// usable as it is, where the device allows).
    fn open(
        &self,
        payload: &[u8],
        same_process: bool,
    ) -> Result<(DevAddr, Box<dyn Any + Send + Sync>)>;
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

/// Every rank's window, as this rank addresses it.
pub(crate) struct Windows {
    rank: usize,
    size: usize,
    bases: Vec<DevAddr>,
    data_offset: usize,
    capacity: usize,
    pids: Vec<u32>,
    // Declared last: dropped after nothing can hand out addresses any more.
    _keep: Vec<Box<dyn Any + Send + Sync>>,
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

impl Windows {
    /// Allocates this rank's window with `capacity` data bytes, exchanges
    /// records through `comm` (a collective call: every rank calls it) and
    /// maps every peer's window.
    ///
    /// Returns `Ok(None)`, on every rank alike, when any rank cannot take
    /// part (no `device`, another host, an allocation or a mapping that
    /// failed); the reason is logged.
    pub(crate) fn establish(
        comm: &Communicator,
        device: Option<&dyn WindowDevice>,
        capacity: usize,
    ) -> Result<Option<Windows>> {
        if capacity < MIN_CAPACITY {
            return Err(Error::invalid(format!(
                "direct-path window of {capacity} bytes: at least {MIN_CAPACITY} are needed"
            )));
        }
        let (rank, size) = (comm.rank(), comm.size());
        let data_offset = (8 * size).div_ceil(DATA_ALIGN) * DATA_ALIGN;
        let mut keep = Vec::new();
        let mut record = vec![0u8; RECORD];
        let mine = match device {
            Some(d) => d.alloc(data_offset + capacity),
            None => Err(Error::Unavailable("no window device".into())),
        };
        let my_base = match mine {
            Ok((base, payload, owner)) if payload.len() <= RECORD - PAYLOAD => {
                keep.push(owner);
                record[0] = 1;
                record[PAYLOAD..PAYLOAD + payload.len()].copy_from_slice(&payload);
                record[24..26].copy_from_slice(&(payload.len() as u16).to_le_bytes());
                base
            }
            Ok(_) => {
                tracing::info!("direct path off: window payload too long");
                0
            }
            Err(e) => {
                tracing::info!(error = %e, "direct path off: no window");
                0
            }
        };
        record[4..8].copy_from_slice(&std::process::id().to_le_bytes());
        record[8..16].copy_from_slice(&host_hash().to_le_bytes());
        record[16..24].copy_from_slice(&(capacity as u64).to_le_bytes());
        let all = gather_bytes(comm, &record)?;

        let mut bases = vec![0; size];
        let mut pids = vec![0; size];
        let mut ok = record[0] == 1;
        for (p, rec) in all.chunks_exact(RECORD).enumerate() {
            pids[p] = u32::from_le_bytes(rec[4..8].try_into().expect("4 bytes"));
            if p == rank {
                bases[p] = my_base;
                continue;
            }
            if !ok {
                continue;
            }
            let peer_capacity = u64::from_le_bytes(rec[16..24].try_into().expect("8 bytes"));
            let same_host = rec[8..16] == record[8..16];
            if rec[0] != 1 || !same_host || peer_capacity != capacity as u64 {
                tracing::info!(
                    peer = p,
                    same_host,
                    "direct path off: a peer cannot take part"
                );
                ok = false;
                continue;
            }
            let len = u16::from_le_bytes([rec[24], rec[25]]) as usize;
            let same_process = pids[p] == std::process::id();
            let Some(device) = device else { continue };
            match device.open(&rec[PAYLOAD..PAYLOAD + len], same_process) {
                Ok((base, owner)) => {
                    bases[p] = base;
                    keep.push(owner);
                }
                Err(e) => {
                    tracing::info!(peer = p, error = %e, "direct path off: cannot map a window");
                    ok = false;
                }
            }
        }
        // Everyone or no one: a rank that failed tells the others.
        let votes = gather_bytes(comm, &[u8::from(ok)])?;
        if votes.iter().any(|&v| v != 1) {
            return Ok(None);
        }
        Ok(Some(Windows {
            rank,
            size,
            bases,
            data_offset,
            capacity,
            pids,
            _keep: keep,
        }))
    }

    /// This rank.
    pub(crate) fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// Data bytes of each window.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// The data area of `owner`'s window.
    pub(crate) fn data(&self, owner: usize) -> DevAddr {
        self.bases[owner] + self.data_offset as u64
    }

    /// The flag word in `owner`'s window that rank `from` raises in `round`.
    pub(crate) fn flag(&self, owner: usize, round: Round, from: usize) -> DevAddr {
        let array = match round {
            Round::Ready => 0,
            Round::Done => self.size,
        };
        self.bases[owner] + 4 * (array + from) as u64
    }

    /// Every flag word of this rank's own window.
    pub(crate) fn own_flags(&self) -> Vec<DevAddr> {
        (0..self.size)
            .filter(|&p| p != self.rank)
            .flat_map(|p| [Round::Ready, Round::Done].map(|r| self.flag(self.rank, r, p)))
            .collect()
    }

    /// The process id of every rank (all on this host).
    pub(crate) fn pids(&self) -> &[u32] {
        &self.pids
    }
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
