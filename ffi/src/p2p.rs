//! Point-to-point for C: `streamcomm_send` / `streamcomm_recv`.
//!
//! Outside a group each call is enqueued at once; inside
//! `streamcomm_group_start/end` it is checked now and submitted by the group's
//! end (see [`crate::group`]).

use std::ffi::{c_int, c_void};

use crate::COMMS;
use crate::args::{CBuf, dtype, index};
use crate::group::{Pending, collect};
use crate::guard::guard;
use crate::result::{Failure, FfiResult};
use crate::stream::stream_of;

/// Checks and wraps one send or receive, then enqueues or collects it.
///
/// # Safety
/// The buffer contract of `streamcomm_send` / `streamcomm_recv`.
unsafe fn post(
    is_send: bool,
    buf: *const c_void,
    count: usize,
    datatype: c_int,
    peer: c_int,
    comm: *mut c_void,
    stream: *mut c_void,
) -> FfiResult {
    let dt = dtype(datatype)?;
    let peer = index(peer, "peer")?;
    let c = COMMS.get(comm)?;
    let s = stream_of(stream)?;
    if peer >= c.size() {
        return Err(Failure::invalid(format!(
            "peer {peer} is out of range for {} ranks",
            c.size()
        )));
    }
    let what = if is_send { "sendbuff" } else { "recvbuff" };
    let cbuf = CBuf::new(buf, dt, count, what)?;
    // SAFETY: forwarded from this function's contract.
    let buf = unsafe { cbuf.wrap() }?;
    let op = Pending {
        is_send,
        cbuf,
        buf,
        peer,
    };
    let Some((c, s, mut op)) = collect(comm, stream, c, s, op)? else {
        return Ok(());
    };
    if op.is_send {
        Ok(c.send(&op.buf, op.peer, &s)?)
    } else {
        Ok(c.recv(&mut op.buf, op.peer, &s)?)
    }
}

/// Writes the entry points of send and receive, each a [`post`] call.
macro_rules! p2p_entry_points {
    ($($(#[$doc:meta])* $name:ident($buf:ident: $ptr:ty) => $is_send:expr;)*) => {$(
        $(#[$doc])*
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            $buf: $ptr,
            count: usize,
            datatype: c_int,
            peer: c_int,
            comm: *mut c_void,
            stream: *mut c_void,
        ) -> c_int {
            guard(stringify!($name), || {
                // SAFETY: forwarded from this function's contract.
                unsafe { post($is_send, $buf, count, datatype, peer, comm, stream) }
            })
        }
    )*};
}

p2p_entry_points! {
    /// Sends `count` elements to `peer`, which posts a matching
    /// `streamcomm_recv`; messages to one peer arrive in posting order.
    ///
    /// # Safety
    /// A non-NULL `sendbuff` holds `count` elements and stays valid until the
    /// operation completes on the stream.
    streamcomm_send(sendbuff: *const c_void) => true;

    /// Receives `count` elements from `peer` into `recvbuff`.
    ///
    /// # Safety
    /// As [`streamcomm_send`], for `recvbuff`.
    streamcomm_recv(recvbuff: *mut c_void) => false;
}
