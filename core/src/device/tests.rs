//! The emulated device's rank, for the GPUDirect RDMA tests
//! (`gpudirect_probe_tests`), which run in the Soft-RoCE guest: there a NIC must
//! register the "device" memory, which the CUDA stand-in cannot offer (its
//! device memory is not host-addressable and it reports no GPUDirect RDMA).
//! Every other device test runs through the real CUDA queue on a CUDA
//! driver (`core/tests/cuda/`, on the stand-in under
//! `scripts/gpu-check.sh --stand-in`).

use rand::Rng;

use super::DeviceShared;
use super::call::{DeviceP2p, DeviceRange};
use super::emulated::{EmulatedQueue, EmulatedSignal, EmulatedStaging};
use crate::comm::p2p::Dir;
use crate::host::HostStream;
use crate::{Communicator, DataType, Result};

pub(in crate::device) const POISON: f32 = f32::NAN;

/// One rank's view of the emulated device.
pub(in crate::device) struct Rank {
    pub comm: Communicator,
    pub stream: HostStream,
    pub shared: DeviceShared<EmulatedStaging, EmulatedSignal>,
}

pub(in crate::device) fn range(v: &[f32]) -> DeviceRange {
    DeviceRange {
        addr: v.as_ptr() as u64,
        len: v.len(),
    }
}

/// Fails listing every rank's mismatches, if any.
pub(in crate::device) fn assert_no_errors(per_rank: Vec<Vec<String>>) {
    let errors: Vec<String> = per_rank.into_iter().flatten().collect();
    assert!(errors.is_empty(), "{errors:#?}");
}

/// Data rank `r` contributes in round `round` (so every rank can compute
/// every other rank's input for its reference).
pub(in crate::device) fn input(seed: u64, r: usize, len: usize) -> Vec<f32> {
    use rand::SeedableRng;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ (r as u64 * 0x9E37_79B9));
    (0..len).map(|_| rng.gen_range(-4.0f32..4.0)).collect()
}

pub(in crate::device) fn p2p(dir: Dir, peer: usize, v: &[f32]) -> DeviceP2p {
    DeviceP2p {
        dir,
        peer,
        dtype: DataType::F32,
        range: range(v),
    }
}

impl Rank {
    /// Enqueues a p2p group on this rank's emulated device stream.
    pub(in crate::device) fn group(&self, ops: &[DeviceP2p]) -> Result<()> {
        let queue = EmulatedQueue {
            stream: &self.stream,
        };
        crate::device::enqueue_device_group(&self.comm, &queue, &self.shared, ops)
    }
}

/// Checks that `inb` starts with `want` (from rank `left`) and keeps its
/// poison after it, adding what differs to `bad`.
pub(in crate::device) fn check_received(
    bad: &mut Vec<String>,
    r: usize,
    left: usize,
    inb: &[f32],
    want: &[f32],
) {
    let len = want.len();
    if inb[..len] != *want {
        bad.push(format!("rank {r}: {len} elements from {left} differ"));
    }
    if inb[len..].iter().any(|x| !x.is_nan()) {
        bad.push(format!("rank {r}: the receive wrote past the message"));
    }
}
