//! libibverbs, loaded at run time (`docs/design/architecture.md`, as NCCL's `ibvwrap`).
//!
//! A binary built with the `verbs` feature must start, and fall back to tcp,
//! on a machine without libibverbs. So nothing links against it: the
//! functions the transport calls are looked up in `libibverbs.so.1` with
//! `dlopen` the first time a device is wanted ([`lib`]); failing that is
//! "no RDMA here", [`Error::Unavailable`]. The struct layouts, the constants
//! and the inline verbs (`ibv_post_send`, `ibv_poll_cq`, ...: calls through
//! the context's provider table, which need no symbol from the library) are
//! in [`super::sys`].

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

use crate::transport::verbs::sys::*;

use crate::{Error, Result};

/// The library file looked for (the soname every distribution ships).
pub(crate) const LIBRARY: &str = "libibverbs.so.1";

macro_rules! verbs_table {
    ($($field:ident = $sym:literal : fn($($arg:ty),*) $(-> $ret:ty)?;)*) => {
        /// The functions of libibverbs the transport calls.
        pub(crate) struct Lib {
            $(
                #[doc = concat!("`", $sym, "`.")]
                pub $field: unsafe extern "C" fn($($arg),*) $(-> $ret)?,
            )*
            _lib: libloading::Library,
        }

        impl Lib {
            fn load() -> std::result::Result<Lib, String> {
                // SAFETY: loading libibverbs runs its initialisers, which
                // only set up its own state (provider discovery is lazy).
                let lib = unsafe { libloading::Library::new(LIBRARY) }
                    .map_err(|e| format!("{LIBRARY}: {e}"))?;
                Ok(Lib {
                    $(
                        // SAFETY: the symbol has this C signature in every
                        // libibverbs 1.x (the default symbol version, the
                        // one a linked program gets); the pointer stays
                        // valid while `_lib` is loaded, which is forever
                        // (the table lives in a static).
                        $field: unsafe {
                            *lib.get::<unsafe extern "C" fn($($arg),*) $(-> $ret)?>(
                                concat!($sym, "\0").as_bytes(),
                            )
                            .map_err(|e| format!("{LIBRARY}: {}: {e}", $sym))?
                        },
                    )*
                    _lib: lib,
                })
            }
        }
    };
}

verbs_table! {
    get_device_list = "ibv_get_device_list": fn(*mut c_int) -> *mut *mut ibv_device;
    free_device_list = "ibv_free_device_list": fn(*mut *mut ibv_device);
    get_device_name = "ibv_get_device_name": fn(*mut ibv_device) -> *const c_char;
    open_device = "ibv_open_device": fn(*mut ibv_device) -> *mut ibv_context;
    close_device = "ibv_close_device": fn(*mut ibv_context) -> c_int;
    alloc_pd = "ibv_alloc_pd": fn(*mut ibv_context) -> *mut ibv_pd;
    dealloc_pd = "ibv_dealloc_pd": fn(*mut ibv_pd) -> c_int;
    query_device = "ibv_query_device": fn(*mut ibv_context, *mut ibv_device_attr) -> c_int;
    query_port = "ibv_query_port": fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int;
    query_gid = "ibv_query_gid": fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int;
    reg_mr = "ibv_reg_mr": fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr;
    dereg_mr = "ibv_dereg_mr": fn(*mut ibv_mr) -> c_int;
    create_comp_channel = "ibv_create_comp_channel": fn(*mut ibv_context) -> *mut ibv_comp_channel;
    destroy_comp_channel = "ibv_destroy_comp_channel": fn(*mut ibv_comp_channel) -> c_int;
    create_cq = "ibv_create_cq":
        fn(*mut ibv_context, c_int, *mut c_void, *mut ibv_comp_channel, c_int) -> *mut ibv_cq;
    destroy_cq = "ibv_destroy_cq": fn(*mut ibv_cq) -> c_int;
    create_qp = "ibv_create_qp": fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp;
    destroy_qp = "ibv_destroy_qp": fn(*mut ibv_qp) -> c_int;
    modify_qp = "ibv_modify_qp": fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int;
    get_cq_event = "ibv_get_cq_event":
        fn(*mut ibv_comp_channel, *mut *mut ibv_cq, *mut *mut c_void) -> c_int;
    ack_cq_events = "ibv_ack_cq_events": fn(*mut ibv_cq, c_uint);
    wc_status_str = "ibv_wc_status_str": fn(ibv_wc_status::Type) -> *const c_char;
    create_ah = "ibv_create_ah": fn(*mut ibv_pd, *mut ibv_ah_attr) -> *mut ibv_ah;
    destroy_ah = "ibv_destroy_ah": fn(*mut ibv_ah) -> c_int;
    attach_mcast = "ibv_attach_mcast": fn(*mut ibv_qp, *const ibv_gid, u16) -> c_int;
    detach_mcast = "ibv_detach_mcast": fn(*mut ibv_qp, *const ibv_gid, u16) -> c_int;
}

static LIB: OnceLock<std::result::Result<Lib, String>> = OnceLock::new();

/// libibverbs, loaded on first use.
///
/// # Errors
/// [`Error::Unavailable`] when the library or one of its functions is
/// missing (the same every call).
pub(crate) fn lib() -> Result<&'static Lib> {
    LIB.get_or_init(Lib::load)
        .as_ref()
        .map_err(|e| Error::Unavailable(format!("verbs: cannot load libibverbs ({e})")))
}

/// `ibv_reg_dmabuf_mr(pd, offset, length, iova, fd, access)`.
pub(crate) type RegDmabufMr =
    unsafe extern "C" fn(*mut ibv_pd, u64, usize, u64, c_int, c_int) -> *mut ibv_mr;

static REG_DMABUF: OnceLock<Option<(RegDmabufMr, libloading::Library)>> = OnceLock::new();

/// `ibv_reg_dmabuf_mr`, which libibverbs has only from rdma-core 34 on
/// (looked up apart from [`Lib`], so that older libraries still load).
pub(crate) fn reg_dmabuf_mr() -> Option<RegDmabufMr> {
    REG_DMABUF
        .get_or_init(|| {
            // SAFETY: as in `Lib::load` (the library is already loaded when
            // a device exists; this only takes another reference).
            let lib = unsafe { libloading::Library::new(LIBRARY) }.ok()?;
            // SAFETY: the symbol has this C signature in every libibverbs
            // that exports it; it stays valid while `lib` is kept, forever.
            let f = unsafe { *lib.get::<RegDmabufMr>(b"ibv_reg_dmabuf_mr\0").ok()? };
            Some((f, lib))
        })
        .as_ref()
        .map(|(f, _)| *f)
}
