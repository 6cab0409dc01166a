//! `f16`/`bf16` ↔ `f32` conversions written so that LLVM vectorises them.
//!
//! Half-precision reductions widen every operand to `f32` and round the result
//! back, so conversions are two thirds of their work. `half`'s slice
//! conversions call an out-of-line F16C routine per 8 elements (and convert
//! `bf16` one element at a time with branches); measured on the reduction loop
//! that gave about 2 GB/s, well below memory bandwidth. The functions here are
//! branch-free bit manipulation (every `if` selects between two already
//! computed values), so a plain loop over them compiles to SIMD code even for
//! the x86-64 baseline (SSE2).
//!
//! The results are bit-for-bit those of `half` (round to nearest, ties to
//! even; NaNs keep their sign and leading payload bits and become quiet); the
//! tests compare every `f16`/`bf16` input and a dense sample of `f32` inputs.
//! The `f16` algorithms are Fabian Giesen's `half_to_float` and
//! `float_to_half_fast3_rtne` (<https://gist.github.com/rygorous/2156668>,
//! public domain), with `half`'s NaN handling.

/// Widens `f16` bits to `f32` (exact).
#[inline(always)]
pub(crate) fn f16_to_f32(h: u16) -> f32 {
    let h = u32::from(h);
    let magic = f32::from_bits(113 << 23);
    let shifted_exp = 0x7c00 << 13;
    // Exponent and mantissa moved into place, exponent rebiased for normals.
    let o = ((h & 0x7fff) << 13) + ((127 - 15) << 23);
    let exp = (h << 13) & shifted_exp;
    // Infinity or NaN: rebias to the all-ones exponent; quiet NaNs.
    let quiet = if h & 0x7fff > 0x7c00 { 0x0040_0000 } else { 0 };
    let special = (o + ((128 - 16) << 23)) | quiet;
    // Zero or subnormal: renormalise with one float subtraction.
    let subnormal = (f32::from_bits(o + (1 << 23)) - magic).to_bits();
    let bits = if exp == shifted_exp {
        special
    } else if exp == 0 {
        subnormal
    } else {
        o
    };
    f32::from_bits(bits | ((h & 0x8000) << 16))
}

/// Rounds `f32` to the nearest `f16` (ties to even), as bits.
#[inline(always)]
pub(crate) fn f32_to_f16(f: f32) -> u16 {
    let x = f.to_bits();
    let sign = x & 0x8000_0000;
    let a = x ^ sign;
    // Infinity, NaN (quiet, top payload bits kept) or too large: infinity.
    let special = if a > 0x7f80_0000 {
        0x7e00 | ((a >> 13) & 0x3ff)
    } else {
        0x7c00
    };
    // Subnormal or zero result: let an f32 addition round the mantissa into
    // the low bits (ties to even, like every IEEE addition).
    let denorm_magic = ((127 - 15) + (23 - 10) + 1) << 23;
    let subnormal = (f32::from_bits(a) + f32::from_bits(denorm_magic))
        .to_bits()
        .wrapping_sub(denorm_magic);
    // Normal result: rebias, add the rounding bias (ties to even), shift.
    let odd = (a >> 13) & 1;
    let normal = a.wrapping_sub((127 - 15) << 23).wrapping_add(0xfff + odd) >> 13;
    let bits = if a >= (127 + 16) << 23 {
        special
    } else if a < 113 << 23 {
        subnormal
    } else {
        normal
    };
    (bits | (sign >> 16)) as u16
}

/// Widens `bf16` bits to `f32` (exact; NaNs become quiet).
#[inline(always)]
pub(crate) fn bf16_to_f32(h: u16) -> f32 {
    let quiet = if h & 0x7fff > 0x7f80 { 0x0040_0000 } else { 0 };
    f32::from_bits((u32::from(h) << 16) | quiet)
}

/// Rounds `f32` to the nearest `bf16` (ties to even), as bits.
#[inline(always)]
pub(crate) fn f32_to_bf16(f: f32) -> u16 {
    let x = f.to_bits();
    let rounded = x.wrapping_add(0x7fff + ((x >> 16) & 1)) >> 16;
    let nan = (x >> 16) | 0x0040;
    let bits = if x & 0x7fff_ffff > 0x7f80_0000 {
        nan
    } else {
        rounded
    };
    bits as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    fn same_f32(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits()
    }

    #[test]
    fn every_f16_and_bf16_widens_like_half() {
        for h in 0..=u16::MAX {
            let want = f16::from_bits(h).to_f32();
            assert!(same_f32(f16_to_f32(h), want), "f16 {h:#06x}");
            let want = bf16::from_bits(h).to_f32();
            assert!(same_f32(bf16_to_f32(h), want), "bf16 {h:#06x}");
        }
    }

    /// f32 bit patterns that exercise every exponent and every rounding case:
    /// all 2^20 combinations of sign, exponent and top mantissa bits, each with
    /// low bits at and around the halfway points of f16 and bf16 rounding.
    fn dense_f32_sample() -> impl Iterator<Item = u32> {
        const LOW: [u32; 12] = [
            0, 1, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x7fff, 0x8000, 0x8001, 0x17fff, 0x18000, 0xffff,
        ];
        (0..1u32 << 20).flat_map(|hi| LOW.iter().map(move |&lo| (hi << 12) ^ lo))
    }

    #[test]
    fn f32_narrows_to_f16_like_half() {
        for x in dense_f32_sample() {
            let f = f32::from_bits(x);
            assert_eq!(f32_to_f16(f), f16::from_f32(f).to_bits(), "f32 {x:#010x}");
        }
    }

    #[test]
    fn f32_narrows_to_bf16_like_half() {
        for x in dense_f32_sample() {
            let f = f32::from_bits(x);
            assert_eq!(f32_to_bf16(f), bf16::from_f32(f).to_bits(), "f32 {x:#010x}");
        }
    }

    /// Every f32 bit pattern (a few seconds in release; run with `--ignored`).
    #[test]
    #[ignore = "exhaustive: 2^32 inputs"]
    fn every_f32_narrows_like_half() {
        for x in 0..=u32::MAX {
            let f = f32::from_bits(x);
            assert_eq!(f32_to_f16(f), f16::from_f32(f).to_bits(), "f16 {x:#010x}");
            assert_eq!(
                f32_to_bf16(f),
                bf16::from_f32(f).to_bits(),
                "bf16 {x:#010x}"
            );
        }
    }
}
