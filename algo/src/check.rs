//! Checks of the arguments that both kinds of plan (data and barrier)
//! take.

use crate::Error;

/// Checks that a communicator of `nranks` has at least one rank and that
/// `rank` is one of them; the error names `call` (what its message starts
/// with: `all_reduce`, `barrier chain`) and the bad value.
pub(crate) fn rank_in_range(call: &str, rank: usize, nranks: usize) -> Result<(), Error> {
    if nranks == 0 {
        return Err(Error::invalid(format!(
            "{call}: nranks is 0 (a communicator has at least one rank)"
        )));
    }
    if rank >= nranks {
        return Err(Error::invalid(format!(
            "{call}: rank {rank} is out of range for {nranks} ranks"
        )));
    }
    Ok(())
}
