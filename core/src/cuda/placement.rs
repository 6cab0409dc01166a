//! One rank of a communicator per GPU per process: the check
//! [`CudaComm::new`](super::CudaComm::new) makes before anything else.
//!
//! Why: the streams of one process on one device share that context's
//! hardware queues (`CUDA_DEVICE_MAX_CONNECTIONS`, 8 by default). Two ranks
//! of one process on one GPU put their streams in one context, and when two
//! of them alias onto one queue, rank A's stream-memory wait for rank B sits
//! in front of B's signal: a hang the driver cannot see, since ordering
//! through stream memory operations is invisible to CUDA's scheduler. The
//! staged path has the same cycle (A's completion wait, B's host function).
//! NCCL refuses such communicators ("Duplicate GPU detected"); so does this
//! backend. Ranks on one GPU in separate processes have contexts (and
//! queues) of their own and are allowed.

use crate::device::direct::window::{gather_bytes, host_hash};
use crate::{Communicator, Error, Result};

/// Bytes of one rank's record: process id, host hash, device ordinal.
const RECORD: usize = 16;

/// Fails, on every rank alike, when two ranks of `comm` are threads of one
/// process bound to one device. A collective call: every rank makes it.
pub(crate) fn check_one_rank_per_gpu(comm: &Communicator, ordinal: usize) -> Result<()> {
    let mut record = [0u8; RECORD];
    record[0..4].copy_from_slice(&std::process::id().to_le_bytes());
    record[4..12].copy_from_slice(&host_hash().to_le_bytes());
    record[12..16].copy_from_slice(&(ordinal as u32).to_le_bytes());
    let all = gather_bytes(comm, &record)?;
    let records: Vec<&[u8]> = all.chunks_exact(RECORD).collect();
    for (a, ra) in records.iter().enumerate() {
        if let Some(b) = (a + 1..records.len()).find(|&b| records[b] == *ra) {
            let pid = u32::from_le_bytes(ra[0..4].try_into().expect("4 bytes"));
            let dev = u32::from_le_bytes(ra[12..16].try_into().expect("4 bytes"));
            return Err(Error::InvalidUsage(format!(
                "CudaComm::new: ranks {a} and {b} are threads of one process (pid {pid}) \
                 on CUDA device {dev}; one rank per GPU per process is allowed (as in NCCL), \
                 since streams of one context share hardware queues and a rank's wait \
                 could block its peer's signal: run these ranks as processes"
            )));
        }
    }
    Ok(())
}
