//! `streamcomm_group_start` / `streamcomm_group_end`: NCCL's group calls.
//!
//! Between the outermost start and its end, `streamcomm_send` and
//! `streamcomm_recv` on this thread are checked and collected here instead of
//! being enqueued; the outermost end submits them as one
//! [`Communicator::group`], so a rank may post sends and receives to each
//! other in any order without deadlock (and may send to itself, paired with
//! a receive from itself). Groups nest (only the outermost end submits). The
//! state is per thread, as in NCCL. All operations of one group must use one
//! communicator and one stream; collectives and barriers are refused inside
//! a group. If the group fails as a whole, nothing of it is enqueued.

use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::sync::Arc;

use streamcomm::Communicator;
use streamcomm::UntypedBuffer;
use streamcomm::host::HostStream;

use crate::args::CBuf;
use crate::guard::guard;
use crate::result::{Failure, FfiResult};
use crate::{COMMS, STREAMS};

/// A send or receive waiting for the group's end.
pub(crate) struct Pending {
    /// True for a send, false for a receive.
    pub is_send: bool,
    /// The C buffer, as checked.
    pub cbuf: CBuf,
    /// The wrapped C buffer.
    pub buf: UntypedBuffer,
    /// The peer rank.
    pub peer: usize,
}

/// What the group collects: the communicator and stream (with their handles,
/// to compare) and the operations in posting order.
struct Batch {
    comm_handle: usize,
    stream_handle: usize,
    comm: Arc<Communicator>,
    stream: Arc<HostStream>,
    ops: Vec<Pending>,
}

#[derive(Default)]
struct GroupState {
    depth: usize,
    batch: Option<Batch>,
}

thread_local! {
    static GROUP: RefCell<GroupState> = RefCell::new(GroupState::default());
}

/// Fails when this thread is inside a group (`call` is not a send or recv).
pub(crate) fn refuse_in_group(call: &str) -> FfiResult {
    if GROUP.with(|g| g.borrow().depth) > 0 {
        return Err(Failure::usage(format!(
            "{call} inside streamcomm_group_start/end: only streamcomm_send and streamcomm_recv may be grouped"
        )));
    }
    Ok(())
}

/// An operation to enqueue at once: communicator, stream, operation.
pub(crate) type Immediate = (Arc<Communicator>, Arc<HostStream>, Pending);

/// Inside a group: keeps `op` for the group's end and returns `None`.
/// Outside: gives `op` back to be enqueued at once.
pub(crate) fn collect(
    comm_handle: *mut c_void,
    stream_handle: *mut c_void,
    comm: Arc<Communicator>,
    stream: Arc<HostStream>,
    op: Pending,
) -> FfiResult<Option<Immediate>> {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Ok(Some((comm, stream, op)));
        }
        let (ch, sh) = (comm_handle as usize, stream_handle as usize);
        match &mut g.batch {
            None => {
                g.batch = Some(Batch {
                    comm_handle: ch,
                    stream_handle: sh,
                    comm,
                    stream,
                    ops: vec![op],
                });
            }
            Some(b) if b.comm_handle == ch && b.stream_handle == sh => {
                // Each C buffer is wrapped on its own, so the library cannot
                // see that two of them share memory: refuse a receive
                // overlapping anything else of the group here (sends may
                // share memory: they only read it).
                let clash = b.ops.iter().find(|o| {
                    (!o.is_send || !op.is_send) && o.cbuf.overlaps(&op.cbuf)
                });
                if let Some(o) = clash {
                    return Err(Failure::invalid(format!(
                        "this {} buffer overlaps the {} buffer of an earlier operation of the group (peer {}); a receive buffer must not share memory with any other buffer of its group",
                        if op.is_send { "send" } else { "recv" },
                        if o.is_send { "send" } else { "recv" },
                        o.peer
                    )));
                }
                b.ops.push(op)
            }
            Some(_) => {
                return Err(Failure::usage(
                    "all operations of one group must use the same communicator and stream",
                ))
            }
        }
        Ok(None)
    })
}

/// Starts (or nests) a group on this thread.
#[unsafe(no_mangle)]
pub extern "C" fn streamcomm_group_start() -> c_int {
    guard("streamcomm_group_start", || {
        GROUP.with(|g| g.borrow_mut().depth += 1);
        Ok(())
    })
}

/// Ends a group; the outermost end submits the collected operations.
#[unsafe(no_mangle)]
pub extern "C" fn streamcomm_group_end() -> c_int {
    guard("streamcomm_group_end", || {
        let batch = GROUP.with(|g| {
            let mut g = g.borrow_mut();
            if g.depth == 0 {
                return Err(Failure::usage(
                    "streamcomm_group_end without streamcomm_group_start",
                ));
            }
            g.depth -= 1;
            Ok(if g.depth == 0 { g.batch.take() } else { None })
        })?;
        match batch {
            Some(b) => submit(b),
            None => Ok(()),
        }
    })
}

/// Submits a finished group's operations as one [`Communicator::group`].
fn submit(batch: Batch) -> FfiResult {
    // A handle destroyed since the group's first operation is reported as
    // a use after destroy, like any other call.
    COMMS.get(batch.comm_handle as *const c_void)?;
    STREAMS.get(batch.stream_handle as *const c_void)?;
    let Batch {
        comm,
        stream,
        mut ops,
        ..
    } = batch;
    comm.group(&stream, |g| {
        for op in ops.iter_mut() {
            if op.is_send {
                g.send(&op.buf, op.peer)?;
            } else {
                g.recv(&mut op.buf, op.peer)?;
            }
        }
        Ok(())
    })?;
    Ok(())
}
