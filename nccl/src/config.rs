//! `ncclConfig_t`: this library reads its first four fields, which every
//! NCCL version since 2.14 lays out alike (`size`, `magic`, `version`,
//! `blocking`), and ignores the rest.

use std::ffi::{c_int, c_uint, c_void};

use streamcomm::Error;

/// The magic number `NCCL_CONFIG_INITIALIZER` writes.
const MAGIC: c_uint = 0xcafe_beef;
/// `NCCL_CONFIG_UNDEF_INT`: a field left at its default.
const UNDEF_INT: c_int = c_int::MIN;

/// The head of `ncclConfig_t`.
#[repr(C)]
struct Head {
    size: usize,
    magic: c_uint,
    version: c_uint,
    blocking: c_int,
}

/// What a communicator's configuration asks of this library.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Config {
    /// Initialization returns once the communicator is made (the default);
    /// otherwise it returns `ncclInProgress` and the communicator is made
    /// in the background (poll `ncclCommGetAsyncError`).
    pub(crate) blocking: bool,
}

/// The configuration `config` points to (NULL: the defaults).
///
/// # Safety
/// `config` is NULL or points to an `ncclConfig_t` (at least its head).
pub(crate) unsafe fn read(config: *const c_void) -> Result<Config, Error> {
    if config.is_null() {
        return Ok(Config { blocking: true });
    }
    // SAFETY: the caller's contract: a config's head is readable.
    let head = unsafe { config.cast::<Head>().read_unaligned() };
    if head.magic != MAGIC || head.size < std::mem::size_of::<Head>() {
        return Err(Error::invalid(format!(
            "the ncclConfig_t was not set up with NCCL_CONFIG_INITIALIZER \
             (magic {:#x}, size {}, version {})",
            head.magic, head.size, head.version
        )));
    }
    let blocking = match head.blocking {
        UNDEF_INT | 1 => true,
        0 => false,
        other => {
            return Err(Error::invalid(format!(
                "ncclConfig_t.blocking is {other}: 0 or 1"
            )));
        }
    };
    Ok(Config { blocking })
}
