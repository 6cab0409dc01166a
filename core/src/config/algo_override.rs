//! `STREAMCOMM_ALGO`: the collective algorithms the user forces, by name.
//!
//! The configuration keeps the names as written (checked for form: one
//! name, or `collective=name` pairs naming each collective once); whether
//! each name is an algorithm that implements its collective is checked by
//! the tuning layer when a communicator is created, since the names of
//! algorithms and collectives belong to the plans, above the configuration.

use std::fmt;

use super::vars::{self, ALGO};
use crate::Result;

/// OverrideNames algorithms (`STREAMCOMM_ALGO`), as names; empty: the cost model
/// chooses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AlgoOverride {
    forced: OverrideNames,
}

/// What an override names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum OverrideNames {
    /// Nothing: the model chooses every algorithm.
    #[default]
    Nothing,
    /// One algorithm for every collective it implements.
    Every(String),
    /// `(collective, algorithm)` pairs, lower case, one per collective.
    Per(Vec<(String, String)>),
}

impl AlgoOverride {
    /// Parses `NAME` or `collective=NAME,...` (empty or `auto`: nothing
    /// forced). Names are lower-cased; a communicator created with this
    /// override checks that they name algorithms implementing the
    /// collectives they are given for.
    ///
    /// # Examples
    /// ```
    /// use streamcomm::config::AlgoOverride;
    /// let o = AlgoOverride::parse("All_Reduce=ring, broadcast=binomial")?;
    /// assert_eq!(o.to_string(), "all_reduce=ring,broadcast=binomial");
    /// assert!(AlgoOverride::parse("auto")?.is_empty());
    /// let err = AlgoOverride::parse("all_reduce=").unwrap_err().to_string();
    /// assert!(err.contains("STREAMCOMM_ALGO=all_reduce= is not an algorithm override"), "{err}");
    /// assert!(err.contains("expected auto, one algorithm name"), "{err}");
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) quoting the
    /// value and saying what is accepted: an item that is not
    /// `collective=algorithm`, an empty name, or a collective named twice.
    pub fn parse(text: &str) -> Result<AlgoOverride> {
        let bad = |why: String| vars::invalid_because(ALGO, text, &why);
        let t = text.trim();
        if t.is_empty() || t.eq_ignore_ascii_case("auto") {
            return Ok(AlgoOverride::default());
        }
        if !t.contains('=') {
            return Ok(AlgoOverride {
                forced: OverrideNames::Every(t.to_ascii_lowercase()),
            });
        }
        let mut pairs: Vec<(String, String)> = Vec::new();
        for item in t.split(',') {
            let (coll, algo) = item
                .split_once('=')
                .ok_or_else(|| bad(format!("{item:?} is not collective=algorithm")))?;
            let (coll, algo) = (
                coll.trim().to_ascii_lowercase(),
                algo.trim().to_ascii_lowercase(),
            );
            if coll.is_empty() || algo.is_empty() {
                return Err(bad(format!("{item:?} is not collective=algorithm")));
            }
            if pairs.iter().any(|(c, _)| *c == coll) {
                return Err(bad(format!("{coll} is given twice")));
            }
            pairs.push((coll, algo));
        }
        Ok(AlgoOverride {
            forced: OverrideNames::Per(pairs),
        })
    }

    /// True when nothing is forced.
    pub fn is_empty(&self) -> bool {
        self.forced == OverrideNames::Nothing
    }

    /// The names, for the tuning layer to resolve.
    pub(crate) fn forced(&self) -> &OverrideNames {
        &self.forced
    }
}

impl fmt::Display for AlgoOverride {
    /// The value as parsed (`auto` when empty).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.forced {
            OverrideNames::Nothing => f.write_str("auto"),
            OverrideNames::Every(name) => f.write_str(name),
            OverrideNames::Per(pairs) => {
                let items: Vec<String> = pairs.iter().map(|(c, a)| format!("{c}={a}")).collect();
                f.write_str(&items.join(","))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_pairs() {
        assert!(AlgoOverride::parse("auto").unwrap().is_empty());
        assert!(AlgoOverride::parse("").unwrap().is_empty());
        assert_eq!(AlgoOverride::parse(" Tree ").unwrap().to_string(), "tree");
        let o = AlgoOverride::parse(" all_reduce=ring , Broadcast=binomial").unwrap();
        assert_eq!(o.to_string(), "all_reduce=ring,broadcast=binomial");
    }

    #[test]
    fn refuses_bad_forms_naming_them() {
        let err = |t: &str| AlgoOverride::parse(t).unwrap_err().to_string();
        assert!(err("all_reduce=ring,all_reduce=tree").contains("given twice"));
        assert!(err("all_reduce=ring,").contains("is not collective=algorithm"));
        assert!(err("all_reduce=").contains("is not collective=algorithm"));
        assert!(err("x=").contains("STREAMCOMM_ALGO=x= is not"));
        assert!(err("x=").contains("expected auto, one algorithm name"));
    }
}
