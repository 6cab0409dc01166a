//! The same program as `cudarc_nccl`, its one `use` line switched to
//! streamcomm's look-alike of `cudarc::nccl::safe`: no libnccl at all. See
//! `nccl_program/program.rs`.

use streamcomm::cuda::nccl;

include!("nccl_program/program.rs");
