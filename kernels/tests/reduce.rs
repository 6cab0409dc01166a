//! Every dtype × op × length × alignment against independent references.
//!
//! Floats are checked against the operation computed in `f64` on the decoded
//! inputs (exact for `f64`, within one unit of rounding for narrower types);
//! integers against the operation computed in the integer type with explicit
//! wrapping arithmetic. Each run uses a fresh random seed, printed so a failure
//! can be replayed with `STREAMCOMM_TEST_SEED=<seed>`.

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use streamcomm_kernels::{
    DataType, KernelErrorKind, ReduceOp, divide, element_as_f64, reduce, reduce_in_place,
    write_element_from_f64,
};

const LENS: [usize; 6] = [0, 1, 7, 33, 1000, 4099];

/// Byte offsets of (a, b, dst) inside 8-byte aligned backing buffers.
const LAYOUTS: [(usize, usize, usize); 3] = [(0, 0, 0), (1, 1, 1), (0, 3, 1)];

fn rng() -> StdRng {
    StdRng::seed_from_u64(streamcomm_testkit::seed())
}

/// A byte buffer whose element 0 sits `offset` bytes past an 8-byte boundary;
/// the `offset` bytes in front are a guard that must stay untouched.
struct Buf {
    words: Vec<u64>,
    offset: usize,
    len: usize,
}

const GUARD: u8 = 0xA5;

impl Buf {
    fn new(offset: usize, len: usize) -> Buf {
        let words = vec![u64::from_ne_bytes([GUARD; 8]); (offset + len).div_ceil(8) + 1];
        Buf { words, offset, len }
    }

    fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[self.offset..self.offset + self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[self.offset..self.offset + self.len]
    }

    fn guards_intact(&self) -> bool {
        let all: &[u8] = bytemuck::cast_slice(&self.words);
        all[..self.offset]
            .iter()
            .chain(&all[self.offset + self.len..])
            .all(|&b| b == GUARD)
    }

    fn copy_of(src: &Buf, offset: usize) -> Buf {
        let mut b = Buf::new(offset, src.len);
        b.bytes_mut().copy_from_slice(src.bytes());
        b
    }
}

/// Random elements of `dtype`: floats uniform in ±`range`, integers any bit pattern.
fn random_buf(rng: &mut StdRng, dtype: DataType, n: usize, offset: usize, range: f64) -> Buf {
    let mut buf = Buf::new(offset, n * dtype.size());
    if dtype.is_float() {
        for i in 0..n {
            write_element_from_f64(dtype, buf.bytes_mut(), i, rng.gen_range(-range..range));
        }
    } else {
        rng.fill_bytes(buf.bytes_mut());
    }
    buf
}

/// Input magnitude for which `op` cannot overflow any float type.
fn float_range(op: ReduceOp) -> f64 {
    match op {
        ReduceOp::Prod => 8.0,
        _ => 1000.0,
    }
}

/// Relative and absolute tolerance of one rounding to `dtype`.
fn tolerance(dtype: DataType) -> (f64, f64) {
    match dtype {
        DataType::F64 => (0.0, 0.0),
        DataType::F32 => (2f64.powi(-23), 2f64.powi(-149)),
        DataType::F16 => (2f64.powi(-10), 2f64.powi(-24)),
        DataType::Bf16 => (2f64.powi(-7), 2f64.powi(-133)),
        _ => unreachable!("integer dtype"),
    }
}

fn f64_op(op: ReduceOp, x: f64, y: f64) -> f64 {
    match op {
        ReduceOp::Sum | ReduceOp::Avg => x + y,
        ReduceOp::Prod => x * y,
        ReduceOp::Min => x.min(y),
        ReduceOp::Max => x.max(y),
    }
}

/// Checks `got[i] == a[i] op b[i]` for a float dtype.
fn check_float(dtype: DataType, op: ReduceOp, a: &[u8], b: &[u8], got: &[u8], what: &str) {
    let (rel, abs) = tolerance(dtype);
    for i in 0..got.len() / dtype.size() {
        let x = element_as_f64(dtype, a, i);
        let y = element_as_f64(dtype, b, i);
        let want = f64_op(op, x, y);
        let got = element_as_f64(dtype, got, i);
        // Min/Max select an input: exact. Others: one rounding from the exact value.
        let tol = match op {
            ReduceOp::Min | ReduceOp::Max => 0.0,
            _ => rel * want.abs() + abs,
        };
        assert!(
            (got - want).abs() <= tol,
            "{what} {dtype} {op} element {i}: {x} op {y} = {got}, want {want} (±{tol})"
        );
    }
}

/// Integer reference arithmetic, written out per type with explicit wrapping ops.
trait Int: Copy + PartialEq + std::fmt::Debug + bytemuck::Pod {
    fn apply(op: ReduceOp, x: Self, y: Self) -> Self;
    fn div_trunc(self, d: usize) -> Self;
}

macro_rules! int_ref {
    ($($t:ty),*) => {$(
        impl Int for $t {
            fn apply(op: ReduceOp, x: $t, y: $t) -> $t {
                match op {
                    ReduceOp::Sum | ReduceOp::Avg => x.wrapping_add(y),
                    ReduceOp::Prod => x.wrapping_mul(y),
                    ReduceOp::Min => if x < y { x } else { y },
                    ReduceOp::Max => if x > y { x } else { y },
                }
            }
            fn div_trunc(self, d: usize) -> $t {
                // i128 division truncates toward zero; the quotient fits in $t.
                <$t>::try_from(i128::from(self) / d as i128).expect("quotient fits")
            }
        }
    )*};
}

int_ref!(i8, u8, i32, u32, i64, u64);

fn ints<T: Int>(bytes: &[u8]) -> Vec<T> {
    bytes
        .chunks_exact(std::mem::size_of::<T>())
        .map(bytemuck::pod_read_unaligned)
        .collect()
}

fn check_int_as<T: Int>(op: ReduceOp, a: &[u8], b: &[u8], got: &[u8], what: &str) {
    let (a, b, got) = (ints::<T>(a), ints::<T>(b), ints::<T>(got));
    for (i, ((&x, &y), &g)) in a.iter().zip(&b).zip(&got).enumerate() {
        let want = T::apply(op, x, y);
        assert_eq!(g, want, "{what} {op} element {i}: {x:?} op {y:?}");
    }
}

fn check(dtype: DataType, op: ReduceOp, a: &[u8], b: &[u8], got: &[u8], what: &str) {
    match dtype {
        DataType::I8 => check_int_as::<i8>(op, a, b, got, what),
        DataType::U8 => check_int_as::<u8>(op, a, b, got, what),
        DataType::I32 => check_int_as::<i32>(op, a, b, got, what),
        DataType::U32 => check_int_as::<u32>(op, a, b, got, what),
        DataType::I64 => check_int_as::<i64>(op, a, b, got, what),
        DataType::U64 => check_int_as::<u64>(op, a, b, got, what),
        _ => check_float(dtype, op, a, b, got, what),
    }
}

#[test]
fn every_dtype_op_length_and_alignment() {
    let mut rng = rng();
    let mut runs = 0;
    for dtype in DataType::ALL {
        for op in ReduceOp::ALL {
            for n in LENS {
                for (oa, ob, od) in LAYOUTS {
                    let what = format!("n={n} offsets=({oa},{ob},{od})");
                    let range = float_range(op);
                    let a = random_buf(&mut rng, dtype, n, oa, range);
                    let b = random_buf(&mut rng, dtype, n, ob, range);

                    let mut dst = random_buf(&mut rng, dtype, n, od, range);
                    reduce(dtype, op, a.bytes(), b.bytes(), dst.bytes_mut()).unwrap();
                    check(
                        dtype,
                        op,
                        a.bytes(),
                        b.bytes(),
                        dst.bytes(),
                        &format!("reduce {what}"),
                    );
                    assert!(dst.guards_intact(), "reduce {what} wrote outside dst");

                    let mut acc = Buf::copy_of(&a, od);
                    reduce_in_place(dtype, op, acc.bytes_mut(), b.bytes()).unwrap();
                    assert_eq!(acc.bytes(), dst.bytes(), "in place {dtype} {op} {what}");
                    check(
                        dtype,
                        op,
                        a.bytes(),
                        b.bytes(),
                        acc.bytes(),
                        &format!("in place {what}"),
                    );
                    assert!(acc.guards_intact(), "in place {what} wrote outside dst");

                    assert!(a.guards_intact() && b.guards_intact());
                    runs += 2;
                }
            }
        }
    }
    assert_eq!(runs, 10 * 5 * LENS.len() * LAYOUTS.len() * 2);
}

#[test]
fn avg_sums_then_divide_finalises() {
    let mut rng = rng();
    for dtype in DataType::ALL {
        for offset in [0, 1] {
            let n = 1000;
            let a = random_buf(&mut rng, dtype, n, offset, 1000.0);
            let b = random_buf(&mut rng, dtype, n, 0, 1000.0);
            let mut sum = Buf::copy_of(&a, offset);
            let mut avg = Buf::copy_of(&a, offset);
            reduce_in_place(dtype, ReduceOp::Sum, sum.bytes_mut(), b.bytes()).unwrap();
            reduce_in_place(dtype, ReduceOp::Avg, avg.bytes_mut(), b.bytes()).unwrap();
            assert_eq!(
                sum.bytes(),
                avg.bytes(),
                "{dtype}: Avg must reduce like Sum"
            );
            divide(dtype, avg.bytes_mut(), 2).unwrap();
            check_divided(dtype, sum.bytes(), avg.bytes(), 2);
        }
    }
}

/// Checks `got[i] == src[i] / d` (float: within one rounding; int: truncated).
fn check_divided(dtype: DataType, src: &[u8], got: &[u8], d: usize) {
    fn ints_div<T: Int>(src: &[u8], got: &[u8], d: usize, dtype: DataType) {
        for (i, (&x, &g)) in ints::<T>(src).iter().zip(&ints::<T>(got)).enumerate() {
            assert_eq!(g, x.div_trunc(d), "{dtype} element {i}: {x:?} / {d}");
        }
    }
    match dtype {
        DataType::I8 => ints_div::<i8>(src, got, d, dtype),
        DataType::U8 => ints_div::<u8>(src, got, d, dtype),
        DataType::I32 => ints_div::<i32>(src, got, d, dtype),
        DataType::U32 => ints_div::<u32>(src, got, d, dtype),
        DataType::I64 => ints_div::<i64>(src, got, d, dtype),
        DataType::U64 => ints_div::<u64>(src, got, d, dtype),
        _ => {
            let (rel, abs) = tolerance(dtype);
            for i in 0..src.len() / dtype.size() {
                let x = element_as_f64(dtype, src, i);
                let want = x / d as f64;
                let got = element_as_f64(dtype, got, i);
                let tol = rel * want.abs() + abs;
                assert!(
                    (got - want).abs() <= tol,
                    "{dtype} element {i}: {x} / {d} = {got}, want {want}"
                );
            }
        }
    }
}

#[test]
fn divide_floats_and_ints() {
    let mut rng = rng();
    let divisors = [1, 2, 3, 7, 127, 128, 200, 255, 256, 1000, 65537, usize::MAX];
    for dtype in DataType::ALL {
        for d in divisors {
            if dtype.is_float() && d > 65537 {
                continue; // float divisors are converted to the type first
            }
            for (n, offset) in [(0, 0), (1, 1), (33, 0), (4099, 1)] {
                let src = random_buf(&mut rng, dtype, n, offset, 1000.0);
                let mut buf = Buf::copy_of(&src, offset);
                divide(dtype, buf.bytes_mut(), d).unwrap();
                check_divided(dtype, src.bytes(), buf.bytes(), d);
                assert!(buf.guards_intact());
            }
        }
    }
}

#[test]
fn integer_division_truncates_toward_zero_at_the_extremes() {
    let mut buf: Vec<u8> = [i8::MIN, -7, 7, i8::MAX].map(|x| x as u8).to_vec();
    divide(DataType::I8, &mut buf, 2).unwrap();
    assert_eq!(buf, [-64i8, -3, 3, 63].map(|x| x as u8));
    let mut buf: Vec<u8> = [i8::MIN, i8::MAX].map(|x| x as u8).to_vec();
    divide(DataType::I8, &mut buf, 128).unwrap();
    assert_eq!(buf, [-1i8, 0].map(|x| x as u8));
    let mut buf = u64::MAX.to_ne_bytes().to_vec();
    divide(DataType::U64, &mut buf, usize::MAX).unwrap();
    assert_eq!(buf, (u64::MAX / usize::MAX as u64).to_ne_bytes());
}

#[test]
fn float_min_max_return_the_number_when_one_operand_is_nan() {
    for dtype in [DataType::F32, DataType::F64, DataType::F16, DataType::Bf16] {
        let mut a = vec![0u8; 3 * dtype.size()];
        let mut b = a.clone();
        for (i, (x, y)) in [(f64::NAN, 2.0), (1.0, f64::NAN), (f64::NAN, f64::NAN)]
            .into_iter()
            .enumerate()
        {
            write_element_from_f64(dtype, &mut a, i, x);
            write_element_from_f64(dtype, &mut b, i, y);
        }
        for (op, first) in [(ReduceOp::Min, 2.0), (ReduceOp::Max, 2.0)] {
            let mut dst = vec![0u8; a.len()];
            reduce(dtype, op, &a, &b, &mut dst).unwrap();
            assert_eq!(element_as_f64(dtype, &dst, 0), first, "{dtype} {op}");
            assert_eq!(element_as_f64(dtype, &dst, 1), 1.0, "{dtype} {op}");
            assert!(element_as_f64(dtype, &dst, 2).is_nan(), "{dtype} {op}");
        }
        let mut dst = vec![0u8; a.len()];
        reduce(dtype, ReduceOp::Sum, &a, &b, &mut dst).unwrap();
        assert!((0..3).all(|i| element_as_f64(dtype, &dst, i).is_nan()));
    }
}

#[test]
fn half_types_round_once_per_operation() {
    // 1 + 2^-11 is not an f16; in f32 it is, and rounds (ties to even) to 1.
    let one = half::f16::ONE.to_bits().to_ne_bytes();
    let tiny = half::f16::from_f64(2f64.powi(-11)).to_bits().to_ne_bytes();
    let mut dst = [0u8; 2];
    reduce(DataType::F16, ReduceOp::Sum, &one, &tiny, &mut dst).unwrap();
    assert_eq!(element_as_f64(DataType::F16, &dst, 0), 1.0);
    // 256 + 1 in bf16 (8 significant bits) ties to even: 256.
    let mut a = [0u8; 2];
    let mut b = [0u8; 2];
    write_element_from_f64(DataType::Bf16, &mut a, 0, 256.0);
    write_element_from_f64(DataType::Bf16, &mut b, 0, 1.0);
    reduce_in_place(DataType::Bf16, ReduceOp::Sum, &mut a, &b).unwrap();
    assert_eq!(element_as_f64(DataType::Bf16, &a, 0), 256.0);
}

#[test]
fn zero_divisor_is_an_error_and_writes_nothing() {
    for dtype in DataType::ALL {
        let mut buf = vec![7u8; 4 * dtype.size()];
        let err = divide(dtype, &mut buf, 0).unwrap_err();
        assert_eq!(err.kind(), &KernelErrorKind::ZeroDivisor);
        assert_eq!(err.dtype(), dtype);
        assert!(err.to_string().contains("divisor is 0"), "{err}");
        assert!(buf.iter().all(|&b| b == 7));
    }
}

#[test]
fn mismatched_lengths_are_errors() {
    let a = [1u8; 16];
    let b = [2u8; 12];
    let mut dst = [0u8; 16];
    let err = reduce(DataType::F32, ReduceOp::Sum, &a, &b, &mut dst).unwrap_err();
    assert_eq!(
        err.kind(),
        &KernelErrorKind::LengthMismatch {
            slice: "b",
            len: 12,
            dst_len: 16
        }
    );
    assert_eq!(err.op(), Some(ReduceOp::Sum));
    let msg = err.to_string();
    assert!(
        msg.contains("f32") && msg.contains("12") && msg.contains("16"),
        "{msg}"
    );
    assert_eq!(dst, [0u8; 16]);

    let err = reduce(DataType::U8, ReduceOp::Max, &a[..3], &a, &mut dst).unwrap_err();
    assert!(matches!(
        err.kind(),
        KernelErrorKind::LengthMismatch {
            slice: "a",
            len: 3,
            ..
        }
    ));

    let mut dst = [0u8; 8];
    let err = reduce_in_place(DataType::I64, ReduceOp::Prod, &mut dst, &a).unwrap_err();
    assert_eq!(
        err.kind(),
        &KernelErrorKind::LengthMismatch {
            slice: "src",
            len: 16,
            dst_len: 8
        }
    );
    assert_eq!(err.call(), "reduce_in_place");
    assert_eq!(dst, [0u8; 8]);
}

#[test]
fn partial_elements_are_errors() {
    let a = [1u8; 7];
    let mut dst = [0u8; 7];
    let err = reduce(DataType::F32, ReduceOp::Sum, &a, &a, &mut dst).unwrap_err();
    assert_eq!(
        err.kind(),
        &KernelErrorKind::PartialElement {
            slice: "a",
            len: 7,
            elem_size: 4
        }
    );
    let msg = err.to_string();
    assert!(
        msg.contains("f32") && msg.contains('7') && msg.contains('4'),
        "{msg}"
    );
    assert_eq!(dst, [0u8; 7]);

    let mut dst6 = [0u8; 6];
    let err = reduce_in_place(DataType::U32, ReduceOp::Min, &mut dst6, &a[..6]).unwrap_err();
    assert!(matches!(
        err.kind(),
        KernelErrorKind::PartialElement {
            slice: "dst",
            len: 6,
            ..
        }
    ));

    let mut buf = [0u8; 3];
    let err = divide(DataType::Bf16, &mut buf, 2).unwrap_err();
    assert!(matches!(
        err.kind(),
        KernelErrorKind::PartialElement {
            slice: "buf",
            len: 3,
            ..
        }
    ));

    // Whole elements of a 1-byte type are always fine, even at odd lengths.
    let mut dst = [0u8; 7];
    reduce(DataType::I8, ReduceOp::Sum, &a, &a, &mut dst).unwrap();
    assert_eq!(dst, [2u8; 7]);

    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(err);
    assert!(boxed.to_string().starts_with("divide(bf16)"));
}

#[test]
fn empty_slices_are_fine_for_every_dtype() {
    for dtype in DataType::ALL {
        for op in ReduceOp::ALL {
            reduce(dtype, op, &[], &[], &mut []).unwrap();
            reduce_in_place(dtype, op, &mut [], &[]).unwrap();
        }
        divide(dtype, &mut [], 3).unwrap();
    }
}
