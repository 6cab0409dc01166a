//! Faults injected into the multicast barrier's datagrams on receive: a
//! share of them dropped, a share delivered twice (`STREAMCOMM_FAULTS`'
//! `mcast:` rule, parsed in `config::fault_spec`), and a join refused.
//! Applied where datagrams are decoded, so they hit the verbs UD queue
//! pair and the in-memory fabric of the tests alike.

/// Parts per million, the unit of the shares.
pub(crate) const PPM: u32 = 1_000_000;

/// What the `mcast:` rule asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct DatagramFaults {
    /// Share of received datagrams dropped, in parts per million.
    pub drop_ppm: u32,
    /// Share of received datagrams delivered twice, in parts per million.
    pub dup_ppm: u32,
    /// The multicast join fails, as where the fabric has no multicast.
    pub refuse_join: bool,
    /// Seed of the dice (with the rank mixed in).
    pub seed: u64,
}

/// What happens to one received datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Lost.
    Drop,
    /// Delivered once.
    Once,
    /// Delivered twice.
    Twice,
}

/// The dice that decide each datagram's [`Fate`] (xorshift64*: cheap,
/// and the same sequence for the same seed and rank).
#[derive(Debug)]
pub(crate) struct Dice {
    faults: DatagramFaults,
    state: u64,
}

impl Dice {
    /// Dice for `rank`, or `None` when nothing is dropped or duplicated.
    pub(crate) fn new(faults: DatagramFaults, rank: usize) -> Option<Dice> {
        (faults.drop_ppm > 0 || faults.dup_ppm > 0).then(|| Dice {
            faults,
            // Never zero (xorshift's fixed point).
            state: (faults.seed ^ (rank as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1,
        })
    }

    /// The next datagram's fate.
    pub(crate) fn roll(&mut self) -> Fate {
        let draw = |s: &mut u64| {
            *s ^= *s >> 12;
            *s ^= *s << 25;
            *s ^= *s >> 27;
            (s.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32 % PPM
        };
        if draw(&mut self.state) < self.faults.drop_ppm {
            Fate::Drop
        } else if draw(&mut self.state) < self.faults.dup_ppm {
            Fate::Twice
        } else {
            Fate::Once
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_come_out_near_what_was_asked() {
        let faults = DatagramFaults {
            drop_ppm: 100_000,
            dup_ppm: 50_000,
            refuse_join: false,
            seed: 7,
        };
        let mut dice = Dice::new(faults, 3).unwrap();
        let n = 200_000;
        let (mut dropped, mut twice) = (0, 0);
        for _ in 0..n {
            match dice.roll() {
                Fate::Drop => dropped += 1,
                Fate::Twice => twice += 1,
                Fate::Once => {}
            }
        }
        let share = |k: i32| f64::from(k) / f64::from(n);
        assert!((share(dropped) - 0.10).abs() < 0.01, "{dropped}");
        // Duplicates are drawn among the datagrams not dropped.
        assert!((share(twice) - 0.9 * 0.05).abs() < 0.01, "{twice}");
        assert!(Dice::new(DatagramFaults::default(), 0).is_none());
    }
}
