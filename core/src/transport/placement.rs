//! Which arriving slots a transport may write straight into a receive buffer.
//!
//! A transport that reads slots off the network itself (tcp) can put a
//! rendezvous message's data where the receiver granted it, instead of into
//! the slot, saving the receiver a copy (the grants are the ring's,
//! `RingEnd::placement`). Which slots carry such data is written in their
//! signatures, in the point-to-point layer's format; that layer hands the
//! transport a [`Placement`] at connection, so the transport knows nothing
//! of the format.

/// How to read slot signatures for placement.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Placement {
    /// The grant key of a slot whose data may be placed (the rendezvous
    /// it belongs to), from the slot's signature; `None` for any other slot.
    pub grant_key: fn(u64) -> Option<u64>,
    /// The signature a slot whose data was placed is published with, from
    /// the signature it arrived with.
    pub placed: fn(u64) -> u64,
}
