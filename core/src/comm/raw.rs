//! Calls made with addresses and NCCL's arguments, as C and frameworks
//! make them: NCCL's rules for laying out `sendbuff`, `recvbuff` and
//! `count` ([`RawBuffers::nccl_layout`], the one copy of those rules), and
//! the host backend's door for such a call
//! ([`Communicator::collective_raw`]; the CUDA backend's is
//! `CudaComm::collective_raw`).

use crate::comm::Communicator;
use crate::comm::buffer::UntypedBuffer;
use crate::host::HostStream;
use crate::plan::Collective;
use crate::{DataType, Error, ReduceOp, Result};

/// `len` elements at an address: of host memory for a [`Communicator`],
/// of device memory (a `CUdeviceptr`) for a `CudaComm`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawSpan {
    /// Address of the first element.
    pub ptr: u64,
    /// Number of elements.
    pub len: usize,
}

/// The buffers of a raw collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawBuffers {
    /// Distinct input and output (either may be unused by this rank, e.g. a
    /// non-root's input of a broadcast; its `ptr` may then be 0).
    Separate {
        /// Input.
        send: RawSpan,
        /// Output.
        recv: RawSpan,
    },
    /// One buffer at NCCL's in-place offsets.
    InPlace(RawSpan),
}

impl RawBuffers {
    /// The buffers of a call made with NCCL's arguments, laid out by
    /// NCCL's rules: `send` and `recv` are device addresses (0 for NULL),
    /// `count` is NCCL's count (per rank for all-gather's input,
    /// reduce-scatter's output and all-to-all's blocks). In place where
    /// NCCL says so: the same buffer (all-reduce, broadcast, reduce,
    /// all-to-all), the input at this rank's block of the output
    /// (all-gather), the output at this rank's block of the input
    /// (reduce-scatter). A buffer this rank does not use (a non-root's
    /// input of a broadcast, output of a reduce) may be NULL. `None` when
    /// the call moves no element: NCCL returns at once.
    ///
    /// The C API (host and CUDA), the NCCL-compatible library and callers
    /// that hold pointers (`tensor.data_ptr()`) all lay out their calls
    /// here.
    ///
    /// # Examples
    /// ```
    /// use streamcomm::{RawBuffers, RawSpan};
    /// use streamcomm::{Collective, DataType};
    /// // Rank 1 of 4 gathers 8 f32 each; its input is its block of the output.
    /// let recv = 0x10000;
    /// let send = recv + 8 * 4;
    /// let b = RawBuffers::nccl_layout(Collective::AllGather, DataType::F32, send, recv, 8, 1, 4)?;
    /// assert_eq!(b, Some(RawBuffers::InPlace(RawSpan { ptr: recv, len: 32 })));
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a barrier (no buffers), a root out of
    /// range, a count whose bytes overflow, or a NULL buffer this rank uses
    /// (named: `sendbuff`, `the root's recvbuff`, ...).
    pub fn nccl_layout(
        collective: Collective,
        dtype: DataType,
        send: u64,
        recv: u64,
        count: usize,
        rank: usize,
        size: usize,
    ) -> Result<Option<RawBuffers>> {
        let blocks = |n: usize| {
            n.checked_mul(size)
                .filter(|all| all.checked_mul(dtype.size()).is_some())
                .ok_or_else(|| Error::invalid(format!("count {count} (x {size}) overflows")))
        };
        let (send_len, recv_len) = match collective {
            Collective::Barrier => {
                return Err(Error::invalid("a barrier has no buffers"));
            }
            Collective::Broadcast { root } | Collective::Reduce { root } if root >= size => {
                return Err(Error::invalid(format!(
                    "root {root} is not a rank of this communicator of {size}"
                )));
            }
            Collective::AllGather => (count, blocks(count)?),
            Collective::ReduceScatter => (blocks(count)?, count),
            Collective::AllToAll => (blocks(count)?, blocks(count)?),
            _ => {
                blocks(count)?;
                (count, count)
            }
        };
        if send_len.max(recv_len) == 0 {
            return Ok(None);
        }
        let reads = !matches!(collective, Collective::Broadcast { root } if root != rank);
        let writes = !matches!(collective, Collective::Reduce { root } if root != rank);
        let needed = |ptr: u64, side: &str| {
            if ptr != 0 {
                return Ok(());
            }
            // The side only the root uses is named so.
            let root_only = matches!(
                (collective, side),
                (Collective::Broadcast { .. }, "sendbuff")
                    | (Collective::Reduce { .. }, "recvbuff")
            );
            let whose = if root_only { "the root's " } else { "" };
            Err(Error::invalid(format!("{whose}{side} is NULL")))
        };
        let buf = |ptr: u64, len: usize| RawSpan { ptr, len };
        let at = |base: u64, elems: usize| base.wrapping_add((elems * dtype.size()) as u64);
        let in_place = send != 0
            && match collective {
                Collective::AllGather => send == at(recv, rank * count),
                Collective::ReduceScatter => recv == at(send, rank * count),
                _ => send == recv,
            };
        let esz = dtype.size() as u64;
        let checked = |ptr: u64, len: usize, side: &str| -> Result<std::ops::Range<u64>> {
            needed(ptr, side)?;
            if !ptr.is_multiple_of(esz) {
                return Err(Error::invalid(format!(
                    "{side} {ptr:#x} is not aligned to its element size ({esz} bytes for {dtype})"
                )));
            }
            let end = (len as u64)
                .checked_mul(esz)
                .and_then(|b| ptr.checked_add(b))
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "{side}: {len} elements at {ptr:#x} run past the end of the address space"
                    ))
                })?;
            Ok(ptr..end)
        };
        if in_place {
            let (ptr, len, side) = match collective {
                Collective::ReduceScatter => (send, send_len, "sendbuff"),
                _ => (recv, recv_len, "recvbuff"),
            };
            checked(ptr, len, side)?;
            return Ok(Some(RawBuffers::InPlace(buf(ptr, len))));
        }
        let sends = reads
            .then(|| checked(send, send_len, "sendbuff"))
            .transpose()?;
        let recvs = writes
            .then(|| checked(recv, recv_len, "recvbuff"))
            .transpose()?;
        if let (Some(a), Some(b)) = (sends, recvs)
            && a.start < b.end
            && b.start < a.end
        {
            return Err(Error::invalid(format!(
                "{}: sendbuff and recvbuff overlap without being NCCL's in-place layout",
                collective.name()
            )));
        }
        Ok(Some(RawBuffers::Separate {
            send: if reads {
                buf(send, send_len)
            } else {
                buf(0, 0)
            },
            recv: if writes {
                buf(recv, recv_len)
            } else {
                buf(0, 0)
            },
        }))
    }
}

impl Communicator {
    /// Enqueues `collective` on `stream` over host memory given by address,
    /// with the semantics of the typed methods of the same collective
    /// ([`Communicator::all_reduce`], its `*_in_place` form for
    /// [`RawBuffers::InPlace`], ...). Lay out NCCL's arguments with
    /// [`RawBuffers::nccl_layout`].
    ///
    /// # Examples
    /// ```
    /// use streamcomm::{Collective, DataType, RawBuffers, ReduceOp};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // What C holds: addresses and NCCL's count.
    /// let mut data = vec![comm.rank() as f32 + 1.0; 4];
    /// let addr = data.as_mut_ptr() as u64;
    /// let (rank, size) = (comm.rank(), comm.size());
    /// let layout = RawBuffers::nccl_layout(Collective::AllReduce, DataType::F32, addr, addr, 4, rank, size)?;
    /// let buffers = layout.expect("4 elements move");
    /// assert!(matches!(buffers, RawBuffers::InPlace(_)));
    /// // SAFETY: `data` holds 4 f32 and is untouched until the stream is synchronized.
    /// unsafe { comm.collective_raw(Collective::AllReduce, DataType::F32, ReduceOp::Sum, buffers, &stream)? };
    /// stream.synchronize()?;
    /// assert_eq!(data, [3.0; 4]);
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Safety
    /// Every buffer this rank uses is host memory holding `len` elements of
    /// `dtype`, valid, and not touched by other code, until the operation
    /// has completed on the stream (at every replay, if captured); a span
    /// of length 0 may have any address.
    ///
    /// # Errors
    /// As [`Communicator::all_reduce`]; a barrier (use
    /// [`Communicator::barrier`]); an all-to-all in one buffer (it has no
    /// in-place form on the host).
    pub unsafe fn collective_raw(
        &self,
        collective: Collective,
        dtype: DataType,
        op: ReduceOp,
        buffers: RawBuffers,
        stream: &HostStream,
    ) -> Result<()> {
        let name = collective.name();
        // SAFETY: forwarded: this function's contract, span by span.
        let wrap = |s: RawSpan| unsafe { s.host_buffer(dtype, name) };
        match (collective, buffers) {
            (Collective::Barrier, _) => Err(Error::invalid(
                "collective_raw: a barrier has no buffers; use barrier",
            )),
            (Collective::AllToAll, RawBuffers::InPlace(_)) => Err(Error::invalid(
                "all_to_all: sendbuff and recvbuff are one buffer, and all-to-all is never in place",
            )),
            (_, RawBuffers::Separate { send, recv }) => {
                self.separate(collective, op, &wrap(send)?, &mut wrap(recv)?, stream)
            }
            (_, RawBuffers::InPlace(buf)) => self.in_place(collective, op, &mut wrap(buf)?, stream),
        }
    }
}

impl RawSpan {
    /// The host memory of this span, borrowed (no copy); an empty buffer
    /// for a span of no element, whatever its address.
    ///
    /// # Safety
    /// As [`Communicator::collective_raw`].
    unsafe fn host_buffer(self, dtype: DataType, call: &str) -> Result<UntypedBuffer> {
        if self.len == 0 {
            return Ok(UntypedBuffer::zeroed(dtype, 0));
        }
        let ptr = usize::try_from(self.ptr)
            .map_err(|_| Error::invalid(format!("{call}: {:#x} is no host address", self.ptr)))?;
        // SAFETY: forwarded: the caller's contract says the memory holds
        // `len` elements of `dtype` and outlives the operation.
        unsafe { UntypedBuffer::from_raw_parts(ptr as *mut u8, dtype, self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const F32: DataType = DataType::F32;

    fn layout(
        c: Collective,
        send: u64,
        recv: u64,
        count: usize,
        rank: usize,
    ) -> Result<Option<RawBuffers>> {
        RawBuffers::nccl_layout(c, F32, send, recv, count, rank, 4)
    }

    fn b(ptr: u64, len: usize) -> RawSpan {
        RawSpan { ptr, len }
    }

    fn message(r: Result<Option<RawBuffers>>) -> String {
        r.expect_err("refused").to_string()
    }

    #[test]
    fn in_place_where_nccl_says_so() {
        let base = 0x10_000;
        let block = |r: usize| base + (r * 8 * 4) as u64;
        for c in [
            Collective::AllReduce,
            Collective::Broadcast { root: 2 },
            Collective::Reduce { root: 2 },
        ] {
            assert_eq!(
                layout(c, base, base, 8, 1).unwrap(),
                Some(RawBuffers::InPlace(b(base, 8))),
                "{c:?}"
            );
        }
        assert_eq!(
            layout(Collective::AllGather, block(3), base, 8, 3).unwrap(),
            Some(RawBuffers::InPlace(b(base, 32)))
        );
        assert_eq!(
            layout(Collective::ReduceScatter, base, block(2), 8, 2).unwrap(),
            Some(RawBuffers::InPlace(b(base, 32)))
        );
        assert_eq!(
            layout(Collective::AllToAll, base, base, 8, 0).unwrap(),
            Some(RawBuffers::InPlace(b(base, 32)))
        );
        // The input at another rank's block is no in-place layout: it overlaps.
        let e = message(layout(Collective::AllGather, block(2), base, 8, 3));
        assert!(
            e.contains("overlap without being NCCL's in-place layout"),
            "{e}"
        );
    }

    #[test]
    fn separate_buffers_carry_each_side_its_length() {
        let (s, r) = (0x10_000, 0x20_000);
        assert_eq!(
            layout(Collective::AllGather, s, r, 8, 1).unwrap(),
            Some(RawBuffers::Separate {
                send: b(s, 8),
                recv: b(r, 32)
            })
        );
        assert_eq!(
            layout(Collective::ReduceScatter, s, r, 8, 1).unwrap(),
            Some(RawBuffers::Separate {
                send: b(s, 32),
                recv: b(r, 8)
            })
        );
        // What a rank does not use may be NULL, and is passed as nothing.
        assert_eq!(
            layout(Collective::Broadcast { root: 0 }, 0, r, 8, 1).unwrap(),
            Some(RawBuffers::Separate {
                send: b(0, 0),
                recv: b(r, 8)
            })
        );
        assert_eq!(
            layout(Collective::Reduce { root: 0 }, s, 0, 8, 1).unwrap(),
            Some(RawBuffers::Separate {
                send: b(s, 8),
                recv: b(0, 0)
            })
        );
        assert_eq!(
            layout(Collective::AllReduce, 0, 0, 0, 1).unwrap(),
            None,
            "no element"
        );
    }

    #[test]
    fn bad_buffers_are_named() {
        let (s, r) = (0x10_000, 0x20_000);
        assert_eq!(
            message(layout(Collective::AllReduce, 0, r, 8, 0)),
            "invalid argument: sendbuff is NULL"
        );
        assert!(
            message(layout(Collective::Broadcast { root: 1 }, 0, r, 8, 1))
                .contains("the root's sendbuff is NULL")
        );
        assert!(
            message(layout(Collective::Reduce { root: 1 }, s, 0, 8, 1))
                .contains("the root's recvbuff is NULL")
        );
        assert!(
            message(layout(Collective::AllReduce, s + 2, r, 8, 0))
                .contains("not aligned to its element size")
        );
        assert!(message(layout(Collective::AllReduce, s, s + 16, 8, 0)).contains("overlap"));
        assert!(
            message(layout(Collective::Reduce { root: 4 }, s, r, 8, 0))
                .contains("root 4 is not a rank")
        );
        assert!(
            message(layout(Collective::AllGather, s, r, usize::MAX / 2, 0)).contains("overflows")
        );
        assert!(
            message(layout(Collective::AllReduce, u64::MAX - 3, r, 8, 0)).contains("past the end")
        );
        assert!(message(layout(Collective::Barrier, s, r, 8, 0)).contains("barrier"));
    }

    #[test]
    fn the_host_door_refuses_what_has_no_host_form_and_runs_the_rest() {
        crate::testing::on_two_ranks(|comm, stream| {
            let mut data = [comm.rank() as u64 + 1; 8];
            let addr = data.as_mut_ptr() as u64;
            let run = |c: Collective, buffers: RawBuffers| {
                // SAFETY: `data` holds 8 u64 and outlives the synchronisation below.
                unsafe { comm.collective_raw(c, DataType::U64, ReduceOp::Sum, buffers, stream) }
            };
            let all = RawBuffers::InPlace(b(addr, 8));
            let e = run(Collective::AllToAll, all).expect_err("all-to-all in place");
            assert!(e.to_string().contains("never in place"), "{e}");
            let e = run(Collective::Barrier, all).expect_err("a barrier");
            assert!(e.to_string().contains("use barrier"), "{e}");
            // A span of no element may have any address: the non-root's input.
            let (rank, size) = (comm.rank(), comm.size());
            let bcast = Collective::Broadcast { root: 1 };
            let send = if rank == 1 { addr } else { 0 };
            let layout = RawBuffers::nccl_layout(bcast, DataType::U64, send, addr, 8, rank, size)?;
            run(bcast, layout.expect("8 elements"))?;
            stream.synchronize()?;
            assert_eq!(data, [2; 8], "rank 1's data everywhere");
            Ok(())
        })
        .unwrap();
    }
}
