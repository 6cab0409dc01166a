//! The one interpreter of data steps.
//!
//! The host backend, the CUDA backend's host-side fallback and the simulator
//! all execute a [`DataStep`] the same way: take the incoming slot and/or a local
//! region, combine them with the plan's operator, finalise if asked, write the
//! result to a local region and/or an outgoing slot. Writing that once here
//! means an algorithm proven in the simulator behaves the same over real
//! transports. This is also where a mismatched peer is caught: a slot whose
//! length differs from what this rank's step expects is reported as
//! [`Error::RemoteFailed`], never truncated or padded.
//!
//! Only safe Rust: disjoint regions of one buffer are split with
//! `split_at_mut`; a source and destination that are the same range are
//! reduced in place; a partial overlap is refused.

use std::ops::Range;

use streamcomm_kernels::{self as kernels, DataType, KernelError, ReduceOp};

use super::layout::InPlaceLayout;
use super::step::{BufId, DataStep, Plan, Region};
use crate::Error;
use streamcomm_types::Collective;

/// The buffers of one collective call, as seen by [`Interpreter::apply`].
#[derive(Debug)]
pub enum Buffers<'a> {
    /// Distinct send and receive buffers; the send buffer is only read.
    Separate {
        /// The call's input ([`BufId::Send`] regions).
        send: &'a [u8],
        /// The call's output ([`BufId::Recv`] regions).
        recv: &'a mut [u8],
    },
    /// One buffer holding both sides, at NCCL's offsets (see
    /// [`InPlaceLayout::of`], and [`Buffers::in_place`] to build this).
    InPlace {
        /// The buffer.
        buf: &'a mut [u8],
        /// Element of `buf` where send element 0 lies.
        send_offset: usize,
        /// Element of `buf` where receive element 0 lies.
        recv_offset: usize,
    },
}

impl<'a> Buffers<'a> {
    /// In-place buffers laid out as NCCL does for `plan` ([`InPlaceLayout::of`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidUsage`] when the collective cannot run in place
    /// (all-to-all); [`Error::InvalidArgument`] when `buf` is shorter than the
    /// layout needs.
    pub fn in_place(plan: &Plan, buf: &'a mut [u8]) -> Result<Buffers<'a>, Error> {
        let layout = InPlaceLayout::of(plan)?;
        let need = layout.len.saturating_mul(plan.dtype.size());
        if buf.len() < need {
            return Err(Error::invalid(format!(
                "{}: in-place buffer is {} bytes, needs {need} ({} {} elements)",
                plan.collective.name(),
                buf.len(),
                layout.len,
                plan.dtype
            )));
        }
        Ok(Buffers::InPlace {
            buf,
            send_offset: layout.send_offset,
            recv_offset: layout.recv_offset,
        })
    }
}

/// A region resolved to a byte range of one concrete buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Loc {
    /// Which buffer: the separate send / recv buffers, or the in-place one.
    target: Target,
    /// Bytes of that buffer.
    bytes: Range<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Send,
    Recv,
    InPlace,
}

/// A source and a destination borrowed together.
enum Pair<'b> {
    /// The same range: reduce in place, copy is a no-op.
    Same(&'b mut [u8]),
    /// Disjoint ranges.
    Disjoint(&'b [u8], &'b mut [u8]),
}

/// The interpreter of one plan's steps: what it needs to know about the
/// plan (its collective, named in errors only, element type, operator,
/// rank count, element size), read once for a run of the plan, and
/// [`Interpreter::apply`], which executes a step.
///
/// # Examples
/// ```
/// use streamcomm_algo::plan::{build, Buffers, Interpreter, PlanParams};
/// use streamcomm_types::{Collective, DataType, ReduceOp};
///
/// // The root of a broadcast of one f32 to two ranks: its first step sends its input.
/// let params = PlanParams { rank: 0, nranks: 2, slot_bytes: 64, nsteps: 2 };
/// let root = Collective::Broadcast { root: 0 };
/// let plan = build(root, DataType::F32, ReduceOp::Sum, 1, &params)?;
/// let send = 2.5f32.to_ne_bytes();
/// let mut recv = [0u8; 4];
/// let mut bufs = Buffers::Separate { send: &send, recv: &mut recv };
/// let mut slot = [0u8; 64];
/// let interp = Interpreter::new(&plan);
/// let step = &plan.steps[0];
/// assert_eq!(step.send_to, Some(1));
/// assert_eq!(interp.apply(step, &mut bufs, None, Some(&mut slot))?, 4);
/// assert_eq!(slot[..4], send);
/// # Ok::<(), streamcomm_types::Error>(())
/// ```
pub struct Interpreter {
    collective: Collective,
    dtype: DataType,
    op: ReduceOp,
    nranks: usize,
    esize: usize,
}

impl Interpreter {
    /// The interpreter of `plan`'s steps.
    pub fn new(plan: &Plan) -> Interpreter {
        Interpreter {
            collective: plan.collective,
            dtype: plan.dtype,
            op: plan.op,
            nranks: plan.nranks,
            esize: plan.dtype.size(),
        }
    }

    /// Executes one step of the plan on `bufs`.
    ///
    /// `slot_in` is the slot received from `step.recv_from` (required exactly when
    /// the step receives); `slot_out` is the slot to fill for `step.send_to`
    /// (required when the step sends, at least `step.count * dtype.size()` bytes;
    /// ignored otherwise). Returns the number of bytes written into `slot_out`,
    /// which the caller publishes as the slot's length.
    ///
    /// The result is `src op slot` when the step has both inputs, else its one
    /// input; with [`DataStep::finalize`] and [`ReduceOp::Avg`] it is divided by
    /// `plan.nranks` before being written. A destination equal to the source
    /// range is reduced in place.
    ///
    /// # Errors
    ///
    /// - [`Error::RemoteFailed`] when `slot_in` is not exactly `step.count`
    ///   elements long: the peer ran a different call (count, dtype or
    ///   collective).
    /// - [`Error::InvalidArgument`] when a region lies outside the buffer bound
    ///   to it (the call's buffers were checked against the plan when it was
    ///   enqueued, so this is an internal error) or the outgoing slot is too
    ///   small.
    /// - [`Error::InvalidUsage`] when a slot is missing or unexpected, a
    ///   destination is in the (read-only) send buffer, or source and destination
    ///   partially overlap.
    pub fn apply(
        &self,
        step: &DataStep,
        bufs: &mut Buffers<'_>,
        slot_in: Option<&[u8]>,
        slot_out: Option<&mut [u8]>,
    ) -> Result<usize, Error> {
        // The step's shape was checked once, when its plan was built
        // (`Plan::verify`): its regions hold `count` elements and its byte count
        // does not overflow.
        debug_assert!(step.src.is_none_or(|r| r.count == step.count));
        debug_assert!(step.dst.is_none_or(|r| r.count == step.count));
        let nbytes = step.count * self.esize;
        let slot = match (step.recv_from, slot_in) {
            (Some(peer), Some(s)) if s.len() != nbytes => {
                return Err(Error::RemoteFailed {
                    peer,
                    op: self.collective.to_string(),
                    cause: format!("sent {} bytes where {nbytes} were expected", s.len()),
                });
            }
            (Some(_), Some(s)) => Some(s),
            (Some(peer), None) => {
                return Err(self.usage(format!(
                    "step receives from rank {peer} but no slot was given"
                )));
            }
            (None, Some(_)) => {
                return Err(self.usage("a slot was given to a step that receives none"));
            }
            (None, None) => None,
        };
        let out = match (step.send_to, slot_out) {
            (Some(peer), Some(o)) => {
                let len = o.len();
                Some(o.get_mut(..nbytes).ok_or_else(|| {
                    self.invalid(format!(
                        "slot for rank {peer} is {len} bytes, the step writes {nbytes}"
                    ))
                })?)
            }
            (Some(peer), None) => {
                return Err(self.usage(format!("step sends to rank {peer} but no slot was given")));
            }
            (None, _) => None,
        };
        let written = if out.is_some() { nbytes } else { 0 };
        if step.count == 0 {
            return Ok(written);
        }
        let src = match step.src {
            Some(r) => Some(
                self.resolve(bufs, r)
                    .ok_or_else(|| self.outside(bufs, r, "src"))?,
            ),
            None => None,
        };
        let dst = match step.dst {
            Some(r) => Some(
                self.resolve(bufs, r)
                    .ok_or_else(|| self.outside(bufs, r, "dst"))?,
            ),
            None => None,
        };
        match (slot, src, dst) {
            (Some(s), Some(src), Some(dst)) => {
                match pair(bufs, &src, &dst, self)? {
                    Pair::Same(d) => {
                        self.kernel(kernels::reduce_in_place(self.dtype, self.op, d, s))?
                    }
                    Pair::Disjoint(a, d) => {
                        self.kernel(kernels::reduce(self.dtype, self.op, a, s, d))?
                    }
                }
                self.finish_local(step, bufs, &dst, out)?;
            }
            (Some(s), Some(src), None) => {
                if let Some(o) = out {
                    let a = view(bufs, &src);
                    self.kernel(kernels::reduce(self.dtype, self.op, a, s, o))?;
                    self.finalize(step, o)?;
                }
            }
            (Some(s), None, Some(dst)) => {
                view_mut(bufs, &dst, self)?.copy_from_slice(s);
                self.finish_local(step, bufs, &dst, out)?;
            }
            (Some(s), None, None) => {
                if let Some(o) = out {
                    o.copy_from_slice(s);
                    self.finalize(step, o)?;
                }
            }
            (None, Some(src), Some(dst)) => {
                if let Pair::Disjoint(a, d) = pair(bufs, &src, &dst, self)? {
                    d.copy_from_slice(a);
                }
                self.finish_local(step, bufs, &dst, out)?;
            }
            (None, Some(src), None) => {
                if let Some(o) = out {
                    o.copy_from_slice(view(bufs, &src));
                    self.finalize(step, o)?;
                }
            }
            // No input: `Plan::verify` made sure the count is 0 (handled above).
            (None, None, _) => {}
        }
        Ok(written)
    }

    #[cold]
    fn invalid(&self, msg: impl std::fmt::Display) -> Error {
        Error::InvalidArgument(format!("{}: {msg}", self.collective))
    }

    #[cold]
    fn usage(&self, msg: impl std::fmt::Display) -> Error {
        Error::InvalidUsage(format!("{}: {msg}", self.collective))
    }

    fn kernel(&self, r: Result<(), KernelError>) -> Result<(), Error> {
        r.map_err(|e| self.invalid(e))
    }

    /// Resolves `region` to bytes of a buffer, checking bounds: `None`
    /// when it lies outside (the error is [`Interpreter::outside`]'s, kept
    /// off this path, which every step of every call takes).
    #[inline]
    fn resolve(&self, bufs: &Buffers<'_>, region: Region) -> Option<Loc> {
        let (target, base, len, _) = place(bufs, region.buf);
        let start = base.checked_add(region.offset)?;
        let end = start.checked_add(region.count)?;
        let bytes = start.checked_mul(self.esize)?..end.checked_mul(self.esize)?;
        (bytes.end <= len).then_some(Loc { target, bytes })
    }

    /// The error of a `region` that [`Interpreter::resolve`] found outside
    /// its buffer (`what` says which of the step's regions it is).
    #[cold]
    fn outside(&self, bufs: &Buffers<'_>, region: Region, what: &str) -> Error {
        let (_, base, len, buf_name) = place(bufs, region.buf);
        self.invalid(format!(
            "{what} region {region:?} (elements at offset {base} of the buffer) \
             lies outside the {buf_name} buffer of {len} bytes"
        ))
    }

    /// Divides by the number of ranks when the step finalises an `Avg`.
    fn finalize(&self, step: &DataStep, bytes: &mut [u8]) -> Result<(), Error> {
        if step.finalize && self.op == ReduceOp::Avg {
            self.kernel(kernels::divide(self.dtype, bytes, self.nranks))?;
        }
        Ok(())
    }

    /// After the result is in `dst`: finalise it there, then copy it into the
    /// outgoing slot, if any.
    fn finish_local(
        &self,
        step: &DataStep,
        bufs: &mut Buffers<'_>,
        dst: &Loc,
        out: Option<&mut [u8]>,
    ) -> Result<(), Error> {
        self.finalize(step, view_mut(bufs, dst, self)?)?;
        if let Some(o) = out {
            o.copy_from_slice(view(bufs, dst));
        }
        Ok(())
    }
}

/// Where buffer `buf` of a step lies in `bufs`: its target, the element
/// offset its regions start from (in place, the send or receive part of
/// the one buffer), the bytes it holds, and its name for an error.
#[inline]
fn place(bufs: &Buffers<'_>, buf: BufId) -> (Target, usize, usize, &'static str) {
    match bufs {
        Buffers::Separate { send, recv } => match buf {
            BufId::Send => (Target::Send, 0, send.len(), "send"),
            BufId::Recv => (Target::Recv, 0, recv.len(), "recv"),
        },
        Buffers::InPlace {
            buf: whole,
            send_offset,
            recv_offset,
        } => {
            let base = match buf {
                BufId::Send => *send_offset,
                BufId::Recv => *recv_offset,
            };
            (Target::InPlace, base, whole.len(), "in-place")
        }
    }
}

/// The bytes of a resolved region (bounds were checked by `resolve`).
fn view<'b>(bufs: &'b Buffers<'_>, loc: &Loc) -> &'b [u8] {
    let whole: &[u8] = match bufs {
        Buffers::Separate { send, recv } => match loc.target {
            Target::Send => send,
            _ => recv,
        },
        Buffers::InPlace { buf, .. } => buf,
    };
    whole.get(loc.bytes.clone()).unwrap_or_default()
}

/// The bytes of a resolved destination region.
fn view_mut<'b>(
    bufs: &'b mut Buffers<'_>,
    loc: &Loc,
    interp: &Interpreter,
) -> Result<&'b mut [u8], Error> {
    let whole: &mut [u8] = match bufs {
        Buffers::Separate { recv, .. } if loc.target == Target::Recv => recv,
        Buffers::InPlace { buf, .. } => buf,
        Buffers::Separate { .. } => return Err(interp.usage("the send buffer is read-only")),
    };
    let len = whole.len();
    whole
        .get_mut(loc.bytes.clone())
        .ok_or_else(|| interp.invalid(format!("bytes {:?} outside a buffer of {len}", loc.bytes)))
}

/// Borrows a source and a destination together, splitting one buffer when
/// both lie in it.
fn pair<'b>(
    bufs: &'b mut Buffers<'_>,
    src: &Loc,
    dst: &Loc,
    interp: &Interpreter,
) -> Result<Pair<'b>, Error> {
    let (s, d) = (src.bytes.clone(), dst.bytes.clone());
    let whole: &mut [u8] = match bufs {
        Buffers::Separate { send, recv } => match (src.target, dst.target) {
            (Target::Send, Target::Recv) => {
                let a = send.get(s).unwrap_or_default();
                return Ok(Pair::Disjoint(a, recv.get_mut(d).unwrap_or_default()));
            }
            (Target::Recv, Target::Recv) => recv,
            _ => return Err(interp.usage("the send buffer is read-only")),
        },
        Buffers::InPlace { buf, .. } => buf,
    };
    if s == d {
        return Ok(Pair::Same(whole.get_mut(d).unwrap_or_default()));
    }
    if s.end <= d.start {
        let (lo, hi) = whole.split_at_mut(d.start);
        let a = lo.get(s).unwrap_or_default();
        return Ok(Pair::Disjoint(a, hi.get_mut(..d.len()).unwrap_or_default()));
    }
    if d.end <= s.start {
        let (lo, hi) = whole.split_at_mut(s.start);
        let a = hi.get(..s.len()).unwrap_or_default();
        return Ok(Pair::Disjoint(a, lo.get_mut(d).unwrap_or_default()));
    }
    Err(interp.usage(format!(
        "source bytes {s:?} and destination bytes {d:?} partially overlap"
    )))
}

#[cfg(test)]
#[path = "apply_tests.rs"]
mod tests;
