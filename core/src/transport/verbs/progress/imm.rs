//! The 32-bit immediate of a verbs WRITE_WITH_IMM: what it carries and how
//! the receiver rebuilds full counts from its bits.

/// Immediate data of a WRITE_WITH_IMM: with this bit set, "a control word
/// in your memory changed" (credit, grant, abort, goodbye, heartbeat);
/// clear, a slot write's: the low [`IMM_TAIL_MASK`] bits of the sender's
/// new tail and, from [`IMM_CREDIT_SHIFT`], the low [`IMM_CREDIT_MASK`]
/// bits of the count of slots it consumed from us. Each side rebuilds the
/// full counts from the ones it has: a tail runs at most a ring (1024
/// slots) ahead of the receiver's, a credit at most a ring ahead of ours.
pub(super) const IMM_CONTROL: u32 = 1 << 31;
/// Bits of the tail carried in a slot write's immediate.
pub(super) const IMM_TAIL_MASK: u32 = 0xffff;
/// Where the consumed count starts in a slot write's immediate.
pub(super) const IMM_CREDIT_SHIFT: u32 = 16;
/// Bits of the consumed count carried in a slot write's immediate.
pub(super) const IMM_CREDIT_MASK: u32 = 0x7fff;
const _: () = assert!(crate::config::MAX_NSTEPS as u32 <= IMM_CREDIT_MASK / 2);

/// The count whose low bits (`mask`) are `low`, for a count within
/// `mask / 2` of `now`; `now` itself when that count is behind it (an
/// immediate older than a credit the peer wrote since: it was posted
/// first, but its completion is read later).
pub(super) fn rebuild(now: u64, low: u32, mask: u32) -> u64 {
    let ahead = low.wrapping_sub(now as u32) & mask;
    if ahead > mask / 2 {
        return now;
    }
    now + u64::from(ahead)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_rebuilt_from_their_low_bits_and_stale_ones_ignored() {
        // Ahead, across a wrap of the low bits.
        assert_eq!(rebuild(0xfff0, 0x0005, IMM_TAIL_MASK), 0x1_0005);
        assert_eq!(rebuild(100, 100, IMM_CREDIT_MASK), 100);
        assert_eq!(rebuild(100, 1124, IMM_CREDIT_MASK), 1124);
        let far = (1u64 << 40) + 7;
        assert_eq!(
            rebuild(far, (far as u32 + 9) & IMM_CREDIT_MASK, IMM_CREDIT_MASK),
            far + 9
        );
        // Behind (an immediate older than a credit written since): kept.
        assert_eq!(rebuild(12, 10, IMM_CREDIT_MASK), 12);
        assert_eq!(rebuild(0x1_0002, 0xfffe, IMM_TAIL_MASK), 0x1_0002);
    }
}
