//! Tensor-parallel building blocks (Megatron's layout): a linear layer
//! split by output features, one split by input features, and an
//! embedding split by vocabulary, each holding only this rank's share of
//! the weights, from a full tensor, straight from a safetensors file
//! (memory-mapped: only this rank's bytes are read) or from a GGUF file
//! (only this rank's bytes read, and kept quantized: the layer multiplies
//! with candle's quantized kernels, as `candle-transformers`' quantized
//! models do).
//!
//! Shares may be uneven: a dimension of `len` over `n` ranks gives the first
//! `len % n` ranks one more ([`shard`]). Where a share must hold whole
//! attention heads or whole quantization blocks, the dimension is split in
//! units of that many features ([`shard_in_units`]).

use std::ops::Range;

use candle_core::quantized::QMatMul;
use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Module, Result, Tensor};
use streamcomm::ReduceOp;

use crate::TensorComm;
use crate::gguf::GgufFile;

/// The part of a dimension of `len` that `rank` of `size` holds:
/// contiguous, in rank order, the first `len % size` ranks one element more.
///
/// ```
/// use streamcomm_candle::tensor_parallel::shard;
/// assert_eq!([shard(7, 0, 3), shard(7, 1, 3), shard(7, 2, 3)], [0..3, 3..5, 5..7]);
/// ```
pub fn shard(len: usize, rank: usize, size: usize) -> Range<usize> {
    let (base, extra) = (len / size, len % size);
    let start = rank * base + rank.min(extra);
    start..start + base + usize::from(rank < extra)
}

/// [`shard`] in units of `unit` features: the `len / unit` units are shared
/// out as [`shard`] shares elements, and the range is in features. For
/// whole attention heads (`unit` = head size) or whole quantization blocks
/// (`unit` = 32 for `Q4_1`).
///
/// ```
/// use streamcomm_candle::tensor_parallel::shard_in_units;
/// // 9 heads of 64 over 2 ranks: 5 heads and 4.
/// assert_eq!([shard_in_units(576, 64, 0, 2), shard_in_units(576, 64, 1, 2)], [0..320, 320..576]);
/// ```
pub fn shard_in_units(len: usize, unit: usize, rank: usize, size: usize) -> Range<usize> {
    let units = shard(len / unit.max(1), rank, size);
    units.start * unit..units.end * unit
}

/// Checks that `len` features split into whole units of `unit`.
fn check_units(name: &str, len: usize, unit: usize) -> Result<()> {
    if unit == 0 || !len.is_multiple_of(unit) {
        return Err(candle_core::Error::Msg(format!(
            "{name}: {len} features do not split into units of {unit}"
        )));
    }
    Ok(())
}

/// Rows `rows` (of dimension 0) of the tensor `name` in `st`, reading only
/// their bytes.
fn load_rows(st: &MmapedSafetensors, name: &str, rows: Range<usize>) -> Result<Tensor> {
    let view = st.get(name)?;
    let dtype = DType::try_from(view.dtype())?;
    let shape = view.shape().to_vec();
    let row_bytes = shape[1..].iter().product::<usize>() * dtype.size_in_bytes();
    let bytes = &view.data()[rows.start * row_bytes..rows.end * row_bytes];
    let mut dims = shape;
    dims[0] = rows.len();
    Tensor::from_raw_buffer(bytes, dtype, &dims, &Device::Cpu)
}

/// Columns `cols` (of dimension 1) of the 2-d tensor `name` in `st`,
/// reading only those bytes of each row.
fn load_columns(st: &MmapedSafetensors, name: &str, cols: Range<usize>) -> Result<Tensor> {
    let view = st.get(name)?;
    let dtype = DType::try_from(view.dtype())?;
    let shape = view.shape();
    if shape.len() != 2 {
        return Err(candle_core::Error::Msg(format!(
            "{name}: a 2-d weight was expected, its shape is {shape:?}"
        )));
    }
    let esz = dtype.size_in_bytes();
    let row = shape[1] * esz;
    let data = view.data();
    let mut bytes = Vec::with_capacity(shape[0] * cols.len() * esz);
    for r in 0..shape[0] {
        bytes.extend_from_slice(&data[r * row + cols.start * esz..r * row + cols.end * esz]);
    }
    Tensor::from_raw_buffer(&bytes, dtype, &[shape[0], cols.len()], &Device::Cpu)
}

/// `y = x W^T + b` with `W` (`out × in`) split by output features: this
/// rank holds rows [`shard`]`(out)` of `W` and of `b`, and computes those
/// output features of `y`.
#[derive(Clone, Debug)]
pub struct ColumnParallelLinear {
    weight: QMatMul,
    bias: Option<Tensor>,
    out_features: usize,
    unit: usize,
    comm: TensorComm,
}

impl ColumnParallelLinear {
    /// This rank's share of the full `weight` (`out × in`) and `bias`.
    ///
    /// ```
    /// # use candle_core::{Device, Tensor};
    /// use streamcomm_candle::{TensorComm, tensor_parallel::ColumnParallelLinear};
    /// let comm = TensorComm::alone()?;
    /// let w = Tensor::new(&[[1f32, 0.], [0., 2.], [1., 1.]], &Device::Cpu)?;
    /// let layer = ColumnParallelLinear::from_full(&w, None, &comm)?;
    /// let y = layer.forward(&Tensor::new(&[[3f32, 4.]], &Device::Cpu)?)?;
    /// assert_eq!(y.to_vec2::<f32>()?, [[3., 8., 7.]]);
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// A weight that is not 2-d.
    pub fn from_full(weight: &Tensor, bias: Option<&Tensor>, comm: &TensorComm) -> Result<Self> {
        let (out, _) = weight.dims2()?;
        let rows = shard(out, comm.rank(), comm.size());
        Ok(ColumnParallelLinear {
            weight: QMatMul::Tensor(weight.narrow(0, rows.start, rows.len())?.contiguous()?),
            bias: bias
                .map(|b| b.narrow(0, rows.start, rows.len()))
                .transpose()?,
            out_features: out,
            unit: 1,
            comm: comm.clone(),
        })
    }

    /// This rank's share of `{prefix}.weight` (and `{prefix}.bias`, where
    /// present) in `st`, reading only its rows.
    ///
    /// # Errors
    /// A missing or malformed weight.
    pub fn load(st: &MmapedSafetensors, prefix: &str, comm: &TensorComm) -> Result<Self> {
        let name = format!("{prefix}.weight");
        let out = st.get(&name)?.shape()[0];
        let rows = shard(out, comm.rank(), comm.size());
        let bias = format!("{prefix}.bias");
        let bias = st
            .get(&bias)
            .is_ok()
            .then(|| load_rows(st, &bias, rows.clone()))
            .transpose()?;
        Ok(ColumnParallelLinear {
            weight: QMatMul::Tensor(load_rows(st, &name, rows)?),
            bias,
            out_features: out,
            unit: 1,
            comm: comm.clone(),
        })
    }

    /// This rank's share of the weight `name` (`out × in`, no bias) in a
    /// GGUF file, split in units of `unit` output features
    /// ([`shard_in_units`]: whole heads, say), reading only its rows and
    /// keeping them quantized.
    ///
    /// ```no_run
    /// use streamcomm_candle::{TensorComm, gguf::GgufFile, tensor_parallel::ColumnParallelLinear};
    /// let comm = TensorComm::from_env()?;
    /// let file = GgufFile::open("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    /// // Whole heads of 64 of the query projection.
    /// let q = ColumnParallelLinear::from_gguf(&file, "blk.0.attn_q.weight", 64, &comm)?;
    /// println!("this rank's query features: {:?}", q.features());
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// A missing or malformed weight; output features that are not whole
    /// units.
    pub fn from_gguf(file: &GgufFile, name: &str, unit: usize, comm: &TensorComm) -> Result<Self> {
        let out = file.shape(name)?.first().copied().unwrap_or(0);
        check_units(name, out, unit)?;
        let rows = shard_in_units(out, unit, comm.rank(), comm.size());
        Ok(ColumnParallelLinear {
            weight: QMatMul::from_qtensor(file.rows(name, rows)?)?,
            bias: None,
            out_features: out,
            unit,
            comm: comm.clone(),
        })
    }

    /// The output features this rank computes.
    ///
    /// ```
    /// # use candle_core::{DType, Device, Tensor};
    /// # use streamcomm_candle::{TensorComm, tensor_parallel::ColumnParallelLinear};
    /// # let comm = TensorComm::alone()?;
    /// # let w = Tensor::zeros((5, 2), DType::F32, &Device::Cpu)?;
    /// let layer = ColumnParallelLinear::from_full(&w, None, &comm)?;
    /// assert_eq!(layer.features(), 0..5);
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    pub fn features(&self) -> Range<usize> {
        self.features_of(self.comm.rank())
    }

    fn features_of(&self, rank: usize) -> Range<usize> {
        shard_in_units(self.out_features, self.unit, rank, self.comm.size())
    }

    /// This rank's output features of `x W^T + b` (`x`: `… × in`).
    ///
    /// # Errors
    /// Shapes that do not match.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = self.weight.forward(x)?;
        match &self.bias {
            Some(b) => y.broadcast_add(b),
            None => Ok(y),
        }
    }

    /// Every output feature of `x W^T + b` on every rank: [`Self::forward`],
    /// then an all-gather of the uneven shares along the last dimension
    /// ([`TensorComm::all_gatherv`]).
    ///
    /// # Errors
    /// As [`Self::forward`]; the communicator's errors.
    pub fn forward_gathered(&self, x: &Tensor) -> Result<Tensor> {
        let mine = self.forward(x)?;
        let last = mine.rank() - 1;
        let sizes: Vec<usize> = (0..self.comm.size())
            .map(|r| self.features_of(r).len())
            .collect();
        self.comm.all_gatherv(&mine, last, &sizes)
    }
}

/// `y = x W^T + b` with `W` (`out × in`) split by input features: this
/// rank holds columns [`shard`]`(in)` of `W` and takes those input
/// features of `x` (what a [`ColumnParallelLinear`] before it computes);
/// the partial products are summed over the ranks, and `b` added once.
#[derive(Clone, Debug)]
pub struct RowParallelLinear {
    weight: QMatMul,
    bias: Option<Tensor>,
    inputs: Range<usize>,
    comm: TensorComm,
}

impl RowParallelLinear {
    /// This rank's share of the full `weight` (`out × in`); `bias` whole.
    ///
    /// ```
    /// # use candle_core::{Device, Tensor};
    /// use streamcomm_candle::{TensorComm, tensor_parallel::RowParallelLinear};
    /// let comm = TensorComm::alone()?;
    /// let w = Tensor::new(&[[1f32, 2., 3.]], &Device::Cpu)?;
    /// let layer = RowParallelLinear::from_full(&w, None, &comm)?;
    /// let y = layer.forward(&Tensor::new(&[[1f32, 1., 1.]], &Device::Cpu)?)?;
    /// assert_eq!(y.to_vec2::<f32>()?, [[6.]]);
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// A weight that is not 2-d.
    pub fn from_full(weight: &Tensor, bias: Option<&Tensor>, comm: &TensorComm) -> Result<Self> {
        let (_, inputs) = weight.dims2()?;
        let cols = shard(inputs, comm.rank(), comm.size());
        Ok(RowParallelLinear {
            weight: QMatMul::Tensor(weight.narrow(1, cols.start, cols.len())?.contiguous()?),
            bias: bias.cloned(),
            inputs: cols,
            comm: comm.clone(),
        })
    }

    /// This rank's share of `{prefix}.weight` in `st` (only its columns of
    /// each row read), and `{prefix}.bias` whole where present.
    ///
    /// # Errors
    /// A missing or malformed weight.
    pub fn load(st: &MmapedSafetensors, prefix: &str, comm: &TensorComm) -> Result<Self> {
        let name = format!("{prefix}.weight");
        let inputs = st.get(&name)?.shape()[1];
        let cols = shard(inputs, comm.rank(), comm.size());
        let bias = format!("{prefix}.bias");
        let bias = st
            .get(&bias)
            .is_ok()
            .then(|| st.load(&bias, &Device::Cpu))
            .transpose()?;
        Ok(RowParallelLinear {
            weight: QMatMul::Tensor(load_columns(st, &name, cols.clone())?),
            bias,
            inputs: cols,
            comm: comm.clone(),
        })
    }

    /// This rank's share of the weight `name` (`out × in`, no bias) in a
    /// GGUF file, split in units of `unit` input features
    /// ([`shard_in_units`]), reading only its columns of each row and
    /// keeping them quantized. Each share must start and end on a
    /// quantization block (32 values for `Q4_1`): a `unit` that is a
    /// multiple of the block size guarantees it.
    ///
    /// ```no_run
    /// use streamcomm_candle::{TensorComm, gguf::GgufFile, tensor_parallel::RowParallelLinear};
    /// let comm = TensorComm::from_env()?;
    /// let file = GgufFile::open("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    /// let down = RowParallelLinear::from_gguf(&file, "blk.0.ffn_down.weight", 32, &comm)?;
    /// println!("this rank's input features: {:?}", down.inputs());
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// A missing or malformed weight; input features that are not whole
    /// units; shares that cut a quantization block.
    pub fn from_gguf(file: &GgufFile, name: &str, unit: usize, comm: &TensorComm) -> Result<Self> {
        let inputs = file.shape(name)?.get(1).copied().unwrap_or(0);
        check_units(name, inputs, unit)?;
        let cols = shard_in_units(inputs, unit, comm.rank(), comm.size());
        Ok(RowParallelLinear {
            weight: QMatMul::from_qtensor(file.columns(name, cols.clone())?)?,
            bias: None,
            inputs: cols,
            comm: comm.clone(),
        })
    }

    /// The input features this rank takes (what the column-parallel layer
    /// before it must compute on this rank).
    ///
    /// ```
    /// # use candle_core::{DType, Device, Tensor};
    /// # use streamcomm_candle::{TensorComm, tensor_parallel::RowParallelLinear};
    /// # let comm = TensorComm::alone()?;
    /// # let w = Tensor::zeros((2, 6), DType::F32, &Device::Cpu)?;
    /// let layer = RowParallelLinear::from_full(&w, None, &comm)?;
    /// assert_eq!(layer.inputs(), 0..6);
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    pub fn inputs(&self) -> Range<usize> {
        self.inputs.clone()
    }

    /// `x W^T + b` on every rank, from this rank's input features `x`
    /// (`… × in_share`): the partial product, summed over the ranks in
    /// place (one all-reduce), plus `b`.
    ///
    /// # Errors
    /// Shapes that do not match; the communicator's errors.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let partial = self.weight.forward(x)?.contiguous()?;
        self.comm.all_reduce_in_place(&partial, ReduceOp::Sum)?;
        match &self.bias {
            Some(b) => partial.broadcast_add(b),
            None => Ok(partial),
        }
    }
}

/// An embedding table (`vocab × hidden`) split by vocabulary: this rank
/// holds rows [`shard`]`(vocab)`, looks up the ids that fall in them (zero
/// for the others), and one all-reduce gives every rank every row.
#[derive(Clone, Debug)]
pub struct VocabParallelEmbedding {
    table: Tensor,
    rows: Range<usize>,
    comm: TensorComm,
}

impl VocabParallelEmbedding {
    /// This rank's share of the full `table`.
    ///
    /// ```
    /// # use candle_core::{Device, Tensor};
    /// use streamcomm_candle::{TensorComm, tensor_parallel::VocabParallelEmbedding};
    /// let comm = TensorComm::alone()?;
    /// let table = Tensor::new(&[[0f32, 0.], [1., 1.], [2., 4.]], &Device::Cpu)?;
    /// let emb = VocabParallelEmbedding::from_full(&table, &comm)?;
    /// let ids = Tensor::new(&[2u32, 1], &Device::Cpu)?;
    /// assert_eq!(emb.forward(&ids)?.to_vec2::<f32>()?, [[2., 4.], [1., 1.]]);
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// A table that is not 2-d.
    pub fn from_full(table: &Tensor, comm: &TensorComm) -> Result<Self> {
        let (vocab, _) = table.dims2()?;
        let rows = shard(vocab, comm.rank(), comm.size());
        Ok(VocabParallelEmbedding {
            table: table.narrow(0, rows.start, rows.len())?.contiguous()?,
            rows,
            comm: comm.clone(),
        })
    }

    /// This rank's rows of `name` in `st`, reading only them.
    ///
    /// # Errors
    /// A missing or malformed table.
    pub fn load(st: &MmapedSafetensors, name: &str, comm: &TensorComm) -> Result<Self> {
        let vocab = st.get(name)?.shape()[0];
        let rows = shard(vocab, comm.rank(), comm.size());
        Ok(VocabParallelEmbedding {
            table: load_rows(st, name, rows.clone())?,
            rows,
            comm: comm.clone(),
        })
    }

    /// This rank's rows of the table `name` in a GGUF file, reading only
    /// them, dequantized to f32 (a lookup takes whole rows).
    ///
    /// ```no_run
    /// use streamcomm_candle::{TensorComm, gguf::GgufFile, tensor_parallel::VocabParallelEmbedding};
    /// let comm = TensorComm::from_env()?;
    /// let file = GgufFile::open("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    /// let tokens = VocabParallelEmbedding::from_gguf(&file, "token_embd.weight", &comm)?;
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// A missing or malformed table.
    pub fn from_gguf(file: &GgufFile, name: &str, comm: &TensorComm) -> Result<Self> {
        let vocab = file.shape(name)?.first().copied().unwrap_or(0);
        let rows = shard(vocab, comm.rank(), comm.size());
        Ok(VocabParallelEmbedding {
            table: file.rows(name, rows.clone())?.dequantize(&Device::Cpu)?,
            rows,
            comm: comm.clone(),
        })
    }

    /// The rows of `ids` (u32, any shape): `ids.dims() × hidden`.
    ///
    /// # Errors
    /// Ids that are not u32; the communicator's errors.
    pub fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        let flat: Vec<u32> = ids.flatten_all()?.to_vec1()?;
        let (start, end) = (self.rows.start as u32, self.rows.end as u32);
        let inside: Vec<u32> = flat
            .iter()
            .map(|&i| {
                if (start..end).contains(&i) {
                    i - start
                } else {
                    0
                }
            })
            .collect();
        let mask: Vec<f32> = flat
            .iter()
            .map(|&i| f32::from(u8::from((start..end).contains(&i))))
            .collect();
        let local = Tensor::from_vec(inside, flat.len(), &Device::Cpu)?;
        let mask =
            Tensor::from_vec(mask, (flat.len(), 1), &Device::Cpu)?.to_dtype(self.table.dtype())?;
        let rows = self
            .table
            .embedding(&local)?
            .broadcast_mul(&mask)?
            .contiguous()?;
        self.comm.all_reduce_in_place(&rows, ReduceOp::Sum)?;
        let mut dims = ids.dims().to_vec();
        dims.push(self.table.dim(1)?);
        rows.reshape(dims)
    }
}
