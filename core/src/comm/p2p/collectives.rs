//! The collectives of a host stream that are groups of sends and
//! receives: `gather`, `scatter`, `all_to_allv` and `all_gatherv`, written
//! from the one table of them ([`crate::comm::p2p::exchange_table`]). Each
//! describes itself as an [`Exchange`], whose lowering (shared with the
//! CUDA backend and the C API) checks it and gives this rank's transfers;
//! they are posted as one group.

use super::exchange::Exchange;
use super::{BufView, Dir};
use crate::comm::Communicator;
use crate::comm::buffer::AsBufView;
use crate::comm::p2p::exchange_table::for_each_exchange;
use crate::comm::table::method_doc;
use crate::host::HostStream;
use crate::{Error, Result};

/// Writes the host stream face's method from an entry of the table.
macro_rules! host_exchange {
    ([$(#[$doc:meta])*] $name:ident [$($sa:ident: $st:ty),*] [$($ra:ident: $rt:ty),*]
        ($($arg:ident: $ty:ty),*) = $x:expr; $errors:literal, $example:literal, $_cuda:literal) => {
        $(#[$doc])*
        #[doc = method_doc!(
            host,
            errors: "[`Error::InvalidArgument`] when the call does not fit the buffers or the \
                communicator, or `send` and `recv` are the same buffer or hold different \
                element types; the stored error if the communicator has failed. Execution \
                errors surface from the stream.",
            $example, $errors
        )]
        #[allow(clippy::too_many_arguments)]
        pub fn $name(
            &self,
            send: &impl AsBufView,
            $($sa: $st,)*
            recv: &mut impl AsBufView,
            $($ra: $rt,)*
            $($arg: $ty,)*
            stream: &HostStream,
        ) -> Result<()> {
            let (s, r) = (send.buf_view(), recv.buf_view());
            self.post_exchange(($x)(s.len(), r.len()), &s, &r, stream)
        }
    };
}

impl Communicator {
    /// Checks `x` against `send` and `recv`, then posts this rank's
    /// transfers as one group on `stream`.
    fn post_exchange(
        &self,
        x: Exchange<'_>,
        send: &BufView,
        recv: &BufView,
        stream: &HostStream,
    ) -> Result<()> {
        let core = &self.inner.core;
        let transfers = x.lower(core.rank(), core.size(), send.len(), recv.len())?;
        let uses = |dir| transfers.iter().any(|t| t.dir == dir);
        if uses(Dir::Send) && uses(Dir::Recv) {
            check_pair(x.call(), send, recv)?;
        }
        self.group_named(&x.name(), stream, |g| {
            for t in &transfers {
                match t.dir {
                    Dir::Send => g.send_region(send, t.offset, t.count, t.peer)?,
                    Dir::Recv => g.recv_region(recv, t.offset, t.count, t.peer)?,
                }
            }
            Ok(())
        })
    }

    for_each_exchange!(host_exchange);
}

/// Fails when one buffer is passed as both, or their element types differ.
fn check_pair(what: &str, s: &BufView, r: &BufView) -> Result<()> {
    if s.raw().same_as(r.raw()) {
        return Err(Error::invalid(format!(
            "{what}: send and recv are the same buffer"
        )));
    }
    if s.dtype() != r.dtype() {
        return Err(Error::invalid(format!(
            "{what}: dtype mismatch: send buffer holds {}, recv buffer holds {}",
            s.dtype(),
            r.dtype()
        )));
    }
    Ok(())
}
