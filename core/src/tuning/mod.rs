//! Cost model and algorithm selection.
//!
//! Several algorithms implement the same collective (see
//! [`crate::plan::Algorithm`]): rings move the fewest bytes but take
//! `O(n)` steps, trees and recursive doubling take `O(log n)` steps but move
//! more bytes through some ranks. Which is faster depends on the message
//! size, the number of ranks and hosts, and the machine. As NCCL does
//! (`graph/tuning.cc`), the communicator predicts each candidate's time with
//! a latency/bandwidth model ([`predict`]) and runs the cheapest
//! ([`choose`]); `STREAMCOMM_ALGO` ([`AlgoOverride`]) forces a choice.
//!
//! The model's parameters ([`CostParams`]: `alpha` per step, `beta` per
//! byte, per link kind, `gamma` per reduced byte, cores per host, the
//! weight of a write against a read) come from
//! the file named by `STREAMCOMM_TUNING_FILE`, which `streamcomm-bench
//! calibrate` measures and writes, or from built-in defaults.

mod model;
mod select;

pub use model::{Shape, predict};
pub use select::choose_by_model;
pub(crate) use select::{ForcedAlgorithms, choose};

use std::collections::HashMap;

use crate::bootstrap::Bootstrap;
use crate::config::{Config, CostParams, Transport, TransportChoice};
use crate::plan::{Algorithm, Collective};
use crate::{Error, Result};

/// Everything a communicator needs to choose algorithms; the same on every
/// rank.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Selector {
    forced: ForcedAlgorithms,
    params: CostParams,
    shape: Shape,
}

impl Selector {
    /// From the configuration and each rank's host label.
    pub(crate) fn new(config: &Config, hosts: &[String]) -> Selector {
        let ranks = hosts.len();
        let mut per: HashMap<&str, usize> = HashMap::new();
        for h in hosts {
            *per.entry(h.as_str()).or_default() += 1;
        }
        let sharing = per.into_values().max().unwrap_or(1);
        let per_host = if config.transport == TransportChoice::Only(Transport::Tcp) {
            // Every pair of ranks talks tcp: as if each had its own host,
            // for the links; the ranks of one machine still share its cores.
            1
        } else {
            sharing
        };
        Selector {
            // Resolved when the communicator checked the configuration
            // (`check_same_everywhere`), which fails on names that are not
            // algorithms; nothing is forced by a configuration that skipped it.
            forced: ForcedAlgorithms::resolve(&config.algo).unwrap_or_default(),
            params: config.tuning.unwrap_or_default(),
            shape: Shape::new(ranks, per_host, config.slot_bytes()).with_sharing(sharing),
        }
    }

    /// The model's prediction for one call by `algo`, in seconds.
    pub(crate) fn predict(
        &self,
        collective: Collective,
        algo: Algorithm,
        count: usize,
        esize: usize,
    ) -> Option<f64> {
        predict(&self.params, collective, algo, count, esize, &self.shape)
    }

    /// The algorithm for one call (`None`: the collective has one schedule).
    pub(crate) fn choose(
        &self,
        collective: Collective,
        count: usize,
        esize: usize,
    ) -> Option<Algorithm> {
        choose(
            &self.forced,
            &self.params,
            collective,
            count,
            esize,
            &self.shape,
        )
    }
}

/// Checks at creation that every rank forces the same algorithms and uses
/// the same model parameters (otherwise ranks would build plans that do not
/// match, and fail later with a less clear error).
///
/// # Errors
/// [`Error::InvalidArgument`] naming the first rank that differs.
pub(crate) fn check_same_everywhere(boot: &mut Bootstrap, config: &Config) -> Result<()> {
    // A name that is no algorithm fails here, alike on every rank.
    let forced = ForcedAlgorithms::resolve(&config.algo)?;
    let mine = format!("STREAMCOMM_ALGO={forced} tuning={:?}", config.tuning);
    let all = boot.all_gather(mine.as_bytes())?;
    match all.iter().position(|theirs| theirs != mine.as_bytes()) {
        None => Ok(()),
        Some(p) => Err(Error::invalid(format!(
            "rank {p} has {:?}, this rank {mine:?}: set the same STREAMCOMM_ALGO and \
             STREAMCOMM_TUNING_FILE on every rank",
            String::from_utf8_lossy(&all[p])
        ))),
    }
}
