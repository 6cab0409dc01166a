//! Injected faults (`fault-injection` feature, `STREAMCOMM_FAULTS` rules set
//! through `Config::faults`): 4 ranks as threads run checked all-reduces
//! while one connection delays, drops, duplicates or fails a chosen slot,
//! over shared memory and over tcp on loopback.
//!
//! - a delayed slot: every result is right, the receiver just gets it later;
//! - a dropped slot with nothing after it: the receiver fails with a timeout
//!   naming the operation, the sender and the transport, and its peers are
//!   released with an error naming the sender well before their own
//!   (longer) timeout;
//! - a dropped slot followed by others: reported as lost at once;
//! - a duplicated slot: an error, never silently shifted data;
//! - an injected transport error: every rank fails naming the same culprit.
//!
//! Run with `cargo test -p streamcomm --features fault-injection --test faults`.

#![cfg(feature = "fault-injection")]

use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use streamcomm::Collective;
use streamcomm::bootstrap::UniqueId;
use streamcomm::host::{HostBuffer, HostStream};
use streamcomm::{Communicator, Config, DataType, Error, ReduceOp, Transport};
use streamcomm_algo::plan::{PlanParams, build};

use super::expect::{self, shm_and_tcp};

const N: usize = 4;
/// 4 slots of 4 KiB: a chunk of the all-reduce below spans 3 slots.
const BUFFSIZE: usize = 16 << 10;
const NSTEPS: usize = 4;
const COUNT: usize = N * 3 * (BUFFSIZE / NSTEPS / 4);
const LONG: Duration = Duration::from_secs(60);

/// `config` with the fault rules `faults` (`STREAMCOMM_FAULTS`'s syntax).
fn with_faults(config: Config, faults: &str) -> Config {
    config
        .with_vars(|name| (name == "STREAMCOMM_FAULTS").then(|| faults.to_string()))
        .unwrap()
}

pub(crate) fn config(transport: Transport, timeout: Duration, faults: &str) -> Config {
    {
        let mut c = Config::default();
        c.buffsize = BUFFSIZE;
        c.nsteps = NSTEPS;
        c.timeout = timeout;
        c.transport = transport.into();
        with_faults(c, faults)
    }
}

/// Slots rank `from` sends to rank `to` in one all-reduce of `COUNT` floats.
fn slots_per_all_reduce(from: usize, to: usize) -> u64 {
    let plan = build(
        Collective::AllReduce,
        DataType::F32,
        ReduceOp::Sum,
        COUNT,
        &PlanParams {
            rank: from,
            nranks: N,
            slot_bytes: BUFFSIZE / NSTEPS,
            nsteps: NSTEPS,
        },
    )
    .unwrap();
    plan.steps.iter().filter(|s| s.send_to == Some(to)).count() as u64
}

/// Runs `f` on one rank (thread) per config, rank r with `configs[r]`; fails the test
/// if they do not all return within a minute.
pub(crate) fn run_ranks<R: Send + 'static>(
    configs: Vec<Config>,
    f: impl Fn(Communicator) -> R + Send + Sync + Clone + 'static,
) -> Vec<R> {
    // One scenario at a time: their timings must not depend on the others.
    static SERIAL: Mutex<()> = Mutex::new(());
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let id = UniqueId::new().unwrap();
    let (tx, rx) = mpsc::channel();
    // Communicators close together once every rank has its outcome: over
    // tcp, a rank closing a socket with unread data resets it, and a reset
    // can overtake the abort notice the peer has yet to read.
    let n = configs.len();
    let all_done = Arc::new(std::sync::Barrier::new(n));
    for (rank, config) in configs.into_iter().enumerate() {
        let (id, f, tx, all_done) = (id, f.clone(), tx.clone(), all_done.clone());
        std::thread::spawn(move || {
            let comm = Communicator::builder()
                .unique_id(&id)
                .rank(rank)
                .size(n)
                .config(config)
                .build()
                .unwrap_or_else(|e| panic!("rank {rank}: init failed: {e}"));
            let c = comm.clone();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || f(c)));
            let _ = tx.send((rank, r));
            all_done.wait();
            drop(comm);
        });
    }
    drop(tx);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut out: Vec<Option<R>> = (0..n).map(|_| None).collect();
    for _ in 0..n {
        let left = deadline.saturating_duration_since(Instant::now());
        let (rank, r) = rx
            .recv_timeout(left)
            .expect("watchdog: a rank hangs or failed to start");
        out[rank] = Some(r.unwrap_or_else(|_| panic!("rank {rank} panicked")));
    }
    out.into_iter().map(Option::unwrap).collect()
}

/// One all-reduce (sum) of fresh random floats; every element of the result
/// is checked against an f64 reference. `Err` only for a communicator
/// error: wrong data panics.
fn checked_all_reduce(comm: &Communicator, stream: &HostStream, seed: u64) -> Result<(), Error> {
    let inputs: Vec<Vec<f32>> = (0..N)
        .map(|r| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ (r as u64) << 32);
            (0..COUNT).map(|_| rng.gen_range(-8i32..8) as f32).collect()
        })
        .collect();
    let send = HostBuffer::from_slice(&inputs[comm.rank()]);
    let mut recv = HostBuffer::from_slice(&vec![f32::NAN; COUNT]);
    comm.all_reduce(&send, &mut recv, ReduceOp::Sum, stream)?;
    stream.synchronize()?;
    for (i, got) in recv.to_vec().into_iter().enumerate() {
        let want: f64 = inputs.iter().map(|v| f64::from(v[i])).sum();
        assert_eq!(
            f64::from(got),
            want,
            "rank {} element {i}: silent corruption",
            comm.rank()
        );
    }
    Ok(())
}

/// What one rank saw: the first error (if any) and when, after the faulty step began.
#[derive(Debug)]
struct Outcome {
    error: Option<Error>,
    after: Duration,
}

/// `ops` checked all-reduces, then a barrier, stopping at the first error
/// (which may come during any of them: a rank that fails releases its
/// peers wherever they are). With `gate`, a rank whose all-reduces all
/// succeeded waits (at most 10 s) for the gate to open before the barrier,
/// and a rank that failed opens it.
fn scenario(comm: Communicator, ops: usize, seed: u64, gate: Option<Arc<Gate>>) -> Outcome {
    let stream = HostStream::new().unwrap();
    let t0 = Instant::now();
    let mut r = Ok(());
    for i in 0..ops {
        r = r.and_then(|()| checked_all_reduce(&comm, &stream, seed + i as u64));
    }
    if let Some(g) = gate {
        match &r {
            Ok(()) => g.wait(Duration::from_secs(10)),
            Err(_) => g.open(),
        }
    }
    let r = r.and_then(|()| {
        comm.barrier(&stream)?;
        stream.synchronize()
    });
    Outcome {
        error: r.err(),
        after: t0.elapsed(),
    }
}

/// A one-shot signal between rank threads.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
}

impl Gate {
    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }

    fn wait(&self, limit: Duration) {
        let g = self.open.lock().unwrap();
        let _ = self.cv.wait_timeout_while(g, limit, |open| !*open).unwrap();
    }
}

/// True when `e`, seen by `rank`, blames `culprit`.
fn blames(e: &Error, rank: usize, culprit: usize) -> bool {
    match e {
        Error::RemoteFailed { peer, .. } | Error::Transport { peer, .. } => *peer == culprit,
        Error::Mismatch(m) => m.culprit == culprit,
        Error::Aborted(m) => rank == culprit && m.contains("this rank"),
        _ => false,
    }
}

/// Panics unless every rank failed within `within`, each blaming
/// `culprit` but the rank `timed_out` (the one whose wait ended).
fn every_rank_failed_blaming(
    out: &[Outcome],
    culprit: usize,
    timed_out: Option<usize>,
    within: Duration,
) {
    for (rank, o) in out.iter().enumerate() {
        let e = o
            .error
            .as_ref()
            .unwrap_or_else(|| panic!("rank {rank} did not fail\n{out:#?}"));
        if timed_out != Some(rank) {
            assert!(blames(e, rank, culprit), "rank {rank}: {e}\n{out:#?}");
        }
        assert!(o.after < within, "rank {rank}: {o:?}\n{out:#?}");
    }
}

fn delayed(transport: Transport) {
    let k = slots_per_all_reduce(0, 1);
    let mut configs = vec![config(transport, LONG, ""); N];
    configs[0] = config(
        transport,
        LONG,
        &format!("send:peer=1:nth={}:delay=300ms", k + 2),
    );
    configs[2] = config(
        transport,
        LONG,
        &format!("recv:peer=1:nth={}:delay=200ms", k + 1),
    );
    let seed = streamcomm_testkit::seed();
    let out = run_ranks(configs, move |comm| scenario(comm, 3, seed, None));
    for (rank, o) in out.iter().enumerate() {
        assert!(o.error.is_none(), "rank {rank}: {o:?}");
    }
    assert!(out[1].after >= Duration::from_millis(300), "{out:?}");
    assert!(out[2].after >= Duration::from_millis(300), "{out:?}");
}

fn dropped_last(transport: Transport) {
    // The last slot rank 0 sends to rank 1 in the second all-reduce: rank 1
    // waits for it alone, with a 1 s timeout; the others wait 20 s.
    let k = slots_per_all_reduce(0, 1);
    let short = Duration::from_secs(1);
    let mut configs = vec![config(transport, LONG, ""); N];
    configs[0] = config(transport, LONG, &format!("send:peer=1:nth={}:drop", 2 * k));
    configs[1] = config(transport, short, "");
    // Ranks that complete the all-reduces hold their barrier until rank 1
    // has failed: a later slot from rank 0 would reveal the loss at once
    // (see `dropped_then_more`), and this test is about the timeout.
    let gate = Arc::new(Gate::default());
    let seed = streamcomm_testkit::seed();
    let out = run_ranks(configs, move |comm| {
        scenario(comm, 2, seed, Some(gate.clone()))
    });
    expect::timeout_waiting_for_rank_0(&out[1].error, "all_reduce #", transport.as_str());
    assert!(out[1].after < short + Duration::from_secs(20), "{out:?}");
    // Rank 1's timeout blames the rank it waited for, and the others are
    // told so: rank 0, whose slot never came.
    every_rank_failed_blaming(&out, 0, Some(1), short + Duration::from_secs(2));
}

fn dropped_then_more(transport: Transport) {
    let mut configs = vec![config(transport, LONG, ""); N];
    configs[0] = config(transport, LONG, "send:peer=1:nth=1:drop");
    let seed = streamcomm_testkit::seed();
    let out = run_ranks(configs, move |comm| {
        // The very first slot is lost; its successors arrive right after.
        let stream = HostStream::new().unwrap();
        let t0 = Instant::now();
        let r = checked_all_reduce(&comm, &stream, seed);
        Outcome {
            error: r.err(),
            after: t0.elapsed(),
        }
    });
    expect::transport_error_from(&out[1].error, 0, "lost", "rank 1");
    every_rank_failed_blaming(&out, 0, None, Duration::from_secs(20));
}

fn duplicated(transport: Transport) {
    let k = slots_per_all_reduce(0, 1);
    let mut configs = vec![config(transport, LONG, ""); N];
    configs[0] = config(transport, LONG, &format!("send:peer=1:nth={}:dup", k + 2));
    let seed = streamcomm_testkit::seed();
    let out = run_ranks(configs, move |comm| scenario(comm, 3, seed, None));
    expect::transport_error_from(&out[1].error, 0, "twice", "rank 1");
    every_rank_failed_blaming(&out, 0, None, Duration::from_secs(20));
}

fn injected_error(transport: Transport) {
    // Rank 0's third slot to rank 1 in the second all-reduce fails; rank 1,
    // the other end of that connection, is the culprit everyone names.
    let rule = format!("send:peer=1:nth={}:error", slots_per_all_reduce(0, 1) + 3);
    let mut configs = vec![config(transport, LONG, ""); N];
    configs[0] = config(transport, LONG, &rule);
    let seed = streamcomm_testkit::seed();
    let out = run_ranks(configs, move |comm| scenario(comm, 2, seed, None));
    let says = format!("injected fault `{rule}`");
    expect::transport_error_from(&out[0].error, 1, &says, "rank 0");
    every_rank_failed_blaming(&out, 1, None, Duration::from_secs(20));
}

/// Regression (found by the soak test): over tcp, a zero-length frame (a
/// barrier message) whose header arrived while the inbound ring was full has
/// no byte left to make its socket readable; the progress engine must still
/// complete it once the stream frees a slot. Rank 1 consumes the first
/// barrier message late, so the second arrives while its one-slot ring is full.
#[test]
fn zero_length_frame_waiting_for_a_slot_is_delivered_tcp() {
    let base = {
        let mut c = config(Transport::Tcp, LONG, "");
        c.nsteps = 1;
        c.nchannels = 1;
        c.timeout = Duration::from_secs(5);
        c
    };
    let slow = with_faults(base.clone(), "recv:peer=0:nth=1:delay=300ms");
    let out = run_ranks(vec![base, slow], |comm| {
        (0..5).try_for_each(|_| comm.barrier_host())
    });
    for (rank, r) in out.iter().enumerate() {
        assert!(r.is_ok(), "rank {rank}: {r:?}");
    }
}

shm_and_tcp! {
    delayed_slot_shm, delayed_slot_tcp => delayed();
    dropped_last_slot_times_out_shm, dropped_last_slot_times_out_tcp => dropped_last();
    dropped_slot_then_more_is_lost_shm, dropped_slot_then_more_is_lost_tcp => dropped_then_more();
    duplicated_slot_is_an_error_shm, duplicated_slot_is_an_error_tcp => duplicated();
    injected_error_names_the_culprit_shm, injected_error_names_the_culprit_tcp => injected_error();
}
