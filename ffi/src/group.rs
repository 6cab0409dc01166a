//! `streamcomm_group_start` / `streamcomm_group_end`: NCCL's group calls.
//!
//! Between the outermost start and its end, `streamcomm_send` and
//! `streamcomm_recv` on this thread are checked and collected here instead of
//! being enqueued; the outermost end submits them together, so that a rank
//! may post sends and receives to each other in any order without deadlock.
//! Groups nest (only the outermost end submits). The state is per thread, as
//! in NCCL. All operations of one group must use one communicator and one
//! stream; collectives and barriers are refused inside a group.

use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::sync::Arc;

use streamcomm::comm::UntypedBuffer;
use streamcomm::host::HostStream;
use streamcomm::Communicator;

use crate::guard::guard;
use crate::result::{Failure, FfiResult, UNAVAILABLE};

/// A send or receive waiting for the group's end.
pub(crate) struct Pending {
    /// True for a send, false for a receive.
    pub is_send: bool,
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
            Some(b) if b.comm_handle == ch && b.stream_handle == sh => b.ops.push(op),
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
#[no_mangle]
pub extern "C" fn streamcomm_group_start() -> c_int {
    guard("streamcomm_group_start", || {
        GROUP.with(|g| g.borrow_mut().depth += 1);
        Ok(())
    })
}

/// Ends a group; the outermost end submits the collected operations.
#[no_mangle]
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

/// Submits a finished group's operations together.
fn submit(batch: Batch) -> FfiResult {
    let _ = (&batch.comm, &batch.stream, batch.ops.len());
    Err(Failure::new(
        UNAVAILABLE,
        "grouped send/recv need Communicator::group, which this build does not have yet; \
         the group's operations were discarded",
    ))
}
