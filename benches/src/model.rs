//! `streamcomm-bench model`: the cost model's prediction for every algorithm
//! at scales we cannot run here.
//!
//! For each collective, a table of predicted times for every algorithm at
//! N = 2, 4, .., 4096 ranks (`--per-host` ranks per host, 8 by default) and
//! sizes 8 B to 1 GiB (factor 8), with the algorithm the communicator would
//! choose; `--plot file.svg` draws predicted time against size at 64, 512
//! and 4096 ranks. Parameters come from `STREAMCOMM_TUNING_FILE` when set
//! (as for a communicator), else the built-in defaults; the slot size from
//! `STREAMCOMM_BUFFSIZE` / `STREAMCOMM_NSTEPS`. Sizes follow the benchmark's
//! rows (the larger buffer, nccl-tests' convention).

use clap::Parser;
use streamcomm::Algorithm;
use streamcomm::testing::tuning::{CostParams, tuning_file_params};
use streamcomm::testing::tuning::{Shape, choose_by_model, predict};
use streamcomm::{Config, DataType};

use crate::cli::{Collective, human_bytes};
use crate::error::{Context, Fallible};
use crate::plot::panels::{self, Panel, Series};
use crate::schedule::schedule_id;

/// Arguments of `streamcomm-bench model`.
#[derive(Debug, Parser)]
#[command(name = "streamcomm-bench model")]
pub(crate) struct ModelCli {
    /// Ranks per host.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..))]
    pub per_host: u64,

    /// Largest number of ranks (powers of two from 2).
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(2..=1 << 20))]
    pub max_ranks: u64,

    /// Also draw the predictions at 64, 512 and 4096 ranks into this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<String>,

    /// Instead of the tables, predict the points listed in this file (`-`:
    /// standard input), one per line: `collective algorithm ranks
    /// ranks_per_host bytes [sharing]` (bytes as the benchmark's rows count
    /// them; `sharing`: ranks sharing one machine's cores, when pretend hosts
    /// share a machine, else `ranks_per_host`); prints each line followed by
    /// the predicted µs. Used by `benches/scripts/model-vs-measured.py
    /// compare`.
    #[arg(long, value_name = "FILE")]
    pub points: Option<String>,

    /// With `--points`: after each prediction, an id of the schedule the
    /// algorithm runs there (hex; equal ids, the same steps on every rank,
    /// see `schedule.rs`), so that measurements of one program are pooled.
    #[arg(long, requires = "points")]
    pub schedule_ids: bool,
}

/// Predicts the points of `path` (see [`ModelCli::points`]).
fn run_points(path: &str, schedule_ids: bool) -> Fallible<()> {
    use std::io::Read;
    let mut text = String::new();
    if path == "-" {
        std::io::stdin()
            .read_to_string(&mut text)
            .context("read the points from standard input")?;
    } else {
        text = std::fs::read_to_string(path).with_context(|| format!("read {path}"))?;
    }
    let mut out = String::new();
    for (i, line) in text.lines().enumerate() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.is_empty() || w[0].starts_with('#') {
            continue;
        }
        let bad = |what: &str| format!("{path} line {}: {what}: {line:?}", i + 1);
        let (coll, algo, ranks, per_host, bytes, sharing) = match w[..] {
            [c, a, r, p, b] => (c, a, r, p, b, None),
            [c, a, r, p, b, s] => (c, a, r, p, b, Some(s)),
            _ => {
                return Err(bad(
                    "expected `collective algorithm ranks ranks_per_host bytes [sharing]`",
                ));
            }
        };
        let c = <Collective as clap::ValueEnum>::from_str(coll, true)
            .map_err(|_| bad("unknown collective"))?;
        let a = Algorithm::parse(algo).ok_or_else(|| bad("unknown algorithm"))?;
        let num = |s: &str| s.parse::<usize>().map_err(|_| bad("not a number"));
        let (n, per, bytes) = (num(ranks)?, num(per_host)?, num(bytes)?);
        if n == 0 || per == 0 {
            return Err(bad("ranks and ranks per host must be positive"));
        }
        let setting = Setting::from_env(per)?;
        let lib = c
            .library()
            .ok_or_else(|| bad("not a collective the model covers"))?;
        let count = c.geometry(bytes as u64, DataType::F32, n).count;
        let mut shape = Shape::new(n, per, setting.slot_bytes);
        if let Some(s) = sharing {
            shape = shape.with_sharing(num(s)?);
        }
        let t = predict(&setting.params, lib, a, count, DataType::F32.size(), &shape)
            .ok_or_else(|| bad("the algorithm does not implement the collective"))?;
        out.push_str(&format!("{line} {:.3}", t * 1e6));
        if schedule_ids {
            let id = schedule_id(lib, a, count, n, setting.slot_bytes, setting.nsteps)
                .ok_or_else(|| bad("no plan for some rank"))?;
            out.push_str(&format!(" {id:016x}"));
        }
        out.push('\n');
    }
    print!("{out}");
    Ok(())
}

/// The collectives of the table, with the library's view of each.
const COLLECTIVES: [Collective; 6] = [
    Collective::AllReduce,
    Collective::AllGather,
    Collective::Broadcast,
    Collective::ReduceScatter,
    Collective::Reduce,
    Collective::AllToAll,
];

/// Sizes of the table: 8 B to 1 GiB by factors of 8.
fn sizes() -> Vec<u64> {
    (0..10).map(|k| 8u64 << (3 * k)).collect()
}

/// What the model needs besides the call.
pub(crate) struct Setting {
    params: CostParams,
    slot_bytes: usize,
    nsteps: usize,
    per_host: usize,
    from_file: bool,
}

impl Setting {
    /// From the environment, as a communicator would read it.
    ///
    /// # Errors
    /// A bad `STREAMCOMM_*` variable or tuning file.
    pub(crate) fn from_env(per_host: usize) -> Fallible<Setting> {
        let config = Config::from_env().context("read the configuration")?;
        Ok(Setting {
            params: tuning_file_params(&config).unwrap_or_default(),
            slot_bytes: config.slot_bytes(),
            nsteps: config.nsteps,
            per_host,
            from_file: tuning_file_params(&config).is_some(),
        })
    }

    /// Predicted µs of every candidate of `c` at `n` ranks and `bytes`, and
    /// the chosen one.
    pub(crate) fn row(
        &self,
        c: Collective,
        n: usize,
        bytes: u64,
    ) -> (Vec<(Algorithm, f64)>, Algorithm) {
        let lib = c.library().unwrap_or(streamcomm::Collective::Barrier);
        let count = c.geometry(bytes, DataType::F32, n).count;
        let shape = Shape::new(n, self.per_host, self.slot_bytes);
        let esize = DataType::F32.size();
        let times: Vec<(Algorithm, f64)> = Algorithm::candidates(lib)
            .iter()
            .filter_map(|&a| {
                predict(&self.params, lib, a, count, esize, &shape).map(|t| (a, t * 1e6))
            })
            .collect();
        let chosen =
            choose_by_model(&self.params, lib, count, esize, &shape).unwrap_or(Algorithm::Ring);
        (times, chosen)
    }
}

/// Prints the tables (and writes the plot).
///
/// # Errors
/// A bad configuration, or the plot file cannot be written.
pub(crate) fn run(cli: &ModelCli) -> Fallible<()> {
    if let Some(path) = &cli.points {
        return run_points(path, cli.schedule_ids);
    }
    let setting = Setting::from_env(cli.per_host as usize)?;
    let mut out = String::new();
    out.push_str(&format!(
        "# streamcomm cost model: predicted time per call (us), f32, {} ranks per host, slot {}, parameters from {}\n",
        setting.per_host,
        human_bytes(setting.slot_bytes as u64),
        if setting.from_file { "STREAMCOMM_TUNING_FILE" } else { "built-in defaults" }
    ));
    let p = &setting.params;
    out.push_str(&format!(
        "# shm alpha {:.2} us beta {:.3} ns/B; tcp alpha {:.2} us latency {:.2} us beta {:.3} ns/B; gamma {:.3} ns/B; {} cores per host; waits: spin {:.1} us, yields {:.1} us, wake {:.1} us\n",
        p.shm.alpha * 1e6,
        p.shm.beta * 1e9,
        p.tcp.alpha * 1e6,
        p.tcp_latency * 1e6,
        p.tcp.beta * 1e9,
        p.gamma * 1e9,
        p.cores,
        p.spin * 1e6,
        p.yields * 1e6,
        p.wake * 1e6
    ));
    let mut ranks = vec![];
    let mut n = 2;
    while n <= cli.max_ranks as usize {
        ranks.push(n);
        n *= 2;
    }
    for c in COLLECTIVES {
        let (first, _) = setting.row(c, 2, 8);
        out.push_str(&format!(
            "\n# {}\n# {:>6} {:>6} {:>8}",
            c.name(),
            "ranks",
            "hosts",
            "size"
        ));
        for (a, _) in &first {
            out.push_str(&format!(" {:>18}", a.name()));
        }
        out.push_str(&format!(" {:>18}\n", "chosen"));
        for &n in &ranks {
            for bytes in sizes() {
                let (times, chosen) = setting.row(c, n, bytes);
                out.push_str(&format!(
                    "  {n:>6} {:>6} {:>8}",
                    n.div_ceil(setting.per_host),
                    human_bytes(bytes)
                ));
                // Below one element per rank, the call moves nothing.
                let empty = c.geometry(bytes, DataType::F32, n).count == 0;
                for (_, t) in &times {
                    if empty {
                        out.push_str(&format!(" {:>18}", "-"));
                    } else {
                        out.push_str(&format!(" {t:>18.1}"));
                    }
                }
                let chosen = if empty { "-" } else { chosen.name() };
                out.push_str(&format!(" {chosen:>18}\n"));
            }
        }
    }
    print!("{out}");
    if let Some(path) = &cli.plot {
        let svg = plot(&setting).with_context(|| format!("draw the plot for {path}"))?;
        std::fs::write(path, svg).with_context(|| format!("write the plot to {path}"))?;
        eprintln!("streamcomm-bench: plot written to {path}");
    }
    Ok(())
}

/// Predicted time against size for the collectives with several
/// algorithms, at 64, 512 and 4096 ranks: one panel each.
fn plot(setting: &Setting) -> Result<String, String> {
    let mut charts = Vec::new();
    for c in [
        Collective::AllReduce,
        Collective::AllGather,
        Collective::Broadcast,
    ] {
        for n in [64, 512, 4096] {
            let mut series: Vec<Series> = Vec::new();
            for bytes in sizes() {
                let (times, _) = setting.row(c, n, bytes);
                for (i, (a, t)) in times.into_iter().enumerate() {
                    if series.len() <= i {
                        series.push(Series {
                            name: a.name().to_string(),
                            points: Vec::new(),
                        });
                    }
                    series[i].points.push((bytes as f64, t));
                }
            }
            charts.push(Panel {
                title: format!(
                    "{} — {n} ranks ({} hosts)",
                    c.name(),
                    n.div_ceil(setting.per_host)
                ),
                series,
            });
        }
    }
    panels::render(
        "streamcomm cost model: predicted time per call (us) against size (bytes)",
        &charts,
        3,
    )
}
