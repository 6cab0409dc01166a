//! A `cudarc::nccl` program, never told about streamcomm: it loads
//! `libnccl.so.2` at run time (cudarc's `nccl` feature), which
//! `streamcomm-run --nccl` makes streamcomm's. See
//! `nccl_program/program.rs`.

use cudarc::nccl::safe as nccl;

include!("nccl_program/program.rs");
