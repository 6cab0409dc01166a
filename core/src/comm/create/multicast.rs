//! Creation, after the barrier state is agreed: joining the multicast
//! barrier's group where it is asked for or preferred (see
//! `docs/design/barriers.md`, "Multicast").
//!
//! Collective where wanted (every rank decides alike from the endpoints
//! and the configuration): each rank joins (`transport::verbs::multicast`)
//! and the ranks all-gather whether they could; if all could, they run one
//! multicast barrier as a probe, bounded by [`PROBE_TIMEOUT`], and
//! all-gather whether it completed, since a join succeeds locally even
//! where the fabric carries no multicast. Then every rank has the group,
//! or every rank has the same reason it is absent: a request for
//! `multicast` fails with it; the default selection keeps its flag
//! algorithm and reports it (`Communicator::barrier_fallback`).

use std::sync::Arc;
use std::time::Duration;

use super::prepare::Local;
use crate::barrier::multicast::{DatagramFaults, MulticastBarrier};
use crate::barrier::{BarrierAlgo, FlagBarriers};
use crate::bootstrap::UniqueId;
use crate::comm::barrier::BarrierState;
use crate::comm::endpoint::{self, Endpoint};
use crate::wait::WaitPolicy;
use crate::{Error, Result};

/// Longest the probe barrier waits (or the communicator's timeout, if
/// shorter): on a fabric whose multicast works it takes one round trip.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The fewest ranks for which the default selection prefers multicast
/// (one step against dissemination's ⌈log2 N⌉ rounds; see
/// `docs/measurements/soft-roce.md`).
pub(crate) const PREFERRED_FROM_RANKS: usize = 4;

/// Why the group is joined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Want {
    /// The configuration asks for `multicast`: without it, creation fails.
    Requested,
    /// The default selection prefers it: without it, the flag algorithm
    /// chosen stays, and the reason is reported.
    Preferred,
}

/// Whether this communicator joins a group (alike on every rank): asked
/// for, or preferred when nothing was asked, every pair of ranks talks
/// over verbs, every rank is on a host of its own and there are at least
/// [`PREFERRED_FROM_RANKS`].
pub(crate) fn wanted(
    requested: Option<BarrierAlgo>,
    endpoints: &[Endpoint],
    nhosts: usize,
) -> Option<Want> {
    let size = endpoints.len();
    match requested {
        Some(BarrierAlgo::Multicast) => Some(Want::Requested),
        Some(_) => None,
        None => (size >= PREFERRED_FROM_RANKS && nhosts == size && all_pairs_on_verbs(endpoints))
            .then_some(Want::Preferred),
    }
}

/// Whether every pair of ranks talks over verbs.
pub(crate) fn all_pairs_on_verbs(endpoints: &[Endpoint]) -> bool {
    endpoints.iter().enumerate().all(|(a, ea)| {
        endpoints
            .iter()
            .enumerate()
            .all(|(b, eb)| a == b || endpoint::pair_uses_verbs(ea, eb))
    })
}

/// Joins the group, probes it, and hands the outcome to `barrier`.
/// Collective (see the module docs).
///
/// # Errors
/// [`Error::Unavailable`] with the reason when `want` is
/// [`Want::Requested`] and the group is absent; as the bootstrap.
pub(crate) fn settle(
    local: &mut Local,
    id: &UniqueId,
    endpoints: &[Endpoint],
    want: Want,
    barrier: &mut BarrierState,
) -> Result<Option<Arc<MulticastBarrier>>> {
    let BarrierState::Flags(flags) = barrier else {
        return absent(
            want,
            None,
            "some ranks are reached over tcp (multicast needs every pair of ranks on verbs)".into(),
        );
    };
    let outcome = join_and_probe(local, id, endpoints)?;
    match outcome {
        Ok(b) => {
            flags.set_multicast(Ok(b.clone()));
            tracing::debug!(rank = local.rank, "barriers run multicast");
            Ok(Some(b))
        }
        Err(why) => absent(want, Some(flags), why),
    }
}

/// The group is absent for `why`: an error when requested, else the
/// fallback recorded and reported.
fn absent(
    want: Want,
    flags: Option<&mut FlagBarriers>,
    why: String,
) -> Result<Option<Arc<MulticastBarrier>>> {
    if want == Want::Requested {
        return Err(Error::Unavailable(format!(
            "barrier algorithm multicast: {why}"
        )));
    }
    if let Some(flags) = flags {
        flags.set_multicast(Err(why));
        if let Some(note) = flags.fallback() {
            tracing::info!("{note}");
        }
    }
    Ok(None)
}

/// Every rank's join, then the probe: the barrier, or the first reason
/// any rank gave (the same on every rank).
fn join_and_probe(
    local: &mut Local,
    id: &UniqueId,
    endpoints: &[Endpoint],
) -> Result<std::result::Result<Arc<MulticastBarrier>, String>> {
    let (rank, size) = (local.rank, local.size);
    let faults = local.config.faults.datagram_faults(rank);
    let tag = tag_of(id);
    let joined = if all_pairs_on_verbs(endpoints) {
        local.device.join_multicast(size, tag, faults.refuse_join)
    } else {
        Err("some pair of ranks is not on verbs (multicast needs every pair on verbs)".into())
    };
    let barrier = match agree(local, &joined.as_ref().map(|_| ()).map_err(Clone::clone))? {
        Ok(()) => Arc::new(MulticastBarrier::new(
            rank,
            size,
            tag,
            joined.map_err(Error::Unavailable)?,
            DatagramFaults::default(),
        )),
        Err(why) => return Ok(Err(why)),
    };
    let policy = WaitPolicy::new(local.config.spin, local.config.timeout.min(PROBE_TIMEOUT));
    let probed = barrier.run(&policy).map_err(|e| match e {
        Error::Timeout { what, waited_ms, .. } => format!(
            "the group was joined, but no multicast datagram came through: rank {rank} waited {waited_ms} ms for {what}"
        ),
        other => format!("the probe barrier failed on rank {rank}: {other}"),
    });
    Ok(agree(local, &probed)?.map(|()| {
        // Injected loss and duplicates hit the barriers the user runs;
        // `mcast:refuse` stands for a fabric without multicast.
        barrier.set_faults(faults);
        barrier
    }))
}

/// All-gathers every rank's outcome: `Ok` when all are, else the first
/// rank's reason, naming it.
fn agree(
    local: &mut Local,
    mine: &std::result::Result<(), String>,
) -> Result<std::result::Result<(), String>> {
    let blob = match mine {
        Ok(()) => Vec::new(),
        Err(why) => why.as_bytes().to_vec(),
    };
    let all = local.boot.all_gather(&blob)?;
    Ok(match all.iter().position(|b| !b.is_empty()) {
        None => Ok(()),
        Some(r) => Err(format!("rank {r}: {}", String::from_utf8_lossy(&all[r]))),
    })
}

/// The communicator's tag: FNV-1a of its unique id (the same on every
/// rank, and every build).
fn tag_of(id: &UniqueId) -> u64 {
    id.to_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
}
