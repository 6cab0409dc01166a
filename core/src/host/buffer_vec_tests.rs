//! `HostBuffer::from_vec` / `into_vec`: the caller's allocation in and out.

use rand::{Rng, SeedableRng};

use super::*;
use crate::bootstrap::UniqueId;
use crate::host::HostStream;
use crate::{Communicator, ReduceOp};

#[test]
fn an_all_reduce_works_on_the_callers_vec_and_gives_the_same_allocation_back() {
    let seed = streamcomm_testkit::seed();
    let n = 4;
    let len = 1 << 14;
    let inputs: Vec<Vec<f32>> = (0..n)
        .map(|r| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed + r as u64);
            (0..len).map(|_| rng.gen_range(-8i32..8) as f32).collect()
        })
        .collect();
    let want: Vec<f64> = (0..len)
        .map(|i| inputs.iter().map(|v| f64::from(v[i])).sum())
        .collect();
    let id = UniqueId::new().unwrap();
    let ranks: Vec<_> = inputs
        .into_iter()
        .enumerate()
        .map(|(rank, data)| {
            std::thread::spawn(move || -> Result<(usize, usize, Vec<f32>)> {
                let comm = Communicator::init(&id, rank, n)?;
                let stream = HostStream::new()?;
                let before = data.as_ptr() as usize;
                let mut buf = HostBuffer::from_vec(data);
                comm.all_reduce_in_place(&mut buf, ReduceOp::Sum, &stream)?;
                stream.synchronize()?;
                let data = buf.into_vec()?;
                Ok((before, data.as_ptr() as usize, data))
            })
        })
        .collect();
    for (rank, r) in ranks.into_iter().enumerate() {
        let (before, after, got) = r.join().unwrap().unwrap();
        assert_eq!(before, after, "rank {rank}: the Vec was copied");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(f64::from(*g), *w, "rank {rank}, element {i}");
        }
    }
}

#[test]
fn into_vec_is_refused_while_a_shared_handle_holds_the_buffer() {
    let buf = HostBuffer::from_vec(vec![3u64; 8]);
    let other = buf.share();
    let e = buf.into_vec().unwrap_err();
    assert!(
        matches!(&e, Error::InvalidUsage(m) if m.contains("another handle")),
        "{e}"
    );
    // The memory lives on in the shared handle.
    assert_eq!(other.to_vec(), vec![3; 8]);
}

#[test]
fn into_vec_is_refused_while_a_stream_has_not_run_the_operation() {
    let id = UniqueId::new().unwrap();
    let comm = Communicator::init(&id, 0, 1).unwrap();
    let stream = HostStream::new().unwrap();
    // The stream waits on the host until released, so the all-reduce
    // enqueued behind it has not run when into_vec is called.
    let gate = Arc::new(std::sync::Barrier::new(2));
    let g = gate.clone();
    stream
        .host_fn(move || {
            g.wait();
        })
        .unwrap();
    let mut buf = HostBuffer::from_vec(vec![1.5f32; 16]);
    comm.all_reduce_in_place(&mut buf, ReduceOp::Sum, &stream)
        .unwrap();
    let e = buf.into_vec().unwrap_err();
    assert!(
        matches!(&e, Error::InvalidUsage(m) if m.contains("synchronize")),
        "{e}"
    );
    gate.wait();
    stream.synchronize().unwrap();
}

#[test]
fn a_shared_handle_is_a_send_buffer_only_and_aliasing_is_refused() {
    let id = UniqueId::new().unwrap();
    let comm = Communicator::init(&id, 0, 1).unwrap();
    let stream = HostStream::new().unwrap();
    let mut owner = HostBuffer::from_slice(&[2.0f64; 8]);
    let mut shared = owner.share();
    // The shared handle as a receive or in-place buffer: refused.
    let send = HostBuffer::from_slice(&[1.0f64; 8]);
    let e = comm
        .all_reduce(&send, &mut shared, ReduceOp::Sum, &stream)
        .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("read-only")),
        "{e}"
    );
    let e = comm
        .all_reduce_in_place(&mut shared, ReduceOp::Sum, &stream)
        .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("read-only")),
        "{e}"
    );
    let e = comm.recv(&mut shared, 0, &stream).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("read-only")),
        "{e}"
    );
    // The same memory as send (shared handle) and recv (owner): refused.
    let e = comm
        .all_reduce(&shared, &mut owner, ReduceOp::Sum, &stream)
        .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("same buffer")),
        "{e}"
    );
    // As a send buffer it works.
    let mut recv = HostBuffer::<f64>::zeroed(8);
    recv.fill_bytes(0xff);
    comm.all_reduce(&shared, &mut recv, ReduceOp::Sum, &stream)
        .unwrap();
    stream.synchronize().unwrap();
    assert_eq!(recv.to_vec(), vec![2.0; 8]);
}

#[test]
fn a_buffer_not_made_from_a_vec_gives_a_copy() {
    let buf = HostBuffer::from_slice(&[1i32, 2, 3]);
    assert_eq!(buf.into_vec().unwrap(), vec![1, 2, 3]);
    assert!(
        HostBuffer::<f64>::from_vec(Vec::new())
            .into_vec()
            .unwrap()
            .is_empty()
    );
}
