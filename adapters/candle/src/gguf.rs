//! Shares of the tensors in a GGUF file (llama.cpp's format), read without
//! the rest: whole rows of a weight, or whole quantization blocks of every
//! row, kept quantized.
//!
//! A GGUF weight of shape `out × in` is stored row after row, each row
//! `in / block` blocks of the tensor's quantization type (32 values for
//! `Q4_1`). So rows `a..b` are one contiguous stretch of the file, and
//! columns `a..b` are one stretch of each row, as long as `a` and `b` fall
//! on block boundaries. [`GgufFile`] reads exactly those bytes (positional
//! reads, no memory map) and counts them ([`GgufFile::bytes_read`]).

use std::collections::HashMap;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use candle_core::quantized::gguf_file::{Content, TensorInfo, Value};
use candle_core::quantized::{GgmlDType, QTensor, ggml_file};
use candle_core::{Device, Result};

/// An open GGUF file: its metadata and tensor table, and reads of a tensor
/// whole or of this rank's share.
///
/// ```no_run
/// use streamcomm_candle::gguf::GgufFile;
/// let file = GgufFile::open("SmolLM2-135M-Instruct.Q4_1.gguf")?;
/// let heads = file.metadata("llama.attention.head_count")?.to_u32()?;
/// let first_rows = file.rows("blk.0.attn_q.weight", 0..64)?; // 64 × 576, quantized
/// assert_eq!(first_rows.shape().dims(), &[64, 576]);
/// # let _ = heads;
/// # Ok::<(), candle_core::Error>(())
/// ```
#[derive(Debug)]
pub struct GgufFile {
    file: File,
    content: Content,
    name: String,
    read: AtomicU64,
}

impl GgufFile {
    /// Opens `path` and reads its header (metadata and tensor table).
    ///
    /// # Errors
    /// A file that cannot be opened or is not GGUF.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref();
        let context = |e: candle_core::Error| e.context(format!("GGUF file {}", path.display()));
        let mut file = File::open(path).map_err(|e| context(e.into()))?;
        let content = Content::read(&mut file).map_err(context)?;
        Ok(GgufFile {
            file,
            content,
            name: path.display().to_string(),
            read: AtomicU64::new(0),
        })
    }

    /// Every metadata entry (`general.architecture`, `llama.block_count`,
    /// `tokenizer.ggml.tokens`, ...).
    pub fn all_metadata(&self) -> &HashMap<String, Value> {
        &self.content.metadata
    }

    /// The metadata entry `key`.
    ///
    /// # Errors
    /// No such entry, naming it and the file.
    pub fn metadata(&self, key: &str) -> Result<&Value> {
        self.content.metadata.get(key).ok_or_else(|| {
            candle_core::Error::Msg(format!("{}: no metadata entry {key}", self.name))
        })
    }

    /// Whether the file has a tensor called `name`.
    pub fn has(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    /// The shape of tensor `name` (candle's order: `out × in` for a weight).
    ///
    /// # Errors
    /// No such tensor.
    pub fn shape(&self, name: &str) -> Result<&[usize]> {
        Ok(self.info(name)?.shape.dims())
    }

    /// The quantization type of tensor `name`.
    ///
    /// # Errors
    /// No such tensor.
    pub fn dtype(&self, name: &str) -> Result<GgmlDType> {
        Ok(self.info(name)?.ggml_dtype)
    }

    /// Bytes of tensor data read from the file so far.
    pub fn bytes_read(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }

    /// Tensor `name` whole.
    ///
    /// # Errors
    /// No such tensor; a short read.
    pub fn tensor(&self, name: &str) -> Result<QTensor> {
        let rows = self.info(name)?.shape.dims().first().copied().unwrap_or(1);
        self.rows(name, 0..rows)
    }

    /// Rows `rows` (of dimension 0) of tensor `name`, still quantized: one
    /// read of their bytes.
    ///
    /// # Errors
    /// No such tensor; rows past its end; a short read.
    pub fn rows(&self, name: &str, rows: Range<usize>) -> Result<QTensor> {
        let info = self.info(name)?;
        let dims = info.shape.dims();
        let total = dims.first().copied().unwrap_or(1);
        if rows.start > rows.end || rows.end > total {
            return Err(self.error(name, format!("rows {rows:?} of {total}")));
        }
        let row = self.row_bytes(name, info)?;
        let mut data = vec![0u8; rows.len() * row];
        self.read_at(name, info, rows.start * row, &mut data)?;
        let mut shape = dims.to_vec();
        if let Some(first) = shape.first_mut() {
            *first = rows.len();
        }
        ggml_file::qtensor_from_ggml(info.ggml_dtype, &data, shape, &Device::Cpu)
    }

    /// Columns `cols` (of dimension 1) of the 2-d tensor `name`, still
    /// quantized: one read per row. `cols` must start and end on a block
    /// boundary of the tensor's quantization type.
    ///
    /// # Errors
    /// No such tensor; not 2-d; columns past its end or inside a block
    /// (naming the block size); a short read.
    pub fn columns(&self, name: &str, cols: Range<usize>) -> Result<QTensor> {
        let info = self.info(name)?;
        let &[rows, width] = info.shape.dims() else {
            return Err(self.error(name, format!("a 2-d weight, not {:?}", info.shape)));
        };
        let block = info.ggml_dtype.block_size();
        if cols.start > cols.end || cols.end > width {
            return Err(self.error(name, format!("columns {cols:?} of {width}")));
        }
        if !cols.start.is_multiple_of(block) || !cols.end.is_multiple_of(block) {
            return Err(self.error(
                name,
                format!(
                    "columns {cols:?}: a share must start and end on a block of {block} values ({:?})",
                    info.ggml_dtype
                ),
            ));
        }
        let row = self.row_bytes(name, info)?;
        let per_block = info.ggml_dtype.type_size();
        let (skip, take) = (
            cols.start / block * per_block,
            cols.len() / block * per_block,
        );
        let mut data = vec![0u8; rows * take];
        for (r, out) in data.chunks_exact_mut(take.max(1)).enumerate().take(rows) {
            self.read_at(name, info, r * row + skip, out)?;
        }
        ggml_file::qtensor_from_ggml(info.ggml_dtype, &data, vec![rows, cols.len()], &Device::Cpu)
    }

    fn info(&self, name: &str) -> Result<&TensorInfo> {
        self.content
            .tensor_infos
            .get(name)
            .ok_or_else(|| candle_core::Error::Msg(format!("{}: no tensor {name}", self.name)))
    }

    /// Bytes of one row (dimension 0) of `name`.
    fn row_bytes(&self, name: &str, info: &TensorInfo) -> Result<usize> {
        let per_row: usize = info.shape.dims().iter().skip(1).product();
        let block = info.ggml_dtype.block_size();
        if !per_row.is_multiple_of(block) {
            return Err(self.error(
                name,
                format!("rows of {per_row} values, not whole blocks of {block}"),
            ));
        }
        Ok(per_row / block * info.ggml_dtype.type_size())
    }

    /// Reads `out.len()` bytes at `offset` within tensor `name`'s data.
    fn read_at(&self, name: &str, info: &TensorInfo, offset: usize, out: &mut [u8]) -> Result<()> {
        let at = self.content.tensor_data_offset + info.offset + offset as u64;
        self.file
            .read_exact_at(out, at)
            .map_err(|e| self.error(name, format!("reading {} bytes at {at}: {e}", out.len())))?;
        self.read.fetch_add(out.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn error(&self, name: &str, what: String) -> candle_core::Error {
        candle_core::Error::Msg(format!("{}: tensor {name}: {what}", self.name))
    }
}
