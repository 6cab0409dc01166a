//! `streamcomm-bench calibrate`: measures the cost model's parameters on
//! this machine and writes the tuning file (`STREAMCOMM_TUNING_FILE`).
//!
//! - `gamma` and the cores: in the launcher, before any rank runs: the
//!   time per byte of a sum-reduction kernel beyond a plain copy of the same
//!   bytes, and `available_parallelism`.
//! - `alpha` and `beta`, per transport: `--ranks` ranks (twice the cores by default),
//!   started with `STREAMCOMM_TRANSPORT=shm` and again with `=tcp`, time two
//!   calls the way the benchmark does (back to back, one synchronize): a
//!   ring all-reduce of 8 bytes, which is almost only per-step cost, and a
//!   chain broadcast of many slots, which is almost only per-byte cost.
//!   `alpha` is then the value for which the model predicts the first call's
//!   time, and `beta` (with that `alpha`) the value for which it predicts
//!   the second's: the parameters are solved through the model itself, so
//!   its step counts and its cores bound are part of the calibration (over
//!   tcp, the model sees one rank per host, as a communicator does).
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
//!   cost out of memory. They also time a chain broadcast small enough that
//!   all ranks' buffers fit in a quarter of the last-level cache
//!   (`cache_bytes`, from sysfs): the cached byte
//!   (`shm.beta_cached_ns_per_byte`). A second shm launch with one rank per
//!   core times the 8-byte all-reduce again: the step when each rank has a
//!   core (`shm.alpha_us`). Measured here on 2 cores (2026-11-30): 1.2 µs
//!   crowded against 0.6-1.0 µs one rank per core, and 0.06-0.09 ns/B
//!   within the cache against 0.14-0.19 out of memory.
//!
//! Medians of several repetitions within a launch and of three launches,
//! so a scheduler hiccup does not become a parameter.

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use streamcomm::comm::UntypedBuffer;
use streamcomm::host::HostStream;
use streamcomm::launch::local::LocalLauncher;
use streamcomm::plan::{Algorithm, Collective};
use streamcomm::tuning::{predict, CostParams, LinkCost, Shape};
use streamcomm::{Communicator, DataType, ReduceOp};

use crate::error::{Context, Fallible};

/// Launches of the two ranks per transport.
const LAUNCHES: usize = 3;

/// Where rank 0 writes its measurements (set by the launcher).
const ENV_OUT: &str = "STREAMCOMM_BENCH_CALIBRATE_OUT";

/// The last-level cache size the launcher read, for the ranks to size the
/// cached broadcast by the same figure the tuning file gets.
const ENV_CACHE: &str = "STREAMCOMM_BENCH_CALIBRATE_CACHE";

/// Arguments of `streamcomm-bench calibrate`.
#[derive(Debug, Parser)]
#[command(name = "streamcomm-bench calibrate")]
pub struct CalibrateCli {
    /// The tuning file to write.
    #[arg(long, default_value = "streamcomm-tuning.txt")]
    pub out: PathBuf,

    /// Calls per timed repetition of the small all-reduce (the large
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
pub fn launcher(cli: &CalibrateCli) -> Fallible<()> {
    let gamma = reduce_gamma();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cache_bytes = crate::machine::last_level_cache_bytes();
    let mut links = Vec::new();
    let mut shm_runs = Vec::new();
    for transport in ["shm", "tcp"] {
        // Three launches, the median of each parameter: how fast waiting
        // ranks wake varies from one launch to the next on a busy machine.
        let ranks = ranks_for(transport, cli, cores);
        let per_host = if transport == "tcp" { 1 } else { ranks };
        let mut runs = Vec::new();
        let measured = launches(transport, ranks, cache_bytes)?;
        for m in &measured {
            let fit = Fit {
                // All of them on this machine's cores, whatever the links.
                shape: Shape::new(ranks, per_host, m.slot).with_sharing(ranks),
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
            runs.push(fit.solve(m.small, m.large, m.big));
        }
        let alpha = median(runs.iter().map(|r| r.0).collect());
        let beta = median(runs.iter().map(|r| r.1).collect());
        eprintln!(
            "streamcomm-bench: {transport} ({ranks} ranks): alpha {:.2} us, beta {:.3} ns/B (median of {LAUNCHES} launches: {})",
            alpha * 1e6,
            beta * 1e9,
            runs.iter()
                .map(|(a, b)| format!("{:.2} us {:.3} ns/B", a * 1e6, b * 1e9))
                .collect::<Vec<_>>()
                .join(", ")
        );
        links.push(LinkCost { alpha, beta });
        if transport == "shm" {
            shm_runs = measured;
        }
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
    };
    params.cached_beta = cached_beta(&params, &shm_runs);
    let crowded_ranks = ranks_for("shm", cli, cores);
    // The wake-up is fitted on launches with a core per rank: where ranks
    // outnumber cores the model puts no wake-up on a call (other ranks'
    // steps fill it), so those launches cannot show one.
    let mut wake_runs = shm_runs;
    if cores >= 2 && crowded_ranks > cores {
        let (alpha, runs) = uncrowded(&params, cores)?;
        params.shm.alpha = alpha;
        wake_runs = runs;
    }
    eprintln!(
        "streamcomm-bench: shm regimes: step {:.2} us with a core per rank, {:.2} us with {crowded_ranks} ranks on {cores} cores; {:.3} ns/B within the {} MiB cache",
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
/// shm launches' broadcast of `cached_bytes` (median over launches;
/// `shm.beta` when the cache size is unknown).
fn cached_beta(params: &CostParams, runs: &[Measured]) -> f64 {
    let measured = runs.iter().filter(|m| m.cached_bytes > 0);
    if params.cache_bytes == 0 || measured.clone().next().is_none() {
        return params.shm.beta;
    }
    median(solve_each(
        measured,
        |m| m.cached,
        |m, shape, b| {
            let p = CostParams {
                cached_beta: b,
                ..*params
            };
            let c = Collective::Broadcast { root: 0 };
            predict(&p, c, Algorithm::Chain, m.cached_bytes, 1, shape)
        },
    ))
}

/// The step with a core per rank: [`LAUNCHES`] shm launches of `cores`
/// ranks, each 8-byte all-reduce solved for `shm.alpha` (the median), and
/// what the launches measured.
///
/// # Errors
/// When the ranks fail.
fn uncrowded(params: &CostParams, cores: usize) -> Fallible<(f64, Vec<Measured>)> {
    let runs = launches("shm", cores, params.cache_bytes)?;
    let alphas = solve_each(
        &runs,
        |m| m.small,
        |_, shape, a| {
            let p = CostParams {
                shm: LinkCost {
                    alpha: a,
                    beta: params.shm.beta,
                },
                ..*params
            };
            predict(&p, Collective::AllReduce, Algorithm::Ring, 8, 1, shape)
        },
    );
    Ok((median(alphas), runs))
}

/// For each launch (its ranks all on this machine's cores), the parameter
/// value at which the model's prediction, `predict_with(launch, shape,
/// value)`, reaches what the launch measured, `target(launch)`.
fn solve_each<'a>(
    runs: impl IntoIterator<Item = &'a Measured>,
    target: impl Fn(&Measured) -> f64,
    predict_with: impl Fn(&Measured, &Shape, f64) -> Option<f64>,
) -> Vec<f64> {
    runs.into_iter()
        .map(|m| {
            let shape = Shape::new(m.ranks, m.ranks, m.slot);
            bisect(|x| predict_with(m, &shape, x).unwrap_or(0.0), target(m))
        })
        .collect()
}

/// The middle value (upper middle for an even count).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// What one launch measured: seconds per call of the small all-reduce and
/// of the large broadcast, the broadcast's bytes, the slot size.
struct Measured {
    ranks: usize,
    small: f64,
    large: f64,
    /// Seconds per call of a recursive-doubling all-gather of one slot.
    mid: f64,
    /// Seconds per call of a chain broadcast of `cached_bytes` (0: the
    /// cache size is unknown, not measured).
    cached: f64,
    cached_bytes: usize,
    big: usize,
    slot: usize,
}

/// [`LAUNCHES`] launches of `ranks` ranks over `transport`.
fn launches(transport: &str, ranks: usize, cache_bytes: usize) -> Fallible<Vec<Measured>> {
    let exe = std::env::current_exe().context("find this program's path")?;
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let mut out = Vec::new();
    for launch in 0..LAUNCHES {
        let file = std::env::temp_dir().join(format!(
            "streamcomm-calibrate-{}-{transport}-{ranks}-{launch}.txt",
            std::process::id()
        ));
        let outcome = LocalLauncher::new(ranks, exe.clone())
            .args(args.clone())
            .env("STREAMCOMM_TRANSPORT", transport)
            .env(
                "STREAMCOMM_ALGO",
                "all_reduce=ring,broadcast=chain,all_gather=recursive_doubling",
            )
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
        let v: Vec<f64> = text
            .split_whitespace()
            .map(|w| {
                w.parse::<f64>()
                    .map_err(|e| format!("{transport} result {w:?}: {e}"))
            })
            .collect::<Result<_, _>>()?;
        let [small, large, mid, cached, big, slot, cached_bytes] = v[..] else {
            return Err(format!("{transport} result {text:?}: expected 7 numbers"));
        };
        out.push(Measured {
            ranks,
            small,
            mid,
            large,
            cached,
            cached_bytes: cached_bytes as usize,
            big: big as usize,
            slot: slot as usize,
        });
    }
    Ok(out)
}

/// Ranks of the `transport` launches for alpha, beta and wake: `--ranks`,
/// by default twice the cores (at least 2, at most 64), ranks sharing cores
/// as on the machines this runs on (most of what we measure); 2 for tcp, where 4 ranks on one host were seen to time out in
/// `barrier_host` after back to back 32 MiB broadcasts (a transport issue,
/// reported, not worked around here).
fn ranks_for(transport: &str, cli: &CalibrateCli, cores: usize) -> usize {
    if transport == "tcp" {
        2
    } else {
        cli.ranks.map_or((2 * cores).clamp(2, 64), |r| r as usize)
    }
}

/// One rank: times the two calls; rank 0 writes their times, the big
/// size and the slot size.
///
/// # Errors
/// Library errors, or the result file cannot be written.
pub fn rank(cli: &CalibrateCli) -> Fallible<()> {
    let comm = Communicator::from_env().context("create the communicator")?;
    let stream = HostStream::new().context("create a stream")?;
    let slot = comm.config().slot_bytes();
    let big = cli.bytes.map_or(64 * slot, |b| b as usize).max(slot);
    let small = per_call(&comm, &stream, Call::AllReduce, 8, cli.iters)?;
    let large = per_call(
        &comm,
        &stream,
        Call::Broadcast,
        big,
        (cli.iters / 10).max(5),
    )?;
    let mid = per_call(
        &comm,
        &stream,
        Call::AllGather,
        slot,
        (cli.iters / 4).max(5),
    )?;
    // Small enough that every rank's two buffers fit in a quarter of the
    // cache (the model's bound for the cached regime), at most 8 slots; a
    // multiple of 8 bytes.
    let cache: usize = std::env::var(ENV_CACHE)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let cached_bytes = (cache / (8 * comm.size())).min(8 * slot) & !7;
    let cached = if cached_bytes > 0 {
        per_call(
            &comm,
            &stream,
            Call::Broadcast,
            cached_bytes,
            (cli.iters / 4).max(5),
        )?
    } else {
        0.0
    };
    comm.barrier_host().context("final barrier")?;
    if comm.rank() == 0 {
        if let Ok(path) = std::env::var(ENV_OUT) {
            std::fs::write(
                &path,
                format!("{small:e} {large:e} {mid:e} {cached:e} {big} {slot} {cached_bytes}\n"),
            )
            .with_context(|| format!("write {path}"))?;
        }
    }
    Ok(())
}

/// The call `per_call` times.
#[derive(Clone, Copy)]
enum Call {
    /// A ring all-reduce (max) of the bytes.
    AllReduce,
    /// A chain broadcast of the bytes from rank 0.
    Broadcast,
    /// A recursive-doubling all-gather of the bytes in all (a block each).
    AllGather,
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
    let send_len = if matches!(what, Call::AllGather) {
        block
    } else {
        bytes
    };
    let recv_len = if matches!(what, Call::AllGather) {
        block * comm.size()
    } else {
        bytes
    };
    let send = UntypedBuffer::zeroed(DataType::U8, send_len);
    let mut recv = UntypedBuffer::zeroed(DataType::U8, recv_len);
    let call = |recv: &mut UntypedBuffer| match what {
        Call::Broadcast => comm.broadcast(&send, recv, 0, stream),
        Call::AllReduce => comm.all_reduce(&send, recv, ReduceOp::Max, stream),
        Call::AllGather => comm.all_gather(&send, recv, stream),
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
        for _ in 0..streamcomm::wait::DEFAULT_YIELDS {
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

    /// `(alpha, beta)` making the model predict `small` seconds for a ring
    /// all-reduce of 8 bytes and then `large` for a chain broadcast of `big`.
    fn solve(&self, small: f64, large: f64, big: usize) -> (f64, f64) {
        let time = |p: &CostParams, c: Collective, a: Algorithm, bytes: usize| {
            predict(p, c, a, bytes, 1, &self.shape).unwrap_or(0.0)
        };
        // Each call depends a little on the other parameter: alternate.
        let (mut alpha, mut beta) = (0.0, 0.0);
        for _ in 0..4 {
            let ar = |a: f64| {
                time(
                    &self.with(a, beta),
                    Collective::AllReduce,
                    Algorithm::Ring,
                    8,
                )
            };
            alpha = bisect(ar, small);
            let bc = |b: f64| {
                let c = Collective::Broadcast { root: 0 };
                time(&self.with(alpha, b), c, Algorithm::Chain, big)
            };
            beta = bisect(bc, large);
        }
        (alpha, beta)
    }
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
        let small = predict(&p, Collective::AllReduce, Algorithm::Ring, 8, 1, &shape).unwrap();
        let bc = Collective::Broadcast { root: 0 };
        let big = 64 << 16;
        let large = predict(&p, bc, Algorithm::Chain, big, 1, &shape).unwrap();
        let (alpha, beta) = fit.solve(small, large, big);
        assert!((alpha / truth.alpha - 1.0).abs() < 1e-6, "{alpha}");
        assert!((beta / truth.beta - 1.0).abs() < 1e-6, "{beta}");
    }
}

#[cfg(test)]
mod regime_tests {
    use super::*;

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
        let c = Collective::Broadcast { root: 0 };
        let cached = predict(&params, c, Algorithm::Chain, cached_bytes, 1, &shape).unwrap();
        let runs: Vec<Measured> = [1.0, 1.0, 1.3]
            .iter()
            .map(|f| Measured {
                ranks,
                small: 0.0,
                large: 0.0,
                mid: 0.0,
                cached: cached * f,
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
