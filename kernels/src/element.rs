//! Scalar arithmetic per primitive type, and the operators as types.
//!
//! The loops in [`crate::loops`] are generic over an [`Element`] and an [`Op`],
//! so each (type, operator) pair becomes its own monomorphic loop that LLVM can
//! auto-vectorise: no per-element dispatch on dtype or op survives into the
//! inner loop. Half-precision types are not `Element`s: they are widened to
//! `f32` in blocks ([`HalfElement`]), reduced there, and rounded back once.

use bytemuck::Pod;
use half::{bf16, f16};

use crate::half_bits;

/// A primitive the reduction loops operate on directly.
///
/// Integer `Sum`/`Prod` wrap; float `Min`/`Max` follow IEEE 754 minNum/maxNum
/// (`f32::min` / `f32::max`): if exactly one operand is NaN the other one is
/// returned, NaN only comes out when both are NaN.
pub(crate) trait Element: Pod {
    /// `self + rhs` (wrapping for integers).
    fn op_sum(self, rhs: Self) -> Self;
    /// `self * rhs` (wrapping for integers).
    fn op_prod(self, rhs: Self) -> Self;
    /// The smaller operand (minNum for floats).
    fn op_min(self, rhs: Self) -> Self;
    /// The larger operand (maxNum for floats).
    fn op_max(self, rhs: Self) -> Self;
    /// `divisor` as an element, when dividing by it gives `self / divisor`.
    ///
    /// `None` when an integer type cannot represent the divisor; then
    /// [`Element::div_wide`] is used instead. `divisor` is never 0.
    fn divisor(divisor: usize) -> Option<Self>;
    /// `self / divisor` for a divisor produced by [`Element::divisor`]
    /// (truncating for integers).
    fn op_div(self, divisor: Self) -> Self;
    /// `self / divisor` for a divisor the type cannot hold (integers only,
    /// computed in `i128`; never reached for floats).
    fn div_wide(self, divisor: usize) -> Self;
}

macro_rules! float_element {
    ($($t:ty),* $(,)?) => {$(
        impl Element for $t {
            #[inline(always)]
            fn op_sum(self, rhs: Self) -> Self {
                self + rhs
            }
            #[inline(always)]
            fn op_prod(self, rhs: Self) -> Self {
                self * rhs
            }
            #[inline(always)]
            fn op_min(self, rhs: Self) -> Self {
                <$t>::min(self, rhs)
            }
            #[inline(always)]
            fn op_max(self, rhs: Self) -> Self {
                <$t>::max(self, rhs)
            }
            #[inline(always)]
            fn divisor(divisor: usize) -> Option<Self> {
                // Rounds for divisors beyond the mantissa (2^24 for f32): the
                // division happens in the element's precision, as documented.
                Some(divisor as $t)
            }
            #[inline(always)]
            fn op_div(self, divisor: Self) -> Self {
                self / divisor
            }
            #[inline(always)]
            fn div_wide(self, divisor: usize) -> Self {
                self / divisor as $t
            }
        }
    )*};
}

macro_rules! int_element {
    ($($t:ty),* $(,)?) => {$(
        impl Element for $t {
            #[inline(always)]
            fn op_sum(self, rhs: Self) -> Self {
                self.wrapping_add(rhs)
            }
            #[inline(always)]
            fn op_prod(self, rhs: Self) -> Self {
                self.wrapping_mul(rhs)
            }
            #[inline(always)]
            fn op_min(self, rhs: Self) -> Self {
                Ord::min(self, rhs)
            }
            #[inline(always)]
            fn op_max(self, rhs: Self) -> Self {
                Ord::max(self, rhs)
            }
            #[inline(always)]
            fn divisor(divisor: usize) -> Option<Self> {
                <$t>::try_from(divisor).ok().filter(|&d| d != 0)
            }
            #[inline(always)]
            fn op_div(self, divisor: Self) -> Self {
                // `divisor` is positive (never 0, see `divisor`), so neither a
                // division by zero nor `MIN / -1` can happen.
                self.wrapping_div(divisor)
            }
            #[inline(always)]
            fn div_wide(self, divisor: usize) -> Self {
                // Both operands fit in i128, and the quotient's magnitude is at
                // most |self|, so it fits back into the type.
                (self as i128 / divisor as i128) as $t
            }
        }
    )*};
}

float_element!(f32, f64);
int_element!(i8, u8, i32, u32, i64, u64);

/// A half-precision type, reduced by widening blocks to `f32`.
///
/// These are the portable conversions ([`crate::half_bits`], bit-for-bit equal
/// to `half`'s): plain loops that LLVM vectorises for any target.
pub(crate) trait HalfElement: Pod {
    /// Converts `src` to `f32` (exact). Both slices have the same length.
    fn widen(src: &[Self], dst: &mut [f32]);
    /// Rounds `src` to the nearest representable value (ties to even).
    /// Both slices have the same length.
    fn narrow(src: &[f32], dst: &mut [Self]);
}

macro_rules! half_element {
    ($($t:ty => $widen:path, $narrow:path;)*) => {$(
        impl HalfElement for $t {
            #[inline(always)]
            fn widen(src: &[Self], dst: &mut [f32]) {
                for (d, s) in dst.iter_mut().zip(src) {
                    *d = $widen(s.to_bits());
                }
            }
            #[inline(always)]
            fn narrow(src: &[f32], dst: &mut [Self]) {
                for (d, &s) in dst.iter_mut().zip(src) {
                    *d = <$t>::from_bits($narrow(s));
                }
            }
        }
    )*};
}

half_element! {
    f16 => half_bits::f16_to_f32, half_bits::f32_to_f16;
    bf16 => half_bits::bf16_to_f32, half_bits::f32_to_bf16;
}

/// A reduction operator as a type, so the loops are monomorphised per operator.
pub(crate) trait Op {
    /// `a op b`.
    fn apply<T: Element>(a: T, b: T) -> T;
}

/// Defines each operator type and its [`Op`] impl, applying its
/// [`Element`] method.
macro_rules! ops {
    ($($(#[doc = $doc:literal])* $op:ident => $method:ident;)*) => {$(
        $(#[doc = $doc])*
        pub(crate) struct $op;

        impl Op for $op {
            #[inline(always)]
            fn apply<T: Element>(a: T, b: T) -> T {
                a.$method(b)
            }
        }
    )*};
}

ops! {
    /// `Sum` (and `Avg`, whose division happens in [`crate::divide`]).
    SumOp => op_sum;
    /// `Prod`.
    ProdOp => op_prod;
    /// `Min`.
    MinOp => op_min;
    /// `Max`.
    MaxOp => op_max;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_ops_wrap() {
        assert_eq!(SumOp::apply(250u8, 10u8), 4);
        assert_eq!(ProdOp::apply(i8::MIN, -1i8), i8::MIN);
        assert_eq!(SumOp::apply(i64::MAX, 1), i64::MIN);
        assert_eq!(MinOp::apply(-3i32, 2), -3);
        assert_eq!(MaxOp::apply(3u64, 2), 3);
    }

    #[test]
    fn float_min_max_ignore_a_single_nan() {
        assert_eq!(MinOp::apply(f32::NAN, 1.0f32), 1.0);
        assert_eq!(MaxOp::apply(2.0f64, f64::NAN), 2.0);
        assert!(MinOp::apply(f32::NAN, f32::NAN).is_nan());
    }

    #[test]
    fn divisors_out_of_range_use_the_wide_path() {
        assert_eq!(<i8 as Element>::divisor(127), Some(127));
        assert_eq!(<i8 as Element>::divisor(128), None);
        assert_eq!(i8::MIN.div_wide(128), -1);
        assert_eq!(i8::MIN.div_wide(129), 0);
        assert_eq!(u8::MAX.div_wide(usize::MAX), 0);
        assert_eq!(i64::MIN.div_wide(usize::MAX), 0);
        assert_eq!((-7i32).op_div(2), -3);
    }

    #[test]
    fn halves_round_trip_through_f32() {
        let src = [f16::from_f32(1.5), f16::from_f32(-0.25), f16::MAX];
        let mut wide = [0.0f32; 3];
        f16::widen(&src, &mut wide);
        assert_eq!(wide, [1.5, -0.25, 65504.0]);
        let mut back = [f16::ZERO; 3];
        f16::narrow(&wide, &mut back);
        assert_eq!(back, src);
    }
}
