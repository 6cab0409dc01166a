//! [`TensorComm`]: streamcomm's calls on candle tensors.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use candle_core::{DType, Device, Result, Shape, Tensor};
use streamcomm::bootstrap::UniqueId;
use streamcomm::{Communicator, ReduceOp};

use crate::elements::{Elem, PerType, not_contiguous, with_dtype};
use crate::in_place::{InPlace, Op};

/// A streamcomm error as a candle one (kept whole, as its source).
pub(crate) fn wrap(e: streamcomm::Error) -> candle_core::Error {
    candle_core::Error::wrap(e)
}

/// Collectives and point-to-point calls on candle tensors, over one
/// streamcomm communicator.
///
/// Every rank makes the same calls in the same order, with tensors of the
/// same shape and type (a reduce-scatter's dimension divisible by the
/// number of ranks), as with any communicator; a call that does not match
/// its peers' fails with streamcomm's error rather than hanging.
///
/// ```
/// use candle_core::{Device, Tensor};
/// use streamcomm::ReduceOp;
/// use streamcomm_candle::TensorComm;
///
/// # fn main() -> candle_core::Result<()> {
/// let comm = TensorComm::alone()?;
/// let grads = Tensor::new(&[[0.5f32, 1.0], [2.0, 4.0]], &Device::Cpu)?;
/// comm.all_reduce_in_place(&grads, ReduceOp::Avg)?;
/// let gathered = comm.all_gather(&grads, 1)?;
/// assert_eq!(gathered.dims(), &[2, 2]);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct TensorComm {
    comm: Communicator,
    /// Nanoseconds spent inside calls that communicate, over every clone.
    busy: Arc<AtomicU64>,
}

impl TensorComm {
    /// Calls over `comm`.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let id = streamcomm::bootstrap::UniqueId::new()?;
    /// let comm = streamcomm::Communicator::builder().unique_id(&id).rank(0).size(1).build()?;
    /// let tensors = streamcomm_candle::TensorComm::new(comm);
    /// assert_eq!(tensors.size(), 1);
    /// # Ok(()) }
    /// ```
    pub fn new(comm: Communicator) -> TensorComm {
        TensorComm {
            comm,
            busy: Arc::default(),
        }
    }

    /// The communicator a launcher's environment describes
    /// ([`Communicator::from_env`]: `streamcomm-run`, torchrun, Slurm,
    /// Open MPI, PMI).
    ///
    /// ```no_run
    /// // Started as `streamcomm-run -n 4 -- prog`:
    /// let comm = streamcomm_candle::TensorComm::from_env()?;
    /// println!("rank {} of {}", comm.rank(), comm.size());
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Communicator::from_env`], wrapped.
    pub fn from_env() -> Result<TensorComm> {
        Communicator::from_env().map(TensorComm::new).map_err(wrap)
    }

    /// [`TensorComm::from_env`] when a launcher started this process
    /// ([`streamcomm::launch::launched`]), else [`TensorComm::alone`]: for
    /// a program that also runs on its own.
    ///
    /// ```
    /// // Run on its own (no launcher variables): one rank.
    /// let comm = streamcomm_candle::TensorComm::from_env_or_alone()?;
    /// # if !streamcomm::launch::launched() {
    /// assert_eq!(comm.size(), 1);
    /// # }
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`TensorComm::from_env`] (a launcher's environment that is
    /// incomplete or wrong is an error, not a reason to run alone), or
    /// [`TensorComm::alone`].
    pub fn from_env_or_alone() -> Result<TensorComm> {
        if streamcomm::launch::launched() {
            TensorComm::from_env()
        } else {
            TensorComm::alone()
        }
    }

    /// A communicator of one rank: every call is local.
    ///
    /// ```
    /// let comm = streamcomm_candle::TensorComm::alone()?;
    /// assert_eq!((comm.rank(), comm.size()), (0, 1));
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Communicator::builder`]'s build, wrapped.
    pub fn alone() -> Result<TensorComm> {
        let id = UniqueId::new().map_err(wrap)?;
        Communicator::builder()
            .unique_id(&id)
            .rank(0)
            .size(1)
            .build()
            .map(TensorComm::new)
            .map_err(wrap)
    }

    /// The communicator underneath.
    ///
    /// ```
    /// let comm = streamcomm_candle::TensorComm::alone()?;
    /// comm.communicator().barrier_host().map_err(candle_core::Error::wrap)?;
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    pub fn communicator(&self) -> &Communicator {
        &self.comm
    }

    /// Time spent so far inside this communicator's calls that
    /// communicate (from the call's first exchange to its last), summed
    /// over its clones: set it against a step's time to see the share of
    /// communication. Calls at world size 1 communicate nothing and add
    /// nothing.
    ///
    /// ```
    /// # use candle_core::{Device, Tensor};
    /// let comm = streamcomm_candle::TensorComm::alone()?;
    /// comm.all_reduce(&Tensor::new(&[1f32], &Device::Cpu)?, streamcomm::ReduceOp::Sum)?;
    /// assert_eq!(comm.time_communicating(), std::time::Duration::ZERO);
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    pub fn time_communicating(&self) -> Duration {
        Duration::from_nanos(self.busy.load(Ordering::Relaxed))
    }

    /// `f`, its time added to [`Self::time_communicating`].
    fn timed<R>(&self, f: impl FnOnce() -> Result<R>) -> Result<R> {
        let start = Instant::now();
        let out = f();
        let nanos = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.busy.fetch_add(nanos, Ordering::Relaxed);
        out
    }

    /// This rank.
    ///
    /// ```
    /// assert_eq!(streamcomm_candle::TensorComm::alone()?.rank(), 0);
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// The number of ranks.
    ///
    /// ```
    /// assert_eq!(streamcomm_candle::TensorComm::alone()?.size(), 1);
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    pub fn size(&self) -> usize {
        self.comm.size()
    }

    /// Every rank's `t` reduced with `op`, as a new tensor (`t` stays).
    ///
    /// ```
    /// # use candle_core::{Device, Tensor};
    /// let comm = streamcomm_candle::TensorComm::alone()?;
    /// let t = Tensor::new(&[3f32, -1.], &Device::Cpu)?;
    /// let max = comm.all_reduce(&t, streamcomm::ReduceOp::Max)?;
    /// assert_eq!(max.to_vec1::<f32>()?, [3., -1.]);
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// A tensor off the CPU or of a type streamcomm does not carry; the
    /// communicator's errors (a peer that failed, a timeout), wrapped.
    pub fn all_reduce(&self, t: &Tensor, op: ReduceOp) -> Result<Tensor> {
        self.on_copy(t, InPlace::AllReduce(op), "all_reduce")
    }

    /// Every rank's `t` reduced with `op`, into `t`'s own storage (no copy;
    /// `t` must be contiguous).
    ///
    /// ```
    /// # use candle_core::{Device, Tensor};
    /// let comm = streamcomm_candle::TensorComm::alone()?;
    /// let t = Tensor::new(&[1f32, 2.], &Device::Cpu)?;
    /// comm.all_reduce_in_place(&t, streamcomm::ReduceOp::Sum)?;
    /// // A strided view is refused, naming the way out.
    /// let square = Tensor::new(&[[1f32, 2.], [3., 4.]], &Device::Cpu)?;
    /// let err = comm.all_reduce_in_place(&square.t()?, streamcomm::ReduceOp::Sum);
    /// assert!(err.unwrap_err().to_string().contains("not contiguous"));
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`TensorComm::all_reduce`], and a tensor that is not contiguous.
    pub fn all_reduce_in_place(&self, t: &Tensor, op: ReduceOp) -> Result<()> {
        self.in_place(t, InPlace::AllReduce(op), "all_reduce_in_place")
    }

    /// Rank `root`'s `t` on every rank, as a new tensor.
    ///
    /// ```
    /// # use candle_core::{Device, Tensor};
    /// let comm = streamcomm_candle::TensorComm::alone()?;
    /// let t = Tensor::new(&[7u32, 8], &Device::Cpu)?;
    /// assert_eq!(comm.broadcast(&t, 0)?.to_vec1::<u32>()?, [7, 8]);
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`TensorComm::all_reduce`], and a root that is no rank.
    pub fn broadcast(&self, t: &Tensor, root: usize) -> Result<Tensor> {
        self.on_copy(t, InPlace::Broadcast(root), "broadcast")
    }

    /// Rank `root`'s `t` into every rank's `t` (no copy; contiguous).
    ///
    /// ```
    /// # use candle_core::{Device, Tensor};
    /// let comm = streamcomm_candle::TensorComm::alone()?;
    /// let t = Tensor::new(&[1i64], &Device::Cpu)?;
    /// comm.broadcast_in_place(&t, 0)?;
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`TensorComm::broadcast`], and a tensor that is not contiguous.
    pub fn broadcast_in_place(&self, t: &Tensor, root: usize) -> Result<()> {
        self.in_place(t, InPlace::Broadcast(root), "broadcast_in_place")
    }

    /// Every rank's `t`, concatenated in rank order along `dim`.
    ///
    /// ```
    /// # use candle_core::{Device, Tensor};
    /// let comm = streamcomm_candle::TensorComm::alone()?;
    /// let t = Tensor::new(&[[1f32, 2.]], &Device::Cpu)?;
    /// assert_eq!(comm.all_gather(&t, 0)?.dims(), &[1, 2]);
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`TensorComm::all_reduce`], and a dimension `t` does not have.
    pub fn all_gather(&self, t: &Tensor, dim: usize) -> Result<Tensor> {
        let dims = cpu_dims(t, dim, "all_gather")?;
        let n = self.size();
        if n == 1 {
            return Ok(t.clone());
        }
        let gathered =
            self.timed(|| with_dtype(t.dtype(), "all_gather", Gather { comm: self, t }))?;
        // Rank-major: [n, dims...], then rank blocks side by side along dim.
        let mut stacked = vec![n];
        stacked.extend(&dims);
        let g = gathered.reshape(stacked)?;
        let blocks: Vec<Tensor> = (0..n).map(|r| g.get(r)).collect::<Result<_>>()?;
        Tensor::cat(&blocks, dim)
    }

    /// Every rank's `t`, concatenated in rank order along `dim`, where the
    /// ranks' tensors differ in size along `dim`: rank `r`'s is `sizes[r]`
    /// long there (uneven shares, as [`crate::tensor_parallel::shard`] gives), every other
    /// dimension alike. One `all_gatherv` moves the shares, no padding.
    ///
    /// ```
    /// # use candle_core::{Device, Tensor};
    /// let comm = streamcomm_candle::TensorComm::alone()?;
    /// let t = Tensor::new(&[[1f32, 2., 3.]], &Device::Cpu)?;
    /// assert_eq!(comm.all_gatherv(&t, 1, &[3])?.dims(), &[1, 3]);
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`TensorComm::all_reduce`]; a dimension `t` does not have;
    /// `sizes` that is not one entry per rank, or whose entry for this rank
    /// is not `t`'s size along `dim`.
    pub fn all_gatherv(&self, t: &Tensor, dim: usize, sizes: &[usize]) -> Result<Tensor> {
        const WHAT: &str = "all_gatherv";
        let dims = cpu_dims(t, dim, WHAT)?;
        let (r, n) = (self.rank(), self.size());
        if sizes.len() != n || sizes[r] != dims[dim] {
            return Err(candle_core::Error::Msg(format!(
                "{WHAT}: sizes {sizes:?} for {n} ranks, and this rank's (rank {r}) tensor is                  {} long along dimension {dim} (shape {dims:?})",
                dims[dim]
            )));
        }
        if n == 1 {
            return Ok(t.clone());
        }
        // `dim` outermost: each rank's share is then one run of elements.
        let moved = t.transpose(0, dim)?.contiguous()?;
        let row: usize = moved.dims()[1..].iter().product();
        let counts: Vec<usize> = sizes.iter().map(|&s| s * row).collect();
        let displs: Vec<usize> = counts
            .iter()
            .scan(0, |at, &c| {
                let here = *at;
                *at += c;
                Some(here)
            })
            .collect();
        let task = GatherV {
            comm: self,
            t: &moved,
            counts: &counts,
            displs: &displs,
        };
        let flat = self.timed(|| with_dtype(t.dtype(), WHAT, task))?;
        let mut shape = moved.dims().to_vec();
        shape[0] = sizes.iter().sum();
        flat.reshape(shape)?.transpose(0, dim)?.contiguous()
    }

    /// Every rank's `t` reduced with `op`, cut into as many equal parts
    /// along `dim` as there are ranks: this rank's part.
    ///
    /// ```
    /// # use candle_core::{Device, Tensor};
    /// let comm = streamcomm_candle::TensorComm::alone()?;
    /// let t = Tensor::new(&[[1f32, 2.], [3., 4.]], &Device::Cpu)?;
    /// let mine = comm.reduce_scatter(&t, 1, streamcomm::ReduceOp::Sum)?;
    /// assert_eq!(mine.dims(), &[2, 2]);
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`TensorComm::all_reduce`], and a dimension that is not divisible
    /// by the number of ranks.
    pub fn reduce_scatter(&self, t: &Tensor, dim: usize, op: ReduceOp) -> Result<Tensor> {
        let dims = cpu_dims(t, dim, "reduce_scatter")?;
        let n = self.size();
        if !dims[dim].is_multiple_of(n) {
            return Err(candle_core::Error::Msg(format!(
                "reduce_scatter: dimension {dim} of shape {dims:?} is {}, not divisible by {n} ranks",
                dims[dim]
            )));
        }
        if n == 1 {
            return Ok(t.clone());
        }
        // Each rank's part, contiguous, one after the other.
        let parts: Vec<Tensor> = t
            .chunk(n, dim)?
            .iter()
            .map(|p| p.contiguous()?.flatten_all())
            .collect::<Result<_>>()?;
        let send = Tensor::cat(&parts, 0)?;
        let mut part_dims = dims;
        part_dims[dim] /= n;
        let task = Scatter {
            comm: self,
            send: &send,
            op,
        };
        self.timed(|| with_dtype(t.dtype(), "reduce_scatter", task))?
            .reshape(part_dims)
    }

    /// Sends `t` to rank `peer`, which receives it with [`TensorComm::recv`].
    ///
    /// ```no_run
    /// # use candle_core::{DType, Device, Tensor};
    /// # let comm = streamcomm_candle::TensorComm::from_env()?;
    /// let right = (comm.rank() + 1) % comm.size();
    /// let left = (comm.rank() + comm.size() - 1) % comm.size();
    /// let t = Tensor::ones((2, 3), DType::BF16, &Device::Cpu)?;
    /// if comm.rank() % 2 == 0 {
    ///     comm.send(&t, right)?;
    ///     let got = comm.recv((2, 3), DType::BF16, left)?;
    /// } else {
    ///     let got = comm.recv((2, 3), DType::BF16, left)?;
    ///     comm.send(&t, right)?;
    /// }
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`TensorComm::all_reduce`], and a peer that is no rank.
    pub fn send(&self, t: &Tensor, peer: usize) -> Result<()> {
        cpu(t, "send")?;
        let task = SendTo {
            comm: self,
            t,
            peer,
        };
        self.timed(|| with_dtype(t.dtype(), "send", task))
    }

    /// A tensor of `shape` and `dtype` from rank `peer`'s
    /// [`TensorComm::send`].
    ///
    /// # Errors
    /// As [`TensorComm::send`]; a message of another size than `shape`'s.
    pub fn recv(&self, shape: impl Into<Shape>, dtype: DType, peer: usize) -> Result<Tensor> {
        let task = RecvFrom {
            comm: self,
            shape: shape.into(),
            peer,
        };
        self.timed(|| with_dtype(dtype, "recv", task))
    }

    /// `what` done in place on a contiguous copy of `t`, returned (`t` stays);
    /// errors name the call `name`.
    fn on_copy(&self, t: &Tensor, what: InPlace, name: &str) -> Result<Tensor> {
        cpu(t, name)?;
        let out = t.copy()?.contiguous()?;
        self.in_place(&out, what, name)?;
        Ok(out)
    }

    /// `what` done on `t`'s own storage; errors name the call `name`.
    fn in_place(&self, t: &Tensor, what: InPlace, name: &str) -> Result<()> {
        cpu(t, name)?;
        if !t.is_contiguous() {
            return Err(not_contiguous(name, t.dims(), t.stride()));
        }
        if self.size() == 1 {
            return match what {
                InPlace::Broadcast(root) if root != 0 => Err(candle_core::Error::Msg(format!(
                    "{name}: root {root} is not a rank of 1"
                ))),
                _ => Ok(()),
            };
        }
        self.timed(|| {
            t.inplace_op1(&Op {
                comm: &self.comm,
                what,
            })
        })
    }
}

/// Refuses a tensor off the CPU, naming its device.
fn cpu(t: &Tensor, what: &str) -> Result<()> {
    match t.device() {
        Device::Cpu => Ok(()),
        other => Err(candle_core::Error::Msg(format!(
            "{what}: the tensor is on {other:?}; streamcomm-candle moves CPU tensors (CUDA \
             tensors: streamcomm::cuda)"
        ))),
    }
}

/// `t`'s dimensions, refusing a tensor off the CPU or a `dim` it does not
/// have.
fn cpu_dims(t: &Tensor, dim: usize, what: &str) -> Result<Vec<usize>> {
    cpu(t, what)?;
    let dims = t.dims().to_vec();
    if dim >= dims.len() {
        return Err(candle_core::Error::Msg(format!(
            "{what}: dimension {dim} of a tensor of shape {dims:?}"
        )));
    }
    Ok(dims)
}

/// The elements of `t`, in order.
fn elements<T: Elem>(t: &Tensor) -> Result<Vec<T>> {
    t.flatten_all()?.to_vec1::<T>()
}

/// A 1-d CPU tensor of `len` elements, written by `fill`.
fn filled<T: Elem>(
    len: usize,
    fill: impl FnOnce(&mut [T]) -> streamcomm::Result<()>,
) -> Result<Tensor> {
    let mut data = vec![T::from_f64(0.0); len];
    fill(&mut data).map_err(wrap)?;
    Tensor::from_vec(data, len, &Device::Cpu)
}

struct Gather<'a> {
    comm: &'a TensorComm,
    t: &'a Tensor,
}

impl PerType for Gather<'_> {
    type Out = Tensor;
    fn run<T: Elem>(self) -> Result<Tensor> {
        let send = elements::<T>(self.t)?;
        filled(send.len() * self.comm.size(), |recv| {
            self.comm.comm.all_gather_host(&send, recv)
        })
    }
}

struct GatherV<'a> {
    comm: &'a TensorComm,
    t: &'a Tensor,
    counts: &'a [usize],
    displs: &'a [usize],
}

impl PerType for GatherV<'_> {
    type Out = Tensor;
    fn run<T: Elem>(self) -> Result<Tensor> {
        let send = elements::<T>(self.t)?;
        filled(self.counts.iter().sum(), |recv| {
            self.comm
                .comm
                .all_gatherv_host(&send, recv, self.counts, self.displs)
        })
    }
}

struct Scatter<'a> {
    comm: &'a TensorComm,
    send: &'a Tensor,
    op: ReduceOp,
}

impl PerType for Scatter<'_> {
    type Out = Tensor;
    fn run<T: Elem>(self) -> Result<Tensor> {
        let send = elements::<T>(self.send)?;
        filled(send.len() / self.comm.size(), |recv| {
            self.comm.comm.reduce_scatter_host(&send, recv, self.op)
        })
    }
}

struct SendTo<'a> {
    comm: &'a TensorComm,
    t: &'a Tensor,
    peer: usize,
}

impl PerType for SendTo<'_> {
    type Out = ();
    fn run<T: Elem>(self) -> Result<()> {
        let data = elements::<T>(self.t)?;
        self.comm.comm.send_host(&data, self.peer).map_err(wrap)
    }
}

struct RecvFrom<'a> {
    comm: &'a TensorComm,
    shape: Shape,
    peer: usize,
}

impl PerType for RecvFrom<'_> {
    type Out = Tensor;
    fn run<T: Elem>(self) -> Result<Tensor> {
        filled::<T>(self.shape.elem_count(), |data| {
            self.comm.comm.recv_host(data, self.peer)
        })?
        .reshape(self.shape)
    }
}
