//! `ncclGroupStart`/`ncclGroupEnd`: sends and receives issued inside a
//! group are held, per communicator and stream, and enqueued together as
//! one group of streamcomm's when the outermost group ends, so that pairs
//! which would wait for each other in stream order (every rank sending
//! first, around a ring) do not. A collective issued inside a group is
//! enqueued at once, after what its communicator holds: streamcomm's
//! calls never wait on the host.

use std::cell::RefCell;
use std::sync::Arc;

use streamcomm::Error;
use streamcomm::cuda::RawP2p;
use streamcomm::cuda::cudarc::driver::sys::CUstream;

use crate::api::{cudaStream_t, export, ncclComm_t, ncclResult_t};
use crate::comms::Ready;
use crate::guard::guard;

/// Operations of one communicator on one stream, held until their group
/// ends.
struct Held {
    comm: ncclComm_t,
    ready: Arc<Ready>,
    stream: cudaStream_t,
    ops: Vec<RawP2p>,
}

thread_local! {
    /// This thread's open groups (they nest), and what they hold.
    static OPEN: RefCell<(usize, Vec<Held>)> = const { RefCell::new((0, Vec::new())) };
}

/// Enqueues `ops` as one group on `stream`.
fn issue(ready: &Ready, stream: cudaStream_t, ops: &[RawP2p]) -> Result<(), Error> {
    // SAFETY: the C caller's contract: every buffer is device memory of
    // the communicator's device holding `len` elements of its type, valid
    // until the operation completes on `stream`, a live stream of that
    // device.
    unsafe { ready.cuda.group_raw(ops, stream as CUstream) }
}

/// `ops` of `comm` on `stream`: held if a group is open on this thread,
/// else enqueued now, together.
pub(crate) fn p2p(
    comm: ncclComm_t,
    ready: Arc<Ready>,
    stream: cudaStream_t,
    ops: Vec<RawP2p>,
) -> Result<(), Error> {
    let rest = OPEN.with(|o| {
        let mut o = o.borrow_mut();
        if o.0 == 0 {
            return Some((ready, ops));
        }
        match o
            .1
            .iter_mut()
            .find(|h| h.comm == comm && h.stream == stream)
        {
            Some(h) => h.ops.extend(ops),
            None => o.1.push(Held {
                comm,
                ready,
                stream,
                ops,
            }),
        }
        None
    });
    match rest {
        Some((ready, ops)) => issue(&ready, stream, &ops),
        None => Ok(()),
    }
}

/// Enqueues now what this thread's open group holds for `comm`, so that a
/// collective issued next comes after it, in NCCL's order.
pub(crate) fn flush(comm: ncclComm_t) -> Result<(), Error> {
    let held: Vec<Held> = OPEN.with(|o| {
        let mut o = o.borrow_mut();
        let (mine, others) = std::mem::take(&mut o.1)
            .into_iter()
            .partition(|h| h.comm == comm);
        o.1 = others;
        mine
    });
    held.iter()
        .try_for_each(|h| issue(&h.ready, h.stream, &h.ops))
}

export! {
    /// `ncclGroupStart`: opens a group on this thread (groups nest).
    ncclGroupStart, pncclGroupStart => fn() -> ncclResult_t {
        guard("ncclGroupStart", || {
            OPEN.with(|o| o.borrow_mut().0 += 1);
            Ok(ncclResult_t::ncclSuccess)
        })
    }
}

export! {
    /// `ncclGroupEnd`: closes this thread's innermost group; the outermost
    /// enqueues what the group holds (every communicator's, even after
    /// one fails; the first failure is returned).
    ncclGroupEnd, pncclGroupEnd => fn() -> ncclResult_t {
        guard("ncclGroupEnd", || {
            let held = OPEN.with(|o| {
                let mut o = o.borrow_mut();
                o.0 = o.0.checked_sub(1).ok_or_else(|| {
                    Error::InvalidUsage("ncclGroupEnd without ncclGroupStart".into())
                })?;
                Ok::<_, Error>(if o.0 == 0 { std::mem::take(&mut o.1) } else { Vec::new() })
            })?;
            // Every communicator's operations are enqueued, even after one
            // fails; the first failure is returned.
            let issued: Vec<Result<(), Error>> =
                held.iter().map(|h| issue(&h.ready, h.stream, &h.ops)).collect();
            issued.into_iter().collect::<Result<(), _>>()?;
            Ok(ncclResult_t::ncclSuccess)
        })
    }
}
