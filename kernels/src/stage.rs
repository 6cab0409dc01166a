//! From raw bytes to typed slices: the aligned fast path and the staged path.
//!
//! Buffers reach the kernels as `&[u8]`: user buffers, shared-memory slots and
//! receive buffers at arbitrary byte offsets. When every slice is aligned for
//! the element type, the bytes are reinterpreted in place (`bytemuck`) and the
//! typed loop runs directly on them. Otherwise blocks of [`STAGE`] elements are
//! copied into aligned stack arrays, reduced there and copied back: slower, but
//! correct for any offset, and free of `unsafe`.
//!
//! Callers have checked that every slice is a whole number of elements and
//! that the lengths agree; the functions here never panic even if they do not.

use bytemuck::{cast_slice, cast_slice_mut, try_cast_slice, try_cast_slice_mut};

use crate::element::Op;
use crate::loops::Lane;

/// Elements per staged block on the unaligned path (at most 2 KiB per array).
pub(crate) const STAGE: usize = 256;

/// `dst = a op b` on byte slices holding elements of `T`.
pub(crate) fn binary<T: Lane, O: Op>(a: &[u8], b: &[u8], dst: &mut [u8]) {
    if let (Ok(ta), Ok(tb)) = (try_cast_slice::<u8, T>(a), try_cast_slice::<u8, T>(b))
        && let Ok(td) = try_cast_slice_mut::<u8, T>(dst)
    {
        T::binary::<O>(ta, tb, td);
        return;
    }
    let size = std::mem::size_of::<T>();
    let mut sa = [T::zeroed(); STAGE];
    let mut sb = [T::zeroed(); STAGE];
    let mut sd = [T::zeroed(); STAGE];
    for ((ca, cb), cd) in a
        .chunks(STAGE * size)
        .zip(b.chunks(STAGE * size))
        .zip(dst.chunks_mut(STAGE * size))
    {
        let n = cd.len().min(ca.len()).min(cb.len()) / size;
        let bytes = n * size;
        let (ta, tb, td) = (&mut sa[..n], &mut sb[..n], &mut sd[..n]);
        cast_slice_mut::<T, u8>(ta).copy_from_slice(&ca[..bytes]);
        cast_slice_mut::<T, u8>(tb).copy_from_slice(&cb[..bytes]);
        T::binary::<O>(ta, tb, td);
        cd[..bytes].copy_from_slice(cast_slice::<T, u8>(td));
    }
}

/// `dst = dst op src` on byte slices holding elements of `T`.
pub(crate) fn in_place<T: Lane, O: Op>(dst: &mut [u8], src: &[u8]) {
    if let Ok(ts) = try_cast_slice::<u8, T>(src)
        && let Ok(td) = try_cast_slice_mut::<u8, T>(dst)
    {
        T::in_place::<O>(td, ts);
        return;
    }
    let size = std::mem::size_of::<T>();
    let mut sd = [T::zeroed(); STAGE];
    let mut ss = [T::zeroed(); STAGE];
    for (cd, cs) in dst.chunks_mut(STAGE * size).zip(src.chunks(STAGE * size)) {
        let n = cd.len().min(cs.len()) / size;
        let bytes = n * size;
        let (td, ts) = (&mut sd[..n], &mut ss[..n]);
        cast_slice_mut::<T, u8>(td).copy_from_slice(&cd[..bytes]);
        cast_slice_mut::<T, u8>(ts).copy_from_slice(&cs[..bytes]);
        T::in_place::<O>(td, ts);
        cd[..bytes].copy_from_slice(cast_slice::<T, u8>(td));
    }
}

/// `buf = buf / divisor` on a byte slice holding elements of `T`.
pub(crate) fn divide<T: Lane>(buf: &mut [u8], divisor: usize) {
    if let Ok(tb) = try_cast_slice_mut::<u8, T>(buf) {
        T::divide(tb, divisor);
        return;
    }
    let size = std::mem::size_of::<T>();
    let mut sb = [T::zeroed(); STAGE];
    for cb in buf.chunks_mut(STAGE * size) {
        let n = cb.len() / size;
        let bytes = n * size;
        let tb = &mut sb[..n];
        cast_slice_mut::<T, u8>(tb).copy_from_slice(&cb[..bytes]);
        T::divide(tb, divisor);
        cb[..bytes].copy_from_slice(cast_slice::<T, u8>(tb));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::element::SumOp;

    /// Native-endian bytes of `values`, starting `offset` bytes into the returned Vec.
    fn bytes_at(values: &[u32], offset: usize) -> Vec<u8> {
        let mut v = vec![0xAA; offset];
        v.extend(values.iter().flat_map(|x| x.to_ne_bytes()));
        v
    }

    #[test]
    fn staged_path_matches_aligned_path() {
        let n = 2 * STAGE + 7;
        let a: Vec<u32> = (0..n as u32).collect();
        let b: Vec<u32> = (0..n as u32).map(|x| x * 3).collect();
        let expect = bytes_at(&a.iter().map(|x| x * 4).collect::<Vec<_>>(), 0);
        for (oa, ob, od) in [(1, 1, 1), (0, 1, 0), (0, 0, 3), (2, 0, 0)] {
            let va = bytes_at(&a, oa);
            let vb = bytes_at(&b, ob);
            let mut vd = vec![0u8; od + 4 * n];
            binary::<u32, SumOp>(&va[oa..], &vb[ob..], &mut vd[od..]);
            assert_eq!(vd[od..], expect[..]);
            let vs = bytes_at(&b, oa);
            in_place::<u32, SumOp>(&mut vd[od..], &vs[oa..]);
            divide::<u32>(&mut vd[od..], 7);
            assert_eq!(vd[od..], bytes_at(&a, 0)[..]);
            assert!(vd[..od].iter().all(|&x| x == 0));
        }
    }
}
