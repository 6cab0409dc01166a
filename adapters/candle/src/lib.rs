//! candle tensors over streamcomm.
//!
//! [`TensorComm`] runs streamcomm's collectives and point-to-point calls on
//! [`candle_core::Tensor`]s: all-reduce (sum, average, maximum, minimum,
//! product), all-gather and reduce-scatter along a dimension, broadcast,
//! send and receive. It is made from a [`streamcomm::Communicator`], so a
//! program launched by `streamcomm-run`, torchrun or Slurm finds its ranks
//! the way every streamcomm program does ([`TensorComm::from_env`]), over
//! shared memory, tcp or verbs, on one host or several.
//!
//! What runs where: tensors on candle's CPU device, with f32, f64, f16,
//! bf16, u8, u32 and i64 elements (the types both libraries know); a
//! tensor on another device is refused, naming it. An all-reduce or
//! broadcast in place ([`TensorComm::all_reduce_in_place`]) works on the
//! tensor's own storage, with no copy; the other calls return new tensors.
//! At world size 1 every call returns its input's values at once, without
//! communicating.
//!
//! [`tensor_parallel`] holds tensor-parallel layers built on these calls: a
//! linear layer split by output features, one split by input features, and
//! an embedding split by vocabulary, loaded from a full tensor or from a
//! safetensors or GGUF file reading only this rank's share ([`gguf`]
//! reads shares of llama.cpp's quantized files and keeps them quantized).
//!
//! ```
//! use candle_core::{Device, Tensor};
//! use streamcomm::ReduceOp;
//! use streamcomm_candle::TensorComm;
//!
//! # fn main() -> candle_core::Result<()> {
//! // One rank (`TensorComm::from_env()` in a launched program): every call is local.
//! let comm = TensorComm::alone()?;
//! let t = Tensor::new(&[1f32, 2., 3.], &Device::Cpu)?;
//! let sum = comm.all_reduce(&t, ReduceOp::Sum)?;
//! assert_eq!(sum.to_vec1::<f32>()?, vec![1., 2., 3.]);
//! # Ok(()) }
//! ```

mod collectives;
mod elements;
pub mod gguf;
mod in_place;
pub mod tensor_parallel;

pub use collectives::TensorComm;
