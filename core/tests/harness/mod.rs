//! Running ranks in tests: as threads of this process or as processes, each
//! with a watchdog, and running one checked collective "case" on a rank.
//!
//! Use from a test file with `mod common; mod harness;`.

#![allow(dead_code)]

pub(crate) mod p2p;
pub(crate) mod scenario;
pub(crate) mod shared;

use std::sync::mpsc;
use std::time::Duration;

use streamcomm::Collective;
use streamcomm::UntypedBuffer;
use streamcomm::bootstrap::UniqueId;
use streamcomm::host::HostStream;
use streamcomm::{Communicator, Config, DataType, ReduceOp};
use streamcomm_run::local::LocalLauncher;

use crate::common::{check, counts, expected, gen_inputs};

/// An all-reduce whose counts differ (rank 0 gives 10 elements, the others
/// 12): the error it ends with, from the enqueue when a peer failed first
/// (it then returns the stored error) or from the stream, and how long
/// that took.
pub(crate) fn mismatched_all_reduce(comm: &Communicator) -> (streamcomm::Error, Duration) {
    let stream = HostStream::new().unwrap();
    let n = if comm.rank() == 0 { 10 } else { 12 };
    let send = streamcomm::host::HostBuffer::<i32>::zeroed(n);
    let mut recv = streamcomm::host::HostBuffer::<i32>::zeroed(n);
    let t0 = std::time::Instant::now();
    let e = comm
        .all_reduce(&send, &mut recv, ReduceOp::Sum, &stream)
        .and_then(|()| stream.synchronize())
        .expect_err("an all-reduce of differing counts must fail");
    (e, t0.elapsed())
}

/// A small ring so that every multi-chunk path runs: 4 slots of 2 KiB.
pub(crate) fn small_config() -> Config {
    let mut c = Config::default();
    c.buffsize = 8 << 10;
    c.nsteps = 4;
    c.timeout = Duration::from_secs(60);
    c
}

/// Runs `f` on `n` ranks, each a thread with its own communicator; fails the
/// test (instead of hanging) if they do not all finish within `limit`.
pub(crate) fn run_threads<R: Send + 'static>(
    n: usize,
    config: Config,
    limit: Duration,
    f: impl Fn(Communicator) -> R + Send + Sync + Clone + 'static,
) -> Vec<R> {
    run_threads_configured(vec![config; n], limit, f)
}

/// [`run_threads`] on one rank a configuration, rank `r` with `configs[r]`.
pub(crate) fn run_threads_configured<R: Send + 'static>(
    configs: Vec<Config>,
    limit: Duration,
    f: impl Fn(Communicator) -> R + Send + Sync + Clone + 'static,
) -> Vec<R> {
    let n = configs.len();
    let id = UniqueId::new().expect("unique id");
    let (tx, rx) = mpsc::channel();
    for (rank, config) in configs.into_iter().enumerate() {
        let (id, f, tx) = (id, f.clone(), tx.clone());
        std::thread::Builder::new()
            .name(format!("rank-{rank}"))
            .spawn(move || {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let comm = Communicator::builder()
                        .unique_id(&id)
                        .rank(rank)
                        .size(n)
                        .config(config)
                        .build()
                        .unwrap_or_else(|e| panic!("rank {rank}: init failed: {e}"));
                    f(comm)
                }));
                let _ = tx.send((rank, r));
            })
            .expect("spawn rank thread");
    }
    drop(tx);
    let deadline = std::time::Instant::now() + limit;
    let mut results: Vec<Option<R>> = (0..n).map(|_| None).collect();
    for _ in 0..n {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok((rank, Ok(r))) => results[rank] = Some(r),
            Ok((rank, Err(p))) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                panic!("rank {rank} failed: {msg}");
            }
            Err(_) => panic!("watchdog: ranks did not finish within {limit:?} (hang?)"),
        }
    }
    results.into_iter().map(|r| r.unwrap()).collect()
}

/// Runs `n` copies of this test binary's ignored test `child` (its full
/// libtest path: `streamcomm_testkit::test_path(module_path!(), "child")`)
/// as the ranks of one job, started the way `streamcomm-run` starts them,
/// with `env` set in each; fails the test if any rank fails, if they take
/// longer than `limit`, or if any child did not run its body to the end
/// (`what` names the job in the failure).
pub(crate) fn launch_children(
    n: usize,
    child: &str,
    env: &[(&str, String)],
    limit: Duration,
    what: &str,
) {
    let exe = std::env::current_exe().expect("this test binary");
    let proof = streamcomm_testkit::ChildProof::new(what);
    let (proof_key, proof_dir) = proof.env();
    let mut launcher = LocalLauncher::new(n, exe)
        .args([
            "--exact",
            child,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(proof_key, proof_dir);
    for (k, v) in env {
        launcher = launcher.env(*k, v);
    }
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(launcher.run());
    });
    let outcome = rx
        .recv_timeout(limit)
        .unwrap_or_else(|_| panic!("watchdog: {what} did not finish in {limit:?}"))
        .expect("launch");
    assert_eq!(
        outcome.exit_code(),
        0,
        "{what} on {n} ranks failed: {outcome:?}"
    );
    proof.assert_ran(n);
}

/// One collective call to run and check.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Case {
    pub collective: Collective,
    pub dtype: DataType,
    pub op: ReduceOp,
    pub count: usize,
    pub in_place: bool,
    pub seed: u64,
}

/// Where send and recv lie inside an in-place buffer (NCCL's layout), and its length.
fn in_place_layout(c: &Case, rank: usize, n: usize) -> (usize, usize, usize) {
    let (s, r) = counts(c.collective, rank, n, c.count);
    match c.collective {
        Collective::AllGather => (rank * c.count, 0, n * c.count),
        Collective::ReduceScatter => (0, rank * c.count, n * c.count),
        _ => (0, 0, s.max(r)),
    }
}

const POISON: u8 = 0xA5;

/// Runs `case` on this rank (every rank must call it with the same case) and
/// checks every element of the output against the f64 reference.
pub(crate) fn run_case(comm: &Communicator, stream: &HostStream, c: &Case) -> Result<(), String> {
    let (rank, n) = (comm.rank(), comm.size());
    let inputs = gen_inputs(c.collective, c.dtype, c.op, n, c.count, c.seed);
    let want = expected(c.collective, c.dtype, c.op, n, c.count, &inputs);
    let esize = c.dtype.size();
    let ctx = |e: streamcomm::Error| format!("rank {rank} {c:?}: {e}");
    if c.in_place {
        let (send_off, recv_off, len) = in_place_layout(c, rank, n);
        let mut bytes = vec![POISON; len * esize];
        let input = &inputs[rank];
        bytes[send_off * esize..send_off * esize + input.len()].copy_from_slice(input);
        let mut buf = UntypedBuffer::zeroed(c.dtype, len);
        buf.copy_from_bytes(&bytes).map_err(ctx)?;
        match c.collective {
            Collective::AllReduce => comm.all_reduce_in_place(&mut buf, c.op, stream),
            Collective::AllGather => comm.all_gather_in_place(&mut buf, stream),
            Collective::ReduceScatter => comm.reduce_scatter_in_place(&mut buf, c.op, stream),
            Collective::Broadcast { root } => comm.broadcast_in_place(&mut buf, root, stream),
            Collective::Reduce { root } => comm.reduce_in_place(&mut buf, c.op, root, stream),
            other => panic!("no in-place form of {other:?}"),
        }
        .map_err(ctx)?;
        stream.synchronize().map_err(ctx)?;
        if let Some(want) = &want[rank] {
            let got = buf.to_bytes();
            let region = &got[recv_off * esize..(recv_off + want.len()) * esize];
            check(c.dtype, c.op, region, want).map_err(|m| format!("rank {rank} {c:?}: {m}"))?;
        }
        return Ok(());
    }
    let send = UntypedBuffer::zeroed(c.dtype, inputs[rank].len() / esize);
    send.copy_from_bytes(&inputs[rank]).map_err(ctx)?;
    let rlen = counts(c.collective, rank, n, c.count).1;
    let mut recv = UntypedBuffer::zeroed(c.dtype, rlen);
    recv.copy_from_bytes(&vec![POISON; rlen * esize])
        .map_err(ctx)?;
    match c.collective {
        Collective::AllReduce => comm.all_reduce(&send, &mut recv, c.op, stream),
        Collective::AllGather => comm.all_gather(&send, &mut recv, stream),
        Collective::ReduceScatter => comm.reduce_scatter(&send, &mut recv, c.op, stream),
        Collective::Broadcast { root } => comm.broadcast(&send, &mut recv, root, stream),
        Collective::Reduce { root } => comm.reduce(&send, &mut recv, c.op, root, stream),
        Collective::AllToAll => comm.all_to_all(&send, &mut recv, stream),
        other => panic!("run_case does not cover {other:?}"),
    }
    .map_err(ctx)?;
    stream.synchronize().map_err(ctx)?;
    match &want[rank] {
        Some(want) => check(c.dtype, c.op, &recv.to_bytes(), want)
            .map_err(|m| format!("rank {rank} {c:?}: {m}")),
        None => Ok(()),
    }
}

/// The collectives `run_case` covers, with roots spread over the ranks.
pub(crate) fn collectives(n: usize) -> Vec<Collective> {
    vec![
        Collective::AllReduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::Broadcast { root: 0 },
        Collective::Broadcast { root: n - 1 },
        Collective::Reduce { root: n / 2 },
        Collective::AllToAll,
    ]
}

/// True for the collectives that take an operator.
pub(crate) fn reduces(c: Collective) -> bool {
    matches!(
        c,
        Collective::AllReduce | Collective::ReduceScatter | Collective::Reduce { .. }
    )
}

/// The representative slice of the matrix used over every transport:
/// every collective × {f32, bf16, i32, u8} × counts {0, 1, slot + 1 element,
/// 3 × BUFFSIZE + 13} × in/out of place, a reducing collective taking the
/// `ops` in turn, one per dtype (so each op runs through every reducing
/// collective; the threads matrix runs every op with every dtype).
pub(crate) fn run_slice(comm: &Communicator, stream: &HostStream, seed: u64, ops: &[ReduceOp]) {
    let slot = comm.config().slot_bytes();
    let buffsize = comm.config().buffsize;
    assert!(
        ops.len() <= SLICE_DTYPES.len(),
        "{} ops in turn over 4 dtypes",
        ops.len()
    );
    for (ci, collective) in collectives(comm.size()).into_iter().enumerate() {
        for (di, dtype) in SLICE_DTYPES.into_iter().enumerate() {
            let op = slice_op(collective, ops, ci + di);
            for count in [0, 1, slot / dtype.size() + 1, 3 * buffsize + 13] {
                for in_place in [false, true] {
                    if in_place && collective == Collective::AllToAll {
                        continue;
                    }
                    run_slice_case(comm, stream, seed, collective, dtype, op, count, in_place);
                }
            }
        }
    }
}

/// A thin slice for many ranks on few cores, where the full slice would
/// take most of a minute: every collective once with one element and once
/// with 3 × BUFFSIZE + 13 elements (several chunks, in place where the
/// collective allows it), the dtypes and `ops` in turn.
pub(crate) fn run_thin_slice(
    comm: &Communicator,
    stream: &HostStream,
    seed: u64,
    ops: &[ReduceOp],
) {
    let buffsize = comm.config().buffsize;
    for (ci, collective) in collectives(comm.size()).into_iter().enumerate() {
        let dtype = SLICE_DTYPES[ci % SLICE_DTYPES.len()];
        let op = slice_op(collective, ops, ci);
        run_slice_case(comm, stream, seed, collective, dtype, op, 1, false);
        let in_place = collective != Collective::AllToAll;
        run_slice_case(
            comm,
            stream,
            seed,
            collective,
            dtype,
            op,
            3 * buffsize + 13,
            in_place,
        );
    }
}

const SLICE_DTYPES: [DataType; 4] = [DataType::F32, DataType::Bf16, DataType::I32, DataType::U8];

/// The operator a slice's case `k` uses: the `ops` in turn for a reducing
/// collective, `Sum` (ignored) for the others.
fn slice_op(collective: Collective, ops: &[ReduceOp], k: usize) -> ReduceOp {
    if reduces(collective) {
        ops[k % ops.len()]
    } else {
        ReduceOp::Sum
    }
}

/// Runs one case of a slice, its seed derived from the slice's; panics
/// with the case on failure.
#[allow(clippy::too_many_arguments)]
fn run_slice_case(
    comm: &Communicator,
    stream: &HostStream,
    seed: u64,
    collective: Collective,
    dtype: DataType,
    op: ReduceOp,
    count: usize,
    in_place: bool,
) {
    let case = Case {
        collective,
        dtype,
        op,
        count,
        in_place,
        seed: seed ^ count as u64 ^ ((dtype as u64) << 40) ^ ((op as u64) << 48),
    };
    run_case(comm, stream, &case).unwrap_or_else(|e| panic!("{e}"));
}
