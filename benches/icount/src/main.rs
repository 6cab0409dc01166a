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
//! waits for its peer: a receive finds its message already sent, a send
//! finds credit, the last rank into a barrier finds the other waiting.
//! A warm-up runs first, outside the markers.
//!
//! Usage: `streamcomm-icount OP ITERS`, OP one of `send_host`,
//! `recv_host`, `barrier_host`. Prints `OP ITERS` when done.

use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Duration;

use streamcomm::bootstrap::UniqueId;
use streamcomm::{Communicator, Result};

/// Warm-up calls before the measured ones (first-touch, lazy setup).
const WARMUP: usize = 200;

#[no_mangle]
#[inline(never)]
fn streamcomm_icount_send_host(comm: &Communicator, buf: &[u8], peer: usize) -> Result<()> {
    comm.send_host(std::hint::black_box(buf), peer)
}

#[no_mangle]
#[inline(never)]
fn streamcomm_icount_recv_host(comm: &Communicator, buf: &mut [u8], peer: usize) -> Result<()> {
    comm.recv_host(std::hint::black_box(buf), peer)
}

#[no_mangle]
#[inline(never)]
fn streamcomm_icount_barrier_host(comm: &Communicator) -> Result<()> {
    comm.barrier_host()
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
            if marked && measure_send {
                streamcomm_icount_send_host(comm, &send, peer)?;
            } else {
                comm.send_host(&send, peer)?;
            }
            turn.give();
            turn.take();
        } else {
            turn.take();
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

/// Rank 0 enters each barrier first; rank 1 follows once rank 0 is surely
/// waiting, so rank 1's barrier (the measured one) never waits.
fn barrier(comm: &Communicator, turn: &Turn, iters: usize) -> Result<()> {
    for i in 0..WARMUP + iters {
        if comm.rank() == 0 {
            turn.give();
            comm.barrier_host()?;
        } else {
            turn.take();
            std::thread::sleep(Duration::from_millis(10));
            if i >= WARMUP {
                streamcomm_icount_barrier_host(comm)?;
            } else {
                comm.barrier_host()?;
            }
        }
    }
    Ok(())
}

fn rank_main(id: UniqueId, rank: usize, op: &str, iters: usize, turn: Turn) -> Result<()> {
    let comm = Communicator::init(&id, rank, 2)?;
    match op {
        "send_host" => send_recv(&comm, &turn, iters, true),
        "recv_host" => send_recv(&comm, &turn, iters, false),
        "barrier_host" => barrier(&comm, &turn, iters),
        _ => unreachable!("checked in main"),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (op, iters) = match args.as_slice() {
        [op, n] if ["send_host", "recv_host", "barrier_host"].contains(&op.as_str()) => {
            match n.parse::<usize>() {
                Ok(n) if n > 0 => (op.clone(), n),
                _ => {
                    eprintln!("streamcomm-icount: ITERS must be a positive integer, got {n:?}");
                    return ExitCode::from(2);
                }
            }
        }
        _ => {
            eprintln!("usage: streamcomm-icount send_host|recv_host|barrier_host ITERS");
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
