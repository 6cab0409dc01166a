//! The monomorphic inner loops, over typed and aligned slices.
//!
//! Every collective spends its time here, and on the small hosts we target the
//! reduction has to keep up with memory bandwidth. The loops therefore take
//! typed slices (never bytes), process fixed-size blocks of [`LANES`] elements
//! so LLVM unrolls and vectorises them, and are instantiated once per
//! (type, operator) pair through [`Lane`]. Half-precision types are widened to
//! `f32` [`HALF_BLOCK`] elements at a time, reduced there, and rounded back
//! once per operation; the half loops take their conversions as arguments so
//! that `crate::x86` can run the same loops with F16C conversions, compiled
//! for AVX2, when the CPU has them.
//!
//! All loops are defensive about lengths: they stop at the shortest slice
//! instead of panicking (the public functions check lengths first).

use bytemuck::Pod;
use half::{bf16, f16};

use crate::element::{Element, HalfElement, Op};

/// Elements per block of the native loops (a few vector registers' worth).
pub(crate) const LANES: usize = 32;

/// Elements per block when widening half-precision types to `f32`
/// (two 256-byte `f32` blocks live on the stack).
pub(crate) const HALF_BLOCK: usize = 64;

/// A type with reduction loops: every [`Element`], plus `f16` and `bf16`.
pub(crate) trait Lane: Pod {
    /// `dst[i] = a[i] op b[i]`.
    fn binary<O: Op>(a: &[Self], b: &[Self], dst: &mut [Self]);
    /// `dst[i] = dst[i] op src[i]`.
    fn in_place<O: Op>(dst: &mut [Self], src: &[Self]);
    /// `buf[i] = buf[i] / divisor`; `divisor` is not 0.
    fn divide(buf: &mut [Self], divisor: usize);
}

impl<T: Element> Lane for T {
    #[inline]
    fn binary<O: Op>(a: &[T], b: &[T], dst: &mut [T]) {
        binary::<T, O>(a, b, dst);
    }

    #[inline]
    fn in_place<O: Op>(dst: &mut [T], src: &[T]) {
        in_place::<T, O>(dst, src);
    }

    #[inline]
    fn divide(buf: &mut [T], divisor: usize) {
        divide::<T>(buf, divisor);
    }
}

/// Implements [`Lane`] for a half type: the x86-64 SIMD path when the CPU has
/// it (see `crate::x86`), the portable block loops otherwise.
macro_rules! half_lane {
    ($($t:ty => $binary:ident, $in_place:ident, $divide:ident;)*) => {$(
        impl Lane for $t {
            #[inline]
            fn binary<O: Op>(a: &[$t], b: &[$t], dst: &mut [$t]) {
                #[cfg(target_arch = "x86_64")]
                if crate::x86::$binary::<O>(a, b, dst) {
                    return;
                }
                half_binary::<$t, O>(a, b, dst, <$t>::widen, <$t>::narrow);
            }

            #[inline]
            fn in_place<O: Op>(dst: &mut [$t], src: &[$t]) {
                #[cfg(target_arch = "x86_64")]
                if crate::x86::$in_place::<O>(dst, src) {
                    return;
                }
                half_in_place::<$t, O>(dst, src, <$t>::widen, <$t>::narrow);
            }

            #[inline]
            fn divide(buf: &mut [$t], divisor: usize) {
                #[cfg(target_arch = "x86_64")]
                if crate::x86::$divide(buf, divisor) {
                    return;
                }
                half_divide::<$t>(buf, divisor, <$t>::widen, <$t>::narrow);
            }
        }
    )*};
}

half_lane! {
    f16 => f16_binary, f16_in_place, f16_divide;
    bf16 => bf16_binary, bf16_in_place, bf16_divide;
}

/// `dst[i] = a[i] op b[i]` over the common length, in blocks of [`LANES`].
#[inline(always)]
fn binary<T: Element, O: Op>(a: &[T], b: &[T], dst: &mut [T]) {
    let n = dst.len().min(a.len()).min(b.len());
    let (a, b, dst) = (&a[..n], &b[..n], &mut dst[..n]);
    let mut dst_blocks = dst.chunks_exact_mut(LANES);
    let mut a_blocks = a.chunks_exact(LANES);
    let mut b_blocks = b.chunks_exact(LANES);
    for ((d, x), y) in (&mut dst_blocks).zip(&mut a_blocks).zip(&mut b_blocks) {
        for ((d, &x), &y) in d.iter_mut().zip(x).zip(y) {
            *d = O::apply(x, y);
        }
    }
    let tail = dst_blocks.into_remainder();
    for ((d, &x), &y) in tail
        .iter_mut()
        .zip(a_blocks.remainder())
        .zip(b_blocks.remainder())
    {
        *d = O::apply(x, y);
    }
}

/// `dst[i] = dst[i] op src[i]` over the common length, in blocks of [`LANES`].
#[inline(always)]
fn in_place<T: Element, O: Op>(dst: &mut [T], src: &[T]) {
    let n = dst.len().min(src.len());
    let (dst, src) = (&mut dst[..n], &src[..n]);
    let mut dst_blocks = dst.chunks_exact_mut(LANES);
    let mut src_blocks = src.chunks_exact(LANES);
    for (d, s) in (&mut dst_blocks).zip(&mut src_blocks) {
        for (d, &s) in d.iter_mut().zip(s) {
            *d = O::apply(*d, s);
        }
    }
    let tail = dst_blocks.into_remainder();
    for (d, &s) in tail.iter_mut().zip(src_blocks.remainder()) {
        *d = O::apply(*d, s);
    }
}

/// `buf[i] = buf[i] / divisor`, truncating for integers.
#[inline(always)]
fn divide<T: Element>(buf: &mut [T], divisor: usize) {
    match T::divisor(divisor) {
        Some(d) => {
            let mut blocks = buf.chunks_exact_mut(LANES);
            for block in &mut blocks {
                for x in block.iter_mut() {
                    *x = x.op_div(d);
                }
            }
            for x in blocks.into_remainder() {
                *x = x.op_div(d);
            }
        }
        // Only integers whose type cannot hold the divisor (e.g. i8 / 200).
        None => {
            for x in buf.iter_mut() {
                *x = x.div_wide(divisor);
            }
        }
    }
}

/// `dst[i] = narrow(widen(a[i]) op widen(b[i]))`, [`HALF_BLOCK`] elements at a
/// time. `widen` and `narrow` convert equally long slices.
#[inline(always)]
pub(crate) fn half_binary<H: Copy, O: Op>(
    a: &[H],
    b: &[H],
    dst: &mut [H],
    widen: impl Fn(&[H], &mut [f32]),
    narrow: impl Fn(&[f32], &mut [H]),
) {
    let mut wa = [0.0f32; HALF_BLOCK];
    let mut wb = [0.0f32; HALF_BLOCK];
    for ((ca, cb), cd) in a
        .chunks(HALF_BLOCK)
        .zip(b.chunks(HALF_BLOCK))
        .zip(dst.chunks_mut(HALF_BLOCK))
    {
        let n = cd.len().min(ca.len()).min(cb.len());
        let (wa, wb) = (&mut wa[..n], &mut wb[..n]);
        widen(&ca[..n], wa);
        widen(&cb[..n], wb);
        in_place::<f32, O>(wa, wb);
        narrow(wa, &mut cd[..n]);
    }
}

/// `dst[i] = narrow(widen(dst[i]) op widen(src[i]))`, [`HALF_BLOCK`] at a time.
#[inline(always)]
pub(crate) fn half_in_place<H: Copy, O: Op>(
    dst: &mut [H],
    src: &[H],
    widen: impl Fn(&[H], &mut [f32]),
    narrow: impl Fn(&[f32], &mut [H]),
) {
    let mut wd = [0.0f32; HALF_BLOCK];
    let mut ws = [0.0f32; HALF_BLOCK];
    for (cd, cs) in dst.chunks_mut(HALF_BLOCK).zip(src.chunks(HALF_BLOCK)) {
        let n = cd.len().min(cs.len());
        let (wd, ws) = (&mut wd[..n], &mut ws[..n]);
        widen(&cd[..n], wd);
        widen(&cs[..n], ws);
        in_place::<f32, O>(wd, ws);
        narrow(wd, &mut cd[..n]);
    }
}

/// `buf[i] = narrow(widen(buf[i]) / divisor)`.
#[inline(always)]
pub(crate) fn half_divide<H: Copy>(
    buf: &mut [H],
    divisor: usize,
    widen: impl Fn(&[H], &mut [f32]),
    narrow: impl Fn(&[f32], &mut [H]),
) {
    let mut w = [0.0f32; HALF_BLOCK];
    for chunk in buf.chunks_mut(HALF_BLOCK) {
        let w = &mut w[..chunk.len()];
        widen(chunk, w);
        divide::<f32>(w, divisor);
        narrow(w, chunk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::element::{MaxOp, ProdOp, SumOp};

    #[test]
    fn loops_cover_blocks_and_tails() {
        for n in [0, 1, LANES - 1, LANES, LANES + 1, 3 * LANES + 5] {
            let a: Vec<i32> = (0..n as i32).collect();
            let b: Vec<i32> = (0..n as i32).map(|x| 2 * x).collect();
            let mut dst = vec![0; n];
            <i32 as Lane>::binary::<SumOp>(&a, &b, &mut dst);
            assert!(dst.iter().enumerate().all(|(i, &x)| x == 3 * i as i32));
            <i32 as Lane>::in_place::<ProdOp>(&mut dst, &b);
            assert!(
                dst.iter()
                    .enumerate()
                    .all(|(i, &x)| x == 6 * (i * i) as i32)
            );
            <i32 as Lane>::divide(&mut dst, 6);
            assert!(dst.iter().enumerate().all(|(i, &x)| x == (i * i) as i32));
        }
    }

    #[test]
    fn half_loops_cover_blocks_and_tails() {
        for n in [0, 1, HALF_BLOCK - 1, HALF_BLOCK, 2 * HALF_BLOCK + 3] {
            let a: Vec<bf16> = (0..n).map(|i| bf16::from_f32(i as f32)).collect();
            let b: Vec<bf16> = (0..n).map(|i| bf16::from_f32(-(i as f32))).collect();
            let mut dst = vec![bf16::ZERO; n];
            <bf16 as Lane>::binary::<MaxOp>(&a, &b, &mut dst);
            assert_eq!(dst, a);
            <bf16 as Lane>::in_place::<SumOp>(&mut dst, &a);
            <bf16 as Lane>::divide(&mut dst, 2);
            assert_eq!(dst, a);
        }
    }

    #[test]
    fn mismatched_lengths_stop_at_the_shortest() {
        let mut dst = [0u8; 4];
        <u8 as Lane>::binary::<SumOp>(&[1, 2, 3], &[1, 1], &mut dst);
        assert_eq!(dst, [2, 3, 0, 0]);
        let mut dst = [f16::ONE; 3];
        <f16 as Lane>::in_place::<SumOp>(&mut dst, &[f16::ONE]);
        assert_eq!(dst, [f16::from_f32(2.0), f16::ONE, f16::ONE]);
    }
}
