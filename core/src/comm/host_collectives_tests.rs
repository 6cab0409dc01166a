//! The host-blocking forms of reduce, all-gather, reduce-scatter,
//! all-to-all, gather and scatter: ranks as threads over shared memory and
//! over tcp, 2 to 5 ranks, a small (eager) and a large (rendezvous, several
//! slots) size, fresh random data (seed printed), an f64 reference, every
//! element checked, outputs poisoned first.

use rand::{Rng, SeedableRng};

use super::super::blocking::tests::on_ranks;
use crate::config::Transport;
use crate::{Communicator, ReduceOp, Result};

const POISON: f32 = -1e9;

/// Rank `rank`'s `len` small integers (exact in f32 in any order).
fn input(seed: u64, rank: usize, len: usize) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ ((rank as u64 + 1) * 0x51f3));
    (0..len).map(|_| rng.gen_range(-64i32..64) as f32).collect()
}

/// Mismatches of `got` against `want` (f64), at most 4, naming `what`.
fn diff(what: &str, rank: usize, got: &[f32], want: &[f64]) -> Vec<String> {
    if got.len() != want.len() {
        return vec![format!(
            "rank {rank} {what}: {} elements, want {}",
            got.len(),
            want.len()
        )];
    }
    got.iter()
        .zip(want)
        .enumerate()
        .filter(|(_, (g, w))| f64::from(**g) != **w)
        .take(4)
        .map(|(i, (g, w))| format!("rank {rank} {what} [{i}]: got {g}, want {w}"))
        .collect()
}

/// Every form on one rank, `count` elements per block.
fn every_form(comm: &Communicator, seed: u64, count: usize) -> Result<Vec<String>> {
    let (r, n) = (comm.rank(), comm.size());
    let ins: Vec<Vec<f32>> = (0..n).map(|q| input(seed, q, count)).collect();
    let wides: Vec<Vec<f32>> = (0..n).map(|q| input(seed ^ 1, q, count * n)).collect();
    let sum = |i: usize| ins.iter().map(|v| f64::from(v[i])).sum::<f64>();
    let wide_sum = |i: usize| wides.iter().map(|v| f64::from(v[i])).sum::<f64>();
    let mut bad = Vec::new();

    let root = n - 1;
    let mut recv = vec![POISON; if r == root { count } else { 0 }];
    comm.reduce_host(&ins[r], &mut recv, ReduceOp::Sum, root)?;
    if r == root {
        bad.extend(diff(
            "reduce",
            r,
            &recv,
            &(0..count).map(sum).collect::<Vec<_>>(),
        ));
    }

    let mut buf = ins[r].clone();
    comm.reduce_in_place_host(&mut buf, ReduceOp::Max, 0)?;
    if r == 0 {
        let max: Vec<f64> = (0..count)
            .map(|i| ins.iter().map(|v| f64::from(v[i])).fold(f64::MIN, f64::max))
            .collect();
        bad.extend(diff("reduce_in_place max", r, &buf, &max));
    } else {
        let mine: Vec<f64> = ins[r].iter().map(|&x| f64::from(x)).collect();
        bad.extend(diff(
            "reduce_in_place (not the root: untouched)",
            r,
            &buf,
            &mine,
        ));
    }

    let gathered: Vec<f64> = (0..n * count)
        .map(|i| f64::from(ins[i / count][i % count]))
        .collect();
    let mut all = vec![POISON; n * count];
    comm.all_gather_host(&ins[r], &mut all)?;
    bad.extend(diff("all_gather", r, &all, &gathered));

    let mut all = vec![POISON; n * count];
    all[r * count..(r + 1) * count].copy_from_slice(&ins[r]);
    comm.all_gather_in_place_host(&mut all)?;
    bad.extend(diff("all_gather_in_place", r, &all, &gathered));

    let mine: Vec<f64> = (0..count).map(|i| wide_sum(r * count + i)).collect();
    let mut recv = vec![POISON; count];
    comm.reduce_scatter_host(&wides[r], &mut recv, ReduceOp::Sum)?;
    bad.extend(diff("reduce_scatter", r, &recv, &mine));

    let mut data = wides[r].clone();
    comm.reduce_scatter_in_place_host(&mut data, ReduceOp::Sum)?;
    bad.extend(diff(
        "reduce_scatter_in_place",
        r,
        &data[r * count..(r + 1) * count],
        &mine,
    ));

    // Block p of rank q's send lands in block q of rank p's recv.
    let transposed: Vec<f64> = (0..n * count)
        .map(|i| f64::from(wides[i / count][r * count + i % count]))
        .collect();
    let mut recv = vec![POISON; n * count];
    comm.all_to_all_host(&wides[r], &mut recv)?;
    bad.extend(diff("all_to_all", r, &recv, &transposed));

    let root = 1 % n;
    let mut all = vec![POISON; if r == root { n * count } else { 0 }];
    comm.gather_host(&ins[r], &mut all, root)?;
    if r == root {
        bad.extend(diff("gather", r, &all, &gathered));
    }

    let mut mine = vec![POISON; count];
    let send: &[f32] = if r == 0 { &wides[0] } else { &[] };
    comm.scatter_host(send, &mut mine, 0)?;
    let want: Vec<f64> = wides[0][r * count..(r + 1) * count]
        .iter()
        .map(|&x| f64::from(x))
        .collect();
    bad.extend(diff("scatter", r, &mine, &want));
    Ok(bad)
}

fn every_form_on(transport: Transport, ranks: &[usize]) {
    let seed = streamcomm_testkit::seed();
    // 3 elements: eager; 40,000 per block: rendezvous over several 2 KiB slots.
    for &n in ranks {
        for count in [3usize, 40_000] {
            let bad: Vec<String> = on_ranks(n, transport.into(), move |comm| {
                every_form(&comm, seed ^ count as u64, count)
            })
            .into_iter()
            .flatten()
            .collect();
            assert!(
                bad.is_empty(),
                "{transport} {n} ranks, {count} per block: {bad:#?}"
            );
        }
    }
}

#[test]
fn every_host_form_over_shared_memory_on_2_to_5_ranks() {
    every_form_on(Transport::Shm, &[2, 3, 4, 5]);
}

#[test]
fn every_host_form_over_tcp_on_2_and_3_ranks() {
    every_form_on(Transport::Tcp, &[2, 3]);
}

#[test]
fn bad_lengths_are_refused_before_anything_runs() {
    let results = on_ranks(2, Transport::Shm.into(), |comm| {
        let msgs = [
            comm.all_gather_host(&[1.0f32; 3], &mut [0.0; 5])
                .unwrap_err()
                .to_string(),
            comm.reduce_scatter_host(&[1.0f32; 3], &mut [0.0; 2], ReduceOp::Sum)
                .unwrap_err()
                .to_string(),
            comm.all_to_all_host(&[1.0f32; 3], &mut [0.0; 3])
                .unwrap_err()
                .to_string(),
            comm.reduce_host(&[1.0f32; 3], &mut [0.0; 3], ReduceOp::Sum, 2)
                .unwrap_err()
                .to_string(),
        ];
        // Refused on every rank alike, so the communicator still works.
        let mut x = [comm.rank() as f32; 2];
        comm.all_reduce_in_place_host(&mut x, ReduceOp::Sum)?;
        Ok((msgs, x))
    });
    for (msgs, x) in results {
        assert!(
            msgs[0].contains("recv holds 5 elements, the call needs 6"),
            "{}",
            msgs[0]
        );
        assert!(
            msgs[1].contains("send holds 3 elements, the call needs 4"),
            "{}",
            msgs[1]
        );
        assert!(
            msgs[2].contains("not a multiple of the 2 ranks"),
            "{}",
            msgs[2]
        );
        assert!(msgs[3].contains("root 2 is not a rank of 2"), "{}", msgs[3]);
        assert_eq!(x, [1.0; 2]);
    }
}
