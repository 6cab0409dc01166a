//! Which barrier algorithm (`STREAMCOMM_BARRIER_ALGO`, the benchmark's
//! `--algo`): the names and their parameters. The algorithms themselves
//! are streamcomm's.

use std::fmt;
use std::str::FromStr;

use crate::Error;

/// Fan-out of `tree` and `hierarchical:tree` when none is given. Four
/// children per node: MCS (1991) found a 4-ary arrival tree best on their
/// machines, and it keeps 64 ranks within three levels.
pub(crate) const DEFAULT_TREE_FANOUT: usize = 4;

/// Peers per round of `kway` when none is given (so `(k+1)`-ary rounds:
/// `ceil(log3 n)` of them).
pub(crate) const DEFAULT_KWAY: usize = 2;

/// How host leaders synchronise in the hierarchical barrier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Inter {
    /// Dissemination among the leaders.
    Dissemination,
    /// A tree over the leaders.
    Tree {
        /// Children per leader (at least 2).
        fanout: usize,
    },
}

/// A barrier algorithm.
///
/// [`BarrierAlgo::parse`] reads the names below; `Display` writes the full
/// form back (`tree:4`), which parses to the same value.
///
/// | name | algorithm |
/// |------|-----------|
/// | `central_counter` | every rank fetch-adds rank 0's counter, waits for its release word |
/// | `central_flags` | one arrival flag per rank at rank 0, which releases each rank |
/// | `chain` | arrival passes 0 → n-1, release passes back n-1 → 0 |
/// | `tree`, `tree:K` | K-ary arrival/release tree, host leaders first |
/// | `dissemination` | `ceil(log2 n)` rounds of pairwise flags |
/// | `kway`, `kway:K` | dissemination with K peers per round |
/// | `hierarchical`, `hierarchical:dissemination`, `hierarchical:tree[:K]` | gather to host leaders, leaders synchronise, leaders release |
/// | `multicast` | every rank multicasts one datagram over verbs UD; lost ones are asked for again |
///
/// Every algorithm but `multicast` runs on flag memory (shared memory, or
/// RDMA writes over verbs). `multicast` needs every pair of ranks on verbs
/// and a RoCE v2 port whose fabric carries multicast: where it is not
/// there, asking for it fails with the reason, and the default selection
/// falls back (`Communicator::barrier_fallback`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BarrierAlgo {
    /// Fetch-add on rank 0's counter, one release word read by everybody.
    CentralCounter,
    /// Arrival flags at rank 0, per-rank release words: no atomic RMW.
    CentralFlags,
    /// Arrival down a chain, release back up it.
    Chain,
    /// A k-ary tree over the ranks, host leaders nearest the root.
    Tree {
        /// Children per node (at least 2).
        fanout: usize,
    },
    /// Hensgen, Finkel and Manber's dissemination barrier.
    Dissemination,
    /// Dissemination notifying `k` peers per round.
    KWayDissemination {
        /// Peers per round (at least 1; 1 is plain dissemination).
        k: usize,
    },
    /// Shared memory inside each host, another algorithm between hosts.
    Hierarchical {
        /// How host leaders synchronise.
        inter: Inter,
    },
    /// One "arrived" datagram per rank to a multicast group, over verbs
    /// unreliable datagrams; a rank that misses one asks for it again.
    Multicast,
}

impl BarrierAlgo {
    /// One of each family with default parameters (the benchmark's list;
    /// the flag algorithms, then `multicast`).
    pub const ALL: &'static [BarrierAlgo] = &[
        BarrierAlgo::CentralCounter,
        BarrierAlgo::CentralFlags,
        BarrierAlgo::Chain,
        BarrierAlgo::Tree {
            fanout: DEFAULT_TREE_FANOUT,
        },
        BarrierAlgo::Dissemination,
        BarrierAlgo::KWayDissemination { k: DEFAULT_KWAY },
        BarrierAlgo::Hierarchical {
            inter: Inter::Dissemination,
        },
        BarrierAlgo::Hierarchical {
            inter: Inter::Tree {
                fanout: DEFAULT_TREE_FANOUT,
            },
        },
        BarrierAlgo::Multicast,
    ];

    /// The family name, without parameters (`tree`, `kway`, ...).
    pub const fn name(&self) -> &'static str {
        match self {
            BarrierAlgo::CentralCounter => "central_counter",
            BarrierAlgo::CentralFlags => "central_flags",
            BarrierAlgo::Chain => "chain",
            BarrierAlgo::Tree { .. } => "tree",
            BarrierAlgo::Dissemination => "dissemination",
            BarrierAlgo::KWayDissemination { .. } => "kway",
            BarrierAlgo::Hierarchical { .. } => "hierarchical",
            BarrierAlgo::Multicast => "multicast",
        }
    }

    /// Reads an algorithm name (see the [type docs](BarrierAlgo)); case and
    /// surrounding spaces are ignored.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] naming the text for an unknown name, a
    /// parameter that is not a number, a fan-out below 2, or `k` below 1.
    ///
    /// # Examples
    ///
    /// ```
    /// use streamcomm::barrier::{BarrierAlgo, Inter};
    ///
    /// assert_eq!(BarrierAlgo::parse("tree:8")?, BarrierAlgo::Tree { fanout: 8 });
    /// let h = BarrierAlgo::parse("hierarchical:tree")?;
    /// assert_eq!(h, BarrierAlgo::Hierarchical { inter: Inter::Tree { fanout: 4 } });
    /// assert_eq!(h.to_string(), "hierarchical:tree:4");
    /// assert!(BarrierAlgo::parse("tree:1").is_err());
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn parse(text: &str) -> Result<BarrierAlgo, Error> {
        BarrierAlgo::parse_reason(text).map_err(|why| {
            Error::invalid(format!(
                "barrier algorithm `{text}`: {why}; expected one of: {NAMES}"
            ))
        })
    }

    /// [`BarrierAlgo::parse`], failing with the reason alone (`unknown
    /// name`, `fanout 1 is below 2`), for callers that name the setting
    /// themselves (streamcomm's `STREAMCOMM_BARRIER_ALGO`).
    ///
    /// # Examples
    /// ```
    /// use streamcomm::barrier::BarrierAlgo;
    ///
    /// assert_eq!(BarrierAlgo::parse_reason("chain"), Ok(BarrierAlgo::Chain));
    /// assert!(BarrierAlgo::parse_reason("tree:1").unwrap_err().contains("fanout 1"));
    /// ```
    pub fn parse_reason(text: &str) -> Result<BarrierAlgo, String> {
        let lower = text.trim().to_ascii_lowercase();
        let parts: Vec<&str> = lower.split(':').collect();
        let algo = match parts.as_slice() {
            ["central_counter"] => BarrierAlgo::CentralCounter,
            ["central_flags"] => BarrierAlgo::CentralFlags,
            ["chain"] => BarrierAlgo::Chain,
            ["tree"] => BarrierAlgo::Tree {
                fanout: DEFAULT_TREE_FANOUT,
            },
            ["tree", k] => BarrierAlgo::Tree { fanout: number(k)? },
            ["dissemination"] => BarrierAlgo::Dissemination,
            ["kway"] => BarrierAlgo::KWayDissemination { k: DEFAULT_KWAY },
            ["kway", k] => BarrierAlgo::KWayDissemination { k: number(k)? },
            ["hierarchical"] | ["hierarchical", "dissemination"] => BarrierAlgo::Hierarchical {
                inter: Inter::Dissemination,
            },
            ["hierarchical", "tree"] => BarrierAlgo::Hierarchical {
                inter: Inter::Tree {
                    fanout: DEFAULT_TREE_FANOUT,
                },
            },
            ["hierarchical", "tree", k] => BarrierAlgo::Hierarchical {
                inter: Inter::Tree { fanout: number(k)? },
            },
            ["multicast"] => BarrierAlgo::Multicast,
            _ => return Err("unknown name".to_string()),
        };
        algo.check()?;
        Ok(algo)
    }

    /// Checks the algorithm's parameters.
    ///
    /// # Examples
    ///
    /// ```
    /// use streamcomm::barrier::BarrierAlgo;
    ///
    /// assert!(BarrierAlgo::Tree { fanout: 2 }.validate().is_ok());
    /// let err = BarrierAlgo::Tree { fanout: 1 }.validate().unwrap_err().to_string();
    /// assert!(err.contains("barrier tree: fanout 1 is below 2"), "{err}");
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a fan-out below 2 or `k` below 1.
    pub fn validate(&self) -> Result<(), Error> {
        self.check()
            .map_err(|why| Error::invalid(format!("barrier {}: {why}", self.name())))
    }

    /// [`BarrierAlgo::validate`]'s reason.
    fn check(&self) -> Result<(), String> {
        match *self {
            BarrierAlgo::Tree { fanout }
            | BarrierAlgo::Hierarchical {
                inter: Inter::Tree { fanout },
            } if fanout < 2 => Err(format!("fanout {fanout} is below 2")),
            BarrierAlgo::KWayDissemination { k } if k < 1 => Err(format!("k {k} is below 1")),
            _ => Ok(()),
        }
    }
}

impl fmt::Display for BarrierAlgo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BarrierAlgo::Tree { fanout } => write!(f, "tree:{fanout}"),
            BarrierAlgo::KWayDissemination { k } => write!(f, "kway:{k}"),
            BarrierAlgo::Hierarchical { inter } => match inter {
                Inter::Dissemination => f.write_str("hierarchical:dissemination"),
                Inter::Tree { fanout } => write!(f, "hierarchical:tree:{fanout}"),
            },
            other => f.write_str(other.name()),
        }
    }
}

impl FromStr for BarrierAlgo {
    type Err = Error;

    fn from_str(s: &str) -> Result<BarrierAlgo, Error> {
        BarrierAlgo::parse(s)
    }
}

/// The names [`BarrierAlgo::parse`] reads, for its error messages.
const NAMES: &str = "central_counter, central_flags, chain, tree[:K] (K >= 2), dissemination, \
                     kway[:K] (K >= 1), hierarchical[:dissemination|:tree[:K]], multicast";

/// A numeric parameter of an algorithm name.
fn number(part: &str) -> Result<usize, String> {
    part.parse()
        .map_err(|_| format!("parameter `{part}` is not a number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for algo in BarrierAlgo::ALL {
            assert_eq!(BarrierAlgo::parse(&algo.to_string()).unwrap(), *algo);
            assert!(algo.to_string().starts_with(algo.name()));
        }
        let more = [
            BarrierAlgo::Tree { fanout: 2 },
            BarrierAlgo::KWayDissemination { k: 1 },
            BarrierAlgo::Hierarchical {
                inter: Inter::Tree { fanout: 8 },
            },
        ];
        for algo in more {
            assert_eq!(algo.to_string().parse::<BarrierAlgo>().unwrap(), algo);
        }
    }

    #[test]
    fn parses_defaults_and_case() {
        let p = |s| BarrierAlgo::parse(s).unwrap();
        assert_eq!(p(" Tree "), BarrierAlgo::Tree { fanout: 4 });
        assert_eq!(p("kway"), BarrierAlgo::KWayDissemination { k: 2 });
        assert_eq!(p("kway:3"), BarrierAlgo::KWayDissemination { k: 3 });
        assert_eq!(
            p("hierarchical"),
            BarrierAlgo::Hierarchical {
                inter: Inter::Dissemination
            }
        );
        assert_eq!(p("CENTRAL_COUNTER"), BarrierAlgo::CentralCounter);
        assert_eq!(p("multicast"), BarrierAlgo::Multicast);
    }

    #[test]
    fn rejects_bad_names_naming_the_text() {
        let err = |s: &str| match BarrierAlgo::parse(s) {
            Err(Error::InvalidArgument(msg)) => msg,
            other => panic!("{s}: expected InvalidArgument, got {other:?}"),
        };
        assert!(err("butterfly").contains("`butterfly`"));
        assert!(err("tree:x").contains("`x`"));
        assert!(err("tree:1").contains("fanout 1"));
        assert!(err("kway:0").contains("k 0"));
        assert!(err("hierarchical:tree:0").contains("fanout 0"));
        assert!(err("chain:2").contains("`chain:2`"));
        assert!(err("multicast:4").contains("`multicast:4`"));
        assert!(err("").contains("unknown"));
        assert!(err("butterfly").contains("expected one of: central_counter, central_flags"));
    }
}
