//! Stage 2 of creation: every rank's endpoint (see [`super`]).

use super::prepare::Local;
use crate::comm::endpoint::Endpoint;
use crate::{Error, Result};

/// Gathers every rank's endpoint through the bootstrap and checks that the
/// tuning agrees on every rank.
///
/// # Errors
/// As the bootstrap; [`Error::InvalidArgument`] when ranks disagree on tuning.
pub(crate) fn exchange(local: &mut Local) -> Result<Vec<Endpoint>> {
    let endpoints = local
        .boot
        .all_gather(&local.me.encode())?
        .iter()
        .map(|b| Endpoint::decode(b))
        .collect::<Result<Vec<_>>>()?;
    if endpoints.len() != local.size {
        return Err(Error::Bootstrap(format!(
            "all-gather returned {} endpoints for {} ranks",
            endpoints.len(),
            local.size
        )));
    }
    crate::tuning::check_same_everywhere(&mut local.boot, &local.config)?;
    Ok(endpoints)
}
