// A program written for `cudarc::nccl::safe`, shared by two examples that
// differ in one line: the module they call `nccl` (cudarc's, which loads
// libnccl.so.2, or streamcomm's look-alike). Run as the ranks of a job
// (`RANK`, `WORLD_SIZE` from the launcher), the id shipped by hand through
// a file, it calls every method with f32, f16, bf16 and i32 and checks
// every element against an f64 reference, outputs poisoned first; it
// prints `rank R: OK <digest>`, the digest summing every result, so that
// the two faces can be compared.
//
// usage: <example> ID_FILE SEED

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits};
use half::{bf16, f16};
use nccl::{Comm, Id, NcclType, ReduceOp, group_end, group_start};

const COUNT: usize = 1030;
const POISON: f64 = 77.0;

trait Num: NcclType + DeviceRepr + ValidAsZeroBits + Copy + Unpin + 'static {
    fn of(x: f64) -> Self;
    fn get(self) -> f64;
}

impl Num for f32 {
    fn of(x: f64) -> Self {
        x as f32
    }
    fn get(self) -> f64 {
        f64::from(self)
    }
}
impl Num for i32 {
    fn of(x: f64) -> Self {
        x as i32
    }
    fn get(self) -> f64 {
        f64::from(self)
    }
}
impl Num for f16 {
    fn of(x: f64) -> Self {
        f16::from_f64(x)
    }
    fn get(self) -> f64 {
        self.to_f64()
    }
}
impl Num for bf16 {
    fn of(x: f64) -> Self {
        bf16::from_f64(x)
    }
    fn get(self) -> f64 {
        self.to_f64()
    }
}

/// Inputs: integers in -8..=8 (-2..=2 for products), exact in every type.
fn value(seed: u64, rank: usize, i: usize, small: bool) -> f64 {
    let mut x = seed
        .wrapping_mul(2654435761)
        .wrapping_add(rank as u64 * 7919)
        .wrapping_add(i as u64 * 104729);
    x ^= x >> 13;
    if small { (x % 5) as f64 - 2.0 } else { (x % 17) as f64 - 8.0 }
}

/// The f64 reference of reducing element `i` of every rank's input.
fn reduced(seed: u64, n: usize, op: &ReduceOp, small: bool, i: usize) -> f64 {
    let col = (0..n).map(|r| value(seed, r, i, small));
    match op {
        ReduceOp::Sum => col.sum(),
        ReduceOp::Prod => col.product(),
        ReduceOp::Max => col.fold(f64::MIN, f64::max),
        ReduceOp::Min => col.fold(f64::MAX, f64::min),
        ReduceOp::Avg => col.sum::<f64>() / n as f64,
    }
}

struct Run<'a> {
    comm: &'a Comm,
    stream: Arc<CudaStream>,
    rank: usize,
    n: usize,
    seed: u64,
    bad: Vec<String>,
    digest: f64,
}

impl Run<'_> {
    fn upload<T: Num>(&self, v: impl Iterator<Item = f64>) -> CudaSlice<T> {
        let host: Vec<T> = v.map(T::of).collect();
        self.stream.clone_htod(&host).unwrap()
    }

    fn poisoned<T: Num>(&self, n: usize) -> CudaSlice<T> {
        self.upload((0..n).map(|_| POISON))
    }

    fn mine<T: Num>(&self, n: usize, small: bool) -> CudaSlice<T> {
        self.upload((0..n).map(|i| value(self.seed, self.rank, i, small)))
    }

    fn check<T: Num>(&mut self, what: &str, got: &CudaSlice<T>, want: impl Fn(usize) -> f64) {
        let got = self.stream.clone_dtoh(got).unwrap();
        for (i, g) in got.into_iter().enumerate() {
            let (g, w) = (g.get(), T::of(want(i)).get());
            self.digest += g * ((i % 7) as f64 + 1.0);
            if g != w && self.bad.len() < 8 {
                let t = std::any::type_name::<T>();
                self.bad.push(format!("rank {} {t} {what} [{i}]: got {g}, want {w}", self.rank));
            }
        }
    }

    fn every_method<T: Num>(&mut self) {
        let (r, n, seed) = (self.rank, self.n, self.seed);
        for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg] {
            let small = matches!(op, ReduceOp::Prod);
            let send = self.mine::<T>(COUNT, small);
            let mut recv = self.poisoned::<T>(COUNT);
            self.comm.all_reduce(&send, &mut recv, &op).unwrap();
            self.check("all_reduce", &recv, |i| reduced(seed, n, &op, small, i));
            let mut buf = self.mine::<T>(COUNT, small);
            self.comm.all_reduce_in_place(&mut buf, &op).unwrap();
            self.check("all_reduce_in_place", &buf, |i| reduced(seed, n, &op, small, i));
        }
        let send = self.mine::<T>(COUNT, false);

        let root = n - 1;
        let mut recv = self.poisoned::<T>(COUNT);
        self.comm
            .broadcast((r == root).then_some(&send), &mut recv, root as i32)
            .unwrap();
        self.check("broadcast", &recv, |i| value(seed, root, i, false));
        let mut buf = self.mine::<T>(COUNT, false);
        self.comm.broadcast_in_place(&mut buf, 0).unwrap();
        self.check("broadcast_in_place", &buf, |i| value(seed, 0, i, false));

        let root = 1 % n;
        let mut recv = self.poisoned::<T>(COUNT);
        self.comm
            .reduce(&send, (r == root).then_some(&mut recv), &ReduceOp::Sum, root as i32)
            .unwrap();
        if r == root {
            self.check("reduce", &recv, |i| reduced(seed, n, &ReduceOp::Sum, false, i));
        } else {
            self.check("reduce (untouched)", &recv, |_| POISON);
        }
        let mut buf = self.mine::<T>(COUNT, false);
        self.comm.reduce_in_place(&mut buf, &ReduceOp::Max, 0).unwrap();
        if r == 0 {
            self.check("reduce_in_place", &buf, |i| reduced(seed, n, &ReduceOp::Max, false, i));
        }

        let mut all = self.poisoned::<T>(COUNT * n);
        self.comm.all_gather(&send, &mut all).unwrap();
        self.check("all_gather", &all, |i| value(seed, i / COUNT, i % COUNT, false));

        let big = self.mine::<T>(COUNT * n, false);
        let mut block = self.poisoned::<T>(COUNT);
        self.comm.reduce_scatter(&big, &mut block, &ReduceOp::Sum).unwrap();
        self.check("reduce_scatter", &block, |i| {
            reduced(seed, n, &ReduceOp::Sum, false, r * COUNT + i)
        });

        // Around a ring, every rank sending first: both group forms.
        let (right, left) = ((r + 1) % n, (r + n - 1) % n);
        let mut inb = self.poisoned::<T>(COUNT);
        {
            let mut group = self.comm.group();
            group.send(send.as_view(), right as i32).unwrap();
            group.recv(inb.as_view_mut(), left as i32).unwrap();
        }
        self.check("group ring", &inb, |i| value(seed, left, i, false));
        let mut inb = self.poisoned::<T>(COUNT);
        group_start().unwrap();
        self.comm.send(&send, right as i32).unwrap();
        self.comm.recv(&mut inb, left as i32).unwrap();
        group_end().unwrap();
        self.check("group_start ring", &inb, |i| value(seed, left, i, false));

        // Outside a group: rank 0 to rank 1.
        if r < 2 {
            let mut inb = self.poisoned::<T>(COUNT);
            if r == 0 {
                self.comm.send(&send, 1).unwrap();
            } else {
                self.comm.recv(&mut inb, 0).unwrap();
                self.check("send/recv", &inb, |i| value(seed, 0, i, false));
            }
        }
        self.stream.synchronize().unwrap();
    }
}

/// The id from rank 0, through `path`.
fn shipped_id(rank: usize, path: &str) -> Id {
    if rank == 0 {
        let id = Id::new().unwrap();
        let bytes: Vec<u8> = id.internal().iter().map(|&c| c as u8).collect();
        let tmp = format!("{path}.tmp");
        std::fs::write(&tmp, bytes).unwrap();
        std::fs::rename(&tmp, path).unwrap();
        return id;
    }
    let start = Instant::now();
    loop {
        if let Ok(bytes) = std::fs::read(path)
            && bytes.len() == 128
        {
            let mut internal = [0 as std::ffi::c_char; 128];
            for (c, b) in internal.iter_mut().zip(bytes) {
                *c = b as std::ffi::c_char;
            }
            return Id::uninit(internal);
        }
        assert!(start.elapsed() < Duration::from_secs(60), "rank {rank}: no id in {path}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    assert_eq!(args.len(), 3, "usage: {} ID_FILE SEED", args[0]);
    let env = |k: &str| -> usize { std::env::var(k).unwrap().parse().unwrap() };
    let (rank, n) = (env("RANK"), env("WORLD_SIZE"));
    let seed: u64 = args[2].parse().unwrap();
    let ctx = CudaContext::new(0).unwrap();
    // Three ranks on the default stream, as cudarc programs use; two on
    // streams of their own.
    let stream = if n == 3 { ctx.default_stream() } else { ctx.new_stream().unwrap() };
    let id = shipped_id(rank, &args[1]);
    let comm = Comm::from_rank(stream.clone(), rank, n, id).unwrap();
    assert_eq!((comm.rank(), comm.world_size()), (rank, n));
    let mut run = Run { comm: &comm, stream, rank, n, seed, bad: Vec::new(), digest: 0.0 };
    run.every_method::<f32>();
    run.every_method::<f16>();
    run.every_method::<bf16>();
    run.every_method::<i32>();
    assert!(run.bad.is_empty(), "{:#?}", run.bad);
    println!("rank {rank}: OK {}", run.digest);
}
