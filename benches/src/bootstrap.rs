//! `streamcomm-bench bootstrap`: what the bootstrap root costs as ranks
//! join it: `--ranks` processes join one root over loopback and run
//! `--rounds` all-gathers of `--bytes` each (creation runs one all-gather
//! of the ranks' endpoint records and one barrier); the root runs in this
//! process, which samples its descriptors and memory while they do.
//!
//! ```text
//! streamcomm-bench bootstrap --ranks 256
//! ```
//!
//! Printed: the time until every rank had joined and each round's time
//! (slowest and median rank), the root's largest count of open sockets
//! and this process's resident memory above the process's before the
//! ranks started, its CPU time, and the bytes it wrote (each rank's
//! all-gather peers, once, and a release a rank a round: the rounds run
//! among the ranks, Bruck's all-gather, `ceil(log2 n)` frames a rank);
//! what each rank sends a round; and the same figures carried to 1,000
//! ranks by the protocol's shape (one connection per rank at the root,
//! `2 ceil(log2 n)` at a rank).

use std::io::{BufRead, BufReader, Read};
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use streamcomm::bootstrap::UniqueId;
use streamcomm::testing::bootstrap::{Bootstrap, RootOptions, RootServer};

use crate::cli::parse_size;
use crate::error::{Context, Fallible};
use crate::init::Footprint;
use crate::table_out::{TableOut, max_median};

/// The command line of `streamcomm-bench bootstrap`.
#[derive(Parser, Debug)]
#[command(name = "streamcomm-bench bootstrap")]
pub(crate) struct BootstrapCli {
    /// Ranks (processes) that join the root.
    #[arg(long, default_value_t = 256)]
    ranks: u32,
    /// Bytes each rank contributes to each all-gather (an endpoint record
    /// is about 150 bytes); suffixes K, M.
    #[arg(long, default_value = "256", value_parser = parse_size)]
    bytes: u64,
    /// All-gather rounds after joining.
    #[arg(long, default_value_t = 2)]
    rounds: u32,
    /// Seconds every rank may take to join, and each round.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// Also write the figures as JSON to this file (`-`: standard output,
    /// the table then going to standard error).
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Joins the root with this id (the ranks this program starts).
    #[arg(long, hide = true)]
    join: Option<String>,
    /// This rank (with `--join`).
    #[arg(long, hide = true, default_value_t = 0)]
    rank: u32,
}

/// Runs `streamcomm-bench bootstrap` (its arguments after the word
/// `bootstrap`).
///
/// # Errors
/// A bad command line, a rank that failed or saw a wrong blob, or a root
/// that did not end cleanly.
pub(crate) fn main(args: impl Iterator<Item = std::ffi::OsString>) -> Fallible<()> {
    let cli = BootstrapCli::parse_from(args);
    if cli.ranks == 0 || cli.bytes == 0 {
        return Err("--ranks and --bytes must be at least 1".into());
    }
    if cli.bytes > streamcomm::testing::bootstrap::MAX_BLOB as u64 {
        return Err(format!(
            "--bytes {} exceeds the bootstrap's {}-byte limit",
            cli.bytes,
            streamcomm::testing::bootstrap::MAX_BLOB
        ));
    }
    match &cli.join {
        Some(id) => join(&cli, id),
        None => root(&cli),
    }
}

/// The blob `rank` contributes to `round`: bytes any rank can recompute.
fn blob(rank: usize, round: u32, bytes: usize) -> Vec<u8> {
    (0..bytes)
        .map(|i| (rank.wrapping_mul(31) ^ i.wrapping_mul(7) ^ round as usize) as u8)
        .collect()
}

/// One rank: joins, runs the rounds, checks every blob, prints its times
/// (µs) as `joined round...` on one line.
fn join(cli: &BootstrapCli, id: &str) -> Fallible<()> {
    let id: UniqueId = id.parse().map_err(|e| format!("--join: {e}"))?;
    let (rank, n) = (cli.rank as usize, cli.ranks as usize);
    // Wait for the go: standard input ends once every rank is started.
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    let started = Instant::now();
    let mut boot = Bootstrap::connect(&id, rank, n, Duration::from_secs(cli.timeout))
        .context("join the bootstrap root")?;
    let mut times = vec![started.elapsed().as_micros() as u64];
    for round in 0..cli.rounds {
        let t = Instant::now();
        let all = boot
            .all_gather(&blob(rank, round, cli.bytes as usize))
            .context("all_gather")?;
        times.push(t.elapsed().as_micros() as u64);
        let wrong = (0..n).find(|&r| all.get(r) != Some(&blob(r, round, cli.bytes as usize)));
        if let Some(r) = wrong {
            return Err(format!("round {round}: rank {r}'s blob arrived wrong"));
        }
    }
    let line: Vec<String> = times.iter().map(u64::to_string).collect();
    println!("{}", line.join(" "));
    Ok(())
}

/// The root's figures, sampled while the ranks run.
#[derive(Default)]
struct Peak {
    sockets: AtomicU64,
    rss_kb: AtomicU64,
}

/// Sockets this process holds open (the root's: the ranks' standard
/// outputs reach this process through pipes, not sockets).
fn sockets() -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    dir.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().starts_with("socket:"))
        .count() as u64
}

/// Starts the root and the ranks, samples the root, reports.
fn root(cli: &BootstrapCli) -> Fallible<()> {
    let n = cli.ranks as usize;
    let before = Footprint::now()?;
    let cpu_before = process_cpu();
    let options = RootOptions::default().with_timeout(Duration::from_secs(cli.timeout));
    let server = RootServer::start(
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        UniqueId::random_secret().context("a secret")?,
        options,
    )
    .context("start the root")?;
    let id = server.id().to_string();

    let peak = Arc::new(Peak::default());
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, stop) = (peak.clone(), stop.clone());
        std::thread::spawn(move || -> Duration {
            while !stop.load(Ordering::Relaxed) {
                peak.sockets.fetch_max(sockets(), Ordering::Relaxed);
                if let Ok(f) = Footprint::now() {
                    peak.rss_kb.fetch_max(f.rss_kb, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            thread_cpu()
        })
    };

    let exe = std::env::current_exe().context("find this program's path")?;
    // One pipe for every rank's line (a line is written whole, under
    // PIPE_BUF): this process's descriptors stay the root's and a few.
    let (reader, writer) = std::io::pipe().context("a pipe for the ranks' figures")?;
    // The ranks join together once all are started (their standard input,
    // one pipe, then ends): starting them never competes with the root
    // for descriptors, and a join time is not a start-up time.
    let (go, go_writer) = std::io::pipe().context("a pipe to start the ranks")?;
    let started = Instant::now();
    let mut children: Vec<Child> = Vec::with_capacity(n);
    for rank in 0..n {
        let child = writer
            .try_clone()
            .and_then(|out| Ok((out, go.try_clone()?)))
            .context("a pipe for a rank")
            .and_then(|(out, go)| {
                Command::new(&exe)
                    .args(["bootstrap", "--join", &id, "--rank", &rank.to_string()])
                    .args(["--ranks", &n.to_string(), "--bytes", &cli.bytes.to_string()])
                    .args(["--rounds", &cli.rounds.to_string()])
                    .args(["--timeout", &cli.timeout.to_string()])
                    .stdout(out)
                    .stdin(go)
                    .spawn()
                    .context("start a rank")
            });
        match child {
            Ok(c) => children.push(c),
            Err(e) => {
                children.iter_mut().for_each(|c| drop(c.kill()));
                return Err(e);
            }
        }
    }
    drop((writer, go, go_writer));
    let spawned = started.elapsed();
    let mut times: Vec<Vec<u64>> = Vec::with_capacity(n);
    for line in BufReader::new(reader).lines() {
        let line = line.context("read the ranks' figures")?;
        if let Ok(t) = line
            .split(' ')
            .map(str::parse)
            .collect::<Result<Vec<u64>, _>>()
        {
            times.push(t);
        }
    }
    let mut failed = Vec::new();
    for (rank, mut child) in children.into_iter().enumerate() {
        if !child.wait().context("wait for a rank")?.success() {
            failed.push(rank);
        }
    }
    let wall = started.elapsed();
    let ended = server.join();
    stop.store(true, Ordering::Relaxed);
    let sampler_cpu = sampler.join().unwrap_or_default();
    if !failed.is_empty() {
        let root = match ended {
            Ok(()) => "ended cleanly".to_string(),
            Err(e) => format!("said: {e}"),
        };
        return Err(format!(
            "{} of {n} ranks failed (their messages are above); the root {root}",
            failed.len()
        ));
    }
    if times.len() != n || times.iter().any(|t| t.len() != 1 + cli.rounds as usize) {
        return Err(format!("{} of {n} ranks reported their times", times.len()));
    }
    ended.context("the bootstrap root")?;
    let root_cpu = process_cpu().saturating_sub(cpu_before + sampler_cpu);

    let socks = peak.sockets.load(Ordering::Relaxed);
    let grew_kb = peak
        .rss_kb
        .load(Ordering::Relaxed)
        .saturating_sub(before.rss_kb);
    // What the protocol writes (bootstrap/wire.rs, bootstrap/gather.rs):
    // the root, one welcome a rank (a 4-byte length, a kind byte, a count
    // and a 19-byte address a step) and a 5-byte release a rank a round; a
    // rank, a round, one frame a step (an 8-byte length) carrying the
    // n - 1 records it lacks (a 4-byte length each).
    let steps = |n: usize| n.next_power_of_two().trailing_zeros() as f64;
    let welcomes = |n: usize| n as f64 * (9.0 + 19.0 * steps(n));
    let releases = |n: usize| n as f64 * 5.0;
    let per_rank = |n: usize| steps(n) * 8.0 + (n as f64 - 1.0) * (cli.bytes as f64 + 4.0);
    let written = welcomes(n) + cli.rounds as f64 * releases(n);
    let column = |k: usize| max_median(times.iter().map(|t| t[k]).collect());
    let per = |k: usize| {
        let (max, median) = column(k);
        format!(
            "slowest {:.1} ms, median {:.1} ms",
            max as f64 / 1e3,
            median as f64 / 1e3
        )
    };
    let out = TableOut::new(cli.json.as_deref());
    let say = |line: String| out.say(line);
    say(format!(
        "# streamcomm-bench bootstrap: {n} ranks (processes) over loopback, {} rounds of {} B per rank",
        cli.rounds, cli.bytes
    ));
    say(format!(
        "started the ranks in {:.0} ms; all done in {:.0} ms",
        spawned.as_secs_f64() * 1e3,
        wall.as_secs_f64() * 1e3
    ));
    say(format!("joined (from the go): {}", per(0)));
    for r in 0..cli.rounds as usize {
        say(format!("all_gather round {r}: {}", per(1 + r)));
    }
    say(format!(
        "root: {socks} sockets at most (its listener and one per rank; the process had {} \
         descriptors before), resident memory +{:.1} MB, CPU {:.0} ms; by the protocol, \
         {:.3} MB written (every rank's all-gather peers once, a release a rank a round)",
        before.fds,
        grew_kb as f64 / 1e3,
        root_cpu.as_secs_f64() * 1e3,
        written / 1e6
    ));
    say(format!(
        "each rank, a round, by the protocol: {} frames, {:.3} MB sent and as much received, \
         over {} sockets",
        steps(n),
        per_rank(n) / 1e6,
        2.0 * steps(n)
    ));
    say(format!(
        "carried to 1000 ranks: the root {} sockets, {:.3} MB written once and {:.3} MB a \
         round (n); a rank {} sockets and {:.3} MB sent a round (n); {:.2} MB of blobs held by \
         each rank (n)",
        1000 + socks.saturating_sub(n as u64),
        welcomes(1000) / 1e6,
        releases(1000) / 1e6,
        2.0 * steps(1000),
        per_rank(1000) / 1e6,
        1000.0 * cli.bytes as f64 / 1e6
    ));
    let stat = |(max, median): (u64, u64)| serde_json::json!({"max": max, "median": median});
    out.json(&serde_json::json!({
        "ranks": n,
        "bytes": cli.bytes,
        "join_us": stat(column(0)),
        "rounds_us": (0..cli.rounds as usize).map(|r| stat(column(1 + r))).collect::<Vec<_>>(),
        "root": {
            "sockets": socks,
            "rss_grew_kb": grew_kb,
            "cpu_ms": root_cpu.as_secs_f64() * 1e3,
            "written": written,
        },
        "rank_per_round": {
            "frames": steps(n),
            "sent_bytes": per_rank(n),
        },
    }))
}

/// CPU time (user and system) of this process so far.
fn process_cpu() -> Duration {
    clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// CPU time of the calling thread so far.
fn thread_cpu() -> Duration {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn clock(id: libc::clockid_t) -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for clock_gettime to fill.
    if unsafe { libc::clock_gettime(id, &mut t) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_differ_by_rank_and_round() {
        assert_eq!(blob(3, 1, 64), blob(3, 1, 64));
        assert_ne!(blob(3, 1, 64), blob(4, 1, 64));
        assert_ne!(blob(3, 1, 64), blob(3, 2, 64));
        assert_eq!(blob(0, 0, 5).len(), 5);
    }
}
