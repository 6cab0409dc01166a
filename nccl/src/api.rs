//! The C types every entry point uses, and the macro that exports a
//! function under its NCCL name and its profiling name (`pnccl...`).

use std::ffi::c_void;

pub(crate) use streamcomm::cuda::nccl::sys::{ncclResult_t, ncclUniqueId};

/// `ncclComm_t`: a key into the communicator table ([`crate::comms`]).
pub(crate) type ncclComm_t = *mut c_void;
/// `cudaStream_t`: the runtime's stream handle, the driver's `CUstream`.
pub(crate) type cudaStream_t = *mut c_void;

/// Defines `$name` as an exported C function and `$pname` as the same
/// function under NCCL's profiling prefix.
macro_rules! export {
    (
        $(#[$doc:meta])*
        $name:ident, $pname:ident => fn($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty $body:block
    ) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// NCCL's contract for this function: every non-NULL pointer
        /// points to what its type says, device buffers stay valid until
        /// the operation completes on its stream.
        #[unsafe(no_mangle)]
        pub(crate) unsafe extern "C" fn $name($($arg: $ty),*) -> $ret $body

        #[doc = concat!("`", stringify!($name), "` under NCCL's profiling prefix.")]
        ///
        /// # Safety
        /// As the unprefixed function.
        #[unsafe(no_mangle)]
        pub(crate) unsafe extern "C" fn $pname($($arg: $ty),*) -> $ret {
            // SAFETY: the same function; the caller's contract is passed on.
            unsafe { $name($($arg),*) }
        }
    };
}
pub(crate) use export;
