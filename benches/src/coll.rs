//! What each collective means for the benchmark: buffer sizes, the bus
//! bandwidth factor, and one iteration enqueued on a stream.
//!
//! Sizes and bandwidths follow nccl-tests (`doc/PERFORMANCE.md` there), so
//! that figures can be compared with NCCL's: the size of a row is the larger
//! of the send and receive buffers, `algbw = size / time`, and `busbw` scales
//! `algbw` by what each rank must move over its busiest link in an optimal
//! algorithm — `2(n-1)/n` for all_reduce, `(n-1)/n` for all_gather,
//! reduce_scatter and all_to_all, 1 for broadcast, reduce and sendrecv.

use streamcomm::UntypedBuffer;
use streamcomm::host::HostStream;
use streamcomm::{Communicator, DataType, ReduceOp, Result};

use crate::cli::Collective;

/// Element counts for one size of the sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    /// The `count` argument of the call, as nccl-tests prints it: all
    /// elements for all_reduce, broadcast, reduce and sendrecv; one rank's
    /// block for all_gather, reduce_scatter and all_to_all.
    pub count: usize,
    /// Elements in the send buffer.
    pub send_len: usize,
    /// Elements in the receive buffer.
    pub recv_len: usize,
    /// Bytes of the row: the larger buffer (what algbw divides by time).
    pub bytes: u64,
}

impl Collective {
    /// The library's collective for this operation (`None` for sendrecv and
    /// barrier, which have a single schedule).
    pub(crate) fn library(self) -> Option<streamcomm::Collective> {
        use streamcomm::Collective as C;
        Some(match self {
            Collective::AllReduce => C::AllReduce,
            Collective::AllGather => C::AllGather,
            Collective::ReduceScatter => C::ReduceScatter,
            Collective::Broadcast => C::Broadcast { root: 0 },
            Collective::Reduce => C::Reduce { root: 0 },
            Collective::AllToAll => C::AllToAll,
            Collective::Sendrecv | Collective::Barrier => return None,
        })
    }

    /// Buffers for a row of `size` bytes (rounded down to whole elements, and
    /// to whole blocks where the buffer is split among `nranks`).
    pub(crate) fn geometry(self, size: u64, dtype: DataType, nranks: usize) -> Geometry {
        let elems = usize::try_from(size).unwrap_or(usize::MAX) / dtype.size();
        let (count, send_len, recv_len) = match self {
            Collective::AllReduce
            | Collective::Sendrecv
            | Collective::Broadcast
            | Collective::Reduce => (elems, elems, elems),
            Collective::AllGather => {
                let count = elems / nranks;
                (count, count, count * nranks)
            }
            Collective::ReduceScatter => {
                let count = elems / nranks;
                (count, count * nranks, count)
            }
            Collective::AllToAll => {
                let count = elems / nranks;
                (count, count * nranks, count * nranks)
            }
            Collective::Barrier => (0, 0, 0),
        };
        Geometry {
            count,
            send_len,
            recv_len,
            bytes: (send_len.max(recv_len) * dtype.size()) as u64,
        }
    }

    /// nccl-tests' factor from algorithm bandwidth to bus bandwidth.
    pub(crate) fn bus_factor(self, nranks: usize) -> f64 {
        let n = nranks as f64;
        match self {
            Collective::AllReduce => 2.0 * (n - 1.0) / n,
            Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll => {
                (n - 1.0) / n
            }
            Collective::Broadcast | Collective::Reduce | Collective::Sendrecv => 1.0,
            Collective::Barrier => 0.0,
        }
    }
}

/// One iteration's arguments.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Call {
    /// The operation.
    pub collective: Collective,
    /// Reduction operator (reductions only).
    pub op: ReduceOp,
    /// Root (broadcast and reduce only).
    pub root: usize,
}

impl Call {
    /// Enqueues one iteration on `stream` (out of place: `send` is never
    /// written, so every iteration computes the same result).
    ///
    /// sendrecv: the library has no grouped send+recv, and a send larger
    /// than the connection's slot ring waits for its receiver, so even ranks
    /// send first and odd ranks receive first; around the ring this never
    /// deadlocks, but a rank's two transfers run one after the other.
    ///
    /// # Errors
    /// Whatever the library's enqueue returns (invalid arguments, a failed
    /// communicator); execution errors surface from `stream.synchronize()`.
    pub(crate) fn enqueue(
        &self,
        comm: &Communicator,
        send: &UntypedBuffer,
        recv: &mut UntypedBuffer,
        stream: &HostStream,
    ) -> Result<()> {
        match self.collective {
            Collective::AllReduce => comm.all_reduce(send, recv, self.op, stream),
            Collective::AllGather => comm.all_gather(send, recv, stream),
            Collective::ReduceScatter => comm.reduce_scatter(send, recv, self.op, stream),
            Collective::Broadcast => comm.broadcast(send, recv, self.root, stream),
            Collective::Reduce => comm.reduce(send, recv, self.op, self.root, stream),
            Collective::AllToAll => comm.all_to_all(send, recv, stream),
            Collective::Sendrecv => {
                let (rank, n) = (comm.rank(), comm.size());
                let (next, prev) = ((rank + 1) % n, (rank + n - 1) % n);
                comm.group(stream, |g| {
                    g.send(send, next)?;
                    g.recv(recv, prev)
                })
            }
            Collective::Barrier => comm.barrier(stream),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_tests_size_conventions() {
        let g = Collective::AllReduce.geometry(64, DataType::F32, 4);
        assert_eq!((g.count, g.send_len, g.recv_len, g.bytes), (16, 16, 16, 64));
        let g = Collective::AllGather.geometry(64, DataType::F32, 4);
        assert_eq!((g.count, g.send_len, g.recv_len, g.bytes), (4, 4, 16, 64));
        let g = Collective::ReduceScatter.geometry(64, DataType::F32, 4);
        assert_eq!((g.count, g.send_len, g.recv_len, g.bytes), (4, 16, 4, 64));
        let g = Collective::AllToAll.geometry(72, DataType::F32, 4);
        assert_eq!((g.count, g.send_len, g.recv_len, g.bytes), (4, 16, 16, 64));
        let g = Collective::AllGather.geometry(8, DataType::F64, 2);
        assert_eq!((g.count, g.bytes), (0, 0));
    }

    #[test]
    fn bus_factors() {
        assert_eq!(Collective::AllReduce.bus_factor(2), 1.0);
        assert_eq!(Collective::AllReduce.bus_factor(4), 1.5);
        assert_eq!(Collective::AllGather.bus_factor(4), 0.75);
        assert_eq!(Collective::Broadcast.bus_factor(8), 1.0);
    }
}
