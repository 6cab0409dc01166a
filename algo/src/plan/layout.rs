//! Where the send and receive buffers lie inside one in-place buffer.
//!
//! NCCL lets a collective run "in place": the send and receive buffers are
//! the same allocation, at offsets fixed per collective (`sendbuff ==
//! recvbuff` for all-reduce, broadcast and reduce; `sendbuff == recvbuff +
//! rank * count` for all-gather; `recvbuff == sendbuff + rank * count` for
//! reduce-scatter). Plans always speak of [`BufId::Send`](super::step::BufId) and
//! [`BufId::Recv`](super::step::BufId) regions; this module says how those map into
//! the single buffer, so the interpreter and every backend agree.

use super::step::Plan;
use crate::Error;
use streamcomm_types::Collective;

/// The layout of an in-place call, in elements.
///
/// Send element `i` lies at buffer element `send_offset + i`, receive element
/// `i` at `recv_offset + i`; the buffer holds at least `len` elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InPlaceLayout {
    /// Where element 0 of the send buffer lies in the in-place buffer.
    pub send_offset: usize,
    /// Where element 0 of the receive buffer lies in the in-place buffer.
    pub recv_offset: usize,
    /// Elements the in-place buffer must hold.
    pub len: usize,
}

impl InPlaceLayout {
    /// The NCCL in-place layout of `plan`.
    ///
    /// | collective       | `send_offset`   | `recv_offset`   | `len`           |
    /// |------------------|-----------------|-----------------|-----------------|
    /// | `AllGather`      | `rank * count`  | 0               | `nranks * count`|
    /// | `ReduceScatter`  | 0               | `rank * count`  | `nranks * count`|
    /// | every other one  | 0               | 0               | max of both     |
    ///
    /// For `Broadcast` a non-root rank's buffer only receives; for `Reduce` a
    /// non-root rank's buffer is only read; `Send`/`Recv` use one side only.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidUsage`] for `AllToAll`: a block a rank still has to
    /// send would be overwritten by one it receives (NCCL does not support
    /// an in-place all-to-all either).
    pub fn of(plan: &Plan) -> Result<InPlaceLayout, Error> {
        let rank = plan.rank;
        let (send_offset, recv_offset) = match plan.collective {
            Collective::AllGather => (rank * plan.send_count, 0),
            Collective::ReduceScatter => (0, rank * plan.recv_count),
            Collective::AllToAll => {
                return Err(Error::InvalidUsage(
                    "all_to_all cannot run in place: pass distinct send and recv buffers"
                        .to_string(),
                ));
            }
            _ => (0, 0),
        };
        Ok(InPlaceLayout {
            send_offset,
            recv_offset,
            len: (send_offset + plan.send_count).max(recv_offset + plan.recv_count),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{PlanParams, build};
    use streamcomm_kernels::{DataType, ReduceOp};

    fn layout(c: Collective, rank: usize) -> Result<InPlaceLayout, Error> {
        let p = PlanParams {
            rank,
            nranks: 4,
            slot_bytes: 64,
            nsteps: 1,
        };
        InPlaceLayout::of(&build(c, DataType::I32, ReduceOp::Sum, 10, &p).unwrap())
    }

    #[test]
    fn nccl_offsets() {
        let l = layout(Collective::AllGather, 2).unwrap();
        assert_eq!((l.send_offset, l.recv_offset, l.len), (20, 0, 40));
        let l = layout(Collective::ReduceScatter, 3).unwrap();
        assert_eq!((l.send_offset, l.recv_offset, l.len), (0, 30, 40));
        let l = layout(Collective::AllReduce, 1).unwrap();
        assert_eq!((l.send_offset, l.recv_offset, l.len), (0, 0, 10));
        let l = layout(Collective::Reduce { root: 0 }, 1).unwrap();
        assert_eq!(l.len, 10);
        let l = layout(Collective::Broadcast { root: 0 }, 1).unwrap();
        assert_eq!(l.len, 10);
        assert!(matches!(
            layout(Collective::AllToAll, 0),
            Err(Error::InvalidUsage(_))
        ));
    }
}
