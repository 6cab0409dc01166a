//! The cost model's parameters and the tuning file that carries them.
//!
//! The file is `key = value` lines (`#` starts a comment), every key exactly
//! once, written by `streamcomm-bench calibrate`:
//!
//! ```text
//! shm.alpha_us = 2.0             # cost of one step (one slot) inside a host
//! shm.beta_ns_per_byte = 0.125   # a byte, per three passes over it (a write weighing write_weight reads)
//! tcp.alpha_us = 30.0            # the same between hosts
//! tcp.beta_ns_per_byte = 1.0
//! gamma_ns_per_byte = 0.3        # extra cost of reducing one byte
//! cores = 2                      # cores per host the ranks share
//! wake_us = 100.0                # waking a rank that waited so long it slept
//! spin_us = 5.0                  # how long a waiting rank spins (when ranks fit the cores)
//! yield_us = 40.0                # then how long it yields before it sleeps
//! shm.alpha_crowded_us = 1.2     # a step inside a host whose ranks outnumber its cores
//! shm.beta_cached_ns_per_byte = 0.05  # a byte, while the host's buffers fit its cache
//! cache_bytes = 33554432         # that cache (the last level, all of the host's)
//! write_weight = 3.0             # a byte written costs this many bytes read
//! tcp.alpha_crowded_us = 30.0    # a tcp step while the ranks outnumber the cores
//! tcp.latency_us = 45.0          # a tcp step's arrival at a peer that waits for it
//! ```
//!
//! Parsing is strict: an unknown or repeated key, a missing key, a value
//! that is not a finite non-negative number (or a positive integer for
//! `cores`) is an error naming the line. `wake_us`, `spin_us` and
//! `yield_us` may be left out (files written before they existed): they are
//! then 0. So may the last three: the crowded step and the cached byte then
//! cost what `shm.alpha_us` and `shm.beta_ns_per_byte` say, and no working
//! set counts as cached. `write_weight`, left out, is the built-in 3
//! ([`DEFAULT_WRITE_WEIGHT`]); `tcp.alpha_crowded_us` and `tcp.latency_us`,
//! left out, are `tcp.alpha_us`. A file with `tcp.alpha_crowded_us` but no
//! `tcp.latency_us` comes from a version of `calibrate` in which
//! `tcp.alpha_crowded_us` meant the crowded latency: it is read as the
//! latency, the crowded step as `tcp.alpha_us`.

use std::path::Path;

use crate::{Error, Result};

/// Cost of moving data over one kind of link.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkCost {
    /// Seconds per step (per slot handed over), whatever its size.
    pub alpha: f64,
    /// Seconds per byte moved by a step. Over shared memory, by a relay
    /// step (a slot read, the byte written out and into the next slot);
    /// the model prices other steps by their passes over the bytes
    /// ([`crate::tuning::predict`]). Over tcp, per byte on the wire.
    pub beta: f64,
}

/// Every parameter of the cost model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostParams {
    /// Links between ranks of one host (shared memory).
    pub shm: LinkCost,
    /// Links between hosts (tcp).
    pub tcp: LinkCost,
    /// Seconds per byte a step reduces (on top of moving it).
    pub gamma: f64,
    /// Cores per host: ranks beyond this share cores, and their steps
    /// serialise.
    pub cores: usize,
    /// Seconds it takes a rank that gave up waiting actively (spun, then
    /// yielded, then slept: `docs/design/architecture.md`) to run again once its data is
    /// there: the futex wake-up plus the wait for a core, which on a shared
    /// machine is whatever the scheduler gives the other work first.
    pub wake: f64,
    /// Seconds a waiting rank spins before yielding, when ranks fit the
    /// cores (none otherwise): `STREAMCOMM_SPIN` iterations, timed.
    pub spin: f64,
    /// Seconds a waiting rank then yields before it sleeps.
    pub yields: f64,
    /// Seconds per step inside a host whose ranks outnumber its cores (in
    /// place of `shm.alpha`): a step then also hands a core from one rank
    /// to another.
    pub crowded_alpha: f64,
    /// Seconds per byte inside a host while the buffers of all its ranks
    /// fit in `cache_bytes` (in place of `shm.beta`): calls issued back to
    /// back on the same buffers then copy from cache to cache.
    pub cached_beta: f64,
    /// Bytes of the host's last-level cache (0: no working set counts as
    /// cached).
    pub cache_bytes: usize,
    /// What a byte written costs inside a host, in bytes read: a step's
    /// bytes cost `beta` times its reads plus this times its writes, over
    /// the three passes of a relay whose passes all weigh the same
    /// ([`crate::tuning::predict`]).
    pub write_weight: f64,
    /// Seconds a tcp step costs the ranks while they outnumber their
    /// machine's cores (in place of `tcp.alpha`, as `crowded_alpha` is for
    /// shared memory): a step then also hands cores from rank to rank, and
    /// the rank that runs it waits for one.
    pub tcp_crowded_alpha: f64,
    /// Seconds from a tcp step's sender handing it over to a receiver that
    /// waits for it seeing it: the latency on the critical path of the calls
    /// that end with every rank waiting for its peers (all-reduce,
    /// all-gather, reduce-scatter, all-to-all), in place of `tcp.alpha`.
    /// `tcp.alpha` is what the step costs the ranks that run it, and what
    /// paces calls that pipeline into each other (back-to-back broadcasts
    /// and reduces: a rank hands the next call's data over while this
    /// call's is still on its way). Measured here over loopback with two
    /// ranks: 38-43 µs against 12-17 µs (two progress engines and two
    /// stream threads woken on the way, each a system call or two).
    pub tcp_latency: f64,
}

/// Built-in [`CostParams::write_weight`]: stores cost about three loads
/// here: a chain reduce takes 0.6-0.7x the time of the chain broadcast of
/// the same size, though both make three passes over each byte per relay
/// (the broadcast's relay writes two of them, the reduce's one), and the
/// model fits measured calls best with a weight between 2.5 and 4
/// (`docs/measurements/host-shm.md`, *Cost model*). Not calibrated:
/// `calibrate` writes this default.
pub const DEFAULT_WRITE_WEIGHT: f64 = 3.0;

impl Default for CostParams {
    /// Built-in defaults: figures measured on the development machines
    /// (`docs/design/architecture.md`), rounded; `cores` large enough not to matter. The
    /// shm byte is 0.125 ns per three weighed passes: with writes weighing
    /// three reads, half the 0.25 ns it was per pass-alike relay (an
    /// average relay weighs twice as much).
    fn default() -> CostParams {
        CostParams {
            shm: LinkCost {
                alpha: 2.0e-6,
                beta: 0.125e-9,
            },
            tcp: LinkCost {
                alpha: 30.0e-6,
                beta: 1.0e-9,
            },
            gamma: 0.3e-9,
            cores: 64,
            wake: 50.0e-6,
            spin: 5.0e-6,
            yields: 40.0e-6,
            crowded_alpha: 2.0e-6,
            cached_beta: 0.125e-9,
            cache_bytes: 0,
            write_weight: DEFAULT_WRITE_WEIGHT,
            tcp_crowded_alpha: 30.0e-6,
            tcp_latency: 30.0e-6,
        }
    }
}

/// The keys of the file, in the order they are written.
const KEYS: [&str; 15] = [
    "shm.alpha_us",
    "shm.beta_ns_per_byte",
    "tcp.alpha_us",
    "tcp.beta_ns_per_byte",
    "gamma_ns_per_byte",
    "cores",
    "wake_us",
    "spin_us",
    "yield_us",
    "shm.alpha_crowded_us",
    "shm.beta_cached_ns_per_byte",
    "cache_bytes",
    "write_weight",
    "tcp.alpha_crowded_us",
    "tcp.latency_us",
];

/// Index in [`KEYS`] of the first key that may be left out (then 0); the
/// ones after it may be too.
const OPTIONAL: usize = 6;

impl CostParams {
    /// Reads and parses a tuning file.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the file when it cannot be read or
    /// does not parse (see [`CostParams::parse`]).
    pub fn load(path: &Path) -> Result<CostParams> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::invalid(format!(
                "tuning file {}: cannot read it: {e}",
                path.display()
            ))
        })?;
        CostParams::parse(&text)
            .map_err(|e| Error::invalid(format!("tuning file {}: {e}", path.display())))
    }

    /// Parses the text of a tuning file.
    ///
    /// # Errors
    /// A message naming the line and what is wrong with it: not `key =
    /// value`, an unknown or repeated key, a bad value, or a missing key.
    pub fn parse(text: &str) -> std::result::Result<CostParams, String> {
        let mut values: [Option<f64>; KEYS.len()] = [None; KEYS.len()];
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let at = format!("line {}", i + 1);
            let (key, value) = line
                .split_once('=')
                .ok_or_else(|| format!("{at}: expected `key = value`, got {line:?}"))?;
            let key = key.trim();
            let k = KEYS
                .iter()
                .position(|&k| k == key)
                .ok_or_else(|| format!("{at}: unknown key {key:?} (known: {})", KEYS.join(", ")))?;
            if values[k].is_some() {
                return Err(format!("{at}: {key} is given twice"));
            }
            let value = value.trim();
            let v: f64 = value
                .parse()
                .map_err(|_| format!("{at}: {key} = {value:?} is not a number"))?;
            if !v.is_finite() || v < 0.0 {
                return Err(format!(
                    "{at}: {key} = {value} must be finite and not negative"
                ));
            }
            if key == "cores" && (v < 1.0 || v.fract() != 0.0 || v > 1e6) {
                return Err(format!("{at}: cores = {value} must be a positive integer"));
            }
            if key == "cache_bytes" && (v.fract() != 0.0 || v > 1e15) {
                return Err(format!(
                    "{at}: cache_bytes = {value} must be a whole number of bytes"
                ));
            }
            values[k] = Some(v);
        }
        let get = |k: usize| values[k].ok_or_else(|| format!("missing key {}", KEYS[k]));
        let optional = |k: usize| values[OPTIONAL + k].unwrap_or(0.0);
        // Before the latency had a key, `tcp.alpha_crowded_us` was it.
        let (tcp_crowded, tcp_latency) = match (values[OPTIONAL + 7], values[OPTIONAL + 8]) {
            (Some(latency), None) => (None, Some(latency)),
            given => given,
        };
        Ok(CostParams {
            shm: LinkCost {
                alpha: get(0)? * 1e-6,
                beta: get(1)? * 1e-9,
            },
            tcp: LinkCost {
                alpha: get(2)? * 1e-6,
                beta: get(3)? * 1e-9,
            },
            gamma: get(4)? * 1e-9,
            cores: get(5)? as usize,
            wake: optional(0) * 1e-6,
            spin: optional(1) * 1e-6,
            yields: optional(2) * 1e-6,
            crowded_alpha: values[OPTIONAL + 3].unwrap_or(get(0)?) * 1e-6,
            cached_beta: values[OPTIONAL + 4].unwrap_or(get(1)?) * 1e-9,
            cache_bytes: optional(5) as usize,
            write_weight: values[OPTIONAL + 6].unwrap_or(DEFAULT_WRITE_WEIGHT),
            tcp_crowded_alpha: tcp_crowded.unwrap_or(get(2)?) * 1e-6,
            tcp_latency: tcp_latency.unwrap_or(get(2)?) * 1e-6,
        })
    }

    /// The text of a tuning file holding these parameters (parsed back
    /// exactly by [`CostParams::parse`]), after a comment line per entry of
    /// `notes`.
    pub fn to_file(&self, notes: &[String]) -> String {
        let mut out = String::from("# streamcomm tuning file (STREAMCOMM_TUNING_FILE)\n");
        for n in notes {
            out.push_str(&format!("# {n}\n"));
        }
        let values = [
            self.shm.alpha * 1e6,
            self.shm.beta * 1e9,
            self.tcp.alpha * 1e6,
            self.tcp.beta * 1e9,
            self.gamma * 1e9,
            self.cores as f64,
            self.wake * 1e6,
            self.spin * 1e6,
            self.yields * 1e6,
            self.crowded_alpha * 1e6,
            self.cached_beta * 1e9,
            self.cache_bytes as f64,
            self.write_weight,
            self.tcp_crowded_alpha * 1e6,
            self.tcp_latency * 1e6,
        ];
        for (k, v) in KEYS.iter().zip(values) {
            out.push_str(&format!("{k} = {v}\n"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_the_file_format() {
        let p = CostParams {
            shm: LinkCost {
                alpha: 1.25e-6,
                beta: 0.125e-9,
            },
            tcp: LinkCost {
                alpha: 17e-6,
                beta: 2e-9,
            },
            gamma: 0.5e-9,
            cores: 3,
            wake: 12e-6,
            spin: 3e-6,
            yields: 30e-6,
            crowded_alpha: 2.5e-6,
            cached_beta: 0.03e-9,
            cache_bytes: 32 << 20,
            write_weight: 2.5,
            tcp_crowded_alpha: 33e-6,
            tcp_latency: 44e-6,
        };
        let text = p.to_file(&["measured here".into()]);
        let back = CostParams::parse(&text).unwrap();
        assert!((back.shm.alpha - p.shm.alpha).abs() < 1e-15);
        assert!((back.tcp.beta - p.tcp.beta).abs() < 1e-18);
        assert_eq!(back.cores, 3);
        assert!((back.wake - p.wake).abs() < 1e-15);
        assert!((back.spin - p.spin).abs() < 1e-15);
        assert!((back.yields - p.yields).abs() < 1e-15);
        assert!((back.crowded_alpha - p.crowded_alpha).abs() < 1e-15);
        assert!((back.cached_beta - p.cached_beta).abs() < 1e-18);
        assert_eq!(back.cache_bytes, 32 << 20);
        assert_eq!(back.write_weight, 2.5);
        assert!((back.tcp_crowded_alpha - p.tcp_crowded_alpha).abs() < 1e-15);
        assert!((back.tcp_latency - p.tcp_latency).abs() < 1e-15);
        // A file from when `tcp.alpha_crowded_us` was the latency reads it
        // as the latency.
        let before: String = text
            .lines()
            .filter(|l| !l.starts_with("tcp.latency_us"))
            .map(|l| format!("{l}\n"))
            .collect();
        let before = CostParams::parse(&before).unwrap();
        assert!((before.tcp_latency - p.tcp_crowded_alpha).abs() < 1e-15);
        assert_eq!(before.tcp_crowded_alpha, before.tcp.alpha);
        // A file from before `wake_us` and the regimes still loads, with no
        // wake-up cost, and the crowded step and cached byte costing what
        // any other does.
        let old: String = text
            .lines()
            .filter(|l| !KEYS[OPTIONAL..].iter().any(|k| l.starts_with(k)))
            .map(|l| format!("{l}\n"))
            .collect();
        let old = CostParams::parse(&old).unwrap();
        assert_eq!(old.wake, 0.0);
        assert_eq!(old.crowded_alpha, old.shm.alpha);
        assert_eq!(old.cached_beta, old.shm.beta);
        assert_eq!(old.cache_bytes, 0);
        assert_eq!(old.write_weight, DEFAULT_WRITE_WEIGHT);
        assert_eq!(old.tcp_crowded_alpha, old.tcp.alpha);
        assert_eq!(old.tcp_latency, old.tcp.alpha);
        let d = CostParams::default();
        assert_eq!(CostParams::parse(&d.to_file(&[])).unwrap().cores, d.cores);
    }

    #[test]
    fn strict_parsing_names_the_problem() {
        let good = CostParams::default().to_file(&[]);
        let err = |text: &str| CostParams::parse(text).unwrap_err();
        assert!(err(&format!("{good}speed = 3\n")).contains("unknown key \"speed\""));
        assert!(err(&format!("{good}cores = 4\n")).contains("given twice"));
        assert!(err(&format!("{good}wake_us = 4\n")).contains("given twice"));
        assert!(err(&good.replace("wake_us = 50", "wake_us = -2")).contains("not negative"));
        assert!(err(&good.replace("cores = 64", "cores = 1.5")).contains("positive integer"));
        assert!(err(&good.replace("cores = 64", "cores = 0")).contains("positive integer"));
        assert!(
            err(&good.replace("gamma_ns_per_byte = 0.3", "gamma_ns_per_byte = -1"))
                .contains("not negative")
        );
        assert!(
            err(&good.replace("tcp.alpha_us = 30", "tcp.alpha_us = fast")).contains("not a number")
        );
        assert!(err(&good.replace("tcp.alpha_us = 30", "tcp.alpha_us 30")).contains("key = value"));
        assert!(err("shm.alpha_us = 1\n").contains("missing key shm.beta_ns_per_byte"));
        assert!(err(&good.replace("tcp.alpha_us = 30", "tcp.alpha_us = inf")).contains("finite"));
    }

    #[test]
    fn load_names_the_file() {
        let e = CostParams::load(Path::new("/nonexistent/tuning.txt")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/tuning.txt"), "{e}");
    }
}
