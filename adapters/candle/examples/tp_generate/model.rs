//! A llama model from a GGUF file, split across the ranks Megatron's way:
//! each rank holds its share of every attention and MLP layer, kept
//! quantized, and the layers meet in two all-reduces per transformer block
//! (after the attention's output projection and after the MLP's down
//! projection) and one all-gather of the logits.
//!
//! The arithmetic is candle-transformers' quantized llama's, operation for
//! operation (the same rotary embedding, mask, softmax and quantized
//! matrix products), so each rank computes exactly what the one-process
//! model computes for its heads and features; only the sums of the
//! row-parallel projections are added in another order.
//!
//! How the layers are split over `n` ranks:
//! - attention by key/value group (a key/value head and the query heads
//!   that share it): [`shard`] of the groups, uneven where `n` does not
//!   divide them (3 groups over 2 ranks: 2 and 1), so at most as many
//!   ranks as key/value heads;
//! - the MLP by whole quantization blocks of its hidden features;
//! - the embedding and the output projection by vocabulary.

use candle_core::{DType, Device, IndexOp, Result, Tensor};
use candle_nn::rotary_emb::rope_i;
use streamcomm_candle::TensorComm;
use streamcomm_candle::gguf::GgufFile;
use streamcomm_candle::tensor_parallel::{
    ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding, shard,
};

/// Positions the rotary tables cover.
const MAX_SEQ_LEN: usize = 4096;

/// One rank's share of the model.
pub(crate) struct Model {
    embedding: VocabParallelEmbedding,
    blocks: Vec<Block>,
    norm: RmsNorm,
    output: ColumnParallelLinear,
}

struct Block {
    attention_norm: RmsNorm,
    attention: Attention,
    mlp_norm: RmsNorm,
    gate: ColumnParallelLinear,
    up: ColumnParallelLinear,
    down: RowParallelLinear,
}

struct Attention {
    q: ColumnParallelLinear,
    k: ColumnParallelLinear,
    v: ColumnParallelLinear,
    o: RowParallelLinear,
    /// This rank's query and key/value heads.
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    cos: Tensor,
    sin: Tensor,
    cache: Option<(Tensor, Tensor)>,
}

struct RmsNorm {
    weight: Tensor,
    eps: f32,
}

impl RmsNorm {
    fn load(file: &GgufFile, name: &str, eps: f32) -> Result<RmsNorm> {
        Ok(RmsNorm {
            weight: file.tensor(name)?.dequantize(&Device::Cpu)?,
            eps,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        candle_nn::ops::rms_norm(x, &self.weight, self.eps)
    }
}

impl Model {
    /// This rank's share of the llama model in `file`.
    pub(crate) fn load(file: &GgufFile, comm: &TensorComm) -> Result<Model> {
        let arch = file.metadata("general.architecture")?.to_string()?;
        if arch != "llama" {
            candle_core::bail!("{arch} model: this example runs llama models");
        }
        let get = |key: &str| -> Result<usize> {
            Ok(file.metadata(&format!("llama.{key}"))?.to_u32()? as usize)
        };
        let (heads, kv_heads) = (
            get("attention.head_count")?,
            get("attention.head_count_kv")?,
        );
        let hidden = get("embedding_length")?;
        let head_dim = hidden / heads;
        let eps = file
            .metadata("llama.attention.layer_norm_rms_epsilon")?
            .to_f32()?;
        let freq_base = file
            .metadata("llama.rope.freq_base")
            .and_then(|v| v.to_f32())
            .unwrap_or(10000.);
        if comm.size() > kv_heads {
            candle_core::bail!(
                "{} ranks: the attention is split by key/value head, and this model has {kv_heads}",
                comm.size()
            );
        }
        let group = heads / kv_heads;
        let my_groups = shard(kv_heads, comm.rank(), comm.size()).len();
        let (cos, sin) = rotary_tables(get("rope.dimension_count")?, freq_base)?;
        let mut blocks = Vec::new();
        for i in 0..get("block_count")? {
            let name = |w: &str| format!("blk.{i}.{w}.weight");
            let block_size = file.dtype(&name("ffn_down"))?.block_size();
            blocks.push(Block {
                attention_norm: RmsNorm::load(file, &name("attn_norm"), eps)?,
                attention: Attention {
                    q: ColumnParallelLinear::from_gguf(
                        file,
                        &name("attn_q"),
                        group * head_dim,
                        comm,
                    )?,
                    k: ColumnParallelLinear::from_gguf(file, &name("attn_k"), head_dim, comm)?,
                    v: ColumnParallelLinear::from_gguf(file, &name("attn_v"), head_dim, comm)?,
                    o: RowParallelLinear::from_gguf(
                        file,
                        &name("attn_output"),
                        group * head_dim,
                        comm,
                    )?,
                    heads: my_groups * group,
                    kv_heads: my_groups,
                    head_dim,
                    cos: cos.clone(),
                    sin: sin.clone(),
                    cache: None,
                },
                mlp_norm: RmsNorm::load(file, &name("ffn_norm"), eps)?,
                gate: ColumnParallelLinear::from_gguf(file, &name("ffn_gate"), block_size, comm)?,
                up: ColumnParallelLinear::from_gguf(file, &name("ffn_up"), block_size, comm)?,
                down: RowParallelLinear::from_gguf(file, &name("ffn_down"), block_size, comm)?,
            });
        }
        // Tied embeddings: without an output projection the token table is one.
        let output = if file.has("output.weight") {
            "output.weight"
        } else {
            "token_embd.weight"
        };
        Ok(Model {
            embedding: VocabParallelEmbedding::from_gguf(file, "token_embd.weight", comm)?,
            blocks,
            norm: RmsNorm::load(file, "output_norm.weight", eps)?,
            output: ColumnParallelLinear::from_gguf(file, output, 1, comm)?,
        })
    }

    /// The logits (`batch × vocab`, every rank) of the token after `ids`
    /// (`batch × seq`), whose first token is at position `pos`; the
    /// attention caches keep `ids` for the next call.
    pub(crate) fn forward(&mut self, ids: &Tensor, pos: usize) -> Result<Tensor> {
        let (_, seq) = ids.dims2()?;
        let mask = (seq > 1).then(|| causal_mask(seq, pos)).transpose()?;
        let mut x = self.embedding.forward(ids)?;
        for block in &mut self.blocks {
            let attn =
                block
                    .attention
                    .forward(&block.attention_norm.forward(&x)?, mask.as_ref(), pos)?;
            x = (attn + &x)?;
            let h = block.mlp_norm.forward(&x)?;
            let gated =
                (candle_nn::ops::silu(&block.gate.forward(&h)?)? * block.up.forward(&h)?)?;
            x = (block.down.forward(&gated)? + &x)?;
        }
        let x = self.norm.forward(&x)?;
        self.output.forward_gathered(&x.i((.., seq - 1, ..))?)
    }

    /// Forgets the attention caches (a new prompt starts at position 0).
    pub(crate) fn clear(&mut self) {
        for block in &mut self.blocks {
            block.attention.cache = None;
        }
    }
}

impl Attention {
    fn forward(&mut self, x: &Tensor, mask: Option<&Tensor>, pos: usize) -> Result<Tensor> {
        let (b, seq, _) = x.dims3()?;
        let split = |t: Tensor, heads: usize| -> Result<Tensor> {
            t.reshape((b, seq, heads, self.head_dim))?.transpose(1, 2)
        };
        let q = split(self.q.forward(x)?, self.heads)?;
        let k = split(self.k.forward(x)?, self.kv_heads)?;
        let v = split(self.v.forward(x)?, self.kv_heads)?.contiguous()?;
        let q = self.rotate(&q, pos)?;
        let k = self.rotate(&k, pos)?;
        let (k, v) = match &self.cache {
            Some((ck, cv)) if pos > 0 => (Tensor::cat(&[ck, &k], 2)?, Tensor::cat(&[cv, &v], 2)?),
            _ => (k, v),
        };
        self.cache = Some((k.clone(), v.clone()));
        let repeat = self.heads / self.kv_heads;
        let k = repeat_kv(k, repeat)?;
        let v = repeat_kv(v, repeat)?;
        let att = (q.matmul(&k.t()?)? / (self.head_dim as f64).sqrt())?;
        let att = match mask {
            None => att,
            Some(mask) => {
                let mask = mask.broadcast_as(att.shape())?;
                let minus_inf = Tensor::new(f32::NEG_INFINITY, att.device())?
                    .broadcast_as(mask.shape().dims())?;
                mask.where_cond(&minus_inf, &att)?
            }
        };
        let att = candle_nn::ops::softmax_last_dim(&att)?;
        let y = att.matmul(&v.contiguous()?)?;
        let y = y
            .transpose(1, 2)?
            .reshape((b, seq, self.heads * self.head_dim))?;
        self.o.forward(&y)
    }

    fn rotate(&self, x: &Tensor, pos: usize) -> Result<Tensor> {
        let seq = x.dim(2)?;
        let cos = self.cos.narrow(0, pos, seq)?;
        let sin = self.sin.narrow(0, pos, seq)?;
        rope_i(&x.contiguous()?, &cos, &sin)
    }
}

/// The rotary embedding's cosines and sines for every position.
fn rotary_tables(dim: usize, base: f32) -> Result<(Tensor, Tensor)> {
    let theta: Vec<f32> = (0..dim)
        .step_by(2)
        .map(|i| 1f32 / base.powf(i as f32 / dim as f32))
        .collect();
    let theta = Tensor::new(theta.as_slice(), &Device::Cpu)?;
    let positions = Tensor::arange(0, MAX_SEQ_LEN as u32, &Device::Cpu)?
        .to_dtype(DType::F32)?
        .reshape((MAX_SEQ_LEN, 1))?;
    let angles = positions.matmul(&theta.reshape((1, theta.elem_count()))?)?;
    Ok((angles.cos()?, angles.sin()?))
}

/// 1 where query `i` (at position `pos + i`) must not see key `j`.
fn causal_mask(seq: usize, pos: usize) -> Result<Tensor> {
    let keys = pos + seq;
    let mask: Vec<u8> = (0..seq)
        .flat_map(|i| (0..keys).map(move |j| u8::from(j > pos + i)))
        .collect();
    Tensor::from_slice(&mask, (seq, keys), &Device::Cpu)
}

/// Each key/value head repeated for the `n` query heads that share it.
fn repeat_kv(x: Tensor, n: usize) -> Result<Tensor> {
    if n == 1 {
        return Ok(x);
    }
    let (b, heads, seq, dim) = x.dims4()?;
    Tensor::cat(&vec![&x; n], 2)?.reshape((b, heads * n, seq, dim))
}

/// The index of the largest logit (the first, on a tie).
pub(crate) fn argmax(logits: &Tensor) -> Result<u32> {
    let v: Vec<f32> = logits.flatten_all()?.to_vec1()?;
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    Ok(best as u32)
}
