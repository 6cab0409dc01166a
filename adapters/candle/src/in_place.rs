//! Collectives on a tensor's own storage: candle's [`InplaceOp1`], so that
//! no copy is made.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, InplaceOp1, Layout, Result};
use streamcomm::host::Element;
use streamcomm::{Communicator, ReduceOp};

use crate::collectives::wrap;

/// What an in-place call does.
#[derive(Clone, Copy, Debug)]
pub(crate) enum InPlace {
    /// `all_reduce_in_place_host` with this operator.
    AllReduce(ReduceOp),
    /// `broadcast_host` from this root.
    Broadcast(usize),
}

/// One in-place call on one communicator.
pub(crate) struct Op<'a> {
    pub(crate) comm: &'a Communicator,
    pub(crate) what: InPlace,
}

impl Op<'_> {
    fn apply<T: Element>(&self, data: &mut [T]) -> Result<()> {
        match self.what {
            InPlace::AllReduce(op) => self.comm.all_reduce_in_place_host(data, op),
            InPlace::Broadcast(root) => self.comm.broadcast_host(data, root),
        }
        .map_err(wrap)
    }
}

impl InplaceOp1 for Op<'_> {
    fn name(&self) -> &'static str {
        match self.what {
            InPlace::AllReduce(_) => "streamcomm-all-reduce",
            InPlace::Broadcast(_) => "streamcomm-broadcast",
        }
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> Result<()> {
        let (start, end) = layout.contiguous_offsets().ok_or_else(|| {
            candle_core::Error::Msg(format!(
                "{}: the tensor is not contiguous (shape {:?}, stride {:?}): call .contiguous() \
                 first, or use the call that returns a new tensor",
                self.name(),
                layout.shape(),
                layout.stride()
            ))
        })?;
        match storage {
            CpuStorage::F32(v) => self.apply(&mut v[start..end]),
            CpuStorage::F64(v) => self.apply(&mut v[start..end]),
            CpuStorage::F16(v) => self.apply(&mut v[start..end]),
            CpuStorage::BF16(v) => self.apply(&mut v[start..end]),
            CpuStorage::U8(v) => self.apply(&mut v[start..end]),
            CpuStorage::U32(v) => self.apply(&mut v[start..end]),
            CpuStorage::I64(v) => self.apply(&mut v[start..end]),
            other => Err(candle_core::Error::Msg(format!(
                "{}: tensors of {:?} are not carried by streamcomm (f32, f64, f16, bf16, u8, \
                 u32 and i64 are)",
                self.name(),
                other.dtype()
            ))),
        }
    }
}
