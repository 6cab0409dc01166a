//! What the tcp transport may place: rendezvous data slots, read from their
//! signatures ([`crate::transport::placement`]).

use crate::plan::signature::{self, P2pSlot};
use crate::transport::placement::Placement;

/// Point-to-point's reading of slot signatures for placement: a rendezvous
/// data slot is placed at its rendezvous' grant, and published as
/// [`P2pSlot::Placed`].
pub(crate) const PLACEMENT: Placement = Placement { grant_key, placed };

fn grant_key(sig: u64) -> Option<u64> {
    match signature::parse_p2p(sig) {
        Some((P2pSlot::Data, _, rdv)) => Some(rdv),
        _ => None,
    }
}

fn placed(sig: u64) -> u64 {
    match signature::parse_p2p(sig) {
        Some((_, Some(dtype), rdv)) => signature::p2p(P2pSlot::Placed, dtype, rdv as usize),
        _ => sig,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DataType;

    #[test]
    fn only_rendezvous_data_is_placed_and_it_is_published_as_placed() {
        let data = signature::p2p(P2pSlot::Data, DataType::F32, 7);
        assert_eq!(grant_key(data), Some(7));
        assert_eq!(
            signature::parse_p2p(placed(data)),
            Some((P2pSlot::Placed, Some(DataType::F32), 7))
        );
        for slot in [P2pSlot::Eager, P2pSlot::ReadyToSend, P2pSlot::Done] {
            assert_eq!(grant_key(signature::p2p(slot, DataType::U8, 7)), None);
        }
        assert_eq!(grant_key(0x1234), None, "not a p2p signature");
    }
}
