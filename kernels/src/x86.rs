//! x86-64 half-precision loops compiled for AVX2 (+F16C), chosen at run time.
//!
//! The crate is built for the x86-64 baseline (SSE2), where widening and
//! rounding `f16` costs a few dozen instructions per four elements: measured,
//! the portable `f16` reduction ran at about 1 GB/s against more than 20 GB/s
//! for `f32`. Nearly every x86-64 server since 2013 has F16C, whose
//! `vcvtph2ps`/`vcvtps2ph` convert eight elements in one instruction, and AVX2.
//! So each half-precision loop exists a second time here, compiled with those
//! features enabled, and is used when `is_x86_feature_detected!` (cached by
//! std) finds them; the check costs one atomic load per call. `bf16` has no
//! conversion instruction below AVX-512, but its portable bit manipulation
//! vectorises twice as wide under AVX2.
//!
//! The results are bit-for-bit those of the portable loops: F16C rounds to
//! nearest-even and quiets NaNs exactly like [`crate::half_bits`] (tested
//! below).
//!
//! Every function returns `false`, having done nothing, when the CPU lacks the
//! features; the caller then runs the portable loop.

use std::arch::x86_64::{
    __m128i, __m256, _MM_FROUND_TO_NEAREST_INT, _mm256_cvtph_ps, _mm256_cvtps_ph,
};

use bytemuck::{cast, cast_slice, pod_read_unaligned};
use half::{bf16, f16};

use crate::element::{HalfElement, Op};
use crate::half_bits;
use crate::loops::{half_binary, half_divide, half_in_place};

/// True when the CPU has AVX2 and F16C.
#[inline]
fn has_avx2_f16c() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c")
}

/// True when the CPU has AVX2.
#[inline]
fn has_avx2() -> bool {
    is_x86_feature_detected!("avx2")
}

/// `f16` `dst = a op b` with F16C; `false` if the CPU lacks AVX2 or F16C.
#[inline]
pub(crate) fn f16_binary<O: Op>(a: &[f16], b: &[f16], dst: &mut [f16]) -> bool {
    if !has_avx2_f16c() {
        return false;
    }
    // SAFETY: the CPU has AVX2 and F16C, which is all the function requires.
    unsafe { f16_binary_f16c::<O>(a, b, dst) };
    true
}

/// `f16` `dst = dst op src` with F16C; `false` if the CPU lacks AVX2 or F16C.
#[inline]
pub(crate) fn f16_in_place<O: Op>(dst: &mut [f16], src: &[f16]) -> bool {
    if !has_avx2_f16c() {
        return false;
    }
    // SAFETY: the CPU has AVX2 and F16C, which is all the function requires.
    unsafe { f16_in_place_f16c::<O>(dst, src) };
    true
}

/// `f16` `buf = buf / divisor` with F16C; `false` if the CPU lacks AVX2 or F16C.
#[inline]
pub(crate) fn f16_divide(buf: &mut [f16], divisor: usize) -> bool {
    if !has_avx2_f16c() {
        return false;
    }
    // SAFETY: the CPU has AVX2 and F16C, which is all the function requires.
    unsafe { f16_divide_f16c(buf, divisor) };
    true
}

/// `bf16` `dst = a op b` with AVX2; `false` if the CPU lacks AVX2.
#[inline]
pub(crate) fn bf16_binary<O: Op>(a: &[bf16], b: &[bf16], dst: &mut [bf16]) -> bool {
    if !has_avx2() {
        return false;
    }
    // SAFETY: the CPU has AVX2, which is all the function requires.
    unsafe { bf16_binary_avx2::<O>(a, b, dst) };
    true
}

/// `bf16` `dst = dst op src` with AVX2; `false` if the CPU lacks AVX2.
#[inline]
pub(crate) fn bf16_in_place<O: Op>(dst: &mut [bf16], src: &[bf16]) -> bool {
    if !has_avx2() {
        return false;
    }
    // SAFETY: the CPU has AVX2, which is all the function requires.
    unsafe { bf16_in_place_avx2::<O>(dst, src) };
    true
}

/// `bf16` `buf = buf / divisor` with AVX2; `false` if the CPU lacks AVX2.
#[inline]
pub(crate) fn bf16_divide(buf: &mut [bf16], divisor: usize) -> bool {
    if !has_avx2() {
        return false;
    }
    // SAFETY: the CPU has AVX2, which is all the function requires.
    unsafe { bf16_divide_avx2(buf, divisor) };
    true
}

/// # Safety
///
/// The CPU must support AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
unsafe fn f16_binary_f16c<O: Op>(a: &[f16], b: &[f16], dst: &mut [f16]) {
    half_binary::<f16, O>(
        a,
        b,
        dst,
        // SAFETY: only called from here, and this function requires F16C.
        |s, d| unsafe { widen_f16c(s, d) },
        // SAFETY: as above.
        |s, d| unsafe { narrow_f16c(s, d) },
    );
}

/// # Safety
///
/// The CPU must support AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
unsafe fn f16_in_place_f16c<O: Op>(dst: &mut [f16], src: &[f16]) {
    half_in_place::<f16, O>(
        dst,
        src,
        // SAFETY: only called from here, and this function requires F16C.
        |s, d| unsafe { widen_f16c(s, d) },
        // SAFETY: as above.
        |s, d| unsafe { narrow_f16c(s, d) },
    );
}

/// # Safety
///
/// The CPU must support AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
unsafe fn f16_divide_f16c(buf: &mut [f16], divisor: usize) {
    half_divide::<f16>(
        buf,
        divisor,
        // SAFETY: only called from here, and this function requires F16C.
        |s, d| unsafe { widen_f16c(s, d) },
        // SAFETY: as above.
        |s, d| unsafe { narrow_f16c(s, d) },
    );
}

/// # Safety
///
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
unsafe fn bf16_binary_avx2<O: Op>(a: &[bf16], b: &[bf16], dst: &mut [bf16]) {
    half_binary::<bf16, O>(a, b, dst, bf16::widen, bf16::narrow);
}

/// # Safety
///
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
unsafe fn bf16_in_place_avx2<O: Op>(dst: &mut [bf16], src: &[bf16]) {
    half_in_place::<bf16, O>(dst, src, bf16::widen, bf16::narrow);
}

/// # Safety
///
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
unsafe fn bf16_divide_avx2(buf: &mut [bf16], divisor: usize) {
    half_divide::<bf16>(buf, divisor, bf16::widen, bf16::narrow);
}

/// Widens `src` into `dst` (equal lengths) eight elements per `vcvtph2ps`.
///
/// # Safety
///
/// The CPU must support F16C (and AVX, which F16C implies).
#[inline(always)]
unsafe fn widen_f16c(src: &[f16], dst: &mut [f32]) {
    let mut src_blocks = src.chunks_exact(8);
    let mut dst_blocks = dst.chunks_exact_mut(8);
    for (s, d) in (&mut src_blocks).zip(&mut dst_blocks) {
        let h: __m128i = pod_read_unaligned(cast_slice::<f16, u8>(s));
        // SAFETY: the caller guarantees F16C.
        let w = unsafe { _mm256_cvtph_ps(h) };
        d.copy_from_slice(&cast::<__m256, [f32; 8]>(w));
    }
    let tail = dst_blocks.into_remainder();
    for (d, s) in tail.iter_mut().zip(src_blocks.remainder()) {
        *d = half_bits::f16_to_f32(s.to_bits());
    }
}

/// Rounds `src` into `dst` (equal lengths, nearest-even) eight per `vcvtps2ph`.
///
/// # Safety
///
/// The CPU must support F16C (and AVX, which F16C implies).
#[inline(always)]
unsafe fn narrow_f16c(src: &[f32], dst: &mut [f16]) {
    let mut src_blocks = src.chunks_exact(8);
    let mut dst_blocks = dst.chunks_exact_mut(8);
    for (s, d) in (&mut src_blocks).zip(&mut dst_blocks) {
        let w: __m256 = pod_read_unaligned(cast_slice::<f32, u8>(s));
        // SAFETY: the caller guarantees F16C.
        let h = unsafe { _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(w) };
        d.copy_from_slice(&cast::<__m128i, [f16; 8]>(h));
    }
    let tail = dst_blocks.into_remainder();
    for (d, &s) in tail.iter_mut().zip(src_blocks.remainder()) {
        *d = f16::from_bits(half_bits::f32_to_f16(s));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::element::{MaxOp, MinOp, ProdOp, SumOp};
    use rand::{Rng, SeedableRng};

    /// Random f32 bit patterns, plus the values where conversions go wrong.
    fn awkward_f32s(n: usize) -> Vec<f32> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(rand::random());
        let mut v = vec![
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            f32::from_bits(0x7f80_0001),
            65504.0,
            65519.99,
            65520.0,
            2f32.powi(-24),
            2f32.powi(-25),
            3.0 * 2f32.powi(-26),
            2f32.powi(-14),
            f32::MIN_POSITIVE,
            1.0 + 2f32.powi(-11),
            1.0 + 3.0 * 2f32.powi(-11),
        ];
        v.extend((v.len()..n).map(|_| f32::from_bits(rng.r#gen())));
        v
    }

    #[test]
    fn f16c_conversions_match_the_portable_ones() {
        if !has_avx2_f16c() {
            return;
        }
        let src = awkward_f32s(100_003);
        let mut ours = vec![f16::ZERO; src.len()];
        let mut portable = ours.clone();
        // SAFETY: F16C is present (checked above).
        unsafe { narrow_f16c(&src, &mut ours) };
        f16::narrow(&src, &mut portable);
        let bits = |v: &[f16]| v.iter().map(|h| h.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&ours), bits(&portable));

        let all: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        let mut ours = vec![0.0f32; all.len()];
        let mut portable = ours.clone();
        // SAFETY: F16C is present (checked above).
        unsafe { widen_f16c(&all, &mut ours) };
        f16::widen(&all, &mut portable);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&ours), bits(&portable));
    }

    fn check_loops_match_portable<H: HalfElement + PartialEq + std::fmt::Debug>(
        simd: impl Fn(&[H], &[H], &mut [H], usize) -> bool,
    ) {
        let src = awkward_f32s(1003);
        let mut a = vec![H::zeroed(); src.len()];
        H::narrow(&src, &mut a);
        let mut b = a.clone();
        b.rotate_left(17);
        for which in 0..5 {
            let mut ours = a.clone();
            let mut portable = a.clone();
            if !simd(&a, &b, &mut ours, which) {
                return;
            }
            match which {
                0 => half_binary::<H, SumOp>(&a, &b, &mut portable, H::widen, H::narrow),
                1 => half_binary::<H, MinOp>(&a, &b, &mut portable, H::widen, H::narrow),
                2 => half_in_place::<H, ProdOp>(&mut portable, &b, H::widen, H::narrow),
                3 => half_in_place::<H, MaxOp>(&mut portable, &b, H::widen, H::narrow),
                _ => half_divide::<H>(&mut portable, 3, H::widen, H::narrow),
            }
            let bits: &[u16] = cast_slice(&ours);
            let want: &[u16] = cast_slice(&portable);
            assert_eq!(bits, want, "case {which}");
        }
    }

    #[test]
    fn simd_loops_match_the_portable_loops() {
        check_loops_match_portable::<f16>(|a, b, d, which| match which {
            0 => f16_binary::<SumOp>(a, b, d),
            1 => f16_binary::<MinOp>(a, b, d),
            2 => f16_in_place::<ProdOp>(d, b),
            3 => f16_in_place::<MaxOp>(d, b),
            _ => f16_divide(d, 3),
        });
        check_loops_match_portable::<bf16>(|a, b, d, which| match which {
            0 => bf16_binary::<SumOp>(a, b, d),
            1 => bf16_binary::<MinOp>(a, b, d),
            2 => bf16_in_place::<ProdOp>(d, b),
            3 => bf16_in_place::<MaxOp>(d, b),
            _ => bf16_divide(d, 3),
        });
    }
}
