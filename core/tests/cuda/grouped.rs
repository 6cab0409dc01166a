//! `gather`, `scatter`, `all_to_allv` and `all_gatherv` of the CUDA backend on a CUDA
//! driver (the CPU stand-in under `scripts/gpu-check.sh --stand-in`, or a
//! GPU): ranks as processes on GPU 0, random data (the seed is printed by
//! the harness), outputs poisoned first, every element checked against an
//! f64 reference, including the poison that must survive around the
//! written regions and in the buffers a call does not use on this rank.

use std::sync::Arc;

use rand::{Rng, SeedableRng};
use streamcomm::Communicator;
use streamcomm::config::DEFAULT_CUDA_WINDOW;
use streamcomm::cuda::CudaComm;
use streamcomm::cuda::cudarc::driver::{CudaContext, CudaStream};

use crate::backend::{
    Num, POISON, child_rank, data, download, gpu_present, launch, poisoned, upload,
};

#[test]
fn gather_scatter_all_to_allv_and_all_gatherv_on_one_gpu_with_2_and_3_ranks() {
    if !gpu_present() {
        return;
    }
    // Groups take the staged path whatever the window; the window only
    // changes what the collectives around them do.
    launch(module_path!(), 2, 0, "grouped");
    launch(module_path!(), 3, DEFAULT_CUDA_WINDOW, "grouped");
}

/// Appends to `bad` where `got` differs from `want` (up to 8 in all).
fn compare(what: &str, got: &[f64], want: &[f64], bad: &mut Vec<String>) {
    if got.len() != want.len() {
        bad.push(format!(
            "{what}: {} elements, want {}",
            got.len(),
            want.len()
        ));
        return;
    }
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if g != w && bad.len() < 8 {
            bad.push(format!("{what}[{i}]: got {g}, want {w}"));
        }
    }
}

/// Gather to the last rank and scatter from rank 0 of `count` elements;
/// returns mismatches.
fn gather_scatter<T: Num>(
    cuda: &CudaComm,
    s: &Arc<CudaStream>,
    seed: u64,
    count: usize,
) -> Vec<String> {
    let comm: &Communicator = cuda.communicator();
    let (r, n) = (comm.rank(), comm.size());
    let mut bad = Vec::new();
    let what = |op: &str| format!("{} rank {r}/{n} count {count} {op}", T::DTYPE);

    // gather: rank n-1 receives everyone's block; its 3 extra elements and
    // every other rank's recv keep their poison.
    let root = n - 1;
    let inputs: Vec<Vec<f64>> = (0..n).map(|q| data(seed, q, count)).collect();
    let send = upload::<T>(s, &inputs[r]);
    let recv_len = if r == root { n * count + 3 } else { 5 };
    let mut recv = poisoned::<T>(s, recv_len);
    cuda.gather(&send, &mut recv, root, s).unwrap();
    let got = download(s, &recv);
    let want: Vec<f64> = if r == root {
        let mut w: Vec<f64> = inputs.concat();
        w.extend([POISON; 3]);
        w
    } else {
        vec![POISON; recv_len]
    };
    compare(&what("gather to the last rank"), &got, &want, &mut bad);

    // scatter: rank 0 sends block j of its buffer to rank j; the 2 extra
    // elements of every recv keep their poison.
    let blocks = data(seed ^ 0x5CA7, 0, n * count + 7);
    let send = if r == 0 {
        upload::<T>(s, &blocks)
    } else {
        poisoned::<T>(s, 3) // not read off the root
    };
    let mut recv = poisoned::<T>(s, count + 2);
    let mut recv_view = recv.slice_mut(0..count);
    cuda.scatter(&send, &mut recv_view, 0, s).unwrap();
    let got = download(s, &recv);
    let mut want = blocks[r * count..(r + 1) * count].to_vec();
    want.extend([POISON; 2]);
    compare(&what("scatter from rank 0"), &got, &want, &mut bad);
    bad
}

/// The elements rank `from` sends rank `to` in the all_to_allv of `seed`:
/// between 0 and 40, so some pairs send nothing.
fn pair_counts(seed: u64, n: usize) -> Vec<Vec<usize>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0xA11_2A11);
    (0..n)
        .map(|_| {
            (0..n)
                .map(|_| {
                    if rng.gen_bool(0.2) {
                        0
                    } else {
                        rng.gen_range(1..=40)
                    }
                })
                .collect()
        })
        .collect()
}

/// Displacements of `counts` with a gap of 0..3 elements before each region.
fn displs(seed: u64, counts: &[usize]) -> (Vec<usize>, usize) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut at = 0;
    let d = counts
        .iter()
        .map(|&c| {
            at += rng.gen_range(0..3);
            let here = at;
            at += c;
            here
        })
        .collect();
    (d, at + rng.gen_range(0..3))
}

/// An all_to_allv with random pair counts, gaps between regions and slack
/// in the receive counts; returns mismatches.
fn all_to_allv<T: Num>(cuda: &CudaComm, s: &Arc<CudaStream>, seed: u64) -> Vec<String> {
    let comm = cuda.communicator();
    let (r, n) = (comm.rank(), comm.size());
    let counts = pair_counts(seed, n);
    // Every rank's send layout, known to all (the reference needs them).
    let layouts: Vec<(Vec<usize>, usize)> = (0..n)
        .map(|q| displs(seed ^ ((q as u64 + 1) * 0x51), &counts[q]))
        .collect();
    let inputs: Vec<Vec<f64>> = (0..n).map(|q| data(seed, q, layouts[q].1)).collect();
    // Receive counts with slack: up to 2 more than the sender sends.
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x5EC ^ r as u64);
    let recv_counts: Vec<usize> = (0..n).map(|q| counts[q][r] + rng.gen_range(0..3)).collect();
    let (recv_displs, recv_len) = displs(seed ^ 0xEC0 ^ r as u64, &recv_counts);
    let (send_displs, _) = &layouts[r];
    // One element more at the end of both buffers: never empty (a device
    // allocation of 0 bytes is refused, and some layouts here have none),
    // and the receive buffer's last element must stay poisoned.
    let padded: Vec<f64> = inputs[r].iter().copied().chain([POISON]).collect();
    let send = upload::<T>(s, &padded);
    let mut recv = poisoned::<T>(s, recv_len + 1);
    cuda.all_to_allv(
        &send,
        &counts[r],
        send_displs,
        &mut recv,
        &recv_counts,
        &recv_displs,
        s,
    )
    .unwrap();
    let got = download(s, &recv);
    let mut want = vec![POISON; recv_len + 1];
    for q in 0..n {
        let (c, from) = (counts[q][r], layouts[q].0[r]);
        want[recv_displs[q]..recv_displs[q] + c].copy_from_slice(&inputs[q][from..from + c]);
    }
    let mut bad = Vec::new();
    compare(
        &format!("{} rank {r}/{n} all_to_allv", T::DTYPE),
        &got,
        &want,
        &mut bad,
    );
    bad
}

/// An all_gatherv with random counts (some zero) and gaps between the
/// regions, which must keep their poison; returns mismatches.
fn all_gatherv<T: Num>(cuda: &CudaComm, s: &Arc<CudaStream>, seed: u64) -> Vec<String> {
    let comm = cuda.communicator();
    let (r, n) = (comm.rank(), comm.size());
    let counts: Vec<usize> = pair_counts(seed, n).iter().map(|row| row[0] * 97).collect();
    let (displs, len) = displs(seed ^ 0x6A7, &counts);
    let inputs: Vec<Vec<f64>> = (0..n).map(|q| data(seed ^ 0x6A7, q, counts[q])).collect();
    // A device allocation of 0 bytes is refused: an empty send is a slice
    // of a one-element buffer.
    let padded: Vec<f64> = inputs[r].iter().copied().chain([POISON]).collect();
    let send = upload::<T>(s, &padded);
    let mut recv = poisoned::<T>(s, len + 1);
    cuda.all_gatherv(&send.slice(..counts[r]), &mut recv, &counts, &displs, s)
        .unwrap();
    let got = download(s, &recv);
    let mut want = vec![POISON; len + 1];
    for q in 0..n {
        want[displs[q]..displs[q] + counts[q]].copy_from_slice(&inputs[q]);
    }
    let mut bad = Vec::new();
    compare(
        &format!("{} rank {r}/{n} all_gatherv, counts {counts:?}", T::DTYPE),
        &got,
        &want,
        &mut bad,
    );
    bad
}

/// One rank's share of the test above; returns mismatches.
fn run(cuda: &CudaComm, s: &Arc<CudaStream>, seed: u64) -> Vec<String> {
    use half::f16;
    let mut bad = gather_scatter::<f32>(cuda, s, seed, 70_001);
    bad.extend(gather_scatter::<i32>(cuda, s, seed ^ 1, 1));
    bad.extend(gather_scatter::<f16>(cuda, s, seed ^ 2, 999));
    bad.extend(gather_scatter::<f64>(cuda, s, seed ^ 3, 4096));
    for round in 0..3 {
        bad.extend(all_to_allv::<f32>(cuda, s, seed ^ (round << 8)));
    }
    bad.extend(all_to_allv::<f64>(cuda, s, seed ^ 0xF64));
    for round in 0..3 {
        bad.extend(all_gatherv::<f32>(cuda, s, seed ^ (round << 12)));
    }
    bad.extend(all_gatherv::<i32>(cuda, s, seed ^ 0x132));
    assert!(cuda.async_error().is_none(), "{:?}", cuda.async_error());
    bad
}

/// One rank of the test above, as a process on GPU 0, bound through the
/// cudarc context it made itself.
#[test]
#[ignore = "a rank of the test above"]
fn child() {
    let (seed, comm) = child_rank();
    let ctx = CudaContext::new(0).unwrap();
    let cuda = CudaComm::new(&comm, ctx.clone()).unwrap();
    let s = ctx.new_stream().unwrap();
    let bad = run(&cuda, &s, seed);
    assert!(bad.is_empty(), "seed {seed}: {bad:#?}");
    streamcomm_testkit::child_ran();
}
