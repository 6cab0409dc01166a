//! [`Algorithm`]: the algorithms a collective's plan can use, their names
//! (`STREAMCOMM_ALGO`, the benchmark's `--algo`) and which collective each
//! implements.

use std::fmt;

use crate::Collective;

/// A collective algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Ring (all-reduce, all-gather, reduce-scatter): bandwidth-optimal,
    /// `n - 1` hops per phase.
    Ring,
    /// Pipelined chain (broadcast, reduce).
    Chain,
    /// Pairwise exchange (all-to-all).
    Pairwise,
    /// Double binary tree (all-reduce), as NCCL's tree: `2 log2 n` hops.
    Tree,
    /// Recursive halving then doubling (all-reduce), Rabenseifner's.
    HalvingDoubling,
    /// Binomial tree (broadcast, reduce): `log2 n` hops.
    Binomial,
    /// Recursive doubling: all-gather (Bruck's algorithm when the number of
    /// ranks is not a power of two), and all-reduce by whole-vector swaps
    /// in `log2 n` rounds (small messages).
    RecursiveDoubling,
    /// Bruck's all-gather for any number of ranks.
    Bruck,
}

impl Algorithm {
    /// Every algorithm.
    pub const ALL: [Algorithm; 8] = [
        Algorithm::Ring,
        Algorithm::Chain,
        Algorithm::Pairwise,
        Algorithm::Tree,
        Algorithm::HalvingDoubling,
        Algorithm::Binomial,
        Algorithm::RecursiveDoubling,
        Algorithm::Bruck,
    ];

    /// The name used by `STREAMCOMM_ALGO` and the benchmark.
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::Ring => "ring",
            Algorithm::Chain => "chain",
            Algorithm::Pairwise => "pairwise",
            Algorithm::Tree => "tree",
            Algorithm::HalvingDoubling => "halving_doubling",
            Algorithm::Binomial => "binomial",
            Algorithm::RecursiveDoubling => "recursive_doubling",
            Algorithm::Bruck => "bruck",
        }
    }

    /// Parses a name (case-insensitive; `-` and `_` alike; `double_tree` and
    /// `rabenseifner` are accepted aliases).
    pub fn parse(text: &str) -> Option<Algorithm> {
        let t = text.trim().to_ascii_lowercase().replace('-', "_");
        match t.as_str() {
            "double_tree" | "dtree" => Some(Algorithm::Tree),
            "rabenseifner" => Some(Algorithm::HalvingDoubling),
            _ => Algorithm::ALL.into_iter().find(|a| a.name() == t),
        }
    }

    /// The algorithms that implement `collective` (the default first); empty
    /// for point-to-point and barriers, which have one schedule each.
    pub const fn candidates(collective: Collective) -> &'static [Algorithm] {
        match collective {
            Collective::AllReduce => &[
                Algorithm::Ring,
                Algorithm::Tree,
                Algorithm::HalvingDoubling,
                Algorithm::RecursiveDoubling,
            ],
            Collective::AllGather => &[
                Algorithm::Ring,
                Algorithm::RecursiveDoubling,
                Algorithm::Bruck,
            ],
            Collective::ReduceScatter => &[Algorithm::Ring],
            Collective::Broadcast { .. } | Collective::Reduce { .. } => {
                &[Algorithm::Chain, Algorithm::Binomial]
            }
            Collective::AllToAll => &[Algorithm::Pairwise],
            _ => &[],
        }
    }

    /// True when this algorithm implements `collective`.
    pub fn supports(self, collective: Collective) -> bool {
        Algorithm::candidates(collective).contains(&self)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
