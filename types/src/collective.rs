//! [`Collective`]: the collectives streamcomm implements, by kind.

/// The collective a plan implements (also the header used for mismatch checks).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Collective {
    /// Every rank ends with the reduction of all inputs.
    AllReduce,
    /// Every rank ends with every rank's input, concatenated in rank order.
    AllGather,
    /// Rank r ends with block r of the reduction.
    ReduceScatter,
    /// Every rank ends with the root's input.
    Broadcast {
        /// The source rank.
        root: usize,
    },
    /// The root ends with the reduction of all inputs.
    Reduce {
        /// The destination rank.
        root: usize,
    },
    /// Block j of rank i's input ends as block i of rank j's output.
    AllToAll,
    /// Nobody leaves before everyone has arrived.
    Barrier,
}

impl Collective {
    /// Short snake-case name (`all_reduce`, `broadcast`, ...), as used in
    /// error messages and benchmark output.
    pub const fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all_reduce",
            Collective::AllGather => "all_gather",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::Broadcast { .. } => "broadcast",
            Collective::Reduce { .. } => "reduce",
            Collective::AllToAll => "all_to_all",
            Collective::Barrier => "barrier",
        }
    }
}

/// Its [`Collective::name`]: what an error message says of the call.
///
/// # Examples
/// ```
/// use streamcomm_types::Collective;
/// assert_eq!(Collective::Reduce { root: 2 }.to_string(), "reduce");
/// assert_eq!(format!("{}: bad", Collective::AllReduce), "all_reduce: bad");
/// ```
impl std::fmt::Display for Collective {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
