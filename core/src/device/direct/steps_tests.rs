//! The direct path's plans, run by a model of the device under random
//! interleavings of the ranks: every window, flag word and buffer is
//! simulated memory, each rank executes its steps in stream order one
//! operation at a time, and a flag round is what the stream enqueues (raise
//! this rank's word in every peer's area; wait for each peer's word; then
//! reset each). A scheduler picks which rank moves next, some ranks far
//! slower than others, so a write into a window that overtakes a peer's
//! read of it shows up as a wrong element, and a round that can never
//! complete as a deadlock. Several calls run back to back, so the rounds
//! that keep one call's writes behind the last call's reads are checked
//! too.

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{
    DirectExchange, DirectStep, GathervLayout, ScatterLayout, TWO_SHOT_MIN_BYTES, WindowLayout,
    direct_steps, exchange_steps, two_shot_chunk,
};
use crate::device::DevAddr;
use crate::device::call::{DeviceBuffers, DeviceCall, DeviceRange};
use crate::device::direct::window::Round;
use crate::plan::Collective;
use crate::{DataType, ReduceOp};

/// Bytes of an element: the model's elements are `u32`.
const ESZ: usize = 4;

/// Where rank `p`'s window starts.
fn window_base(p: usize) -> DevAddr {
    (1 + p as u64) << 32
}

/// Where rank `p`'s buffer `b` of call `c` starts.
fn buffer_base(c: usize, p: usize, b: usize) -> DevAddr {
    ((0x100 + 0x10 * c as u64 + 2 * p as u64 + b as u64) << 36) | 0x40
}

/// The windows of one rank of the model.
struct Layout {
    rank: usize,
    size: usize,
    capacity: usize,
}

impl WindowLayout for Layout {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn capacity(&self) -> usize {
        self.capacity
    }
    fn data(&self, owner: usize) -> DevAddr {
        window_base(owner)
    }
}

/// Simulated memory: regions of `u32` elements by base address.
#[derive(Default)]
struct Memory {
    regions: BTreeMap<DevAddr, Vec<u32>>,
}

impl Memory {
    fn add(&mut self, base: DevAddr, data: Vec<u32>) {
        self.regions.insert(base, data);
    }

    /// The region holding `[addr, addr + len)` elements, and the index.
    fn at(&mut self, addr: DevAddr, len: usize) -> (&mut Vec<u32>, usize) {
        let (&base, region) = self
            .regions
            .range_mut(..=addr)
            .next_back()
            .unwrap_or_else(|| panic!("address {addr:#x} is in no region"));
        assert_eq!((addr - base) % ESZ as u64, 0, "misaligned {addr:#x}");
        let i = ((addr - base) / ESZ as u64) as usize;
        assert!(
            i + len <= region.len(),
            "[{addr:#x}, +{len} elements) runs past its region of {} at {base:#x}",
            region.len()
        );
        (region, i)
    }

    fn read(&mut self, addr: DevAddr, len: usize) -> Vec<u32> {
        let (r, i) = self.at(addr, len);
        r[i..i + len].to_vec()
    }

    fn write(&mut self, addr: DevAddr, data: &[u32]) {
        let (r, i) = self.at(addr, data.len());
        r[i..i + data.len()].copy_from_slice(data);
    }
}

/// One operation of a stream, as the device runs it.
#[derive(Clone, Debug)]
enum Op {
    Step(DirectStep),
    /// Raise this rank's word of the round in every peer's area.
    Raise(Round),
    /// Wait until `from`'s word of the round in this rank's area is raised.
    Wait(Round, usize),
    /// Reset `from`'s word of the round in this rank's area.
    Reset(Round, usize),
}

/// The operations a rank's stream runs for `steps`.
fn ops(steps: Vec<DirectStep>, rank: usize, size: usize) -> Vec<Op> {
    let mut out = Vec::new();
    for step in steps {
        match step {
            DirectStep::Arrive(round) => {
                // As the stream enqueues a round: raise, wait for each
                // peer, then reset each peer's word.
                out.push(Op::Raise(round));
                let peers = (0..size).filter(|&p| p != rank);
                out.extend(peers.clone().map(|p| Op::Wait(round, p)));
                out.extend(peers.map(|p| Op::Reset(round, p)));
            }
            step => out.push(Op::Step(step)),
        }
    }
    out
}

/// Flag words: `(owner, round, from)` raised or not.
type Flags = BTreeMap<(usize, u8, usize), bool>;

/// Runs one operation of `rank`, or returns false when it must wait.
fn run_op(op: &Op, rank: usize, size: usize, mem: &mut Memory, flags: &mut Flags) -> bool {
    match op {
        Op::Step(DirectStep::Copy { dst, src, bytes }) => {
            assert_eq!(bytes % ESZ, 0);
            let data = mem.read(*src, bytes / ESZ);
            mem.write(*dst, &data);
        }
        Op::Step(DirectStep::Reduce { srcs, dsts, count }) => {
            let mut acc = vec![0u32; *count];
            for &s in srcs {
                for (a, x) in acc.iter_mut().zip(mem.read(s, *count)) {
                    *a = a.wrapping_add(x);
                }
            }
            for &d in dsts {
                mem.write(d, &acc);
            }
        }
        Op::Step(DirectStep::Arrive(_)) => unreachable!("lowered by `ops`"),
        Op::Raise(round) => {
            for p in (0..size).filter(|&p| p != rank) {
                flags.insert((p, *round as u8, rank), true);
            }
        }
        Op::Wait(round, from) => {
            return flags
                .get(&(rank, *round as u8, *from))
                .copied()
                .unwrap_or(false);
        }
        Op::Reset(round, from) => {
            flags.insert((rank, *round as u8, *from), false);
        }
    }
    true
}

/// One call of the model: what every rank passes and what it must get.
struct Call {
    collective: Collective,
    in_place: bool,
    /// Elements of the call's `count` (NCCL's meaning).
    count: usize,
    /// Set for an exchange (then `collective` and `count` are not used).
    exchange: Option<ModelExchange>,
}

/// The exchanges the direct path runs.
enum ModelExchange {
    /// Each rank's count; blocks go in reverse rank order, 3 elements apart.
    AllGatherv(Vec<usize>),
    /// `count` elements from every rank to `root`.
    Gather { root: usize, count: usize },
    /// `count` elements from `root` to every rank.
    Scatter { root: usize, count: usize },
}

impl ModelExchange {
    fn name(&self) -> &'static str {
        match self {
            ModelExchange::AllGatherv(_) => "all_gatherv",
            ModelExchange::Gather { .. } => "gather",
            ModelExchange::Scatter { .. } => "scatter",
        }
    }
}

impl Call {
    fn plan(collective: Collective, in_place: bool, count: usize) -> Call {
        Call {
            collective,
            in_place,
            count,
            exchange: None,
        }
    }
}

/// Displacements of an `all_gatherv` of `counts` (reverse rank order, a
/// gap of 3 before each block) and the output's length.
fn gatherv_displs(counts: &[usize]) -> (Vec<usize>, usize) {
    let mut displs = vec![0; counts.len()];
    let mut at = 0;
    for p in (0..counts.len()).rev() {
        at += 3;
        displs[p] = at;
        at += counts[p];
    }
    (displs, at)
}

/// Send and receive lengths of `c` on `rank`.
fn lens(c: &Call, size: usize) -> (usize, usize) {
    match c.collective {
        Collective::AllGather => (c.count, size * c.count),
        Collective::ReduceScatter => (size * c.count, c.count),
        Collective::AllToAll => (size * c.count, size * c.count),
        Collective::Barrier => (0, 0),
        _ => (c.count, c.count),
    }
}

/// What rank `r` must hold in its output after `c`, from every rank's
/// input (sums in `u64`, then the `u32` the model keeps), or `None` where
/// `r` has no output.
fn expected(c: &Call, inputs: &[Vec<u32>], r: usize) -> Option<Vec<u32>> {
    let n = inputs.len();
    let sum = |i: usize| inputs.iter().map(|v| u64::from(v[i])).sum::<u64>() as u32;
    let k = c.count;
    Some(match c.collective {
        Collective::AllReduce => (0..k).map(sum).collect(),
        Collective::Reduce { root } if root == r => (0..k).map(sum).collect(),
        Collective::Reduce { .. } | Collective::Barrier => return None,
        Collective::Broadcast { root } => inputs[root].clone(),
        Collective::AllGather => (0..n * k).map(|i| inputs[i / k][i % k]).collect(),
        Collective::ReduceScatter => (0..k).map(|i| sum(r * k + i)).collect(),
        Collective::AllToAll => (0..n * k).map(|i| inputs[i / k][r * k + i % k]).collect(),
    })
}

/// Runs `calls` back to back on `size` ranks with windows of `capacity`
/// bytes, one interleaving drawn from `rng`; checks every element.
fn run(calls: &[Call], size: usize, capacity: usize, rng: &mut StdRng) {
    let mut mem = Memory::default();
    for p in 0..size {
        mem.add(window_base(p), vec![0xdead_beef; capacity / ESZ]);
    }
    let mut streams: Vec<Vec<Op>> = vec![Vec::new(); size];
    let mut checks = Vec::new();
    for (ci, c) in calls.iter().enumerate() {
        if let Some(x) = &c.exchange {
            let layout = |r| Layout {
                rank: r,
                size,
                capacity,
            };
            let random = |rng: &mut StdRng, k: usize| -> Vec<u32> {
                (0..k).map(|_| rng.gen_range(0..1 << 24)).collect()
            };
            let mut run_on = |r: usize, steps: Option<Vec<DirectStep>>| {
                let steps = steps.expect("the direct path takes it");
                streams[r].extend(ops(steps, r, size));
            };
            match x {
                ModelExchange::AllGatherv(counts) => {
                    let (displs, len) = gatherv_displs(counts);
                    let inputs: Vec<Vec<u32>> = counts.iter().map(|&k| random(rng, k)).collect();
                    let mut want = vec![0xfeed_f00d; len];
                    for p in 0..size {
                        want[displs[p]..displs[p] + counts[p]].copy_from_slice(&inputs[p]);
                    }
                    for (r, input) in inputs.iter().enumerate() {
                        let (send, recv) = (buffer_base(ci, r, 0), buffer_base(ci, r, 1));
                        mem.add(send, input.clone());
                        mem.add(recv, vec![0xfeed_f00d; len]);
                        let g = GathervLayout {
                            send,
                            recv,
                            counts,
                            displs: &displs,
                            esz: ESZ,
                            only_to: None,
                        };
                        run_on(r, exchange_steps(&layout(r), &DirectExchange::Gather(g)));
                        checks.push((ci, r, recv, want.clone()));
                    }
                }
                &ModelExchange::Gather { root, count } => {
                    let counts = vec![count; size];
                    let displs: Vec<usize> = (0..size).map(|p| p * count).collect();
                    let inputs: Vec<Vec<u32>> = (0..size).map(|_| random(rng, count)).collect();
                    for r in 0..size {
                        let send = buffer_base(ci, r, 0);
                        mem.add(send, inputs[r].clone());
                        // Only the root has an output.
                        let recv = if r == root {
                            let recv = buffer_base(ci, r, 1);
                            mem.add(recv, vec![0xfeed_f00d; size * count]);
                            checks.push((ci, r, recv, inputs.concat()));
                            recv
                        } else {
                            0
                        };
                        let g = GathervLayout {
                            send,
                            recv,
                            counts: &counts,
                            displs: &displs,
                            esz: ESZ,
                            only_to: Some(root),
                        };
                        run_on(r, exchange_steps(&layout(r), &DirectExchange::Gather(g)));
                    }
                }
                &ModelExchange::Scatter { root, count } => {
                    let blocks = random(rng, size * count);
                    for r in 0..size {
                        // Only the root has an input.
                        let send = if r == root {
                            let send = buffer_base(ci, r, 0);
                            mem.add(send, blocks.clone());
                            send
                        } else {
                            0
                        };
                        let recv = buffer_base(ci, r, 1);
                        mem.add(recv, vec![0xfeed_f00d; count]);
                        checks.push((ci, r, recv, blocks[r * count..][..count].to_vec()));
                        let x = DirectExchange::Scatter(ScatterLayout {
                            send,
                            recv,
                            count,
                            root,
                            esz: ESZ,
                        });
                        run_on(r, exchange_steps(&layout(r), &x));
                    }
                }
            }
            continue;
        }
        let (send_len, recv_len) = lens(c, size);
        let inputs: Vec<Vec<u32>> = (0..size)
            .map(|_| (0..send_len).map(|_| rng.gen_range(0..1 << 24)).collect())
            .collect();
        for (r, stream) in streams.iter_mut().enumerate() {
            let (send, recv) = (buffer_base(ci, r, 0), buffer_base(ci, r, 1));
            let buffers = if c.collective == Collective::Barrier {
                DeviceBuffers::None
            } else if c.in_place {
                // NCCL's in-place offsets: the input is this rank's block
                // of the output (all-gather), or the whole buffer.
                let len = send_len.max(recv_len);
                let mut buf = vec![0xfeed_f00d; len];
                let at = if c.collective == Collective::AllGather {
                    r * c.count
                } else {
                    0
                };
                buf[at..at + send_len].copy_from_slice(&inputs[r]);
                mem.add(send, buf);
                DeviceBuffers::InPlace(DeviceRange { addr: send, len })
            } else {
                mem.add(send, inputs[r].clone());
                mem.add(recv, vec![0xfeed_f00d; recv_len]);
                DeviceBuffers::Separate {
                    send: DeviceRange {
                        addr: send,
                        len: send_len,
                    },
                    recv: DeviceRange {
                        addr: recv,
                        len: recv_len,
                    },
                }
            };
            let call = DeviceCall {
                collective: c.collective,
                dtype: DataType::U32,
                op: ReduceOp::Sum,
                buffers,
            };
            let layout = Layout {
                rank: r,
                size,
                capacity,
            };
            let steps = direct_steps(&call, &layout)
                .expect("a valid call")
                .expect("the direct path takes it");
            stream.extend(ops(steps, r, size));
            if let Some(want) = expected(c, &inputs, r) {
                // In place, a reduce-scatter's output is this rank's block.
                let out = match (c.in_place, c.collective) {
                    (false, _) => recv,
                    (true, Collective::ReduceScatter) => send + (r * c.count * ESZ) as u64,
                    (true, _) => send,
                };
                checks.push((ci, r, out, want));
            }
        }
    }
    // Each rank's speed: most run alike, some far slower or faster.
    let speed: Vec<u32> = (0..size)
        .map(|_| [1, 1, 8, 64][rng.gen_range(0..4)])
        .collect();
    let mut pc = vec![0usize; size];
    let mut flags = Flags::new();
    loop {
        let live: Vec<usize> = (0..size).filter(|&r| pc[r] < streams[r].len()).collect();
        if live.is_empty() {
            break;
        }
        // A rank that waits for a word nobody raised cannot move.
        let mut movable = Vec::new();
        for &r in &live {
            if let Op::Wait(round, from) = &streams[r][pc[r]]
                && !flags
                    .get(&(r, *round as u8, *from))
                    .copied()
                    .unwrap_or(false)
            {
                continue;
            }
            movable.push(r);
        }
        assert!(
            !movable.is_empty(),
            "deadlock: ranks at {:?}",
            live.iter()
                .map(|&r| (r, &streams[r][pc[r]]))
                .collect::<Vec<_>>()
        );
        let total: u32 = movable.iter().map(|&r| speed[r]).sum();
        let mut pick = rng.gen_range(0..total);
        let r = *movable
            .iter()
            .find(|&&r| {
                if pick < speed[r] {
                    true
                } else {
                    pick -= speed[r];
                    false
                }
            })
            .expect("a pick below the total");
        assert!(run_op(&streams[r][pc[r]], r, size, &mut mem, &mut flags));
        pc[r] += 1;
    }
    for (ci, r, out, want) in checks {
        let got = mem.read(out, want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g,
                w,
                "call {ci} ({}{}), rank {r}/{size}: element {i} of {}",
                calls[ci]
                    .exchange
                    .as_ref()
                    .map_or(calls[ci].collective.name(), ModelExchange::name),
                if calls[ci].in_place { ", in place" } else { "" },
                want.len()
            );
        }
    }
    // No flag is left raised: the next call starts from clean words.
    assert!(flags.values().all(|&up| !up), "a flag left raised");
}

/// Every collective, out of place and in place, several chunks each, back
/// to back, for 2 to 8 ranks.
#[test]
fn every_plan_keeps_its_writes_behind_the_peers_reads_under_random_interleavings() {
    let seed = streamcomm_testkit::seed();
    let mut rng = StdRng::seed_from_u64(seed);
    // Small windows: several chunks a call.
    let capacity = 2048;
    for size in 2..=8 {
        let mut calls: Vec<Call> = [
            Collective::AllReduce,
            Collective::AllGather,
            Collective::Barrier,
            Collective::ReduceScatter,
            Collective::AllToAll,
            Collective::Broadcast { root: size - 1 },
            Collective::Reduce { root: 1 },
            Collective::AllReduce,
        ]
        .into_iter()
        .enumerate()
        .map(|(i, collective)| {
            let in_place = i % 2 == 1 && collective != Collective::AllToAll;
            Call::plan(collective, in_place, 3 * capacity / ESZ / size + 5 * i)
        })
        .collect();
        // Exchanges between plans, so that the rounds around them are
        // checked too: an all_gatherv of blocks from none to several
        // windows, a gather and a scatter of several windows' parts.
        let exchange = |x| Call {
            exchange: Some(x),
            ..Call::plan(Collective::AllGather, false, 0)
        };
        let uneven = (0..size)
            .map(|p| [0, 7, capacity / ESZ, 3 * capacity / ESZ + 11][p % 4])
            .collect();
        calls.insert(3, exchange(ModelExchange::AllGatherv(uneven)));
        calls.insert(
            5,
            exchange(ModelExchange::Gather {
                root: size - 1,
                count: capacity / ESZ + 13,
            }),
        );
        calls.insert(
            7,
            exchange(ModelExchange::Scatter {
                root: 1,
                count: capacity / ESZ / 2 + 9,
            }),
        );
        for _ in 0..6 {
            run(&calls, size, capacity, &mut rng);
        }
    }
}

/// The two-shot all-reduce: many chunks and an odd tail, back to back
/// with itself and a one-shot call, for 3 to 8 ranks.
#[test]
fn the_two_shot_all_reduce_keeps_its_writes_behind_the_peers_reads() {
    let seed = streamcomm_testkit::seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let capacity = 16 << 10;
    for size in 3..=8 {
        let chunk = two_shot_chunk(capacity, ESZ, size);
        let count = (TWO_SHOT_MIN_BYTES / ESZ).next_multiple_of(chunk) + chunk / 3 + 1;
        let calls = [
            Call::plan(Collective::AllReduce, false, count),
            Call::plan(Collective::AllReduce, true, count + 17),
            Call::plan(Collective::AllReduce, false, 100),
        ];
        for _ in 0..3 {
            run(&calls, size, capacity, &mut rng);
        }
    }
}

/// The two-shot plan's shape: one flag round a chunk, one more, and the
/// final *done*, a round never following itself.
#[test]
fn the_two_shot_all_reduce_takes_one_flag_round_a_chunk() {
    let capacity = 64 << 10;
    for size in 3..=8 {
        let chunk = two_shot_chunk(capacity, ESZ, size);
        let chunks = (TWO_SHOT_MIN_BYTES / ESZ).div_ceil(chunk) + 2;
        let count = chunks * chunk - 7;
        assert!(count * ESZ >= TWO_SHOT_MIN_BYTES);
        let call = DeviceCall {
            collective: Collective::AllReduce,
            dtype: DataType::U32,
            op: ReduceOp::Sum,
            buffers: DeviceBuffers::Separate {
                send: DeviceRange {
                    addr: buffer_base(0, 0, 0),
                    len: count,
                },
                recv: DeviceRange {
                    addr: buffer_base(0, 0, 1),
                    len: count,
                },
            },
        };
        let layout = Layout {
            rank: 1,
            size,
            capacity,
        };
        let steps = direct_steps(&call, &layout).unwrap().unwrap();
        let rounds: Vec<Round> = steps
            .iter()
            .filter_map(|s| match s {
                DirectStep::Arrive(r) => Some(*r),
                _ => None,
            })
            .collect();
        assert_eq!(rounds.len(), chunks + 2, "{size} ranks: {rounds:?}");
        assert!(rounds.windows(2).all(|w| w[0] != w[1]), "{rounds:?}");
        assert_eq!(rounds.last(), Some(&Round::Done));
    }
}
