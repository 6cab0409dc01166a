//! Streams, events, the legacy stream, hardware queues, stream memory
//! operations, host functions and synchronisation on the stand-in.

mod common;

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use common::{alloc, bind, eventually, expect, mapped, ok, stream};
use cudarc::driver::sys;

/// A pinned, device-mapped 32-bit word: (host view, device address).
fn word() -> (&'static AtomicU32, sys::CUdeviceptr) {
    let (h, d) = mapped(64);
    // SAFETY: the pinned allocation is never freed, 4-byte aligned, and the
    // device side accesses it only with 32-bit atomics.
    let w = unsafe { AtomicU32::from_ptr(h.cast()) };
    w.store(0, Ordering::SeqCst);
    (w, d)
}

const GEQ: u32 = 0;
const EQ: u32 = 1;
const AND: u32 = 2;
const NOR: u32 = 3;

standin_test!(work_runs_in_stream_order_not_at_call_time, 20, &[], {
    bind();
    let s = stream(true);
    let (gate, gate_d) = word();
    let (flag, flag_d) = word();
    // SAFETY: driver calls with valid handles and device-mapped words.
    unsafe {
        let (mut ev, mut timed0, mut timed1, mut never) = (
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        ok(sys::cuEventCreate(&mut ev, 2));
        ok(sys::cuEventCreate(&mut timed0, 0));
        ok(sys::cuEventCreate(&mut timed1, 0));
        ok(sys::cuEventCreate(&mut never, 0));
        expect(sys::cuEventCreate(&mut never, 4), 1);
        ok(sys::cuEventQuery(never));
        ok(sys::cuEventRecord(timed0, s));
        ok(sys::cuStreamWaitValue32_v2(s, gate_d, 1, EQ));
        ok(sys::cuStreamWriteValue32_v2(s, flag_d, 5, 0));
        ok(sys::cuEventRecord(ev, s));
        ok(sys::cuEventRecord(timed1, s));
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            flag.load(Ordering::SeqCst),
            0,
            "work ran before the stream reached it"
        );
        expect(sys::cuStreamQuery(s), 600);
        expect(sys::cuEventQuery(ev), 600);
        let mut ms = 0f32;
        expect(sys::cuEventElapsedTime(&mut ms, timed0, timed1), 600);
        expect(sys::cuEventElapsedTime(&mut ms, timed0, never), 400);
        // Another stream waiting on the event waits for the gate too.
        let t = stream(true);
        let (after, after_d) = word();
        ok(sys::cuStreamWaitEvent(t, ev, 0));
        ok(sys::cuStreamWriteValue32_v2(t, after_d, 9, 0));
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            after.load(Ordering::SeqCst),
            0,
            "cuStreamWaitEvent did not order"
        );
        gate.store(1, Ordering::SeqCst);
        ok(sys::cuStreamSynchronize(s));
        ok(sys::cuStreamSynchronize(t));
        assert_eq!(
            (flag.load(Ordering::SeqCst), after.load(Ordering::SeqCst)),
            (5, 9)
        );
        ok(sys::cuEventQuery(ev));
        ok(sys::cuEventElapsedTime(&mut ms, timed0, timed1));
        assert!(ms >= 40.0, "elapsed {ms} ms spans the 50 ms gate");
        expect(sys::cuEventElapsedTime(&mut ms, ev, timed1), 400);
    }
});

standin_test!(legacy_stream_orders_with_blocking_streams_only, 20, &[], {
    bind();
    let blocking = stream(false);
    let nonblocking = stream(true);
    let (gate, gate_d) = word();
    let (legacy_done, legacy_d) = word();
    let (nb_done, nb_d) = word();
    // SAFETY: driver calls with valid handles and device-mapped words.
    unsafe {
        ok(sys::cuStreamWaitValue32_v2(blocking, gate_d, 1, GEQ));
        // Legacy-stream work waits for the blocking stream ...
        ok(sys::cuStreamWriteValue32_v2(
            std::ptr::null_mut(),
            legacy_d,
            1,
            0,
        ));
        // ... and later blocking-stream work waits for the legacy stream.
        let other_blocking = stream(false);
        let (ob, ob_d) = word();
        ok(sys::cuStreamWriteValue32_v2(other_blocking, ob_d, 1, 0));
        // A NON_BLOCKING stream does not.
        ok(sys::cuStreamWriteValue32_v2(nonblocking, nb_d, 1, 0));
        ok(sys::cuStreamSynchronize(nonblocking));
        assert_eq!(nb_done.load(Ordering::SeqCst), 1);
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(
            legacy_done.load(Ordering::SeqCst),
            0,
            "legacy stream overtook a blocking stream"
        );
        assert_eq!(
            ob.load(Ordering::SeqCst),
            0,
            "a blocking stream overtook the legacy stream"
        );
        gate.store(1, Ordering::SeqCst);
        ok(sys::cuCtxSynchronize());
        assert_eq!(
            (
                legacy_done.load(Ordering::SeqCst),
                ob.load(Ordering::SeqCst)
            ),
            (1, 1)
        );
        // Failure 4 of issue 27: cuMemsetD8 is ordered with the legacy stream
        // only, so it completes while a NON_BLOCKING stream is still parked.
        gate.store(0, Ordering::SeqCst);
        let d = alloc(256);
        ok(sys::cuStreamWaitValue32_v2(nonblocking, gate_d, 1, GEQ));
        ok(sys::cuMemsetD8_v2(d, 0x11, 256));
        ok(sys::cuStreamSynchronize(std::ptr::null_mut()));
        assert_eq!(common::read(d, 4), [0x11; 4]);
        expect(sys::cuStreamQuery(nonblocking), 600);
        gate.store(1, Ordering::SeqCst);
        ok(sys::cuStreamSynchronize(nonblocking));
    }
});

/// Stream A waits for a word that stream B writes. `true` if B's write landed.
fn wait_then_signal_across_streams() -> bool {
    let a = stream(true);
    let b = stream(true);
    let (w, wd) = word();
    // SAFETY: valid streams and a device-mapped word.
    unsafe {
        ok(sys::cuStreamWaitValue32_v2(a, wd, 1, GEQ));
        ok(sys::cuStreamWriteValue32_v2(b, wd, 1, 0));
    }
    let landed = eventually(Duration::from_millis(300), || w.load(Ordering::SeqCst) == 1);
    // Release A from the host either way, so the process can finish.
    w.store(1, Ordering::SeqCst);
    // SAFETY: valid streams.
    unsafe {
        ok(sys::cuStreamSynchronize(a));
        ok(sys::cuStreamSynchronize(b));
    }
    landed
}

standin_test!(
    streams_sharing_one_hardware_queue_deadlock_on_a_memop_wait,
    20,
    &[("CUDA_DEVICE_MAX_CONNECTIONS", "1")],
    {
        bind();
        assert!(
            !wait_then_signal_across_streams(),
            "with one hardware queue, B's signal must sit behind A's wait (failure 3 of issue 27)"
        );
    }
);

standin_test!(
    streams_on_separate_hardware_queues_do_not_block_each_other,
    20,
    &[],
    {
        bind();
        assert!(
            wait_then_signal_across_streams(),
            "with 8 queues, A and B are independent"
        );
    }
);

standin_test!(memop_conditions_flags_and_targets, 20, &[], {
    bind();
    let s = stream(true);
    let (w, wd) = word();
    let run = |value: u32, cond: u32| -> bool {
        // SAFETY: valid stream and device-mapped word.
        unsafe {
            ok(sys::cuStreamWaitValue32_v2(s, wd, value, cond));
            eventually(Duration::from_millis(30), || {
                sys::cuStreamQuery(s) == sys::cudaError_enum::CUDA_SUCCESS
            })
        }
    };
    let release = |v: u32| {
        w.store(v, Ordering::SeqCst);
        // SAFETY: valid stream.
        ok(unsafe { sys::cuStreamSynchronize(s) });
    };
    w.store(5, Ordering::SeqCst);
    assert!(
        run(0xFFFF_FFF0, GEQ),
        "GEQ is cyclic: 5 - 0xfffffff0 >= 0 as int32"
    );
    w.store(0xFFFF_FFF0, Ordering::SeqCst);
    assert!(!run(0x10, GEQ), "0xfffffff0 - 0x10 < 0 as int32");
    release(0x20);
    assert!(!run(7, EQ));
    release(7);
    w.store(0b0100, Ordering::SeqCst);
    assert!(!run(0b0011, AND));
    release(0b0010);
    w.store(0xFFFF_FFFF, Ordering::SeqCst);
    assert!(!run(0, NOR), "~(0xffffffff | 0) == 0");
    release(0xFFFF_FFFE);
    // SAFETY: driver calls with valid stream; addresses checked by the driver.
    unsafe {
        expect(sys::cuStreamWaitValue32_v2(s, wd, 1, 1 << 30), 1);
        expect(sys::cuStreamWaitValue32_v2(s, wd, 1, 4), 1);
        expect(sys::cuStreamWriteValue32_v2(s, wd, 1, 1), 1);
        expect(sys::cuStreamWriteValue32_v2(s, wd + 2, 1, 0), 1);
        let mut pageable = 0u32;
        expect(
            sys::cuStreamWriteValue32_v2(s, &mut pageable as *mut u32 as u64, 1, 0),
            1,
        );
        let (h, d) = mapped(64);
        ok(sys::cuStreamWriteValue64_v2(s, d + 8, u64::MAX - 1, 0));
        ok(sys::cuStreamWaitValue64_v2(s, d + 8, u64::MAX - 3, GEQ));
        ok(sys::cuStreamSynchronize(s));
        assert_eq!(*(h.add(8) as *const u64), u64::MAX - 1);
        expect(sys::cuStreamWaitValue64_v2(s, d + 4, 1, GEQ), 1);
    }
});

static RUNNING: AtomicUsize = AtomicUsize::new(0);
static MAX_RUNNING: AtomicUsize = AtomicUsize::new(0);
static QUERY_FROM_HOST_FN: AtomicU32 = AtomicU32::new(0);

unsafe extern "C" fn host_fn(data: *mut std::ffi::c_void) {
    let now = RUNNING.fetch_add(1, Ordering::SeqCst) + 1;
    MAX_RUNNING.fetch_max(now, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(20));
    // SAFETY: `data` is the stream handle passed at launch.
    let r = unsafe { sys::cuStreamQuery(data.cast()) };
    QUERY_FROM_HOST_FN.store(r as u32, Ordering::SeqCst);
    RUNNING.fetch_sub(1, Ordering::SeqCst);
}

standin_test!(
    host_functions_are_ordered_serialised_and_may_not_call_cuda,
    20,
    &[],
    {
        bind();
        let a = stream(true);
        let b = stream(true);
        let (gate, gate_d) = word();
        let (after, after_d) = word();
        // SAFETY: valid streams; `host_fn` matches CUhostFn.
        unsafe {
            ok(sys::cuStreamWaitValue32_v2(a, gate_d, 1, GEQ));
            ok(sys::cuLaunchHostFunc(a, Some(host_fn), a.cast()));
            ok(sys::cuStreamWriteValue32_v2(a, after_d, 1, 0));
            ok(sys::cuLaunchHostFunc(b, Some(host_fn), b.cast()));
            std::thread::sleep(Duration::from_millis(10));
            assert!(
                MAX_RUNNING.load(Ordering::SeqCst) > 0,
                "stream b's host function ran while a was gated"
            );
            gate.store(1, Ordering::SeqCst);
            ok(sys::cuStreamSynchronize(a));
            ok(sys::cuStreamSynchronize(b));
        }
        assert_eq!(after.load(Ordering::SeqCst), 1);
        assert_eq!(
            MAX_RUNNING.load(Ordering::SeqCst),
            1,
            "host functions of two streams overlapped"
        );
        assert_eq!(
            QUERY_FROM_HOST_FN.load(Ordering::SeqCst),
            800,
            "CUDA from a host function is NOT_PERMITTED"
        );
    }
);

standin_test!(synchronisation_waits_for_a_parked_memop, 20, &[], {
    let ctx = bind();
    let s = stream(true);
    let (gate, gate_d) = word();
    let d = alloc(64);
    // SAFETY: valid stream and word.
    ok(unsafe { sys::cuStreamWaitValue32_v2(s, gate_d, 1, GEQ) });
    let ctx_addr = ctx as usize;
    let sync = std::thread::spawn(move || {
        // SAFETY: the retained primary context; cuMemFree of a live allocation.
        unsafe {
            ok(sys::cuCtxSetCurrent(ctx_addr as sys::CUcontext));
            ok(sys::cuCtxSynchronize());
            ok(sys::cuMemFree_v2(d));
        }
    });
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !sync.is_finished(),
        "cuCtxSynchronize returned while a stream was parked on a memop"
    );
    gate.store(1, Ordering::SeqCst);
    sync.join().unwrap();
});
