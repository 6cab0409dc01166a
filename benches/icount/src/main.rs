//! `streamcomm-icount`: small host calls to count instructions of under
//! callgrind (`benches/scripts/icount.sh`).
//!
//! Two ranks run as threads of this process over shared memory. The calls
//! measured are made through the `streamcomm_icount_*` functions below:
//! unmangled, never inlined, so that `valgrind --tool=callgrind
//! --toggle-collect=streamcomm_icount_<op>` counts exactly the instructions
//! executed inside them (callgrind counts instructions, not time: the same
//! binary and inputs give the same count on a busy machine).
//!
//! The ranks take turns through channels so that the measured call never
//! waits for its peer: a receive finds its message already arrived, a send
//! finds credit, the last rank into a barrier finds the other waiting.
//! Before each send and receive the measuring rank lets 5 ms pass, so that
//! what lands after a call returns (a NIC's completions and returned
//! credit over verbs, the socket over tcp) has landed: each measured call
//! meets the same state, and the count does not move with the timing.
//! A warm-up runs first, outside the markers. `STREAMCOMM_TRANSPORT=verbs`
//! (in a build with the `verbs` feature) or `=tcp` counts those
//! transports' calls instead.
//!
//! Usage: `streamcomm-icount OP ITERS`, OP one of `send_host`,
//! `recv_host`, `barrier_host`, `all_reduce_host` (two f32). Prints `OP ITERS` when done.

use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Duration;

use streamcomm::bootstrap::UniqueId;
use streamcomm::{Communicator, ReduceOp, Result};

/// The calls this tool can measure.
const OPS: [&str; 4] = ["send_host", "recv_host", "barrier_host", "all_reduce_host"];

/// Warm-up calls before the measured ones (first-touch, lazy setup).
const WARMUP: usize = 200;

#[unsafe(no_mangle)]
#[inline(never)]
fn streamcomm_icount_send_host(comm: &Communicator, buf: &[u8], peer: usize) -> Result<()> {
    comm.send_host(std::hint::black_box(buf), peer)
}

#[unsafe(no_mangle)]
#[inline(never)]
fn streamcomm_icount_recv_host(comm: &Communicator, buf: &mut [u8], peer: usize) -> Result<()> {
    comm.recv_host(std::hint::black_box(buf), peer)
}

#[unsafe(no_mangle)]
#[inline(never)]
fn streamcomm_icount_barrier_host(comm: &Communicator) -> Result<()> {
    comm.barrier_host()
}

#[unsafe(no_mangle)]
#[inline(never)]
fn streamcomm_icount_all_reduce_host(
    comm: &Communicator,
    send: &[f32],
    recv: &mut [f32],
) -> Result<()> {
    comm.all_reduce_host(std::hint::black_box(send), recv, ReduceOp::Sum)
}

/// A one-way signal between the two rank threads.
struct Turn {
    tx: mpsc::Sender<()>,
    rx: mpsc::Receiver<()>,
}

impl Turn {
    fn pair() -> (Turn, Turn) {
        let (a_tx, b_rx) = mpsc::channel();
        let (b_tx, a_rx) = mpsc::channel();
        (Turn { tx: a_tx, rx: a_rx }, Turn { tx: b_tx, rx: b_rx })
    }
    fn give(&self) {
        let _ = self.tx.send(());
    }
    fn take(&self) {
        let _ = self.rx.recv();
    }
}

/// Rank 0 sends 8 bytes, then rank 1 receives them; `measure` says which
/// side goes through its marker.
fn send_recv(comm: &Communicator, turn: &Turn, iters: usize, measure_send: bool) -> Result<()> {
    let peer = 1 - comm.rank();
    let send = [7u8; 8];
    let mut recv = [0u8; 8];
    for i in 0..WARMUP + iters {
        let marked = i >= WARMUP;
        if comm.rank() == 0 {
            if measure_send {
                // Over verbs the completions of the last send and the
                // receiver's returned credit land a little after its
                // `recv_host` returns: let them, so that each measured
                // send meets the same state (a reaped queue, credit in
                // place) rather than whatever the emulator's timing left.
                std::thread::sleep(Duration::from_millis(5));
            }
            if marked && measure_send {
                streamcomm_icount_send_host(comm, &send, peer)?;
            } else {
                comm.send_host(&send, peer)?;
            }
            turn.give();
            turn.take();
        } else {
            turn.take();
            if !measure_send {
                // Over verbs or tcp the message lands a little after
                // `send_host` returns (the NIC, the socket): let it (in the
                // Soft-RoCE guest, under valgrind, 1 ms was sometimes short).
                std::thread::sleep(Duration::from_millis(5));
            }
            if marked && !measure_send {
                streamcomm_icount_recv_host(comm, &mut recv, peer)?;
            } else {
                comm.recv_host(&mut recv, peer)?;
            }
            turn.give();
        }
    }
    Ok(())
}

/// Rank 0 enters each collective first; rank 1 follows once rank 0 is
/// surely waiting, so rank 1's call (the measured one) never waits: its
/// peer's part is already there. `call(comm, marked)` makes one call,
/// through the marker when `marked`.
fn rank1_last(
    comm: &Communicator,
    turn: &Turn,
    iters: usize,
    mut call: impl FnMut(&Communicator, bool) -> Result<()>,
) -> Result<()> {
    for i in 0..WARMUP + iters {
        if comm.rank() == 0 {
            turn.give();
            call(comm, false)?;
        } else {
            turn.take();
            std::thread::sleep(Duration::from_millis(3));
            call(comm, i >= WARMUP)?;
        }
    }
    Ok(())
}

fn barrier(comm: &Communicator, turn: &Turn, iters: usize) -> Result<()> {
    rank1_last(comm, turn, iters, |comm, marked| {
        if marked {
            streamcomm_icount_barrier_host(comm)
        } else {
            comm.barrier_host()
        }
    })
}

/// An all-reduce (sum) of two f32 (8 bytes), the result checked.
fn all_reduce(comm: &Communicator, turn: &Turn, iters: usize) -> Result<()> {
    let send = [comm.rank() as f32 + 1.0, 0.5];
    let mut recv = [0f32; 2];
    rank1_last(comm, turn, iters, |comm, marked| {
        recv = [f32::NAN; 2];
        if marked {
            streamcomm_icount_all_reduce_host(comm, &send, &mut recv)?;
        } else {
            comm.all_reduce_host(&send, &mut recv, ReduceOp::Sum)?;
        }
        assert_eq!(recv, [3.0, 1.0], "all_reduce_host gave a wrong sum");
        Ok(())
    })
}

fn rank_main(id: UniqueId, rank: usize, op: &str, iters: usize, turn: Turn) -> Result<()> {
    let comm = Communicator::init(&id, rank, 2)?;
    match op {
        "send_host" => send_recv(&comm, &turn, iters, true),
        "recv_host" => send_recv(&comm, &turn, iters, false),
        "barrier_host" => barrier(&comm, &turn, iters),
        "all_reduce_host" => all_reduce(&comm, &turn, iters),
        _ => unreachable!("checked in main"),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (op, iters) = match args.as_slice() {
        [op, n] if OPS.contains(&op.as_str()) => match n.parse::<usize>() {
            Ok(n) if n > 0 => (op.clone(), n),
            _ => {
                eprintln!("streamcomm-icount: ITERS must be a positive integer, got {n:?}");
                return ExitCode::from(2);
            }
        },
        _ => {
            eprintln!("usage: streamcomm-icount {} ITERS", OPS.join("|"));
            return ExitCode::from(2);
        }
    };
    let id = match UniqueId::new() {
        Ok(id) => id,
        Err(e) => {
            eprintln!("streamcomm-icount: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (t0, t1) = Turn::pair();
    let threads: Vec<_> = [(0, t0), (1, t1)]
        .into_iter()
        .map(|(rank, turn)| {
            let op = op.clone();
            std::thread::spawn(move || rank_main(id, rank, &op, iters, turn))
        })
        .collect();
    let mut failed = false;
    for (rank, t) in threads.into_iter().enumerate() {
        match t.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                eprintln!("streamcomm-icount: rank {rank}: {e}");
                failed = true;
            }
            Err(_) => {
                eprintln!("streamcomm-icount: rank {rank} panicked");
                failed = true;
            }
        }
    }
    if failed {
        return ExitCode::FAILURE;
    }
    println!("{op} {iters}");
    ExitCode::SUCCESS
}
