//! Reduce-copy kernels on a GPU: every dtype × op, 1–3 sources, 1–2
//! destinations, in place, misaligned (scalar path) and 16-byte aligned
//! (vector path), prime counts (131071, 1000003; 8191 on the CPU stand-in).
//! Fresh random inputs; references computed on the
//! host in f64 (floats) or i128 (integers); outputs poisoned first and the
//! element past the end checked untouched. Skips without a GPU.

mod common;

use std::time::Duration;

use half::{bf16, f16};
use rand::{Rng, SeedableRng};
use streamcomm_gpu::{DeviceBuffer, GpuConfig, Kernels, ReduceCopy, Stream};
use streamcomm_kernels::{DataType, ReduceOp};

#[derive(Clone, Copy, Debug, PartialEq)]
enum V {
    F(f64),
    I(i128),
}

fn get(d: DataType, b: &[u8], i: usize) -> V {
    let s = d.size();
    let x = &b[i * s..(i + 1) * s];
    match d {
        DataType::F32 => V::F(f32::from_le_bytes(x.try_into().unwrap()) as f64),
        DataType::F64 => V::F(f64::from_le_bytes(x.try_into().unwrap())),
        DataType::F16 => V::F(f16::from_le_bytes(x.try_into().unwrap()).to_f64()),
        DataType::Bf16 => V::F(bf16::from_le_bytes(x.try_into().unwrap()).to_f64()),
        DataType::I8 => V::I(x[0] as i8 as i128),
        DataType::U8 => V::I(x[0] as i128),
        DataType::I32 => V::I(i32::from_le_bytes(x.try_into().unwrap()) as i128),
        DataType::U32 => V::I(u32::from_le_bytes(x.try_into().unwrap()) as i128),
        DataType::I64 => V::I(i64::from_le_bytes(x.try_into().unwrap()) as i128),
        DataType::U64 => V::I(u64::from_le_bytes(x.try_into().unwrap()) as i128),
    }
}

fn put(d: DataType, b: &mut [u8], i: usize, v: V) {
    let s = d.size();
    let x = &mut b[i * s..(i + 1) * s];
    match (d, v) {
        (DataType::F32, V::F(f)) => x.copy_from_slice(&(f as f32).to_le_bytes()),
        (DataType::F64, V::F(f)) => x.copy_from_slice(&f.to_le_bytes()),
        (DataType::F16, V::F(f)) => x.copy_from_slice(&f16::from_f64(f).to_le_bytes()),
        (DataType::Bf16, V::F(f)) => x.copy_from_slice(&bf16::from_f64(f).to_le_bytes()),
        (_, V::I(n)) => x.copy_from_slice(&n.to_le_bytes()[..s]),
        _ => unreachable!(),
    }
}

/// Wraps `n` to the integer type's range (two's complement).
fn wrap(d: DataType, n: i128) -> i128 {
    let bits = 8 * d.size() as u32;
    let m = n & ((1i128 << bits) - 1);
    let signed = matches!(d, DataType::I8 | DataType::I32 | DataType::I64);
    if signed && m >= 1i128 << (bits - 1) {
        m - (1i128 << bits)
    } else {
        m
    }
}

fn reference(d: DataType, op: ReduceOp, xs: &[V], div: u32) -> V {
    match xs[0] {
        V::F(_) => {
            let f: Vec<f64> = xs
                .iter()
                .map(|v| if let V::F(f) = v { *f } else { 0.0 })
                .collect();
            V::F(match op {
                ReduceOp::Sum => f.iter().sum(),
                ReduceOp::Avg => f.iter().sum::<f64>() / div as f64,
                ReduceOp::Prod => f.iter().product(),
                ReduceOp::Min => f.iter().copied().fold(f64::INFINITY, f64::min),
                ReduceOp::Max => f.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            })
        }
        V::I(_) => {
            let n: Vec<i128> = xs
                .iter()
                .map(|v| if let V::I(n) = v { *n } else { 0 })
                .collect();
            V::I(match op {
                ReduceOp::Sum => wrap(d, n.iter().fold(0i128, |a, b| a.wrapping_add(*b))),
                ReduceOp::Avg => {
                    wrap(d, n.iter().fold(0i128, |a, b| a.wrapping_add(*b))) / div as i128
                }
                ReduceOp::Prod => wrap(d, n.iter().fold(1i128, |a, b| a.wrapping_mul(*b))),
                ReduceOp::Min => *n.iter().min().unwrap(),
                ReduceOp::Max => *n.iter().max().unwrap(),
            })
        }
    }
}

/// Absolute rounding error of the output type near zero (half of f16's
/// smallest subnormal step; bf16 shares f32's range, so its step is negligible).
fn abs_tol(d: DataType) -> f64 {
    match d {
        DataType::F16 => 2f64.powi(-25),
        DataType::Bf16 => 2f64.powi(-133),
        _ => 0.0,
    }
}

/// Relative unit roundoff of the output type and of the accumulation type.
fn eps(d: DataType) -> (f64, f64) {
    match d {
        DataType::F64 => (f64::EPSILON, f64::EPSILON),
        DataType::F16 => (2f64.powi(-10), f32::EPSILON as f64),
        DataType::Bf16 => (2f64.powi(-7), f32::EPSILON as f64),
        _ => (f32::EPSILON as f64, f32::EPSILON as f64),
    }
}

fn close(d: DataType, op: ReduceOp, got: V, want: V, xs: &[V], div: u32) -> bool {
    match (got, want) {
        (V::F(g), V::F(w)) => {
            let (out, acc) = eps(d);
            let mag: f64 = xs
                .iter()
                .map(|v| if let V::F(f) = v { f.abs() } else { 0.0 })
                .sum();
            let tol = match op {
                ReduceOp::Min | ReduceOp::Max => 0.0,
                ReduceOp::Prod => (xs.len() as f64 + 1.0) * acc * w.abs() + out * w.abs(),
                ReduceOp::Sum | ReduceOp::Avg => {
                    (4.0 * acc * mag) / if op == ReduceOp::Avg { div as f64 } else { 1.0 }
                        + out * w.abs()
                }
            };
            (g - w).abs() <= tol + abs_tol(d) + 1e-300
        }
        (g, w) => g == w,
    }
}

fn random(d: DataType, rng: &mut impl Rng) -> V {
    if d.is_float() {
        V::F(rng.gen_range(-2.0..2.0))
    } else {
        V::I(rng.r#gen::<i128>())
    }
}

#[test]
fn every_dtype_and_op_on_the_device() {
    let Some(device) = common::device_or_skip("every_dtype_and_op_on_the_device") else {
        return;
    };
    let stand_in = common::is_stand_in(&device);
    let kernels = Kernels::load(&device, &GpuConfig::from_env()).expect("kernels");
    let stream = Stream::new(&device).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(streamcomm_testkit::seed());
    // (sources, destinations, element offset, in place)
    let shapes = [
        (1, 1, 0, false),
        (2, 1, 0, false),
        (3, 2, 0, false),
        (2, 1, 1, false),
        (2, 1, 0, true),
    ];
    let mut checked = 0usize;
    for d in DataType::ALL {
        for op in ReduceOp::ALL {
            for (shape, &(nsrcs, ndsts, offset, in_place)) in shapes.iter().enumerate() {
                // 1_000_003 (prime) makes every dtype loop over its grid; it is
                // run for one shape only to keep the test short. The stand-in
                // has no grid (a kernel is a host loop): a smaller prime there.
                let large = match (stand_in, shape) {
                    (true, _) => 8_191,
                    (false, 1) => 1_000_003,
                    (false, _) => 131_071,
                };
                for count in [1usize, 4099, large] {
                    let s = d.size();
                    let bytes = (count + offset + 1) * s; // +1: the guard element
                    let div = rng.gen_range(1..=8u32);
                    let mut inputs = Vec::new();
                    let mut srcs = Vec::new();
                    let mut src_ptrs = Vec::new();
                    for _ in 0..nsrcs {
                        let mut host = vec![0u8; bytes];
                        for i in 0..count + offset + 1 {
                            put(d, &mut host, i, random(d, &mut rng));
                        }
                        let mut buf = DeviceBuffer::alloc(&device, bytes).unwrap();
                        buf.copy_from_host(&host).unwrap();
                        src_ptrs.push(buf.as_raw() + (offset * s) as u64);
                        inputs.push(host);
                        srcs.push(buf);
                    }
                    let mut dsts = Vec::new();
                    let mut dst_ptrs = Vec::new();
                    if in_place {
                        dst_ptrs.push(src_ptrs[0]);
                    } else {
                        for _ in 0..ndsts {
                            let mut buf = DeviceBuffer::alloc(&device, bytes).unwrap();
                            buf.fill(0xA5).unwrap();
                            dst_ptrs.push(buf.as_raw() + (offset * s) as u64);
                            dsts.push(buf);
                        }
                    }
                    let work = ReduceCopy {
                        srcs: &src_ptrs,
                        dsts: &dst_ptrs,
                        count,
                        avg_divisor: div,
                    };
                    // SAFETY: every pointer addresses `count` elements of a live
                    // buffer, kept until the stream is synchronised below.
                    unsafe { kernels.reduce_copy(&stream, d, op, &work) }.unwrap();
                    stream.synchronize_timeout(Duration::from_secs(60)).unwrap();
                    let outs: Vec<&DeviceBuffer> = if in_place {
                        vec![&srcs[0]]
                    } else {
                        dsts.iter().collect()
                    };
                    for (k, out) in outs.iter().enumerate() {
                        let mut host = vec![0u8; bytes];
                        out.copy_to_host(&mut host).unwrap();
                        for i in 0..count {
                            let xs: Vec<V> = inputs.iter().map(|h| get(d, h, offset + i)).collect();
                            let want = reference(d, op, &xs, div);
                            let got = get(d, &host, offset + i);
                            assert!(
                                close(d, op, got, want, &xs, div),
                                "{d} {op} srcs {nsrcs} dst {k} offset {offset} in_place {in_place} \
                                 count {count} element {i}: got {got:?}, want {want:?} from {xs:?}"
                            );
                        }
                        let guard = offset + count;
                        let untouched = if in_place {
                            inputs[0][guard * s..(guard + 1) * s].to_vec()
                        } else {
                            vec![0xA5; s]
                        };
                        assert_eq!(
                            &host[guard * s..(guard + 1) * s],
                            &untouched[..],
                            "{d} {op}: wrote past the end"
                        );
                        checked += count;
                    }
                }
            }
        }
    }
    eprintln!("checked {checked} elements");
}
