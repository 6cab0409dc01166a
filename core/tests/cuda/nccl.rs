//! A program written for `cudarc::nccl`, with its `use` line switched to
//! `streamcomm::cuda::nccl`: every method, every reduction operator, 2
//! ranks on streams of their own and 3 on the default stream, as
//! processes, f32, f16, bf16 and i32, the id shipped by hand as such
//! programs do, groups of sends and receives around a ring (both forms and
//! `group!`), errors as NCCL's codes with the reason kept, and
//! `from_devices` with several devices in one process.

use std::sync::Arc;

use half::{bf16, f16};
use streamcomm::Communicator;
use streamcomm::cuda::cudarc::driver::{CudaContext, CudaSlice, CudaStream};
// The one line a cudarc::nccl program changes:
// use cudarc::nccl::safe::{group_end, group_start, Comm, Id, ReduceOp};
use streamcomm::cuda::nccl::{Comm, Id, ReduceOp, group_end, group_start};
// What such programs also name: cudarc::nccl::{result, sys, NcclError, group}.
use streamcomm::cuda::nccl::{NcclError, group, result, sys};

use crate::backend::{
    Num, POISON, child_rank, data, download, gpu_present, launch, poisoned, upload,
};

const COUNT: usize = 1030;

#[test]
fn a_cudarc_nccl_program_runs_after_its_use_line_changes() {
    if !gpu_present() {
        return;
    }
    for n in [2, 3] {
        launch(
            module_path!(),
            n,
            streamcomm::config::DEFAULT_CUDA_WINDOW,
            "nccl",
        );
    }
}

/// The id the way a cudarc::nccl program ships it: rank 0 makes it, the
/// others get its 128 bytes (here over a host communicator; MPI or a file
/// elsewhere).
fn shipped_id(world: &Communicator) -> Id {
    let mut bytes = vec![0u8; 128];
    if world.rank() == 0 {
        let id = Id::new().unwrap();
        for (b, &c) in bytes.iter_mut().zip(id.internal()) {
            *b = c as u8;
        }
    }
    world.broadcast_host(&mut bytes, 0).unwrap();
    let mut internal = [0 as std::ffi::c_char; 128];
    for (c, &b) in internal.iter_mut().zip(bytes.iter()) {
        *c = b as std::ffi::c_char;
    }
    Id::uninit(internal)
}

/// Every method on `comm` for one dtype; returns mismatches.
fn every_method<T: Num + streamcomm::cuda::nccl::NcclType>(comm: &Comm, seed: u64) -> Vec<String> {
    let s = comm.stream();
    let (r, n) = (comm.rank(), comm.world_size());
    let ins: Vec<Vec<f64>> = (0..n).map(|q| data(seed, q, COUNT)).collect();
    let mut bad = Vec::new();
    let mut check = |what: &str, got: Vec<f64>, want: &dyn Fn(usize) -> f64| {
        for (i, &g) in got.iter().enumerate() {
            if g != want(i) && bad.len() < 8 {
                bad.push(format!("rank {r} {what} [{i}]: got {g}, want {}", want(i)));
            }
        }
    };
    let sum = |i: usize| ins.iter().map(|v| v[i]).sum::<f64>();
    let max = |i: usize| ins.iter().map(|v| v[i]).fold(f64::MIN, f64::max);
    let send: CudaSlice<T> = upload(&s, &ins[r]);

    let mut recv = poisoned::<T>(&s, COUNT);
    comm.all_reduce(&send, &mut recv, &ReduceOp::Sum).unwrap();
    check("all_reduce sum", download(&s, &recv), &sum);

    let mut buf = upload::<T>(&s, &ins[r]);
    comm.all_reduce_in_place(&mut buf, &ReduceOp::Max).unwrap();
    check("all_reduce_in_place max", download(&s, &buf), &max);

    // Every operator, each against its own reference (a face that maps one
    // operator to another fails here). Products use inputs in -2..=2 so
    // that they stay exact; every reference is rounded to T once, as the
    // device's result is (Avg on integers truncates, as NCCL's does).
    let small: Vec<Vec<f64>> = ins
        .iter()
        .map(|v| v.iter().map(|x| x.rem_euclid(5.0) - 2.0).collect())
        .collect();
    let ops = [
        (ReduceOp::Sum, "sum"),
        (ReduceOp::Prod, "prod"),
        (ReduceOp::Min, "min"),
        (ReduceOp::Max, "max"),
        (ReduceOp::Avg, "avg"),
    ];
    for (op, name) in ops {
        let input = if matches!(op, ReduceOp::Prod) {
            &small
        } else {
            &ins
        };
        let want = |i: usize| {
            let col = input.iter().map(|v| v[i]);
            let x = match op {
                ReduceOp::Sum => col.sum::<f64>(),
                ReduceOp::Prod => col.product::<f64>(),
                ReduceOp::Min => col.fold(f64::MAX, f64::min),
                ReduceOp::Max => col.fold(f64::MIN, f64::max),
                ReduceOp::Avg => col.sum::<f64>() / n as f64,
            };
            T::of(x).get()
        };
        let mine: CudaSlice<T> = upload(&s, &input[r]);
        let mut recv = poisoned::<T>(&s, COUNT);
        comm.all_reduce(&mine, &mut recv, &op).unwrap();
        check(&format!("all_reduce {name}"), download(&s, &recv), &want);
    }

    let root = n - 1;
    let mut recv = poisoned::<T>(&s, COUNT);
    let sendbuff = (r == root).then_some(&send);
    comm.broadcast(sendbuff, &mut recv, root as i32).unwrap();
    check("broadcast", download(&s, &recv), &|i| ins[root][i]);

    let mut buf = upload::<T>(&s, &ins[r]);
    comm.broadcast_in_place(&mut buf, 0).unwrap();
    check("broadcast_in_place", download(&s, &buf), &|i| ins[0][i]);

    let root = 1 % n;
    let mut recv = poisoned::<T>(&s, COUNT);
    let recvbuff = (r == root).then_some(&mut recv);
    comm.reduce(&send, recvbuff, &ReduceOp::Sum, root as i32)
        .unwrap();
    let got = download(&s, &recv);
    if r == root {
        check("reduce", got, &sum);
    } else {
        check("reduce (not the root: untouched)", got, &|_| POISON);
    }

    let mut buf = upload::<T>(&s, &ins[r]);
    comm.reduce_in_place(&mut buf, &ReduceOp::Sum, 0).unwrap();
    if r == 0 {
        check("reduce_in_place", download(&s, &buf), &sum);
    }

    let mut all = poisoned::<T>(&s, COUNT * n);
    comm.all_gather(&send, &mut all).unwrap();
    check("all_gather", download(&s, &all), &|i| {
        ins[i / COUNT][i % COUNT]
    });

    let block = COUNT / n;
    let big: Vec<Vec<f64>> = (0..n).map(|q| data(seed ^ 7, q, block * n)).collect();
    let send_all: CudaSlice<T> = upload(&s, &big[r]);
    let mut mine = poisoned::<T>(&s, block);
    comm.reduce_scatter(&send_all, &mut mine, &ReduceOp::Sum)
        .unwrap();
    check("reduce_scatter", download(&s, &mine), &|i| {
        big.iter().map(|v| v[r * block + i]).sum::<f64>()
    });

    // Around a ring, every rank sending first: a group keeps the pairs
    // from waiting on each other. Both forms.
    let (right, left) = ((r + 1) % n, (r + n - 1) % n);
    let mut inb = poisoned::<T>(&s, COUNT);
    {
        let mut group = comm.group();
        group.send(send.as_view(), right as i32).unwrap();
        group.recv(inb.as_view_mut(), left as i32).unwrap();
    }
    check("group ring", download(&s, &inb), &|i| ins[left][i]);
    let mut inb = poisoned::<T>(&s, COUNT);
    group_start().unwrap();
    comm.send(&send, right as i32).unwrap();
    comm.recv(&mut inb, left as i32).unwrap();
    group_end().unwrap();
    check("group_start ring", download(&s, &inb), &|i| ins[left][i]);
    let mut inb = poisoned::<T>(&s, COUNT);
    group!({
        comm.send(&send, right as i32)?;
        comm.recv(&mut inb, left as i32)?;
    })
    .unwrap();
    check("group! ring", download(&s, &inb), &|i| ins[left][i]);

    // Outside groups: rank 0 sends, rank 1 receives.
    if r < 2 {
        let mut inb = poisoned::<T>(&s, COUNT);
        if r == 0 {
            comm.send(&send, 1).unwrap();
        } else {
            comm.recv(&mut inb, 0).unwrap();
            check("send/recv", download(&s, &inb), &|i| ins[0][i]);
        }
    }
    s.synchronize().unwrap();
    if let Some(e) = comm.async_error() {
        bad.push(format!("rank {r}: {e}"));
    }
    bad
}

/// One rank of the test above.
#[test]
#[ignore = "a rank of the test above"]
fn child() {
    let (seed, world) = child_rank();
    let id = shipped_id(&world);
    // Two ranks on streams of their own, three on the context's default
    // stream, which is what cudarc programs (and cudarc's own nccl tests)
    // use.
    let ctx = CudaContext::new(0).unwrap();
    let stream: Arc<CudaStream> = if world.size() == 3 {
        ctx.default_stream()
    } else {
        ctx.new_stream().unwrap()
    };
    let comm = Comm::from_rank(stream, world.rank(), world.size(), id).unwrap();
    assert_eq!(result::get_nccl_version().unwrap(), 23000);
    let mut bad = every_method::<f32>(&comm, seed);
    bad.extend(every_method::<f16>(&comm, seed ^ 1));
    bad.extend(every_method::<bf16>(&comm, seed ^ 2));
    bad.extend(every_method::<i32>(&comm, seed ^ 3));
    // A peer that is no rank is refused, naming it.
    let s = comm.stream();
    let x = upload::<f32>(&s, &[1.0; 4]);
    let e = comm.send(&x, comm.world_size() as i32).unwrap_err();
    assert_eq!(e, NcclError(sys::ncclResult_t::ncclInvalidArgument));
    assert!(e.to_string().contains("not a rank"), "{e}");
    let full = streamcomm::cuda::nccl::last_error().expect("the full reason is kept");
    assert!(
        matches!(full, streamcomm::Error::InvalidArgument(_)),
        "{full}"
    );
    assert!(bad.is_empty(), "{bad:#?}");
    streamcomm_testkit::child_ran();
}

/// `Comm::from_devices`: one rank per device as threads of this process,
/// an all-reduce on every rank issued from this one thread inside a group
/// (as NCCL programs do with several GPUs), and a ring of sends.
#[test]
fn from_devices_makes_one_rank_per_device_in_this_process() {
    if !gpu_present() {
        return;
    }
    let devices = streamcomm::cuda::device_count().unwrap();
    if devices < 2 {
        streamcomm_testkit::skip(
            "from_devices_makes_one_rank_per_device_in_this_process",
            "fewer than 2 devices (the stand-in makes 2 with STREAMCOMM_STANDIN_DEVICES=2, as \
             scripts/gpu-check.sh does)",
        );
        return;
    }
    let seed = streamcomm_testkit::seed();
    let n = devices.min(3);
    let streams: Vec<_> = (0..n)
        .map(|d| CudaContext::new(d).unwrap().new_stream().unwrap())
        .collect();
    let comms = Comm::from_devices(streams).unwrap();
    let ins: Vec<Vec<f64>> = (0..n).map(|q| data(seed, q, COUNT)).collect();
    let sends: Vec<CudaSlice<f32>> = comms
        .iter()
        .map(|c| upload(&c.stream(), &ins[c.rank()]))
        .collect();
    let mut recvs: Vec<CudaSlice<f32>> =
        comms.iter().map(|c| poisoned(&c.stream(), COUNT)).collect();
    group_start().unwrap();
    for ((c, s), r) in comms.iter().zip(&sends).zip(recvs.iter_mut()) {
        c.all_reduce(s, r, &ReduceOp::Sum).unwrap();
    }
    group_end().unwrap();
    let mut inbs: Vec<CudaSlice<f32>> =
        comms.iter().map(|c| poisoned(&c.stream(), COUNT)).collect();
    group_start().unwrap();
    for ((c, s), inb) in comms.iter().zip(&sends).zip(inbs.iter_mut()) {
        let (r, n) = (c.rank(), c.world_size());
        c.send(s, ((r + 1) % n) as i32).unwrap();
        c.recv(inb, ((r + n - 1) % n) as i32).unwrap();
    }
    group_end().unwrap();
    let mut bad = Vec::new();
    for (c, (recv, inb)) in comms.iter().zip(recvs.iter().zip(&inbs)) {
        let (r, s) = (c.rank(), c.stream());
        let left = (r + n - 1) % n;
        for (i, (g, h)) in download(&s, recv)
            .into_iter()
            .zip(download(&s, inb))
            .enumerate()
        {
            let want = ins.iter().map(|v| v[i]).sum::<f64>();
            if (g != want || h != ins[left][i]) && bad.len() < 8 {
                bad.push(format!(
                    "rank {r} [{i}]: sum {g} (want {want}), ring {h} (want {})",
                    ins[left][i]
                ));
            }
        }
        assert!(c.async_error().is_none(), "{:?}", c.async_error());
    }
    assert!(bad.is_empty(), "{bad:#?}");
}
