//! Fault-injection rules: which slot of which connection misbehaves, and how.
//!
//! Failure paths (a slot that never arrives, arrives late, arrives twice, or
//! a transport that reports an error) must be tested deterministically, not
//! by hoping a machine misbehaves. A [`FaultPlan`] names the slots to hit:
//! `STREAMCOMM_FAULTS` (or [`Config::faults`](crate::Config::faults)) holds
//! comma-separated rules such as
//!
//! ```text
//! send:peer=1:nth=5:drop            the 5th slot this rank sends to rank 1 is lost
//! send:peer=1:nth=5:dup             ... is delivered twice
//! send:peer=1:nth=5:delay=200ms     ... leaves 200 ms late
//! recv:peer=2:nth=3:delay=50ms      the 3rd slot from rank 2 is consumed 50 ms late
//! send:rank=0:peer=3:nth=1:error    rank 0's 1st send to rank 3 fails (transport error)
//! mcast:drop=10%:dup=1%             the multicast barrier loses 10% of the datagrams it
//!                                   receives and takes 1% of the rest twice
//! mcast:refuse                      the multicast barrier's group cannot be joined
//! ```
//!
//! The `mcast` rule (at most one; `rank=R` and `seed=N`, the seed of the
//! draws, are optional) acts on the multicast barrier's datagrams as they
//! are received ([`crate::barrier::multicast`]), shares given in percent.
//!
//! `nth` counts slots on that connection and direction from 1, over the
//! communicator's life; `rank=R` limits a rule to rank R (all ranks read
//! the same environment under a launcher). Parsing is strict: an unknown or
//! repeated field, a missing `peer`/`nth`, or `drop`/`dup` on `recv` is an
//! error naming the rule. Rules are parsed in every build, so a typo fails
//! everywhere; they are applied only by builds with the `fault-injection`
//! feature ([`crate::transport::fault`]).

use std::fmt;
use std::time::Duration;

use crate::barrier::multicast::DatagramFaults;
use crate::barrier::multicast::faults::PPM;
use crate::{Error, Result};

/// Which side of a connection a rule acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FaultDirection {
    /// Slots this rank publishes to the peer.
    Send,
    /// Slots this rank consumes from the peer.
    Recv,
}

/// What happens to the chosen slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FaultAction {
    /// Wait this long before publishing (send) or consuming (recv) it.
    Delay(Duration),
    /// Never deliver it (send only); later slots still go.
    Drop,
    /// Deliver it twice (send only).
    Duplicate,
    /// Fail with a transport error naming the peer instead of moving it.
    Error,
}

/// One rule: on `rank` (any if `None`), the `nth` slot in `direction` on
/// the connection to `peer` suffers `action`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FaultRule {
    /// Send or receive side.
    pub direction: FaultDirection,
    /// The rank at the other end of the connection.
    pub peer: usize,
    /// Which slot, counting from 1.
    pub nth: u64,
    /// The only rank that applies the rule (`None`: every rank).
    pub rank: Option<usize>,
    /// What to do.
    pub action: FaultAction,
}

/// A list of fault rules (empty: no faults, the default).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FaultPlan {
    /// The rules, in the order given.
    pub(crate) rules: Vec<FaultRule>,
    /// The `mcast` rule: the only rank it applies to (`None`: every rank),
    /// and what it does.
    pub(crate) datagrams: Option<(Option<usize>, DatagramFaults)>,
}

/// Longest delay a rule may ask for (a delay beyond it is a timeout test,
/// which `drop` does better).
const MAX_DELAY: Duration = Duration::from_secs(60);

impl FaultPlan {
    /// Parses comma-separated rules (see the module documentation); an
    /// empty or blank text is the empty plan.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] quoting the rule and saying what is wrong.
    pub(crate) fn parse(text: &str) -> Result<FaultPlan> {
        let mut rules: Vec<FaultRule> = Vec::new();
        let mut datagrams = None;
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if part.starts_with("mcast") {
                if datagrams.replace(parse_mcast(part)?).is_some() {
                    return Err(bad_rule(part, "a second `mcast` rule"));
                }
                continue;
            }
            let rule = FaultRule::parse(part)?;
            let same_slot = |r: &FaultRule| {
                (r.direction, r.peer, r.nth, r.rank)
                    == (rule.direction, rule.peer, rule.nth, rule.rank)
            };
            if rules.iter().any(same_slot) {
                return Err(bad_rule(part, "another rule already names this slot"));
            }
            rules.push(rule);
        }
        Ok(FaultPlan { rules, datagrams })
    }

    /// True when there is no rule.
    pub(crate) fn is_empty(&self) -> bool {
        self.rules.is_empty() && self.datagrams.is_none()
    }

    /// What the `mcast` rule does on `rank` (nothing without one).
    pub(crate) fn datagram_faults(&self, rank: usize) -> DatagramFaults {
        match self.datagrams {
            Some((only, f)) if only.is_none_or(|r| r == rank) => f,
            _ => DatagramFaults::default(),
        }
    }

    /// The rules `rank` of `size` applies, checked against the communicator.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a rule naming a rank out of range, or
    /// this rank as its own peer.
    #[cfg(any(test, feature = "fault-injection"))]
    pub(crate) fn for_rank(&self, rank: usize, size: usize) -> Result<Vec<FaultRule>> {
        let mut mine = Vec::new();
        for r in &self.rules {
            if r.rank.is_some_and(|x| x >= size) || r.peer >= size {
                return Err(bad_rule(
                    &r.to_string(),
                    &format!("names a rank out of range for {size} ranks"),
                ));
            }
            if r.rank.is_none_or(|x| x == rank) {
                if r.peer == rank {
                    return Err(bad_rule(
                        &r.to_string(),
                        &format!("rank {rank} has no connection to itself"),
                    ));
                }
                mine.push(*r);
            }
        }
        Ok(mine)
    }
}

impl FaultRule {
    /// Parses one rule, e.g. `send:peer=1:nth=5:drop`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] quoting the rule and saying what is wrong.
    pub(crate) fn parse(text: &str) -> Result<FaultRule> {
        let mut fields = text.split(':').map(str::trim);
        let direction = match fields.next() {
            Some("send") => FaultDirection::Send,
            Some("recv") => FaultDirection::Recv,
            _ => return Err(bad_rule(text, "must start with `send` or `recv`")),
        };
        let (mut peer, mut nth, mut rank, mut action) = (None, None, None, None);
        for field in fields {
            let (key, value) = match field.split_once('=') {
                Some((k, v)) => (k.trim(), Some(v.trim())),
                None => (field, None),
            };
            let set_once = |slot: &mut Option<u64>, v: Option<&str>| -> Result<()> {
                let v = v.ok_or_else(|| bad_rule(text, &format!("`{key}` needs a value")))?;
                let n: u64 = v.parse().map_err(|_| {
                    bad_rule(text, &format!("`{key}={v}` is not a non-negative integer"))
                })?;
                if slot.replace(n).is_some() {
                    return Err(bad_rule(text, &format!("`{key}` is given twice")));
                }
                Ok(())
            };
            let new_action = match (key, value) {
                ("peer", v) => {
                    set_once(&mut peer, v)?;
                    None
                }
                ("nth", v) => {
                    set_once(&mut nth, v)?;
                    None
                }
                ("rank", v) => {
                    set_once(&mut rank, v)?;
                    None
                }
                ("drop", None) => Some(FaultAction::Drop),
                ("dup", None) => Some(FaultAction::Duplicate),
                ("error", None) => Some(FaultAction::Error),
                ("delay", Some(v)) => Some(FaultAction::Delay(parse_delay(text, v)?)),
                _ => return Err(bad_rule(text, &format!("unknown field `{field}`"))),
            };
            if let Some(a) = new_action
                && action.replace(a).is_some()
            {
                return Err(bad_rule(text, "has more than one action"));
            }
        }
        let as_rank = |v: u64| usize::try_from(v).map_err(|_| bad_rule(text, "rank too large"));
        let rule = FaultRule {
            direction,
            peer: as_rank(peer.ok_or_else(|| bad_rule(text, "needs `peer=RANK`"))?)?,
            nth: nth.ok_or_else(|| bad_rule(text, "needs `nth=N` (from 1)"))?,
            rank: rank.map(as_rank).transpose()?,
            action: action
                .ok_or_else(|| bad_rule(text, "needs an action: drop, dup, error or delay=MSms"))?,
        };
        if rule.nth == 0 {
            return Err(bad_rule(text, "`nth` counts from 1"));
        }
        if direction == FaultDirection::Recv
            && matches!(rule.action, FaultAction::Drop | FaultAction::Duplicate)
        {
            return Err(bad_rule(
                text,
                "drop and dup act on sent slots only (a receiver cannot lose what arrived)",
            ));
        }
        Ok(rule)
    }
}

/// Parses `mcast[:rank=R][:seed=N][:drop=P%][:dup=P%][:refuse]`.
fn parse_mcast(text: &str) -> Result<(Option<usize>, DatagramFaults)> {
    let mut fields = text.split(':').map(str::trim);
    if fields.next() != Some("mcast") {
        return Err(bad_rule(text, "must start with `send`, `recv` or `mcast`"));
    }
    let (mut rank, mut f, mut any) = (None, DatagramFaults::default(), false);
    let mut seen = Vec::new();
    for field in fields {
        let (key, value) = match field.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (field, None),
        };
        if seen.contains(&key) {
            return Err(bad_rule(text, &format!("`{key}` is given twice")));
        }
        seen.push(key);
        let number = |v: Option<&str>| -> Result<u64> {
            let v = v.ok_or_else(|| bad_rule(text, &format!("`{key}` needs a value")))?;
            v.parse()
                .map_err(|_| bad_rule(text, &format!("`{key}={v}` is not a non-negative integer")))
        };
        match (key, value) {
            ("rank", v) => {
                rank = Some(
                    usize::try_from(number(v)?).map_err(|_| bad_rule(text, "rank too large"))?,
                )
            }
            ("seed", v) => f.seed = number(v)?,
            ("drop", Some(v)) => (f.drop_ppm, any) = (parse_share(text, v)?, true),
            ("dup", Some(v)) => (f.dup_ppm, any) = (parse_share(text, v)?, true),
            ("refuse", None) => (f.refuse_join, any) = (true, true),
            _ => return Err(bad_rule(text, &format!("unknown field `{field}`"))),
        }
    }
    if !any {
        return Err(bad_rule(text, "needs drop=P%, dup=P% or refuse"));
    }
    Ok((rank, f))
}

/// A share in percent (`10%`, `0.5%`), as parts per million.
fn parse_share(rule: &str, v: &str) -> Result<u32> {
    let pct: f64 = v
        .strip_suffix('%')
        .and_then(|n| n.parse().ok())
        .filter(|p: &f64| (0.0..=100.0).contains(p))
        .ok_or_else(|| bad_rule(rule, &format!("`{v}` must be a percentage from 0% to 100%")))?;
    Ok((pct / 100.0 * f64::from(PPM)).round() as u32)
}

fn parse_delay(rule: &str, v: &str) -> Result<Duration> {
    let ms = v
        .strip_suffix("ms")
        .and_then(|n| n.parse::<u64>().ok())
        .ok_or_else(|| {
            bad_rule(
                rule,
                &format!("`delay={v}` must be milliseconds, e.g. 200ms"),
            )
        })?;
    let d = Duration::from_millis(ms);
    if d > MAX_DELAY {
        return Err(bad_rule(rule, "delay is longer than 60 s"));
    }
    Ok(d)
}

fn bad_rule(rule: &str, why: &str) -> Error {
    let faults = super::vars::FAULTS;
    Error::invalid(format!(
        "{} rule {rule:?}: {why}; expected {}",
        faults.name, faults.expected
    ))
}

impl fmt::Display for FaultRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dir = match self.direction {
            FaultDirection::Send => "send",
            FaultDirection::Recv => "recv",
        };
        write!(f, "{dir}")?;
        if let Some(r) = self.rank {
            write!(f, ":rank={r}")?;
        }
        write!(f, ":peer={}:nth={}:", self.peer, self.nth)?;
        match self.action {
            FaultAction::Delay(d) => write!(f, "delay={}ms", d.as_millis()),
            FaultAction::Drop => write!(f, "drop"),
            FaultAction::Duplicate => write!(f, "dup"),
            FaultAction::Error => write!(f, "error"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_text_is_the_empty_plan_and_a_bad_rule_is_quoted() {
        assert!(FaultPlan::parse("send:peer=1:nth=5:drop, recv:peer=0:nth=2:delay=50ms").is_ok());
        assert!(FaultPlan::parse(" ").unwrap().is_empty());
        let err = FaultPlan::parse("send:peer=1:drop")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("STREAMCOMM_FAULTS rule \"send:peer=1:drop\": needs `nth=N`"),
            "{err}"
        );
        assert!(
            err.contains("expected comma-separated rules send|recv"),
            "{err}"
        );
    }

    #[test]
    fn rules_parse_and_print_back() {
        let text = "send:peer=1:nth=5:drop, recv:peer=2:nth=3:delay=50ms,\
                    send:rank=0:peer=3:nth=1:error,send:peer=1:nth=6:dup";
        let plan = FaultPlan::parse(text).unwrap();
        assert_eq!(plan.rules.len(), 4);
        assert_eq!(
            plan.rules[1],
            FaultRule {
                direction: FaultDirection::Recv,
                peer: 2,
                nth: 3,
                rank: None,
                action: FaultAction::Delay(Duration::from_millis(50)),
            }
        );
        let printed: Vec<String> = plan.rules.iter().map(|r| r.to_string()).collect();
        assert_eq!(
            printed,
            [
                "send:peer=1:nth=5:drop",
                "recv:peer=2:nth=3:delay=50ms",
                "send:rank=0:peer=3:nth=1:error",
                "send:peer=1:nth=6:dup"
            ]
        );
        assert_eq!(FaultPlan::parse(&printed.join(",")).unwrap(), plan);
        assert!(FaultPlan::parse("  ").unwrap().is_empty());
        // Field order after the direction is free.
        assert_eq!(
            FaultRule::parse("send:drop:nth=5:peer=1").unwrap(),
            plan.rules[0]
        );
    }

    #[test]
    fn bad_rules_are_refused_with_a_reason() {
        for (text, why) in [
            ("sned:peer=1:nth=1:drop", "start with"),
            ("send:nth=1:drop", "needs `peer"),
            ("send:peer=1:drop", "needs `nth"),
            ("send:peer=1:nth=1", "needs an action"),
            ("send:peer=1:nth=0:drop", "from 1"),
            ("send:peer=1:nth=1:drop:dup", "more than one action"),
            ("send:peer=1:peer=2:nth=1:drop", "twice"),
            ("send:peer=x:nth=1:drop", "not a non-negative integer"),
            ("send:peer=-1:nth=1:drop", "not a non-negative integer"),
            ("send:peer:nth=1:drop", "needs a value"),
            ("send:peer=1:nth=1:delay=200", "milliseconds"),
            ("send:peer=1:nth=1:delay=61000ms", "60 s"),
            ("send:peer=1:nth=1:explode", "unknown field"),
            ("send:peer=1:nth=1:drop=1", "unknown field"),
            ("recv:peer=1:nth=1:drop", "sent slots only"),
            ("recv:peer=1:nth=1:dup", "sent slots only"),
            (
                "send:peer=1:nth=1:drop,send:peer=1:nth=1:dup",
                "already names",
            ),
        ] {
            let e = FaultPlan::parse(text).unwrap_err().to_string();
            assert!(
                e.contains("STREAMCOMM_FAULTS") && e.contains(why),
                "{text}: {e}"
            );
        }
    }

    #[test]
    fn the_mcast_rule_parses_and_bad_ones_are_refused() {
        let plan =
            FaultPlan::parse("send:peer=1:nth=5:drop, mcast:drop=10%:dup=0.5%:seed=3").unwrap();
        let f = plan.datagram_faults(2);
        assert_eq!(
            (f.drop_ppm, f.dup_ppm, f.seed, f.refuse_join),
            (100_000, 5_000, 3, false)
        );
        assert!(!plan.is_empty());
        let only = FaultPlan::parse("mcast:rank=1:refuse").unwrap();
        assert!(only.datagram_faults(1).refuse_join);
        assert_eq!(only.datagram_faults(0), DatagramFaults::default());
        assert!(!only.is_empty());
        for (text, why) in [
            ("mcast", "needs drop"),
            ("mcast:drop=10", "percentage"),
            ("mcast:drop=101%", "percentage"),
            ("mcast:drop=5%:drop=6%", "twice"),
            ("mcast:loss=5%", "unknown field"),
            ("mcast:refuse,mcast:drop=1%", "second"),
            ("mcastx:refuse", "must start"),
        ] {
            let e = FaultPlan::parse(text).unwrap_err().to_string();
            assert!(e.contains(why), "{text}: {e}");
        }
    }

    #[test]
    fn rules_are_checked_against_the_communicator() {
        let plan =
            FaultPlan::parse("send:peer=1:nth=1:drop,recv:rank=2:peer=0:nth=2:error").unwrap();
        assert_eq!(plan.for_rank(0, 4).unwrap().len(), 1);
        assert_eq!(plan.for_rank(2, 4).unwrap().len(), 2);
        assert!(
            plan.for_rank(1, 4)
                .unwrap_err()
                .to_string()
                .contains("itself")
        );
        assert!(plan.for_rank(0, 3).is_ok());
        let far = FaultPlan::parse("send:rank=9:peer=0:nth=1:drop").unwrap();
        assert!(
            far.for_rank(0, 4)
                .unwrap_err()
                .to_string()
                .contains("out of range")
        );
    }
}
