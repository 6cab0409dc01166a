//! `streamcomm-bench calibrate`: measures the cost model's parameters on
//! this machine and writes the tuning file (`STREAMCOMM_TUNING_FILE`).
//! Started by a launcher across hosts instead, it measures the links
//! between them into the file ([`links`]).
//!
//! - `gamma` and the cores: in the launcher, before any rank runs: the
//!   time per byte of a sum-reduction kernel beyond a plain copy of the same
//!   bytes, and `available_parallelism`.
//! - `alpha` and `beta`, per transport: `--ranks` ranks (twice the cores by default),
//!   started with `STREAMCOMM_TRANSPORT=shm` and again with `=tcp`, time
//!   calls the way the benchmark does (back to back, one synchronize): one
//!   of each collective with 8-byte blocks (a ring all-reduce and a chain
//!   broadcast of 8 bytes, a recursive-doubling all-gather, a ring
//!   reduce-scatter and an all-to-all of 8 bytes per rank), which are
//!   almost only per-step cost, and a chain broadcast of many slots, which
//!   is almost only per-byte cost. `alpha` is then the geometric mean of
//!   the values for which the model predicts each small call's time, and
//!   `beta` (with that `alpha`) the value for which it predicts the
//!   broadcast's: the parameters are solved through the model itself, so
//!   its step counts and its cores bound are part of the calibration (over
//!   tcp, the model sees one rank per host, as a communicator does).
//!   Over tcp a step's cost to the ranks and its latency differ (about 15
//!   against 42 µs here): `tcp.alpha` is solved from the broadcast alone,
//!   whose back-to-back calls pipeline, and `tcp.latency_us` from the four
//!   others, which end with every rank waiting for its peers.
//!
//! - `spin` and `yields`: in the launcher, how long a waiting rank spins
//!   (`STREAMCOMM_SPIN` checks) and then yields before it sleeps.
//! - `wake`: the shm ranks also time a recursive-doubling all-gather of one
//!   slot, whose rounds leave a rank idle too long to be caught before it
//!   sleeps; the wake-ups are what the model, given everything else, then
//!   lacks to predict it (on the launches with a core per rank below: with
//!   more ranks than cores the model puts no wake-up on a call).
//! - The two regimes of the shm link. The shm launches above (twice the
//!   cores) give the crowded step (`shm.alpha_crowded_us`) and the per-byte
//!   cost out of memory. They also time the small calls again at a size at
//!   which all ranks' buffers fit in a quarter of the last-level cache
//!   (`cache_bytes`, from sysfs): the cached byte
//!   (`shm.beta_cached_ns_per_byte`), their geometric mean. A second shm
//!   launch with one rank per core times the small calls again: the step
//!   when each rank has a core (`shm.alpha_us`). Measured here on 2 cores
//!   (2026-11-30): 1.1-1.8 µs crowded against 0.6-1.1 µs one rank per core,
//!   and 0.06-0.11 ns/B within the cache against 0.15-0.19 out of memory.
//!
//! - The crowded tcp step (`tcp.alpha_crowded_us`): a fourth launch, over
//!   tcp with as many ranks as the crowded shm one (twice the cores), times
//!   only the small calls; solved through the model (every rank a host of
//!   its own, all sharing this machine's cores, the latency known) for the
//!   step's cost while ranks outnumber cores, the geometric mean over the
//!   calls as for the crowded shm step. Measured here (2 cores,
//!   2026-12-01, four calibrations): 32-37 µs against 12-17 µs with a
//!   core per rank. Only where there are two cores or more and more
//!   crowded ranks than cores; elsewhere the file gets `tcp.alpha_us`.
//!   (Two pretend hosts made by
//!   `STREAMCOMM_HOSTS_OVERRIDE` cannot stand in: their links stay shared
//!   memory.)
//!
//! - `write_weight` is not measured: the file gets the built-in value
//!   (`DEFAULT_WRITE_WEIGHT`, measured across runs).
//!
//! Medians of several repetitions within a launch and of [`LAUNCHES`]
//! launches of each kind, taken in turns, so a scheduler hiccup or a
//! minute of a slower machine does not become a parameter (~100 s here).

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use streamcomm::UntypedBuffer;
use streamcomm::host::HostStream;
use streamcomm::testing::tuning::{CostParams, DEFAULT_WRITE_WEIGHT, LinkCost};
use streamcomm::testing::tuning::{Shape, predict};
use streamcomm::{Algorithm, Collective};
use streamcomm::{Communicator, DataType, ReduceOp};
use streamcomm_run::local::LocalLauncher;

use crate::error::{Context, Fallible};

mod links;

/// The schedules the panel's calls are timed with, whatever the model
/// would choose: the ones [`Call::schedule`] names.
const SCHEDULES: &str = "all_reduce=ring,broadcast=chain,all_gather=recursive_doubling";

/// Launches of each kind (crowded shm, tcp, one rank per core over shm,
/// crowded tcp).
const LAUNCHES: usize = 7;

/// Where rank 0 writes its measurements (set by the launcher).
const ENV_OUT: &str = "STREAMCOMM_BENCH_CALIBRATE_OUT";

/// Set for launches that time only the small calls (the crowded tcp
/// launches: their step is all they are for).
const ENV_SMALL_ONLY: &str = "STREAMCOMM_BENCH_CALIBRATE_SMALL_ONLY";

/// The last-level cache size the launcher read, for the ranks to size the
/// cached broadcast by the same figure the tuning file gets.
const ENV_CACHE: &str = "STREAMCOMM_BENCH_CALIBRATE_CACHE";

/// Arguments of `streamcomm-bench calibrate`.
#[derive(Debug, Parser)]
#[command(name = "streamcomm-bench calibrate")]
pub(crate) struct CalibrateCli {
    /// The tuning file to write (under a launcher across hosts: to update
    /// with the links between them).
    #[arg(long, default_value = "streamcomm-tuning.txt")]
    pub out: PathBuf,

    /// Calls per timed repetition of each small call (the large
    /// broadcast runs a tenth as many); 7 repetitions, the median is kept.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(10..))]
    pub iters: u64,

    /// Ranks to calibrate the shm parameters with (default: twice the
    /// cores, at least 2, at most 64).
    #[arg(long, value_parser = clap::value_parser!(u64).range(2..=64))]
    pub ranks: Option<u64>,

    /// Bytes of the large broadcast (default 64 slots).
    #[arg(long, value_parser = crate::cli::parse_size)]
    pub bytes: Option<u64>,
}

/// The launcher: measures gamma and the waits' patience, runs the ranks
/// over shm then tcp, writes the file.
///
/// # Errors
/// When ranks fail or the file cannot be written.
pub(crate) fn launcher(cli: &CalibrateCli) -> Fallible<()> {
    let gamma = reduce_gamma();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cache_bytes = crate::machine::last_level_cache_bytes();
    // Several launches of each kind, the median of each parameter: how
    // fast waiting ranks wake, and how fast memory is, varies from one
    // launch to the next on a busy machine. The kinds take turns, so that
    // each parameter's launches span the whole calibration.
    let crowded_ranks = ranks_for("shm", cli, cores);
    let spread = cores >= 2 && crowded_ranks > cores;
    let (mut shm_runs, mut tcp_runs, mut spread_runs) = (Vec::new(), Vec::new(), Vec::new());
    let mut crowded_tcp_runs = Vec::new();
    for i in 0..LAUNCHES {
        shm_runs.push(launch("shm", crowded_ranks, i, cache_bytes, false)?);
        tcp_runs.push(launch(
            "tcp",
            ranks_for("tcp", cli, cores),
            i,
            cache_bytes,
            false,
        )?);
        if spread {
            spread_runs.push(launch("shm", cores, i, cache_bytes, false)?);
            crowded_tcp_runs.push(launch("tcp", crowded_ranks, i, cache_bytes, true)?);
        }
    }
    let mut links = Vec::new();
    for (transport, measured) in [("shm", &shm_runs), ("tcp", &tcp_runs)] {
        let mut runs = Vec::new();
        for m in measured {
            let per_host = if transport == "tcp" { 1 } else { m.ranks };
            let fit = Fit {
                // All of them on this machine's cores, whatever the links.
                shape: Shape::new(m.ranks, per_host, m.slot).with_sharing(m.ranks),
                base: CostParams {
                    gamma,
                    cores,
                    // Both calls out of memory here: the cached regime is
                    // calibrated below.
                    cache_bytes: 0,
                    ..links
                        .first()
                        .map_or_else(CostParams::default, |&shm| CostParams {
                            shm,
                            ..CostParams::default()
                        })
                },
                tcp: transport == "tcp",
            };
            runs.push(fit.solve(&m.small, m.large, m.big));
        }
        let alpha = median(runs.iter().map(|r| r.0).collect());
        let beta = median(runs.iter().map(|r| r.1).collect());
        eprintln!(
            "streamcomm-bench: {transport} ({} ranks): alpha {:.2} us, beta {:.3} ns/B (median of {} launches: {})",
            measured[0].ranks,
            alpha * 1e6,
            beta * 1e9,
            runs.len(),
            runs.iter()
                .map(|(a, b)| format!("{:.2} us {:.3} ns/B", a * 1e6, b * 1e9))
                .collect::<Vec<_>>()
                .join(", ")
        );
        links.push(LinkCost { alpha, beta });
    }
    let (spin, yields) = patience();
    let mut params = CostParams {
        shm: links[0],
        tcp: links[1],
        gamma,
        cores,
        wake: 0.0,
        spin,
        yields,
        crowded_alpha: links[0].alpha,
        cached_beta: links[0].beta,
        cache_bytes,
        // Measured once, across runs (see DEFAULT_WRITE_WEIGHT), not here.
        write_weight: DEFAULT_WRITE_WEIGHT,
        tcp_crowded_alpha: links[1].alpha,
        tcp_latency: links[1].alpha,
    };
    params.tcp_latency = tcp_latency(&params, &tcp_runs);
    if spread {
        params.tcp_crowded_alpha = crowded_tcp(&params, &crowded_tcp_runs);
    }
    eprintln!(
        "streamcomm-bench: tcp: a step costs {:.2} us with a core per rank, {:.2} us with {crowded_ranks} ranks on {cores} cores; it arrives after {:.2} us",
        params.tcp.alpha * 1e6,
        params.tcp_crowded_alpha * 1e6,
        params.tcp_latency * 1e6,
    );
    params.cached_beta = cached_beta(&params, &shm_runs);
    // The wake-up is fitted on launches with a core per rank: where ranks
    // outnumber cores the model puts no wake-up on a call (other ranks'
    // steps fill it), so those launches cannot show one.
    let mut wake_runs = shm_runs;
    if spread {
        params.shm.alpha = uncrowded(&params, &spread_runs);
        wake_runs = spread_runs;
    }
    eprintln!(
        "streamcomm-bench: shm regimes: step {:.2} us with a core per rank, {:.2} us with more ranks than its {cores} cores; {:.3} ns/B within the {} MiB cache",
        params.shm.alpha * 1e6,
        params.crowded_alpha * 1e6,
        params.cached_beta * 1e9,
        cache_bytes >> 20,
    );
    // The wake-up cost: a recursive-doubling all-gather of one slot in all
    // over shm has rounds in which a rank waits, idle, for its partner's
    // blocks, too long to be caught while spinning or yielding; with
    // everything else known, the wake-ups are what the model then lacks to
    // predict it. (A ring, whose ranks move in lock step and rarely sleep,
    // cannot show it.)
    // (Where the all-gather's steps are within the patience the prediction
    // has no wake-up at all, and the fit gives 0.)
    let wakes = solve_each(
        &wake_runs,
        |m| m.mid,
        |m, shape, w| {
            let p = CostParams { wake: w, ..params };
            let block = m.slot / m.ranks;
            predict(
                &p,
                Collective::AllGather,
                Algorithm::RecursiveDoubling,
                block,
                1,
                shape,
            )
        },
    );
    params.wake = median(wakes.clone());
    eprintln!(
        "streamcomm-bench: waiting: spin {:.2} us, yield {:.2} us, wake {:.2} us (median of {LAUNCHES} launches: {})",
        spin * 1e6,
        yields * 1e6,
        params.wake * 1e6,
        wakes
            .iter()
            .map(|w| format!("{:.2} us", w * 1e6))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let notes = [
        format!("measured by streamcomm-bench calibrate on {cores} cores"),
        format!(
            "slot {} bytes (STREAMCOMM_BUFFSIZE / STREAMCOMM_NSTEPS at calibration)",
            streamcomm::Config::from_env()
                .map(|c| c.slot_bytes())
                .unwrap_or(0)
        ),
    ];
    std::fs::write(&cli.out, params.to_file(&notes))
        .with_context(|| format!("write {}", cli.out.display()))?;
    eprintln!(
        "streamcomm-bench: gamma {:.3} ns/B, {cores} cores; wrote {}",
        gamma * 1e9,
        cli.out.display()
    );
    Ok(())
}

/// The per-byte cost within the cache: what makes the model predict the
/// shm launches' calls of about `cached_bytes` (per launch the geometric
/// mean over [`PANEL`], then the median over launches; `shm.beta` when the
/// cache size is unknown).
fn cached_beta(params: &CostParams, runs: &[Measured]) -> f64 {
    let measured: Vec<&Measured> = runs.iter().filter(|m| m.cached_bytes > 0).collect();
    if params.cache_bytes == 0 || measured.is_empty() {
        return params.shm.beta;
    }
    median(per_launch(measured, |m, shape| {
        let bytes = |c: Call| c.bytes_near(m.cached_bytes, m.ranks);
        panel_fit(&m.cached, bytes, shape, |b| CostParams {
            cached_beta: b,
            ..*params
        })
    }))
}

/// The geometric mean of the positive values (a value of 0 is a call the
/// model prices at or above its time with the parameter at 0: it says
/// nothing about the parameter); 0 when there are none.
fn geometric_mean(values: impl Iterator<Item = f64>) -> f64 {
    let logs: Vec<f64> = values.filter(|&v| v > 0.0).map(f64::ln).collect();
    if logs.is_empty() {
        return 0.0;
    }
    (logs.iter().sum::<f64>() / logs.len() as f64).exp()
}

/// The numbers, written for the launcher.
fn seconds(values: &[f64]) -> String {
    values
        .iter()
        .map(|t| format!("{t:e}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The step with a core per rank: the small calls of each shm launch of
/// one rank per core (`runs`) solved for `shm.alpha`, the median.
fn uncrowded(params: &CostParams, runs: &[Measured]) -> f64 {
    median(per_launch(runs, |m, shape| {
        alpha_for(&m.small, shape, |a| CostParams {
            shm: LinkCost {
                alpha: a,
                beta: params.shm.beta,
            },
            ..*params
        })
    }))
}

/// A tcp step's latency: the calls of the tcp launches (a core per rank)
/// that end with every rank waiting for its peers, solved for
/// `tcp_latency` (per launch their geometric mean), the median;
/// `tcp.alpha` where no call depends on it.
fn tcp_latency(params: &CostParams, runs: &[Measured]) -> f64 {
    let fitted = tcp_fit(runs, |m, shape| latency_for(params, m, shape));
    fitted.unwrap_or(params.tcp.alpha)
}

/// The latency at which the model predicts the small calls of `m` on
/// `shape` that end with every rank waiting (their geometric mean; 0 when
/// none depends on it).
fn latency_for(params: &CostParams, m: &Measured, shape: &Shape) -> f64 {
    alpha_over(
        &m.small,
        shape,
        |c| !c.rooted(),
        |a| CostParams {
            tcp_latency: a,
            ..*params
        },
    )
}

/// A tcp step's cost to the ranks while they outnumber the cores: the
/// small calls of each crowded tcp launch solved for `tcp_crowded_alpha`
/// (per launch their geometric mean, as for the crowded shm step), the
/// median; `tcp.alpha` where no call depends on it.
fn crowded_tcp(params: &CostParams, runs: &[Measured]) -> f64 {
    let fitted = tcp_fit(runs, |m, shape| {
        alpha_for(&m.small, shape, |a| CostParams {
            tcp_crowded_alpha: a,
            ..*params
        })
    });
    fitted.unwrap_or(params.tcp.alpha)
}

/// The median of `fit(launch, shape)` over the tcp launches `runs` (every
/// rank a host of its own, as a communicator over tcp sees them, all on
/// this machine's cores), leaving out launches whose calls do not depend
/// on the parameter (0); `None` when none is left.
fn tcp_fit(runs: &[Measured], fit: impl Fn(&Measured, &Shape) -> f64) -> Option<f64> {
    let fitted: Vec<f64> = runs
        .iter()
        .map(|m| fit(m, &Shape::new(m.ranks, 1, m.slot).with_sharing(m.ranks)))
        .filter(|&a| a > 0.0)
        .collect();
    (!fitted.is_empty()).then(|| median(fitted))
}

/// `fit(launch, shape)` for each launch, its ranks all on this machine's
/// cores (`shape`).
fn per_launch<'a>(
    runs: impl IntoIterator<Item = &'a Measured>,
    fit: impl Fn(&Measured, &Shape) -> f64,
) -> Vec<f64> {
    runs.into_iter()
        .map(|m| fit(m, &Shape::new(m.ranks, m.ranks, m.slot)))
        .collect()
}

/// For each launch, the parameter value at which the model's prediction,
/// `predict_with(launch, shape, value)`, reaches what the launch measured,
/// `target(launch)`.
fn solve_each<'a>(
    runs: impl IntoIterator<Item = &'a Measured>,
    target: impl Fn(&Measured) -> f64,
    predict_with: impl Fn(&Measured, &Shape, f64) -> Option<f64>,
) -> Vec<f64> {
    per_launch(runs, |m, shape| {
        bisect(|x| predict_with(m, shape, x).unwrap_or(0.0), target(m))
    })
}

/// The middle value (upper middle for an even count).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// What one launch measured: seconds per call of the small calls and of
/// the large broadcast, the broadcast's bytes, the slot size.
struct Measured {
    ranks: usize,
    /// Seconds per call of each of [`PANEL`], in order, of 8-byte
    /// blocks.
    small: Vec<f64>,
    large: f64,
    /// Seconds per call of a recursive-doubling all-gather of one slot.
    mid: f64,
    /// Seconds per call of each of [`PANEL`] of about `cached_bytes` (0:
    /// the cache size is unknown, not measured).
    cached: Vec<f64>,
    cached_bytes: usize,
    big: usize,
    slot: usize,
}

/// Launch number `launch` of `ranks` ranks over `transport` (timing only
/// the small calls when `small_only`).
fn launch(
    transport: &str,
    ranks: usize,
    launch: usize,
    cache_bytes: usize,
    small_only: bool,
) -> Fallible<Measured> {
    let exe = std::env::current_exe().context("find this program's path")?;
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let file = std::env::temp_dir().join(format!(
        "streamcomm-calibrate-{}-{transport}-{ranks}-{launch}.txt",
        std::process::id()
    ));
    let mut launcher = LocalLauncher::new(ranks, exe);
    if small_only {
        launcher = launcher.env(ENV_SMALL_ONLY, "1");
    }
    let outcome = launcher
        .args(args)
        .env("STREAMCOMM_TRANSPORT", transport)
        .env(
            "STREAMCOMM_TIMEOUT",
            std::env::var("STREAMCOMM_TIMEOUT").unwrap_or_else(|_| "60".into()),
        )
        .env(ENV_OUT, file.as_os_str())
        .env(ENV_CACHE, cache_bytes.to_string())
        .run()
        .context("start the ranks")?;
    if outcome.exit_code() != 0 {
        return Err(format!("the {transport} ranks failed: {outcome}"));
    }
    let text =
        std::fs::read_to_string(&file).with_context(|| format!("read {}", file.display()))?;
    let _ = std::fs::remove_file(&file);
    Measured::from_line(&text, ranks).map_err(|e| format!("{transport} result {text:?}: {e}"))
}

impl Measured {
    /// The line rank 0 writes for the launcher.
    fn to_line(&self) -> String {
        format!(
            "{} {} {:e} {:e} {} {} {}\n",
            seconds(&self.small),
            seconds(&self.cached),
            self.large,
            self.mid,
            self.big,
            self.slot,
            self.cached_bytes
        )
    }

    /// What [`Measured::to_line`] wrote, for `ranks` ranks.
    fn from_line(text: &str, ranks: usize) -> Result<Measured, String> {
        let v: Vec<f64> = text
            .split_whitespace()
            .map(|w| w.parse::<f64>().map_err(|e| format!("{w:?}: {e}")))
            .collect::<Result<_, _>>()?;
        let n = PANEL.len();
        let [large, mid, big, slot, cached_bytes] = v[(2 * n).min(v.len())..] else {
            return Err(format!("expected {} numbers", 2 * n + 5));
        };
        Ok(Measured {
            ranks,
            small: v[..n].to_vec(),
            cached: v[n..2 * n].to_vec(),
            mid,
            large,
            cached_bytes: cached_bytes as usize,
            big: big as usize,
            slot: slot as usize,
        })
    }
}

/// Ranks of the `transport` launches for alpha, beta and wake: over shm
/// `--ranks`, by default twice the cores (at least 2, at most 64), ranks
/// sharing cores as on the machines this runs on (most of what we
/// measure). (Launches of four times the cores, in turn with these, were
/// tried: their per-byte costs, the cached one most, came out 10-100%
/// above what 3 to 8 ranks measured, and the model fell from 74-80% to
/// 59-70% of points within 35%.) Over tcp 2: 4 ranks on one host were seen
/// to time out in `barrier_host` after back to back 32 MiB broadcasts (a
/// transport issue, reported, not worked around here).
fn ranks_for(transport: &str, cli: &CalibrateCli, cores: usize) -> usize {
    if transport == "tcp" {
        2
    } else {
        cli.ranks.map_or((2 * cores).clamp(2, 64), |r| r as usize)
    }
}

/// One rank: times the calls. Started by [`launcher`], rank 0 writes
/// their times, the big size and the slot size for it; started by another
/// launcher across hosts, rank 0 fits the links between hosts and updates
/// the tuning file ([`links`]).
///
/// # Errors
/// Library errors, or the result file cannot be written.
pub(crate) fn rank(cli: &CalibrateCli) -> Fallible<()> {
    let mut config = streamcomm::Config::from_env().context("read the configuration")?;
    config.algo = streamcomm::config::AlgoOverride::parse(SCHEDULES)
        .context("the calibration's schedules")?;
    let comm = Communicator::builder()
        .config(config)
        .build()
        .context("create the communicator")?;
    let stream = HostStream::new().context("create a stream")?;
    let out = std::env::var(ENV_OUT).ok();
    if out.is_none() {
        links::check(&comm)?;
    }
    if out.is_none() {
        let rounds = (0..links::ROUNDS)
            .map(|_| {
                let measured = measure(cli, &comm, &stream)?;
                let exchange = links::time_exchange(cli, &comm, &stream, measured.big)?;
                Ok((measured, exchange))
            })
            .collect::<Fallible<Vec<_>>>()?;
        comm.barrier_host().context("final barrier")?;
        return match comm.rank() {
            0 => links::update(cli, &comm, &rounds),
            _ => Ok(()),
        };
    }
    let measured = measure(cli, &comm, &stream)?;
    comm.barrier_host().context("final barrier")?;
    match out {
        Some(path) if comm.rank() == 0 => {
            std::fs::write(&path, measured.to_line()).with_context(|| format!("write {path}"))
        }
        _ => Ok(()),
    }
}

/// Times the calls on this rank (see [`Measured`]).
fn measure(cli: &CalibrateCli, comm: &Communicator, stream: &HostStream) -> Fallible<Measured> {
    let slot = comm.config().slot_bytes();
    let big = cli.bytes.map_or(64 * slot, |b| b as usize).max(slot);
    let n = comm.size();
    let small = PANEL
        .iter()
        .map(|&c| per_call(comm, stream, c, c.bytes_for_blocks_of(8, n), cli.iters))
        .collect::<Fallible<Vec<f64>>>()?;
    let small_only = std::env::var_os(ENV_SMALL_ONLY).is_some();
    let (large, mid) = if small_only {
        (0.0, 0.0)
    } else {
        let large = per_call(comm, stream, Call::Broadcast, big, (cli.iters / 10).max(5))?;
        let mid = per_call(comm, stream, Call::AllGather, slot, (cli.iters / 4).max(5))?;
        (large, mid)
    };
    // Small enough that every rank's two buffers fit in a quarter of the
    // cache (the model's bound for the cached regime), at most 8 slots; a
    // multiple of 8 bytes.
    let cache: usize = std::env::var(ENV_CACHE)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|_| !small_only)
        .unwrap_or(0);
    let cached_bytes = (cache / (8 * comm.size())).min(8 * slot) & !7;
    let cached = if cached_bytes > 0 {
        PANEL
            .iter()
            .map(|&c| {
                let bytes = c.bytes_near(cached_bytes, n);
                per_call(comm, stream, c, bytes, (cli.iters / 4).max(5))
            })
            .collect::<Fallible<Vec<f64>>>()?
    } else {
        vec![0.0; PANEL.len()]
    };
    Ok(Measured {
        ranks: n,
        small,
        large,
        mid,
        cached,
        cached_bytes,
        big,
        slot,
    })
}

/// The call `per_call` times.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Call {
    /// A ring all-reduce (max) of the bytes.
    AllReduce,
    /// A chain broadcast of the bytes from rank 0.
    Broadcast,
    /// A recursive-doubling all-gather of the bytes in all (a block each).
    AllGather,
    /// A ring reduce-scatter (max) of the bytes in all (a block each out).
    ReduceScatter,
    /// A pairwise all-to-all of the bytes in all (a block to each rank).
    AllToAll,
}

/// The calls whose small sizes give `alpha`, and whose sizes within the
/// cache the cached `beta`: one of each collective, each solved through
/// the model for the parameter that predicts it, and the geometric mean
/// kept. (One call alone, an all-reduce for `alpha` and a broadcast for
/// the cached byte, gave values that the others' points missed by 15-30%,
/// and moved by as much between launches.)
const PANEL: [Call; 5] = [
    Call::AllReduce,
    Call::Broadcast,
    Call::AllGather,
    Call::ReduceScatter,
    Call::AllToAll,
];

impl Call {
    /// The collective and algorithm the call runs (as the launcher's
    /// `STREAMCOMM_ALGO` forces them).
    fn schedule(self) -> (Collective, Algorithm) {
        match self {
            Call::AllReduce => (Collective::AllReduce, Algorithm::Ring),
            Call::Broadcast => (Collective::Broadcast { root: 0 }, Algorithm::Chain),
            Call::AllGather => (Collective::AllGather, Algorithm::RecursiveDoubling),
            Call::ReduceScatter => (Collective::ReduceScatter, Algorithm::Ring),
            Call::AllToAll => (Collective::AllToAll, Algorithm::Pairwise),
        }
    }

    /// Whether the call is rooted: its back-to-back calls pipeline into each
    /// other, so over tcp they are paced by the step's cost to the ranks
    /// (`tcp.alpha`), the others by its latency (`tcp.latency`).
    fn rooted(self) -> bool {
        matches!(self, Call::Broadcast)
    }

    /// Whether the call's bytes are cut into a block per rank.
    fn blocked(self) -> bool {
        matches!(self, Call::AllGather | Call::ReduceScatter | Call::AllToAll)
    }

    /// The call's bytes for blocks of `block` bytes among `ranks` (the
    /// all-reduce and broadcast: one block).
    fn bytes_for_blocks_of(self, block: usize, ranks: usize) -> usize {
        if self.blocked() { block * ranks } else { block }
    }

    /// About `bytes` (the blocked calls' rounded down to a block per rank).
    fn bytes_near(self, bytes: usize, ranks: usize) -> usize {
        if self.blocked() {
            self.bytes_for_blocks_of(bytes / ranks.max(1), ranks)
        } else {
            bytes
        }
    }

    /// The model's prediction for the call of `bytes` bytes.
    fn predict(self, params: &CostParams, bytes: usize, shape: &Shape) -> Option<f64> {
        let (c, a) = self.schedule();
        let count = if self.blocked() {
            bytes / shape.ranks.max(1)
        } else {
            bytes
        };
        predict(params, c, a, count, 1, shape)
    }
}

/// Median time per call of `iters` back-to-back calls of `what` moving
/// `bytes` bytes.
fn per_call(
    comm: &Communicator,
    stream: &HostStream,
    what: Call,
    bytes: usize,
    iters: u64,
) -> Fallible<f64> {
    let block = bytes / comm.size();
    let (send_len, recv_len) = match what {
        Call::AllGather => (block, block * comm.size()),
        Call::ReduceScatter => (block * comm.size(), block),
        Call::AllToAll => (block * comm.size(), block * comm.size()),
        Call::AllReduce | Call::Broadcast => (bytes, bytes),
    };
    let send = UntypedBuffer::zeroed(DataType::U8, send_len);
    let mut recv = UntypedBuffer::zeroed(DataType::U8, recv_len);
    let call = |recv: &mut UntypedBuffer| match what {
        Call::Broadcast => comm.broadcast(&send, recv, 0, stream),
        Call::AllReduce => comm.all_reduce(&send, recv, ReduceOp::Max, stream),
        Call::AllGather => comm.all_gather(&send, recv, stream),
        Call::ReduceScatter => comm.reduce_scatter(&send, recv, ReduceOp::Max, stream),
        Call::AllToAll => comm.all_to_all(&send, recv, stream),
    };
    let mut samples = Vec::new();
    for rep in 0..8 {
        comm.barrier_host().context("barrier before timing")?;
        let start = Instant::now();
        for _ in 0..iters {
            call(&mut recv).context("enqueue")?;
        }
        stream.synchronize().context("timed calls")?;
        // The first repetition warms up.
        if rep > 0 {
            samples.push(start.elapsed().as_secs_f64() / iters as f64);
        }
    }
    samples.sort_by(f64::total_cmp);
    Ok(samples[samples.len() / 2])
}

/// How long a waiting rank spins (`STREAMCOMM_SPIN` iterations of the
/// wait's check) and then yields (its yield calls) before it sleeps, here
/// and now (medians of 21; yields take longer on a busy machine, and that
/// is part of the measurement).
fn patience() -> (f64, f64) {
    let spins = streamcomm::Config::from_env().map_or(200, |c| c.spin);
    let word = std::sync::atomic::AtomicU64::new(0);
    let time = |f: &dyn Fn()| {
        let mut t: Vec<f64> = (0..21)
            .map(|_| {
                let start = Instant::now();
                f();
                start.elapsed().as_secs_f64()
            })
            .collect();
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    };
    let spin = time(&|| {
        for _ in 0..spins {
            if word.load(std::sync::atomic::Ordering::Acquire) == u64::MAX {
                break;
            }
            std::hint::spin_loop();
        }
    });
    let yields = time(&|| {
        for _ in 0..streamcomm::testing::wait::DEFAULT_YIELDS {
            std::thread::yield_now();
        }
    });
    (spin, yields)
}

/// Seconds per byte a sum-reduction costs beyond a copy of the same bytes
/// (f32, 4 MiB, median of 21).
fn reduce_gamma() -> f64 {
    let bytes = 4 << 20;
    let a = vec![1u8; bytes];
    let b = vec![2u8; bytes];
    let mut out = vec![0u8; bytes];
    let mut time = |f: &mut dyn FnMut(&mut [u8])| {
        let mut t: Vec<f64> = (0..21)
            .map(|_| {
                let start = Instant::now();
                f(&mut out);
                std::hint::black_box(&out);
                start.elapsed().as_secs_f64()
            })
            .collect();
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    };
    let copy = time(&mut |o| o.copy_from_slice(&a));
    let reduce = time(&mut |o| {
        let _ = streamcomm_kernels::reduce(DataType::F32, ReduceOp::Sum, &a, &b, o);
    });
    ((reduce - copy) / bytes as f64).max(0.0)
}

/// Solves one transport's `alpha` and `beta` through the model.
struct Fit {
    shape: Shape,
    /// The other parameters (shm's when fitting tcp, gamma, cores).
    base: CostParams,
    /// Fitting the tcp link (else shm).
    tcp: bool,
}

impl Fit {
    fn with(&self, alpha: f64, beta: f64) -> CostParams {
        let link = LinkCost { alpha, beta };
        let mut p = self.base;
        if self.tcp {
            p.tcp = link;
        } else {
            // Whichever regime the launch's shape is in.
            p.shm = link;
            p.crowded_alpha = alpha;
            p.cached_beta = beta;
        }
        p
    }

    /// `(alpha, beta)` making the model predict `small` seconds for the
    /// small calls (geometric mean of the `alpha` each gives) and then
    /// `large` for a chain broadcast of `big`.
    fn solve(&self, small: &[f64], large: f64, big: usize) -> (f64, f64) {
        // Each call depends a little on the other parameter: alternate.
        let (mut alpha, mut beta) = (0.0, 0.0);
        for _ in 0..4 {
            // Over tcp the step's cost to the ranks from the calls that
            // pipeline (the latency is solved after, from the others).
            let calls = |c: Call| !self.tcp || c.rooted();
            alpha = alpha_over(small, &self.shape, calls, |a| self.with(a, beta));
            let bc = |b: f64| {
                let c = Collective::Broadcast { root: 0 };
                predict(
                    &self.with(alpha, b),
                    c,
                    Algorithm::Chain,
                    big,
                    1,
                    &self.shape,
                )
                .unwrap_or(0.0)
            };
            beta = bisect(bc, large);
        }
        (alpha, beta)
    }
}

/// The step cost at which the model, given `with(alpha)`, predicts the
/// small calls' times (`small`, in [`PANEL`] order): each call's own
/// solution, their geometric mean.
fn alpha_for(small: &[f64], shape: &Shape, with: impl Fn(f64) -> CostParams) -> f64 {
    alpha_over(small, shape, |_| true, with)
}

/// [`alpha_for`] over the calls of the panel that `calls` keeps.
fn alpha_over(
    small: &[f64],
    shape: &Shape,
    calls: impl Fn(Call) -> bool,
    with: impl Fn(f64) -> CostParams,
) -> f64 {
    let times = PANEL.iter().zip(small).map(|(&c, &t)| (c, t));
    geometric_mean(times.filter(|&(c, _)| calls(c)).map(|(c, t)| {
        let bytes = c.bytes_for_blocks_of(8, shape.ranks);
        bisect(|x| c.predict(&with(x), bytes, shape).unwrap_or(0.0), t)
    }))
}

/// The parameter value at which the model, given `with(value)`, predicts
/// the times of the [`PANEL`] calls of `bytes(call)` bytes: each call's own
/// solution, their geometric mean.
fn panel_fit(
    times: &[f64],
    bytes: impl Fn(Call) -> usize,
    shape: &Shape,
    with: impl Fn(f64) -> CostParams,
) -> f64 {
    geometric_mean(PANEL.iter().zip(times).map(|(&c, &t)| {
        let bytes = bytes(c);
        bisect(|x| c.predict(&with(x), bytes, shape).unwrap_or(0.0), t)
    }))
}

/// The `x >= 0` where the increasing `f` reaches `target` (0 when `f(0)`
/// already does, or when `f` does not depend on `x` at all; capped at one
/// second per unit).
fn bisect(f: impl Fn(f64) -> f64, target: f64) -> f64 {
    let (mut lo, mut hi) = (0.0, 1e-9);
    if f(lo) >= target || f(1.0) <= f(lo) {
        return 0.0;
    }
    while f(hi) < target && hi < 1.0 {
        hi *= 2.0;
    }
    for _ in 0..100 {
        let mid = (lo + hi) / 2.0;
        if f(mid) < target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo + hi) / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solves_back_the_parameters_the_model_was_given() {
        let shape = Shape::new(4, 4, 1 << 16);
        let truth = LinkCost {
            alpha: 7e-6,
            beta: 0.4e-9,
        };
        let base = CostParams {
            cores: 2,
            ..CostParams::default()
        };
        let fit = Fit {
            shape,
            base,
            tcp: false,
        };
        let p = fit.with(truth.alpha, truth.beta);
        let small: Vec<f64> = PANEL
            .iter()
            .map(|c| c.predict(&p, c.bytes_for_blocks_of(8, 4), &shape).unwrap())
            .collect();
        let bc = Collective::Broadcast { root: 0 };
        let big = 64 << 16;
        let large = predict(&p, bc, Algorithm::Chain, big, 1, &shape).unwrap();
        let (alpha, beta) = fit.solve(&small, large, big);
        assert!((alpha / truth.alpha - 1.0).abs() < 1e-6, "{alpha}");
        assert!((beta / truth.beta - 1.0).abs() < 1e-6, "{beta}");
        // Calls taking longer or shorter than the model says move the step
        // by their geometric mean: two calls 2x and 0.5x cancel, one call
        // at 2^5 moves it by 2.
        let mut skewed = small.clone();
        skewed[1] *= 2.0;
        skewed[3] *= 0.5;
        let (alpha, _) = fit.solve(&skewed, large, big);
        assert!((alpha / truth.alpha - 1.0).abs() < 0.05, "{alpha}");
        let mut slow = small.clone();
        slow[0] *= 32.0;
        let (alpha, _) = fit.solve(&slow, large, big);
        assert!((alpha / truth.alpha - 2.0).abs() < 0.2, "{alpha}");
    }
}

/// What a launch of `shape`'s ranks would measure if the model with
/// `truth` were exact: the small calls and a chain broadcast of `big`.
#[cfg(test)]
fn modelled(truth: &CostParams, shape: &Shape, big: usize) -> Measured {
    let ranks = shape.ranks;
    let small = PANEL
        .iter()
        .map(|c| {
            c.predict(truth, c.bytes_for_blocks_of(8, ranks), shape)
                .unwrap()
        })
        .collect();
    let bc = Collective::Broadcast { root: 0 };
    Measured {
        ranks,
        small,
        large: predict(truth, bc, Algorithm::Chain, big, 1, shape).unwrap(),
        mid: 0.0,
        cached: Vec::new(),
        cached_bytes: 0,
        big,
        slot: shape.slot_bytes,
    }
}

#[cfg(test)]
mod regime_tests {
    use super::*;

    #[test]
    fn solves_back_the_tcp_step_and_its_latency() {
        // Two ranks, a host each, a core each, as the tcp launches run.
        let (ranks, slot) = (2, 1 << 16);
        let shape = Shape::new(ranks, 1, slot).with_sharing(ranks);
        let truth = CostParams {
            cores: 2,
            wake: 0.0,
            tcp: LinkCost {
                alpha: 15e-6,
                beta: 0.6e-9,
            },
            tcp_latency: 42e-6,
            ..CostParams::default()
        };
        let run = modelled(&truth, &shape, 64 << 16);
        // Start from other values: the fit must find the truth.
        let fit = Fit {
            shape,
            base: CostParams {
                tcp_latency: 90e-6,
                ..truth
            },
            tcp: true,
        };
        let (alpha, beta) = fit.solve(&run.small, run.large, run.big);
        assert!((alpha / truth.tcp.alpha - 1.0).abs() < 1e-6, "{alpha}");
        assert!((beta / truth.tcp.beta - 1.0).abs() < 1e-6, "{beta}");
        let from = CostParams {
            tcp: LinkCost { alpha, beta },
            tcp_latency: 90e-6,
            ..truth
        };
        let latency = tcp_latency(&from, std::slice::from_ref(&run));
        assert!(
            (latency / truth.tcp_latency - 1.0).abs() < 1e-6,
            "{latency}"
        );
    }

    #[test]
    fn solves_back_the_cached_byte_and_falls_back_without_a_cache_size() {
        let (ranks, slot) = (4, 1 << 19);
        let cached_bytes = 1 << 20;
        let truth = 0.06e-9;
        let params = CostParams {
            cores: 2,
            cache_bytes: 32 << 20,
            cached_beta: truth,
            ..CostParams::default()
        };
        let shape = Shape::new(ranks, ranks, slot);
        let cached: Vec<f64> = PANEL
            .iter()
            .map(|c| {
                let bytes = c.bytes_near(cached_bytes, ranks);
                c.predict(&params, bytes, &shape).unwrap()
            })
            .collect();
        // One launch faster than the model says, one slower.
        let runs: Vec<Measured> = [[0.7; 5], [1.0; 5], [1.3; 5]]
            .iter()
            .map(|f| Measured {
                ranks,
                small: Vec::new(),
                large: 0.0,
                mid: 0.0,
                cached: cached.iter().enumerate().map(|(i, t)| t * f[i]).collect(),
                cached_bytes,
                big: 0,
                slot,
            })
            .collect();
        // Start from another value: the fit must find the truth (the
        // median launch), not keep what it was given.
        let from = CostParams {
            cached_beta: 1e-9,
            ..params
        };
        let beta = cached_beta(&from, &runs);
        assert!((beta / truth - 1.0).abs() < 1e-6, "{beta}");
        let unknown = CostParams {
            cache_bytes: 0,
            ..from
        };
        assert_eq!(cached_beta(&unknown, &runs), unknown.shm.beta);
    }
}
