//! The collectives that are plans, on host streams: the methods are
//! written from the one table of collectives ([`super::table`]), each one
//! line into one of two doors (separate buffers, one buffer).
//!
//! Every call validates its arguments, builds the plan (a pure function, see
//! [`crate::plan`]) and enqueues one task on the stream, then returns.
//!
//! What "enqueued" and "capturable" promise is said once, on
//! [`Communicator`](super::Communicator) (*Stream semantics*, *Graph capture*).

use crate::comm::Communicator;
use crate::comm::buffer::{AsBufView, Binding};
use crate::comm::plan_cache::CallKey;
use crate::comm::table::{for_each_collective, method_doc};
use crate::comm::task::PlanTask;
use crate::host::HostStream;
use crate::plan::{Collective, CountFrom, Lens, count_from};
use crate::{ReduceOp, Result};

/// Writes the host stream face's methods from an entry of the table.
macro_rules! host_face {
    (@separate [$(#[$doc:meta])*] $name:ident ($($arg:ident: $ty:ty),*),
        $collective:expr, $op:expr, $errors:literal, $example:literal, $_cuda:literal) => {
        $(#[$doc])*
        #[doc = host_face!(@docs $example, $errors)]
        pub fn $name(
            &self,
            send: &impl AsBufView,
            recv: &mut impl AsBufView,
            $($arg: $ty,)*
            stream: &HostStream,
        ) -> Result<()> {
            self.separate($collective, $op, send, recv, stream)
        }
    };
    (@in_place $of:ident $name:ident ($($arg:ident: $ty:ty),*), $collective:expr, $op:expr,
        $errors:literal, $summary:literal, $example:literal, $_cuda:literal) => {
        #[doc = concat!("[`Communicator::", stringify!($of), "`] ", $summary, ".")]
        #[doc = host_face!(@docs $example, $errors)]
        pub fn $name(&self, buf: &mut impl AsBufView, $($arg: $ty,)* stream: &HostStream) -> Result<()> {
            self.in_place($collective, $op, buf, stream)
        }
    };
    (@docs $example:literal, $errors:literal) => {
        method_doc!(
            host,
            errors: "[`Error::InvalidArgument`](crate::Error::InvalidArgument) when a buffer \
                is too small for the call, the element types differ, or `send` and `recv` \
                are the same buffer; the stored error if the communicator has failed. \
                Execution errors surface from the stream.",
            $example, $errors
        )
    };
}

impl Communicator {
    for_each_collective!(host_face);

    /// The front door of every collective with separate buffers: NCCL's
    /// count and the element type from the buffers by the rule every face
    /// shares ([`crate::plan::count_from`]), a rooted collective's buffer
    /// that this rank does not use left out, then one task on `stream`.
    pub(super) fn separate(
        &self,
        collective: Collective,
        op: ReduceOp,
        send: &impl AsBufView,
        recv: &mut impl AsBufView,
        stream: &HostStream,
    ) -> Result<()> {
        let (s, r) = (send.buf_view(), recv.buf_view());
        let lens = Lens::Separate {
            send: s.len(),
            recv: r.len(),
        };
        let (rank, size) = self.inner.core.place();
        let (count, from) = count_from(collective, lens, size)?;
        let dtype = match from {
            CountFrom::Recv => r.dtype(),
            _ => s.dtype(),
        };
        let reads = !matches!(collective, Collective::Broadcast { root } if root != rank);
        let writes = !matches!(collective, Collective::Reduce { root } if root != rank);
        let binding = Binding::Separate {
            send: reads.then_some(s),
            recv: writes.then_some(r),
        };
        let shape = CallKey {
            collective,
            dtype,
            op,
            count,
        };
        stream.enqueue(PlanTask::for_call(&self.inner.core, shape, binding)?)
    }

    /// The front door of every collective in one buffer (NCCL's in-place
    /// layout), as [`Communicator::separate`].
    pub(super) fn in_place(
        &self,
        collective: Collective,
        op: ReduceOp,
        buf: &mut impl AsBufView,
        stream: &HostStream,
    ) -> Result<()> {
        let v = buf.buf_view();
        let size = self.inner.core.size();
        let (count, _) = count_from(collective, Lens::InPlace(v.len()), size)?;
        let shape = CallKey {
            collective,
            dtype: v.dtype(),
            op,
            count,
        };
        stream.enqueue(PlanTask::for_call(
            &self.inner.core,
            shape,
            Binding::InPlace(v),
        )?)
    }
}
