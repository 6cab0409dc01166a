//! NCCL 2.30's functions this library does not support: each exists, so
//! that programs bound at load time start, and returns `ncclInvalidUsage`
//! with `ncclGetLastError` saying so; and its two functions without a
//! result (`ncclResetDebugInit`, `ncclParamDumpAll`).

use std::ffi::{c_char, c_int, c_uint, c_void};

use streamcomm::Error;

use crate::api::{cudaStream_t, export, ncclComm_t, ncclResult_t, ncclUniqueId};
use crate::guard::guard;

export! {
    /// `ncclResetDebugInit`: deprecated in NCCL; nothing to do here
    /// (`NCCL_DEBUG` is read once).
    ncclResetDebugInit, pncclResetDebugInit => fn() -> () {}
}

export! {
    /// `ncclParamDumpAll`: says on stderr that this library has no NCCL
    /// parameters, and where its settings are.
    ncclParamDumpAll, pncclParamDumpAll => fn() -> () {
        let _ = std::panic::catch_unwind(|| {
            eprintln!(
                "streamcomm's libnccl has no NCCL parameters: its settings are the \
                 STREAMCOMM_* variables (docs/guide/configuration.md)"
            );
        });
    }
}

/// The refusal of `name`.
fn refuse(name: &str) -> ncclResult_t {
    guard(name, || {
        Err(Error::InvalidUsage(format!(
            "{name} is not supported by streamcomm's libnccl (docs/guide/nccl.md lists what is)"
        )))
    })
}

/// One unsupported function per line: its names and C parameters.
macro_rules! unsupported {
    ($($name:ident, $pname:ident => ($($arg:ident: $ty:ty),* $(,)?);)*) => {
        $(export! {
            #[doc = concat!("`", stringify!($name), "`: not supported (`ncclInvalidUsage`).")]
            $name, $pname => fn($($arg: $ty),*) -> ncclResult_t {
                let _ = ($($arg,)*);
                refuse(stringify!($name))
            }
        })*
    };
}

unsupported! {
    ncclCommGetUniqueId, pncclCommGetUniqueId => (comm: ncclComm_t, uniqueId: *mut ncclUniqueId);
    ncclCommGrow, pncclCommGrow => (comm: ncclComm_t, nRanks: c_int, uniqueId: *const ncclUniqueId, rank: c_int, newcomm: *mut ncclComm_t, config: *mut c_void);
    ncclCommMemStats, pncclCommMemStats => (comm: ncclComm_t, stat: c_int, value: *mut u64);
    ncclCommSuspend, pncclCommSuspend => (comm: ncclComm_t, flags: c_int);
    ncclCommResume, pncclCommResume => (comm: ncclComm_t);
    ncclCommRevoke, pncclCommRevoke => (comm: ncclComm_t, revokeFlags: c_int);
    ncclCommWindowRegister, pncclCommWindowRegister => (comm: ncclComm_t, buff: *mut c_void, size: usize, win: *mut *mut c_void, winFlags: c_int);
    ncclCommWindowDeregister, pncclCommWindowDeregister => (comm: ncclComm_t, win: *mut c_void);
    ncclWinGetUserPtr, pncclWinGetUserPtr => (comm: ncclComm_t, win: *mut c_void, outUserPtr: *mut *mut c_void);
    ncclGroupSimulateEnd, pncclGroupSimulateEnd => (simInfo: *mut c_void);
    ncclPutSignal, pncclPutSignal => (localbuff: *const c_void, count: usize, datatype: c_int, peer: c_int, peerWin: *mut c_void, peerWinOffset: usize, sigIdx: c_int, ctx: c_int, flags: c_uint, comm: ncclComm_t, stream: cudaStream_t);
    ncclSignal, pncclSignal => (peer: c_int, sigIdx: c_int, ctx: c_int, flags: c_uint, comm: ncclComm_t, stream: cudaStream_t);
    ncclWaitSignal, pncclWaitSignal => (nDesc: c_int, signalDescs: *mut c_void, comm: ncclComm_t, stream: cudaStream_t);
    ncclParamBind, pncclParamBind => (out: *mut *mut c_void, key: *const c_char);
    ncclParamGet, pncclParamGet => (h: *mut c_void, out: *mut c_void, maxLen: c_int, len: *mut c_int);
    ncclParamGetI8, pncclParamGetI8 => (h: *mut c_void, out: *mut i8);
    ncclParamGetI16, pncclParamGetI16 => (h: *mut c_void, out: *mut i16);
    ncclParamGetI32, pncclParamGetI32 => (h: *mut c_void, out: *mut i32);
    ncclParamGetI64, pncclParamGetI64 => (h: *mut c_void, out: *mut i64);
    ncclParamGetU8, pncclParamGetU8 => (h: *mut c_void, out: *mut u8);
    ncclParamGetU16, pncclParamGetU16 => (h: *mut c_void, out: *mut u16);
    ncclParamGetU32, pncclParamGetU32 => (h: *mut c_void, out: *mut u32);
    ncclParamGetU64, pncclParamGetU64 => (h: *mut c_void, out: *mut u64);
    ncclParamGetStr, pncclParamGetStr => (h: *mut c_void, out: *mut *const c_char);
    ncclParamGetParameter, pncclParamGetParameter => (key: *const c_char, value: *mut *const c_char, valueLen: *mut c_int);
    ncclParamGetAllParameterKeys, pncclParamGetAllParameterKeys => (table: *mut *mut *const c_char, tableLen: *mut c_int);
}
