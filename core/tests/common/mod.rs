//! Test support shared by the integration tests of `streamcomm`.
//!
//! Every test of a collective needs the same three things: inputs whose
//! reduction is exact (so a wrong result cannot hide behind rounding), an
//! independent reference computed in `f64` straight from the definition of
//! the collective, and an element-by-element comparison that says where and
//! how a result is wrong. Whether the collective ran in the simulator, over
//! threads or over processes, the checks are these.
//!
//! Use it from a test file with `mod common;`.

// Each test binary uses its own subset of these helpers.
#![allow(dead_code, unused_imports)]

mod inputs;
mod ports;
mod reference;

pub(crate) use inputs::{gen_inputs, gen_values};
pub(crate) use ports::unused_port;
pub(crate) use reference::{check, counts, decode, encode, expected};

/// The (dtype, op) pairs the integration tests spread over their matrices.
pub(crate) const DTYPE_OPS: [(streamcomm::DataType, streamcomm::ReduceOp); 20] = {
    use streamcomm::DataType::{Bf16, F32, I32, U8};
    use streamcomm::ReduceOp::{Avg, Max, Min, Prod, Sum};
    [
        (F32, Sum),
        (I32, Prod),
        (Bf16, Min),
        (U8, Max),
        (F32, Avg),
        (I32, Sum),
        (Bf16, Prod),
        (U8, Min),
        (F32, Max),
        (I32, Avg),
        (Bf16, Sum),
        (U8, Prod),
        (F32, Min),
        (I32, Max),
        (Bf16, Avg),
        (U8, Sum),
        (F32, Prod),
        (I32, Min),
        (Bf16, Max),
        (U8, Avg),
    ]
};
