//! Unit tests of the step interpreter (kept beside `apply.rs` so that file
//! stays about the interpreter itself).

use super::*;
use crate::plan::Collective;

fn plan(op: ReduceOp, nranks: usize) -> Plan {
    Plan {
        collective: Collective::AllReduce,
        dtype: DataType::F32,
        op,
        rank: 0,
        nranks,
        send_count: 4,
        recv_count: 4,
        work_count: 0,
        signature: 0,
        steps: Vec::new(),
    }
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A rank's separate buffers: a send buffer of the given `f32`s and a
/// zeroed receive buffer of four.
struct Separate {
    send: Vec<u8>,
    recv: Vec<u8>,
}

impl Separate {
    fn new(send: &[f32]) -> Separate {
        Separate {
            send: bytes(send),
            recv: vec![0u8; 16],
        }
    }

    fn bufs(&mut self) -> Buffers<'_> {
        Buffers::Separate {
            send: &self.send,
            recv: &mut self.recv,
        }
    }

    /// Applies `step` with `slot` arriving and an outgoing slot of
    /// `out_len` bytes: the bytes it reports sent, and that slot.
    fn apply_with_slots(
        &mut self,
        p: &Plan,
        step: &DataStep,
        slot: &[f32],
        out_len: usize,
    ) -> (usize, Vec<u8>) {
        let mut out = vec![0u8; out_len];
        let n = Interpreter::new(p)
            .apply(step, &mut self.bufs(), Some(&bytes(slot)), Some(&mut out))
            .unwrap();
        (n, out)
    }
}

#[test]
fn recv_reduce_copy_send_writes_dst_and_slot() {
    let p = plan(ReduceOp::Sum, 2);
    let mut io = Separate::new(&[1.0, 2.0, 3.0, 4.0]);
    let step = DataStep::recv_reduce_copy_send(1, Region::send(2, 2), Region::recv(1, 2), 1);
    let (n, out) = io.apply_with_slots(&p, &step, &[10.0, 20.0], 64);
    assert_eq!(n, 8);
    assert_eq!(floats(&io.recv), [0.0, 13.0, 24.0, 0.0]);
    assert_eq!(floats(&out[..8]), [13.0, 24.0]);
}

#[test]
fn avg_finalizes_once_and_in_place_reduces() {
    let p = plan(ReduceOp::Avg, 4);
    let mut buf = bytes(&[1.0, 2.0, 3.0, 4.0]);
    let slot = bytes(&[7.0, 6.0]);
    let step = DataStep::recv_reduce(1, Region::send(0, 2), Region::recv(0, 2)).finalized();
    let mut bufs = Buffers::in_place(&p, &mut buf).unwrap();
    assert_eq!(
        Interpreter::new(&p)
            .apply(&step, &mut bufs, Some(&slot), None)
            .unwrap(),
        0
    );
    assert_eq!(floats(&buf), [2.0, 2.0, 3.0, 4.0]);
}

#[test]
fn reduce_into_slot_and_finalize_in_slot() {
    let p = plan(ReduceOp::Avg, 2);
    let mut io = Separate::new(&[1.0, 3.0, 0.0, 0.0]);
    let step = DataStep::recv_reduce_send(1, Region::send(0, 2), 1).finalized();
    let (_, out) = io.apply_with_slots(&p, &step, &[3.0, 5.0], 8);
    assert_eq!(floats(&out), [2.0, 4.0]);
}

#[test]
fn copies_between_disjoint_ranges_of_one_buffer() {
    let p = plan(ReduceOp::Sum, 1);
    let mut buf = bytes(&[1.0, 2.0, 3.0, 4.0]);
    let mut bufs = Buffers::InPlace {
        buf: &mut buf,
        send_offset: 0,
        recv_offset: 0,
    };
    let fwd = DataStep::copy(Region::send(0, 2), Region::recv(2, 2));
    Interpreter::new(&p)
        .apply(&fwd, &mut bufs, None, None)
        .unwrap();
    let back = DataStep::copy(Region::send(3, 1), Region::recv(0, 1));
    Interpreter::new(&p)
        .apply(&back, &mut bufs, None, None)
        .unwrap();
    let same = DataStep::copy(Region::send(1, 2), Region::recv(1, 2));
    Interpreter::new(&p)
        .apply(&same, &mut bufs, None, None)
        .unwrap();
    assert_eq!(floats(&buf), [2.0, 2.0, 1.0, 2.0]);
}

#[test]
fn recv_then_send_slot_copies() {
    let p = plan(ReduceOp::Max, 3);
    let mut io = Separate::new(&[]);
    let step = DataStep::recv_copy_send(2, Region::recv(3, 1), 1);
    let (_, out) = io.apply_with_slots(&p, &step, &[5.0], 4);
    assert_eq!(floats(&io.recv)[3], 5.0);
    assert_eq!(floats(&out), [5.0]);
}

#[test]
fn a_short_slot_is_a_remote_failure() {
    let p = plan(ReduceOp::Sum, 2);
    let mut io = Separate::new(&[1.0; 4]);
    let mut bufs = io.bufs();
    let step = DataStep::recv(1, Region::recv(0, 3));
    let err = Interpreter::new(&p)
        .apply(&step, &mut bufs, Some(&[0u8; 8]), None)
        .unwrap_err();
    match err {
        Error::RemoteFailed { peer, op, cause } => {
            assert_eq!((peer, op.as_str()), (1, "all_reduce"));
            assert_eq!(cause, "sent 8 bytes where 12 were expected");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn misuse_is_an_error_not_a_panic() {
    let p = plan(ReduceOp::Sum, 2);
    let mut io = Separate::new(&[1.0; 4]);
    let mut bufs = io.bufs();
    // Out of bounds, naming the region and the buffer length.
    let far = DataStep::copy(Region::send(3, 2), Region::recv(0, 2));
    match Interpreter::new(&p).apply(&far, &mut bufs, None, None) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("16 bytes"), "{m}"),
        other => panic!("{other:?}"),
    }
    // Writing the send buffer.
    let into_send = DataStep::copy(Region::recv(0, 1), Region::send(0, 1));
    assert!(matches!(
        Interpreter::new(&p).apply(&into_send, &mut bufs, None, None),
        Err(Error::InvalidUsage(_))
    ));
    // Missing slots.
    let rs = DataStep::recv_reduce_send(1, Region::send(0, 1), 1);
    assert!(matches!(
        Interpreter::new(&p).apply(&rs, &mut bufs, None, Some(&mut [0u8; 4])),
        Err(Error::InvalidUsage(_))
    ));
    assert!(matches!(
        Interpreter::new(&p).apply(&rs, &mut bufs, Some(&[0u8; 4]), None),
        Err(Error::InvalidUsage(_))
    ));
    // An outgoing slot too small.
    assert!(matches!(
        Interpreter::new(&p).apply(&rs, &mut bufs, Some(&[0u8; 4]), Some(&mut [0u8; 2])),
        Err(Error::InvalidArgument(_))
    ));
    // A count that disagrees with its region is the plan's error, refused
    // when it is built (`Plan::verify`'s tests).
}

#[test]
fn a_region_past_an_in_place_buffer_is_an_error_naming_it() {
    let p = plan(ReduceOp::Sum, 2);
    let mut buf = bytes(&[1.0; 4]);
    let mut bufs = Buffers::InPlace {
        buf: &mut buf,
        send_offset: 2,
        recv_offset: 0,
    };
    // The send part starts at element 2: elements 2..5 run past the 4.
    let far = DataStep::copy(Region::send(1, 2), Region::recv(0, 2));
    match Interpreter::new(&p).apply(&far, &mut bufs, None, None) {
        Err(Error::InvalidArgument(m)) => {
            assert!(
                m.contains("src") && m.contains("in-place buffer of 16 bytes"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn partial_overlap_is_refused() {
    let p = plan(ReduceOp::Sum, 1);
    let mut buf = bytes(&[1.0; 4]);
    let mut bufs = Buffers::InPlace {
        buf: &mut buf,
        send_offset: 0,
        recv_offset: 1,
    };
    let step = DataStep::copy(Region::send(0, 2), Region::recv(0, 2));
    assert!(matches!(
        Interpreter::new(&p).apply(&step, &mut bufs, None, None),
        Err(Error::InvalidUsage(_))
    ));
}

#[test]
fn signals_carry_no_bytes() {
    let p = plan(ReduceOp::Sum, 2);
    let mut bufs = Buffers::Separate {
        send: &[],
        recv: &mut [],
    };
    let mut out = [0u8; 4];
    assert_eq!(
        Interpreter::new(&p)
            .apply(&DataStep::signal(1), &mut bufs, None, Some(&mut out))
            .unwrap(),
        0
    );
    assert_eq!(
        Interpreter::new(&p)
            .apply(&DataStep::wait(1), &mut bufs, Some(&[]), None)
            .unwrap(),
        0
    );
    assert!(matches!(
        Interpreter::new(&p).apply(&DataStep::wait(1), &mut bufs, Some(&[1]), None),
        Err(Error::RemoteFailed { .. })
    ));
}
