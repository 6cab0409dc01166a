//! Host backend streams: order, doorbells, events, capture, errors.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use streamcomm::Error;
use streamcomm::host::{Doorbell, HostBuffer, HostEvent, HostStream, WaitCmp};

#[test]
fn tasks_run_in_enqueue_order() {
    let stream = HostStream::new().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    for i in 0..1000 {
        let log = log.clone();
        stream.host_fn(move || log.lock().unwrap().push(i)).unwrap();
    }
    stream.synchronize().unwrap();
    assert_eq!(*log.lock().unwrap(), (0..1000).collect::<Vec<_>>());
    assert!(stream.query());
}

#[test]
fn work_progresses_without_synchronize() {
    // The worker thread runs tasks even if nobody waits on the stream.
    let stream = HostStream::new().unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let d = done.clone();
    stream
        .host_fn(move || {
            d.store(1, Ordering::SeqCst);
        })
        .unwrap();
    let t0 = Instant::now();
    while done.load(Ordering::SeqCst) == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "worker never ran the task"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn doorbells_order_two_streams() {
    let (a, b) = (HostStream::new().unwrap(), HostStream::new().unwrap());
    let bell = Doorbell::new();
    // Written by host work on one stream, read by another: shared explicitly.
    let buf = Arc::new(Mutex::new(HostBuffer::<u64>::zeroed(1)));
    // b waits for a's write before reading the buffer a fills after a delay.
    let bb = buf.clone();
    let seen = Arc::new(Mutex::new(0u64));
    let s2 = seen.clone();
    b.wait_value32(&bell, 5, WaitCmp::Geq).unwrap();
    b.host_fn(move || *s2.lock().unwrap() = bb.lock().unwrap().to_vec()[0])
        .unwrap();
    let ba = buf.clone();
    a.host_fn(move || {
        std::thread::sleep(Duration::from_millis(20));
        ba.lock().unwrap().with_mut(|s| s[0] = 99);
    })
    .unwrap();
    a.write_value32(&bell, 7).unwrap();
    b.synchronize().unwrap();
    a.synchronize().unwrap();
    assert_eq!(*seen.lock().unwrap(), 99);
    assert_eq!(bell.load(), 7);
}

/// `query` is false while exactly one job is pending, and true once it and
/// every job before it ran.
#[test]
fn query_counts_the_last_pending_job() {
    let s = HostStream::with_timeout(Duration::from_secs(10)).unwrap();
    assert!(s.query(), "a new stream has nothing pending");
    let bell = Doorbell::new();
    s.wait_value32(&bell, 1, WaitCmp::Eq).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert!(!s.query(), "one job is pending");
    bell.store(1);
    s.synchronize().unwrap();
    assert!(s.query());
    s.wait_value32(&bell, 2, WaitCmp::Eq).unwrap();
    s.write_value32(&bell, 3).unwrap();
    bell.store(2);
    s.synchronize().unwrap();
    assert!(s.query(), "both jobs ran");
    assert_eq!(bell.load(), 3);
}

#[test]
fn wait_eq_needs_exact_value_and_poison_fails_the_stream() {
    let s = HostStream::with_timeout(Duration::from_secs(10)).unwrap();
    let bell = Doorbell::new();
    s.wait_value32(&bell, 3, WaitCmp::Eq).unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    s.host_fn(move || {
        r.fetch_add(1, Ordering::SeqCst);
    })
    .unwrap();
    bell.store(4); // not equal: still waiting
    std::thread::sleep(Duration::from_millis(20));
    assert!(!s.query());
    bell.store(Doorbell::POISON);
    let e = s.synchronize().unwrap_err();
    assert!(matches!(e, Error::Aborted(_)), "{e}");
    // Sticky: the task after the failed wait was skipped, and later ones too.
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    s.host_fn(|| {}).unwrap();
    assert!(s.synchronize().is_err());
}

#[test]
fn wait_times_out_with_a_named_error() {
    let s = HostStream::with_timeout(Duration::from_millis(50)).unwrap();
    let bell = Doorbell::new();
    s.wait_value32(&bell, 1, WaitCmp::Eq).unwrap();
    let t0 = Instant::now();
    let e = s.synchronize().unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(5));
    match e {
        Error::Timeout { op, waited_ms, .. } => {
            assert_eq!(op, "wait_value32");
            assert!(waited_ms >= 50);
        }
        other => panic!("expected timeout, got {other}"),
    }
}

#[test]
fn events_order_streams_and_report_completion() {
    let (a, b) = (HostStream::new().unwrap(), HostStream::new().unwrap());
    let buf = Arc::new(Mutex::new(HostBuffer::<i32>::zeroed(8)));
    let ba = buf.clone();
    a.host_fn(move || {
        std::thread::sleep(Duration::from_millis(30));
        ba.lock().unwrap().with_mut(|s| s.fill(-3));
    })
    .unwrap();
    let ev = HostEvent::new();
    ev.record(&a).unwrap();
    b.wait(&ev).unwrap();
    let bb = buf.clone();
    let copy = Arc::new(Mutex::new(Vec::new()));
    let c2 = copy.clone();
    b.host_fn(move || *c2.lock().unwrap() = bb.lock().unwrap().to_vec())
        .unwrap();
    b.synchronize().unwrap();
    assert_eq!(*copy.lock().unwrap(), vec![-3; 8]);
    ev.synchronize().unwrap();
    assert!(ev.query());
}

#[test]
fn capture_and_replay() {
    let s = HostStream::new().unwrap();
    let counter = Arc::new(AtomicUsize::new(0));
    let bell = Doorbell::new();
    s.begin_capture().unwrap();
    assert!(s.begin_capture().is_err());
    let c = counter.clone();
    s.host_fn(move || {
        c.fetch_add(1, Ordering::SeqCst);
    })
    .unwrap();
    s.write_value32(&bell, 1).unwrap();
    s.wait_value32(&bell, 1, WaitCmp::Eq).unwrap();
    s.write_value32(&bell, 0).unwrap();
    let graph = s.end_capture().unwrap();
    assert_eq!(graph.len(), 4);
    // Nothing ran during capture.
    s.synchronize().unwrap();
    assert_eq!(counter.load(Ordering::SeqCst), 0);
    for _ in 0..100 {
        graph.launch(&s).unwrap();
    }
    s.synchronize().unwrap();
    assert_eq!(counter.load(Ordering::SeqCst), 100);
    assert_eq!(bell.load(), 0);
    assert!(s.end_capture().is_err());
    // Event use during capture is refused.
    s.begin_capture().unwrap();
    assert!(matches!(
        HostEvent::new().record(&s),
        Err(Error::InvalidUsage(_))
    ));
    assert!(matches!(graph.launch(&s), Err(Error::InvalidUsage(_))));
    s.end_capture().unwrap();
}

#[test]
fn panicking_and_failing_user_tasks_become_errors() {
    let s = HostStream::new().unwrap();
    s.host_fn(|| panic!("boom")).unwrap();
    match s.synchronize() {
        Err(Error::UserTask(m)) => assert!(m.contains("boom"), "{m}"),
        other => panic!("{other:?}"),
    }
    let s = HostStream::new().unwrap();
    s.try_host_fn(|| Err("bad input".to_string())).unwrap();
    assert!(matches!(s.synchronize(), Err(Error::UserTask(m)) if m == "bad input"));
}
