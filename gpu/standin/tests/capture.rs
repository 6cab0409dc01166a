//! Graph capture on the stand-in: the driver's refusals (900 and the capture
//! invalidated, 901, 903, 904, 905, 906, 907, 908), fork/join, and replay of a
//! captured graph many times with fresh data.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{alloc, bind, code, expect, mapped, ok, stream};
use cudarc::driver::sys;
use sys::CUstreamCaptureMode::{
    CU_STREAM_CAPTURE_MODE_GLOBAL as GLOBAL, CU_STREAM_CAPTURE_MODE_RELAXED as RELAXED,
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL as THREAD_LOCAL,
};

fn status(s: sys::CUstream) -> u32 {
    let mut st = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: valid stream and out-pointer.
    ok(unsafe { sys::cuStreamIsCapturing(s, &mut st) });
    st as u32
}

fn end(s: sys::CUstream) -> (u32, sys::CUgraph) {
    let mut g = std::ptr::null_mut();
    // SAFETY: valid stream and out-pointer.
    let r = unsafe { sys::cuStreamEndCapture(s, &mut g) };
    (code(r), g)
}

fn alloc_code() -> u32 {
    let mut p = 0;
    // SAFETY: valid out-pointer.
    let r = unsafe { sys::cuMemAlloc_v2(&mut p, 64) };
    if code(r) == 0 {
        // SAFETY: frees what was just allocated.
        unsafe { sys::cuMemFree_v2(p) };
    }
    code(r)
}

fn host_alloc_code() -> u32 {
    let mut h = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    code(unsafe { sys::cuMemHostAlloc(&mut h, 64, 0) })
}

/// `cuStreamEndCapture` of `s` from a new thread.
fn end_on_another_thread(ctx: sys::CUcontext, s: sys::CUstream) -> u32 {
    let (c, s) = (ctx as usize, s as usize);
    std::thread::spawn(move || {
        let mut g = std::ptr::null_mut();
        // SAFETY: the retained context and a live stream.
        unsafe {
            ok(sys::cuCtxSetCurrent(c as sys::CUcontext));
            code(sys::cuStreamEndCapture(s as sys::CUstream, &mut g))
        }
    })
    .join()
    .unwrap()
}

/// Runs `f` on a new thread with the context current, in capture `mode`.
fn on_thread<T: Send + 'static>(
    ctx: sys::CUcontext,
    mode: sys::CUstreamCaptureMode,
    f: fn() -> T,
) -> T {
    let c = ctx as usize;
    std::thread::spawn(move || {
        let mut m = mode;
        // SAFETY: the retained primary context; valid in/out pointer.
        unsafe {
            ok(sys::cuCtxSetCurrent(c as sys::CUcontext));
            ok(sys::cuThreadExchangeStreamCaptureMode(&mut m));
        }
        f()
    })
    .join()
    .unwrap()
}

standin_test!(
    allocation_during_capture_is_refused_and_invalidates,
    20,
    &[],
    {
        let ctx = bind();
        let s = stream(true);
        let d = alloc(64);
        // SAFETY: driver calls with valid handles throughout.
        unsafe {
            // Thread-local: the capturing thread is barred, other threads are not.
            ok(sys::cuStreamBeginCapture_v2(s, THREAD_LOCAL));
            assert_eq!(on_thread(ctx, GLOBAL, alloc_code), 0);
            ok(sys::cuMemsetD8Async(d, 1, 64, s));
            assert_eq!(
                alloc_code(),
                900,
                "failure 1 of issue 27: cuMemAlloc while capturing"
            );
            assert_eq!(status(s), 2, "the capture is invalidated");
            expect(sys::cuMemsetD8Async(d, 1, 64, s), 901);
            assert_eq!(end(s), (901, std::ptr::null_mut()));
            assert_eq!(status(s), 0);

            // Global: any GLOBAL-mode thread is barred; a RELAXED thread is not.
            ok(sys::cuStreamBeginCapture_v2(s, GLOBAL));
            assert_eq!(on_thread(ctx, RELAXED, alloc_code), 0);
            assert_eq!(on_thread(ctx, THREAD_LOCAL, alloc_code), 0);
            let pinned = on_thread(ctx, GLOBAL, host_alloc_code);
            assert_eq!(pinned, 900, "cuMemHostAlloc from another GLOBAL thread");
            assert_eq!(end(s).0, 901);

            // The capturing thread switching itself to RELAXED may allocate.
            ok(sys::cuStreamBeginCapture_v2(s, THREAD_LOCAL));
            let mut m = RELAXED;
            ok(sys::cuThreadExchangeStreamCaptureMode(&mut m));
            assert_eq!(m, GLOBAL);
            assert_eq!(alloc_code(), 0);
            ok(sys::cuThreadExchangeStreamCaptureMode(&mut m));
            // cuMemFree, cuEventQuery and cuCtxSynchronize are refused too.
            expect(sys::cuMemFree_v2(d), 900);
            let (r, g) = end(s);
            assert_eq!(r, 901);
            assert!(g.is_null());
            let mut ev = std::ptr::null_mut();
            ok(sys::cuEventCreate(&mut ev, 2));
            ok(sys::cuStreamBeginCapture_v2(s, GLOBAL));
            expect(sys::cuEventQuery(ev), 900);
            assert_eq!(end(s).0, 901);
            ok(sys::cuStreamBeginCapture_v2(s, RELAXED));
            expect(sys::cuCtxSynchronize(), 900);
            assert_eq!(end(s).0, 901);
        }
    }
);

standin_test!(sync_and_legacy_use_during_capture, 20, &[], {
    bind();
    let nb = stream(true);
    let blocking = stream(false);
    let d = alloc(64);
    // SAFETY: driver calls with valid handles throughout.
    unsafe {
        ok(sys::cuStreamBeginCapture_v2(nb, RELAXED));
        expect(sys::cuStreamSynchronize(nb), 900);
        assert_eq!(status(nb), 2);
        assert_eq!(end(nb).0, 901);
        ok(sys::cuStreamBeginCapture_v2(nb, RELAXED));
        expect(sys::cuStreamQuery(nb), 900);
        assert_eq!(end(nb).0, 901);
        // Legacy-stream use while a NON_BLOCKING stream captures is fine ...
        ok(sys::cuStreamBeginCapture_v2(nb, RELAXED));
        ok(sys::cuMemsetD8_v2(d, 0, 64));
        let (r, g) = end(nb);
        assert_eq!(r, 0);
        ok(sys::cuGraphDestroy(g));
        // ... but not while a blocking stream does (906).
        ok(sys::cuStreamBeginCapture_v2(blocking, RELAXED));
        let mut st = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        expect(sys::cuStreamIsCapturing(std::ptr::null_mut(), &mut st), 906);
        expect(sys::cuMemsetD8_v2(d, 0, 64), 906);
        assert_eq!(status(blocking), 2);
        assert_eq!(end(blocking).0, 901);
        expect(
            sys::cuStreamBeginCapture_v2(std::ptr::null_mut(), RELAXED),
            900,
        );
        ok(sys::cuStreamBeginCapture_v2(nb, RELAXED));
        expect(sys::cuStreamBeginCapture_v2(nb, RELAXED), 401);
        assert_eq!(end(nb).0, 0);
    }
});

standin_test!(fork_join_and_malformed_captures, 20, &[], {
    let ctx = bind();
    let s1 = stream(true);
    let s2 = stream(true);
    let d = alloc(64);
    let mk = || {
        let mut e = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        ok(unsafe { sys::cuEventCreate(&mut e, 2) });
        e
    };
    let (fork, join, outside) = (mk(), mk(), mk());
    // SAFETY: driver calls with valid handles throughout.
    unsafe {
        ok(sys::cuEventRecord(outside, s2));
        ok(sys::cuStreamSynchronize(s2));
        // Unjoined fork: 904.
        ok(sys::cuStreamBeginCapture_v2(s1, GLOBAL));
        ok(sys::cuMemsetD8Async(d, 1, 8, s1));
        ok(sys::cuEventRecord(fork, s1));
        expect(sys::cuEventQuery(fork), 907);
        ok(sys::cuStreamWaitEvent(s2, fork, 0));
        assert_eq!(status(s2), 1, "s2 was pulled into the capture");
        ok(sys::cuMemsetD8Async(d, 2, 8, s2));
        expect(sys::cuStreamEndCapture(s2, &mut std::ptr::null_mut()), 903);
        assert_eq!(end(s1).0, 901);
        ok(sys::cuStreamBeginCapture_v2(s1, GLOBAL));
        ok(sys::cuEventRecord(fork, s1));
        ok(sys::cuStreamWaitEvent(s2, fork, 0));
        ok(sys::cuMemsetD8Async(d, 2, 8, s2));
        assert_eq!(end(s1), (904, std::ptr::null_mut()));
        assert_eq!(status(s2), 0);
        // Joined fork: a graph.
        ok(sys::cuStreamBeginCapture_v2(s1, GLOBAL));
        ok(sys::cuEventRecord(fork, s1));
        ok(sys::cuStreamWaitEvent(s2, fork, 0));
        ok(sys::cuMemsetD8Async(d, 3, 8, s2));
        ok(sys::cuEventRecord(join, s2));
        ok(sys::cuStreamWaitEvent(s1, join, 0));
        let (r, g) = end(s1);
        assert_eq!(r, 0);
        assert!(!g.is_null());
        // A non-captured event: 905.
        ok(sys::cuStreamBeginCapture_v2(s1, GLOBAL));
        expect(sys::cuStreamWaitEvent(s1, outside, 0), 905);
        assert_eq!(end(s1).0, 901);
        // Ending from another thread (not RELAXED): 908; graph launch into a
        // capturing stream: 900.
        let mut exec = std::ptr::null_mut();
        ok(sys::cuGraphInstantiateWithFlags(&mut exec, g, 0));
        ok(sys::cuStreamBeginCapture_v2(s1, THREAD_LOCAL));
        assert_eq!(end_on_another_thread(ctx, s1), 908);
        expect(sys::cuGraphLaunch(exec, s1), 900);
        assert_eq!(end(s1).0, 901);
        ok(sys::cuGraphLaunch(exec, s1));
        ok(sys::cuStreamSynchronize(s1));
        assert_eq!(common::read(d, 8), [3; 8]);
        ok(sys::cuGraphExecDestroy(exec));
        ok(sys::cuGraphDestroy(g));
    }
});

static HOST_CALLS: AtomicU32 = AtomicU32::new(0);
static DESTROYED: AtomicU32 = AtomicU32::new(0);

unsafe extern "C" fn count_call(_: *mut std::ffi::c_void) {
    HOST_CALLS.fetch_add(1, Ordering::SeqCst);
}

unsafe extern "C" fn destroyed(_: *mut std::ffi::c_void) {
    DESTROYED.fetch_add(1, Ordering::SeqCst);
}

standin_test!(a_captured_graph_replays_with_fresh_data, 20, &[], {
    bind();
    let s = stream(true);
    const N: usize = 1024;
    let (src_h, src_d) = mapped(N);
    let (dst_h, _) = mapped(N);
    let staging = alloc(N);
    let (_, flag_d) = mapped(64);
    let mut graph = std::ptr::null_mut();
    let mut exec = std::ptr::null_mut();
    // SAFETY: driver calls with valid handles; pinned buffers live to the end.
    unsafe {
        ok(sys::cuStreamBeginCapture_v2(s, GLOBAL));
        ok(sys::cuMemcpyDtoDAsync_v2(staging, src_d, N, s));
        ok(sys::cuMemcpyDtoHAsync_v2(dst_h.cast(), staging, N, s));
        ok(sys::cuLaunchHostFunc(
            s,
            Some(count_call),
            std::ptr::null_mut(),
        ));
        ok(sys::cuStreamWriteValue32_v2(s, flag_d, 1, 0));
        let mut st = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let (mut id, mut g, mut deps, mut n) =
            (0u64, std::ptr::null_mut(), std::ptr::null(), 0usize);
        ok(sys::cuStreamGetCaptureInfo_v2(
            s, &mut st, &mut id, &mut g, &mut deps, &mut n,
        ));
        assert_eq!((st as u32, n), (1, 1));
        common::give_graph_user_object(g, destroyed);
        ok(sys::cuStreamEndCapture(s, &mut graph));
        assert_eq!(graph, g);
        assert_eq!(
            HOST_CALLS.load(Ordering::SeqCst),
            0,
            "captured work does not run"
        );
        // AUTO_FREE_ON_LAUNCH (1) is accepted, as by the driver (no
        // allocation nodes here, so it changes nothing); UPLOAD (2) and the
        // other flags are not implemented and say so.
        let mut auto_free = std::ptr::null_mut();
        ok(sys::cuGraphInstantiateWithFlags(&mut auto_free, graph, 1));
        ok(sys::cuGraphExecDestroy(auto_free));
        let mut upload = std::ptr::null_mut();
        expect(sys::cuGraphInstantiateWithFlags(&mut upload, graph, 2), 801);
        ok(sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0));
        for round in 0..100u32 {
            let fill = (round * 37 + 11) as u8;
            std::ptr::write_bytes(src_h, fill, N);
            ok(sys::cuGraphLaunch(exec, s));
            ok(sys::cuStreamSynchronize(s));
            let out = std::slice::from_raw_parts(dst_h, N);
            assert!(out.iter().all(|&b| b == fill), "round {round}: stale data");
        }
        assert_eq!(HOST_CALLS.load(Ordering::SeqCst), 100);
        ok(sys::cuGraphDestroy(graph));
        assert_eq!(
            DESTROYED.load(Ordering::SeqCst),
            0,
            "the exec still holds the user object"
        );
        ok(sys::cuGraphExecDestroy(exec));
    }
    assert!(
        common::eventually(Duration::from_secs(2), || DESTROYED.load(Ordering::SeqCst)
            == 1),
        "the user object's destructor ran once both graph and exec were gone"
    );
});
