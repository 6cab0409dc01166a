//! Injected faults on point-to-point traffic (`fault-injection` feature):
//! rank 0 sends rank 1 a fixed sequence of messages with `send_host`, over
//! shared memory and over tcp on loopback, while a rule delays, drops or
//! repeats one of their slots. The sequence mixes one-slot messages, which
//! take the immediate path, with three-slot ones, which take the full
//! path's sender and receiver, so a rule on a chosen slot exercises each
//! writer of the slot seam. Every message received is checked element by
//! element (the seed is printed).
//!
//! - a delayed slot (sent or consumed late): all data right, and the
//!   delays add up (message `k` completes at least `k` delays after the
//!   start);
//! - a dropped slot followed by others: the receiver fails with a
//!   transport error saying a slot (over tcp, a frame) was lost, never
//!   with shifted data;
//! - a dropped last slot: the receiver times out naming the sender and
//!   the transport, instead of hanging;
//! - a repeated slot: the receiver fails with a transport error saying a
//!   slot (or frame) came twice.
//!
//! The `_verbs` tests run the same over verbs where an RDMA device is
//! (the Soft-RoCE guest: `scripts/verbs-check.sh`), and say `SKIPPED`
//! elsewhere.

#![cfg(feature = "fault-injection")]

use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use streamcomm::{Communicator, Error, Transport};

use super::expect::{self, shm_and_tcp};
use super::injected::{config, run_ranks};

/// Elements of each message (f32): one slot of the tests' rings holds 1024.
const SIZES: [usize; 5] = [8, 3 * 1024, 8, 3 * 1024, 8];
/// The slots (counted from 1, as rules count them) each message occupies.
const FIRST_SLOT: [u64; 5] = [1, 2, 5, 6, 9];
const LONG: Duration = Duration::from_secs(60);
const DELAY: Duration = Duration::from_millis(300);

/// Message `k` of the sequence drawn from `seed`.
fn message(seed: u64, k: usize) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ (k as u64) << 40);
    (0..SIZES[k]).map(|_| rng.gen_range(-1e6f32..1e6)).collect()
}

/// What rank 1 saw: when each message completed (from the start), and the
/// error that ended the sequence, if any.
#[derive(Debug)]
struct Received {
    done_at: Vec<Duration>,
    error: Option<Error>,
}

/// Rank 0 sends the sequence; rank 1 receives it, checking every element
/// of every message it gets, and stops at the first error.
fn exchange(comm: Communicator, seed: u64) -> Option<Received> {
    let t0 = Instant::now();
    if comm.rank() == 0 {
        for k in 0..SIZES.len() {
            if comm.send_host(&message(seed, k), 1).is_err() {
                break;
            }
        }
        return None;
    }
    let mut done_at = Vec::new();
    for (k, &size) in SIZES.iter().enumerate() {
        let mut got = vec![f32::NAN; size];
        if let Err(e) = comm.recv_host(&mut got, 0) {
            return Some(Received {
                done_at,
                error: Some(e),
            });
        }
        done_at.push(t0.elapsed());
        for (i, (g, w)) in got.iter().zip(message(seed, k)).enumerate() {
            assert_eq!(
                g.to_bits(),
                w.to_bits(),
                "message {k} element {i}: silent corruption (STREAMCOMM_TEST_SEED={seed})"
            );
        }
    }
    Some(Received {
        done_at,
        error: None,
    })
}

/// Runs the sequence with rank 0 under `send_rules` and rank 1 under
/// `recv_rules` and a timeout of `recv_timeout`; what rank 1 saw.
fn run(
    transport: Transport,
    send_rules: &str,
    recv_rules: &str,
    recv_timeout: Duration,
) -> Received {
    let configs = vec![
        config(transport, LONG, send_rules),
        config(transport, recv_timeout, recv_rules),
    ];
    let seed = streamcomm_testkit::seed();
    let mut out = run_ranks(configs, move |comm| exchange(comm, seed));
    out.pop().flatten().expect("rank 1 reports")
}

fn delayed(transport: Transport) {
    // One delay per writer: the full path's sender (a slot inside message
    // 1), the immediate send (message 2), the full path's receiver (a slot
    // inside message 3) and the immediate receive (message 4).
    let ms = DELAY.as_millis();
    let send = format!(
        "send:peer=1:nth={}:delay={ms}ms,send:peer=1:nth={}:delay={ms}ms",
        FIRST_SLOT[1] + 1,
        FIRST_SLOT[2]
    );
    let recv = format!(
        "recv:peer=0:nth={}:delay={ms}ms,recv:peer=0:nth={}:delay={ms}ms",
        FIRST_SLOT[3] + 1,
        FIRST_SLOT[4]
    );
    let r = run(transport, &send, &recv, LONG);
    assert!(r.error.is_none(), "{r:?}");
    assert_eq!(r.done_at.len(), SIZES.len(), "{r:?}");
    // The delays add up, each after the one before on its side: message
    // `k` completes at least `k` delays after the start (less a margin).
    // Counted from the start, not from the message before: the first may
    // arrive late (over verbs the pair's queue pairs are made at its first
    // use) while the sender's delays already run. A delay skipped leaves
    // its message, and every one after it, a whole delay short.
    let margin = Duration::from_millis(50);
    for k in 1..SIZES.len() {
        let due = DELAY * k as u32;
        assert!(
            r.done_at[k] + margin >= due,
            "message {k} was not delayed (due at {due:?} at the earliest): {r:?}"
        );
    }
}

/// Drops slot `nth` of rank 0's; a later slot reveals the loss.
fn dropped_then_more(transport: Transport, nth: u64) {
    let r = run(transport, &format!("send:peer=1:nth={nth}:drop"), "", LONG);
    // "slot 3 arrived where slot 2 was due (a slot was lost)", or over
    // tcp the frame's own count: "... (a frame was lost)".
    expect::transport_error_from(&r.error, 0, "was lost", "rank 1");
    // No message from the one that lost its slot on arrived. Over shared
    // memory every message before it did (checked); over tcp the
    // progress engine may find the gap in the frames, and fail the
    // communicator, before the stream has taken them all.
    let before = FIRST_SLOT.iter().take_while(|&&f| f <= nth).count() - 1;
    match transport {
        Transport::Shm => assert_eq!(r.done_at.len(), before, "{r:?}"),
        _ => assert!(r.done_at.len() <= before, "{r:?}"),
    }
}

fn dropped_last(transport: Transport) {
    let short = Duration::from_secs(1);
    let nth = FIRST_SLOT[SIZES.len() - 1];
    let t0 = Instant::now();
    let r = run(transport, &format!("send:peer=1:nth={nth}:drop"), "", short);
    expect::timeout_waiting_for_rank_0(&r.error, "recv_host", transport.as_str());
    assert_eq!(r.done_at.len(), SIZES.len() - 1, "{r:?}");
    assert!(t0.elapsed() < Duration::from_secs(20), "{r:?}");
}

/// Repeats slot `nth` of rank 0's; the copy is refused.
fn duplicated(transport: Transport, nth: u64) {
    let r = run(transport, &format!("send:peer=1:nth={nth}:dup"), "", LONG);
    // A slot's or a tcp frame's count: "... came twice".
    expect::transport_error_from(&r.error, 0, "came twice", "rank 1");
    // The message holding the original slot may complete (its last slot)
    // or fail (a middle one); nothing after it does.
    let holding = FIRST_SLOT.iter().take_while(|&&f| f <= nth).count();
    assert!(r.done_at.len() <= holding, "{r:?}");
}

shm_and_tcp! {
    delayed_slots_shm, delayed_slots_tcp => delayed();
    dropped_slot_of_the_full_path_is_lost_shm, dropped_slot_of_the_full_path_is_lost_tcp
        => dropped_then_more(FIRST_SLOT[1] + 1);
    dropped_slot_of_the_immediate_path_is_lost_shm, dropped_slot_of_the_immediate_path_is_lost_tcp
        => dropped_then_more(FIRST_SLOT[2]);
    dropped_last_slot_times_out_shm, dropped_last_slot_times_out_tcp => dropped_last();
    duplicated_slot_of_the_full_path_is_an_error_shm, duplicated_slot_of_the_full_path_is_an_error_tcp
        => duplicated(FIRST_SLOT[1] + 1);
    duplicated_slot_of_the_immediate_path_is_an_error_shm,
        duplicated_slot_of_the_immediate_path_is_an_error_tcp => duplicated(FIRST_SLOT[2]);
}

/// Runs `body` over verbs where an RDMA device is, else says why not.
fn on_verbs(body: impl FnOnce(Transport)) {
    if streamcomm_testkit::rdma_device(cfg!(feature = "verbs")) {
        body(Transport::Verbs);
    } else {
        streamcomm_testkit::skip(
            &streamcomm_testkit::current_test(),
            "no active RDMA device on this host (scripts/verbs-check.sh runs it in the Soft-RoCE guest)",
        );
    }
}

#[test]
fn delayed_slots_verbs() {
    on_verbs(delayed);
}

#[test]
fn dropped_slot_of_the_full_path_is_lost_verbs() {
    on_verbs(|t| dropped_then_more(t, FIRST_SLOT[1] + 1));
}

#[test]
fn dropped_slot_of_the_immediate_path_is_lost_verbs() {
    on_verbs(|t| dropped_then_more(t, FIRST_SLOT[2]));
}

#[test]
fn dropped_last_slot_times_out_verbs() {
    on_verbs(dropped_last);
}

#[test]
fn duplicated_slot_of_the_full_path_is_an_error_verbs() {
    on_verbs(|t| duplicated(t, FIRST_SLOT[1] + 1));
}

#[test]
fn duplicated_slot_of_the_immediate_path_is_an_error_verbs() {
    on_verbs(|t| duplicated(t, FIRST_SLOT[2]));
}
