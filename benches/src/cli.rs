//! The command line: nccl-tests' flags, spelled the same where they exist.
//!
//! Anyone who has run `all_reduce_perf -b 8 -e 128M -f 2` can run this
//! benchmark without reading its help, so the short flags, their defaults and
//! the size suffixes follow nccl-tests; the few flags of our own (`--ranks`,
//! `--json`, the barrier and latency iteration counts) are long-only.

use clap::{Parser, ValueEnum};
use streamcomm::{DataType, ReduceOp};

/// The operation a run measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Collective {
    /// Every rank gets the reduction of all inputs.
    #[value(name = "all_reduce")]
    AllReduce,
    /// Every rank gets the concatenation of all inputs.
    #[value(name = "all_gather")]
    AllGather,
    /// Every rank gets one block of the reduction.
    #[value(name = "reduce_scatter")]
    ReduceScatter,
    /// Every rank gets the root's input.
    #[value(name = "broadcast")]
    Broadcast,
    /// The root gets the reduction of all inputs.
    #[value(name = "reduce")]
    Reduce,
    /// Block `j` of rank `i` goes to block `i` of rank `j`.
    #[value(name = "all_to_all")]
    AllToAll,
    /// Each rank sends to the next and receives from the previous.
    #[value(name = "sendrecv")]
    Sendrecv,
    /// Latency of host and stream barriers.
    #[value(name = "barrier")]
    Barrier,
}

impl Collective {
    /// The name used on the command line and in the JSON output.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all_reduce",
            Collective::AllGather => "all_gather",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::Broadcast => "broadcast",
            Collective::Reduce => "reduce",
            Collective::AllToAll => "all_to_all",
            Collective::Sendrecv => "sendrecv",
            Collective::Barrier => "barrier",
        }
    }

    /// True when the operation takes a reduction operator (`-o`).
    pub(crate) fn has_op(self) -> bool {
        matches!(
            self,
            Collective::AllReduce | Collective::ReduceScatter | Collective::Reduce
        )
    }

    /// True when the operation takes a root (`-r`).
    pub(crate) fn has_root(self) -> bool {
        matches!(self, Collective::Broadcast | Collective::Reduce)
    }
}

/// `streamcomm-bench`: nccl-tests-style benchmarks of streamcomm collectives.
///
/// Without a launcher environment it starts `--ranks` copies of itself on
/// this host (default 1); under a launcher (`streamcomm-run`, torchrun,
/// Slurm, Open MPI) it runs as the rank it was given.
#[derive(Debug, Parser)]
#[command(
    name = "streamcomm-bench",
    version,
    about,
    long_about = None,
    after_help = "Environment:\n  \
        STREAMCOMM_TRANSPORT=tcp     connect every pair of ranks over tcp, even on one host\n  \
        STREAMCOMM_NCHANNELS=N       sockets per tcp peer (default 2)\n  \
        STREAMCOMM_BENCH_TCP_BYTES=N bytes of each raw tcp bandwidth run (default 256M)\n\n\
        When rank 0 reaches rank 1 over tcp, ranks 0 and 1 first measure raw tcp between \
        them (--latency-iters round trips of 8 B; one and NCHANNELS sockets, best of 2 runs)."
)]
pub(crate) struct Cli {
    /// The operation to measure.
    #[arg(value_enum)]
    pub collective: Collective,

    /// Smallest size in bytes (suffixes K, M, G: powers of 1024).
    #[arg(short = 'b', long = "minbytes", default_value = "8", value_parser = parse_size)]
    pub min_bytes: u64,

    /// Largest size in bytes (suffixes K, M, G).
    #[arg(short = 'e', long = "maxbytes", default_value = "64M", value_parser = parse_size)]
    pub max_bytes: u64,

    /// Factor between consecutive sizes.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 4,
          value_parser = clap::value_parser!(u64).range(2..))]
    pub step_factor: u64,

    /// Timed iterations per size.
    #[arg(short = 'n', long = "iters", default_value_t = 20,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub iters: u64,

    /// Warm-up iterations per size (not timed).
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 5)]
    pub warmup: u64,

    /// Check the results of the last iteration (1) or not (0).
    #[arg(short = 'c', long = "check", default_value_t = 1,
          value_parser = clap::value_parser!(u8).range(0..=1))]
    pub check: u8,

    /// Element type: f32, f64, f16, bf16, i8, u8, i32, u32, i64, u64.
    #[arg(short = 'd', long = "datatype", default_value = "f32", value_parser = parse_dtype)]
    pub dtype: DataType,

    /// Reduction operator: sum, prod, min, max, avg.
    #[arg(short = 'o', long = "op", default_value = "sum", value_parser = parse_op)]
    pub op: ReduceOp,

    /// Root rank of broadcast and reduce.
    #[arg(short = 'r', long = "root", default_value_t = 0)]
    pub root: usize,

    /// Ranks to start on this host when not under a launcher (default 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub ranks: Option<u64>,

    /// Also write the results as JSON to this file (`-`: to stdout, and the
    /// table to stderr).
    #[arg(long, value_name = "PATH|-")]
    pub json: Option<String>,

    /// Timed `barrier_host` iterations of the barrier benchmark.
    #[arg(long, default_value_t = 100_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub barrier_iters: u64,

    /// Timed stream-barrier iterations (default: `--barrier-iters` / 5).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub stream_barrier_iters: Option<u64>,

    /// Algorithm: `default` (the communicator's choice). For barrier: `ALL`
    /// or a name (`dissemination`, `tree:4`, ...); for a collective, the one
    /// to force (`ring`, `tree`, `halving_doubling`, `binomial`, `chain`,
    /// `recursive_doubling`, `bruck`, `pairwise`), as `STREAMCOMM_ALGO` would.
    #[arg(long, default_value = "default")]
    pub algo: String,

    /// Timed round trips of the 8-byte sendrecv latency test (and of the raw
    /// tcp round-trip measurement when ranks 0 and 1 talk tcp).
    #[arg(long, default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub latency_iters: u64,

    /// Write latency and bandwidth curves of the sendrecv sweep to this SVG file.
    #[arg(long, value_name = "PATH")]
    pub plot: Option<String>,

    /// Add the cost model's columns to the sweep: its predicted time for the
    /// algorithm that ran ("model") and prediction / measured time
    /// ("model/time"), and a count of the rows it predicted within 35%.
    #[arg(long)]
    pub model: bool,
}

impl Cli {
    /// True when `-c 1`.
    pub(crate) fn check(&self) -> bool {
        self.check == 1
    }

    /// The barrier algorithms to measure (`None`: the communicator's default).
    ///
    /// # Errors
    /// An unknown algorithm name.
    pub(crate) fn barrier_algos(
        &self,
    ) -> Result<Vec<Option<streamcomm::barrier::BarrierAlgo>>, String> {
        use streamcomm::barrier::BarrierAlgo;
        match self.algo.as_str() {
            "default" => Ok(vec![None]),
            a if a.eq_ignore_ascii_case("all") => {
                Ok(BarrierAlgo::ALL.iter().map(|&a| Some(a)).collect())
            }
            list => list
                .split(',')
                .map(|a| BarrierAlgo::parse(a).map(Some).map_err(|e| e.to_string()))
                .collect(),
        }
    }

    /// The `STREAMCOMM_ALGO` value that forces `--algo` on a collective, or
    /// `None` for `default` and for barrier (chosen per run instead).
    ///
    /// # Errors
    /// An unknown algorithm, one that does not implement the collective, or
    /// any algorithm for sendrecv.
    pub(crate) fn forced_algo(&self) -> Result<Option<String>, String> {
        if self.algo == "default" || self.collective == Collective::Barrier {
            return Ok(None);
        }
        let Some(c) = self.collective.library() else {
            return Err(format!(
                "--algo {}: {} has a single schedule",
                self.algo,
                self.collective.name()
            ));
        };
        let algo = streamcomm::Algorithm::parse(&self.algo).ok_or_else(|| {
            let all: Vec<&str> = streamcomm::Algorithm::ALL
                .iter()
                .map(|a| a.name())
                .collect();
            format!(
                "--algo: unknown algorithm {:?} (one of {})",
                self.algo,
                all.join(", ")
            )
        })?;
        if !algo.supports(c) {
            return Err(format!("--algo: {algo} does not implement {}", c.name()));
        }
        Ok(Some(format!("{}={}", c.name(), algo.name())))
    }

    /// Timed stream-barrier iterations.
    pub(crate) fn stream_barrier_iters(&self) -> u64 {
        self.stream_barrier_iters
            .unwrap_or((self.barrier_iters / 5).max(1))
    }

    /// The sizes of the sweep: `-b`, times `-f`, up to `-e` included.
    pub(crate) fn sizes(&self) -> Vec<u64> {
        let mut sizes = Vec::new();
        let mut size = self.min_bytes;
        while size <= self.max_bytes {
            sizes.push(size);
            match size.checked_mul(self.step_factor) {
                Some(next) => size = next,
                None => break,
            }
        }
        sizes
    }

    /// Checks the arguments that depend on each other or on the number of
    /// ranks.
    ///
    /// # Errors
    /// A message naming the flag at fault.
    pub(crate) fn validate(&self, nranks: usize) -> Result<(), String> {
        if self.min_bytes == 0 {
            return Err("-b must be at least 1 byte".into());
        }
        if self.min_bytes > self.max_bytes {
            return Err(format!(
                "-b {} is larger than -e {}",
                self.min_bytes, self.max_bytes
            ));
        }
        if self.collective.has_root() && self.root >= nranks {
            return Err(format!(
                "-r {}: root out of range for {nranks} ranks",
                self.root
            ));
        }
        if self.collective == Collective::Sendrecv && nranks < 2 {
            return Err("sendrecv needs at least 2 ranks (--ranks 2)".into());
        }
        self.forced_algo()?;
        Ok(())
    }
}

/// Parses a byte count with an optional K, M or G suffix (powers of 1024;
/// `KB`, `KiB` and lower case accepted).
///
/// # Errors
/// A message quoting the input.
pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let digits_end = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (number, suffix) = lower.split_at(digits_end);
    let value: u64 = number
        .parse()
        .map_err(|_| format!("'{s}' is not a size (e.g. 8, 64K, 128M, 1G)"))?;
    let shift = match suffix {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => {
            return Err(format!(
                "'{s}': unknown size suffix '{suffix}' (use K, M or G)"
            ));
        }
    };
    value
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("'{s}' is too large"))
}

/// Parses an element type name (`f32`, `float`, `bf16`, ...).
///
/// # Errors
/// A message listing the valid names.
pub(crate) fn parse_dtype(s: &str) -> Result<DataType, String> {
    DataType::parse(s).ok_or_else(|| {
        let names: Vec<_> = DataType::ALL.iter().map(|d| d.name()).collect();
        format!("unknown data type '{s}' (one of {})", names.join(", "))
    })
}

/// Parses a reduction operator name (`sum`, `prod`, `min`, `max`, `avg`).
///
/// # Errors
/// A message listing the valid names.
pub(crate) fn parse_op(s: &str) -> Result<ReduceOp, String> {
    ReduceOp::parse(s).ok_or_else(|| {
        let names: Vec<_> = ReduceOp::ALL.iter().map(|o| o.name()).collect();
        format!("unknown reduction '{s}' (one of {})", names.join(", "))
    })
}

/// Formats a byte count the way sizes are usually written (`64 MiB`).
pub(crate) fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut unit = 0;
    let mut value = bytes;
    while unit + 1 < UNITS.len() && value >= 1024 && value.is_multiple_of(1024) {
        value /= 1024;
        unit += 1;
    }
    format!("{value} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("64m"), Ok(64 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert!(parse_size("12X").is_err());
        assert!(parse_size("M").is_err());
    }

    #[test]
    fn sweep_includes_both_ends() {
        let cli = Cli::parse_from(["x", "all_reduce", "-b", "8", "-e", "64K", "-f", "8"]);
        assert_eq!(cli.sizes(), vec![8, 64, 512, 4096, 32768]);
        let cli = Cli::parse_from(["x", "all_reduce", "-b", "8", "-e", "64M", "-f", "4"]);
        // 8 * 4^k never equals 64M: the last size is 32M, as in nccl-tests.
        assert_eq!(cli.sizes().len(), 12);
        assert_eq!(cli.sizes().last(), Some(&(32 << 20)));
    }

    #[test]
    fn validation_names_the_flag() {
        let cli = Cli::parse_from(["x", "broadcast", "-r", "2"]);
        assert!(cli.validate(2).unwrap_err().contains("-r 2"));
        let cli = Cli::parse_from(["x", "sendrecv"]);
        assert!(cli.validate(1).is_err());
        assert!(cli.validate(2).is_ok());
        let cli = Cli::parse_from(["x", "all_reduce", "--algo", "binomial"]);
        assert!(cli.validate(2).unwrap_err().contains("--algo"));
        let cli = Cli::parse_from(["x", "all_gather", "--algo", "bruck"]);
        assert_eq!(cli.forced_algo().unwrap().unwrap(), "all_gather=bruck");
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human_bytes(8), "8 B");
        assert_eq!(human_bytes(64 << 20), "64 MiB");
        assert_eq!(human_bytes(1536), "1536 B");
    }
}
