//! Collectives on a tensor's own storage: candle's [`InplaceOp1`], so that
//! no copy is made.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, InplaceOp1, Layout, Result};
use streamcomm::host::Element;
use streamcomm::{Communicator, ReduceOp};

use crate::collectives::wrap;
use crate::elements::{not_contiguous, unsupported};

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
        let (start, end) = layout
            .contiguous_offsets()
            .ok_or_else(|| not_contiguous(self.name(), layout.dims(), layout.stride()))?;
        match storage {
            CpuStorage::F32(v) => self.apply(&mut v[start..end]),
            CpuStorage::F64(v) => self.apply(&mut v[start..end]),
            CpuStorage::F16(v) => self.apply(&mut v[start..end]),
            CpuStorage::BF16(v) => self.apply(&mut v[start..end]),
            CpuStorage::U8(v) => self.apply(&mut v[start..end]),
            CpuStorage::U32(v) => self.apply(&mut v[start..end]),
            CpuStorage::I64(v) => self.apply(&mut v[start..end]),
            other => Err(unsupported(self.name(), other.dtype())),
        }
    }
}
