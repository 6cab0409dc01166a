//! Point-to-point payloads and scenarios shared by the p2p tests of every
//! transport (`p2p.rs` for shm and tcp, `verbs.rs` for verbs).
//!
//! Payloads are generated from (seed, source, destination, tag), so the
//! receiver recomputes independently what it must have got; every output
//! element is checked, and everything not written must still hold poison.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use streamcomm::Communicator;
use streamcomm::host::{HostBuffer, HostStream};

/// What receive buffers hold before a message lands (never a payload value).
pub(crate) const POISON: i64 = i64::MIN;

/// The values `src` sends `dst` as message `tag` (never `POISON`).
pub(crate) fn payload(seed: u64, src: usize, dst: usize, tag: u64, len: usize) -> Vec<i64> {
    let mut rng = StdRng::seed_from_u64(seed ^ (src as u64) << 48 ^ (dst as u64) << 32 ^ tag);
    (0..len)
        .map(|_| rng.gen_range(-(1 << 40)..(1 << 40)))
        .collect()
}

/// Every rank sends to its right and receives from its left in one group,
/// for eager and rendezvous sizes (with a 4 KiB eager limit), with the
/// calls in either order.
pub(crate) fn ring_exchange(comm: &Communicator, stream: &HostStream, seed: u64) {
    let (r, n) = (comm.rank(), comm.size());
    let (right, left) = ((r + 1) % n, (r + n - 1) % n);
    for (tag, len) in [(1u64, 1usize), (2, 300), (3, 5000), (4, 100_000)] {
        let out = HostBuffer::from_slice(&payload(seed, r, right, tag, len));
        let mut inb = HostBuffer::from_slice(&vec![POISON; len + 7]);
        let recv_first = (tag + r as u64).is_multiple_of(2);
        comm.group(stream, |g| {
            if recv_first {
                g.recv(&mut inb, left)?;
                g.send(&out, right)
            } else {
                g.send(&out, right)?;
                g.recv(&mut inb, left)
            }
        })
        .unwrap();
        stream.synchronize().unwrap();
        let got = inb.to_vec();
        assert_eq!(
            &got[..len],
            &payload(seed, left, r, tag, len)[..],
            "rank {r}: message {tag} of {len} from {left}"
        );
        assert!(
            got[len..].iter().all(|&v| v == POISON),
            "rank {r}: wrote past the message"
        );
    }
}
