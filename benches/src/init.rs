//! `streamcomm-bench init`: what a communicator costs to have, as the
//! number of ranks grows: the time to create it, and each rank's resident
//! memory (all, anonymous, shared), pinned memory (RDMA registrations),
//! open file descriptors, threads and the peers whose connection it has
//! made (tcp sockets and verbs queue pairs are made on first use),
//! and the host's allocated shared memory (/dev/shm, mapped or not),
//! after creation and after the first all-reduce, all-gather and
//! all-to-all.
//!
//! ```text
//! streamcomm-bench init --ranks 8
//! streamcomm-run -n 32 streamcomm-bench init --bytes 64M --pair-bytes 1M
//! ```
//!
//! Each rank reads, once the program's own buffers of the stage are freed,
//! `/proc/self/status` (`VmRSS`, `RssAnon`, `RssShmem`, `VmPin`,
//! `Threads`) and counts `/proc/self/fd`; rank 0 prints, for every stage,
//! the largest and the median over the ranks. Creation is timed around
//! `Communicator::from_env` on each rank (it returns once every rank has
//! joined, so the slowest rank's time is the job's). Figures are of this
//! build on this machine: compare builds in the same run of the machine.

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use streamcomm::{Communicator, ReduceOp};
use streamcomm_run::local::{LocalLauncher, Outcome, install_termination_handler};

use crate::cli::parse_size;
use crate::error::{Context, Fallible};
use crate::launch::Role;
use crate::table_out::{TableOut, max_median};

/// The command line of `streamcomm-bench init`.
#[derive(Parser, Debug)]
#[command(name = "streamcomm-bench init")]
pub(crate) struct InitCli {
    /// Ranks to start when run by hand (under a launcher: the launcher's).
    #[arg(long, default_value_t = 2)]
    ranks: u32,
    /// Bytes of the all-reduce, and of the all-gather's output (each rank
    /// contributing its share); suffixes K, M, G.
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    bytes: u64,
    /// Bytes each rank sends each rank in the all-to-all.
    #[arg(long = "pair-bytes", default_value = "1M", value_parser = parse_size)]
    pair_bytes: u64,
    /// Also write the figures as JSON to this file (`-`: standard output,
    /// the table then going to standard error).
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One rank's figures at one stage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Footprint {
    /// Resident memory, kB (`VmRSS`).
    pub(crate) rss_kb: u64,
    /// Resident anonymous memory, kB (`RssAnon`).
    pub(crate) anon_kb: u64,
    /// Resident shared memory, kB (`RssShmem`).
    pub(crate) shmem_kb: u64,
    /// Pinned memory, kB (`VmPin`: RDMA registrations).
    pub(crate) pinned_kb: u64,
    /// Open file descriptors.
    pub(crate) fds: u64,
    /// Threads.
    pub(crate) threads: u64,
    /// Peers whose connection this rank has made (tcp sockets and verbs
    /// queue pairs on first use; shared memory at creation).
    pub(crate) peers: u64,
    /// Shared memory allocated on the whole host, kB (`Shmem` of
    /// `/proc/meminfo`: every job's /dev/shm, the job's own rings among
    /// them, mapped or not).
    pub(crate) host_shm_kb: u64,
}

impl Footprint {
    /// This process now.
    ///
    /// # Errors
    /// When `/proc/self` cannot be read.
    pub(crate) fn now() -> Fallible<Footprint> {
        let status =
            std::fs::read_to_string("/proc/self/status").context("read /proc/self/status")?;
        let fds = std::fs::read_dir("/proc/self/fd")
            .context("list /proc/self/fd")?
            .count() as u64;
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let host_shm_kb = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("Shmem:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        // The listing held one descriptor of its own while it ran.
        Ok(Footprint {
            fds: fds.saturating_sub(1),
            host_shm_kb,
            ..Footprint::parse(&status)
        })
    }

    /// The memory and thread figures of a `/proc/<pid>/status` text.
    pub(crate) fn parse(status: &str) -> Footprint {
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        };
        Footprint {
            rss_kb: field("VmRSS"),
            anon_kb: field("RssAnon"),
            shmem_kb: field("RssShmem"),
            pinned_kb: field("VmPin"),
            fds: 0,
            threads: field("Threads"),
            peers: 0,
            host_shm_kb: 0,
        }
    }

    /// With the number of peers whose connection `comm` has made now.
    fn with_peers(self, comm: &Communicator) -> Footprint {
        let peers = streamcomm::testing::transport::made_peers(comm).len() as u64;
        Footprint { peers, ..self }
    }

    fn to_words(self) -> [u64; FIGURES] {
        [
            self.rss_kb,
            self.anon_kb,
            self.shmem_kb,
            self.pinned_kb,
            self.fds,
            self.threads,
            self.peers,
            self.host_shm_kb,
        ]
    }

    fn from_words(w: &[u64]) -> Footprint {
        Footprint {
            rss_kb: w[0],
            anon_kb: w[1],
            shmem_kb: w[2],
            pinned_kb: w[3],
            fds: w[4],
            threads: w[5],
            peers: w[6],
            host_shm_kb: w[7],
        }
    }
}

/// The stages at which figures are taken, in order.
const STAGES: [&str; 4] = ["created", "all_reduce", "all_gather", "all_to_all"];

/// Figures per stage.
const FIGURES: usize = 8;

/// Words each rank contributes: its creation time (µs), then the figures
/// of each stage.
const WORDS: usize = 1 + FIGURES * STAGES.len();

/// Runs `streamcomm-bench init` (its arguments after the word `init`).
///
/// # Errors
/// A bad command line, a rank that failed, or a figure that cannot be read.
pub(crate) fn main(args: impl Iterator<Item = std::ffi::OsString>) -> Fallible<()> {
    let cli = InitCli::parse_from(args);
    match crate::launch::role()? {
        Role::Launcher => launcher(&cli),
        Role::Rank(_) => rank(&cli),
    }
}

/// Starts `--ranks` copies of this program, each running [`rank`].
fn launcher(cli: &InitCli) -> Fallible<()> {
    if cli.ranks == 0 {
        return Err("--ranks must be at least 1".into());
    }
    let exe = std::env::current_exe().context("find this program's path")?;
    install_termination_handler().context("install the signal handlers")?;
    let outcome = LocalLauncher::new(cli.ranks as usize, exe)
        .args(std::env::args_os().skip(1))
        .prefix_output(false)
        .run()
        .context("start the ranks")?;
    match outcome {
        Outcome::Success => Ok(()),
        other => Err(other.to_string()),
    }
}

/// One rank: create, measure, run the three collectives, measure after
/// each; rank 0 prints everyone's figures.
fn rank(cli: &InitCli) -> Fallible<()> {
    let started = Instant::now();
    let comm = Communicator::from_env().context("create the communicator")?;
    let create_us = started.elapsed().as_micros() as u64;
    let (rank, n) = (comm.rank(), comm.size());
    let mut mine = vec![create_us];
    mine.extend(Footprint::now()?.with_peers(&comm).to_words());

    // Each stage is measured once the program's own buffers are gone (large
    // blocks go back to the system when freed): what stays is the library's.
    let floats = (cli.bytes / 4).max(1) as usize;
    let send: Vec<f32> = (0..floats).map(|i| (i % 7) as f32).collect();
    let mut recv = vec![0f32; floats];
    comm.all_reduce_host(&send, &mut recv, ReduceOp::Sum)
        .context("all_reduce")?;
    check(&recv, "all_reduce", |i| ((i % 7) * n) as f32)?;
    drop((send, recv));
    mine.extend(Footprint::now()?.with_peers(&comm).to_words());

    let share = (floats / n).max(1);
    let send = vec![rank as f32; share];
    let mut recv = vec![-1f32; share * n];
    comm.all_gather_host(&send, &mut recv)
        .context("all_gather")?;
    check(&recv, "all_gather", |i| (i / share) as f32)?;
    drop((send, recv));
    mine.extend(Footprint::now()?.with_peers(&comm).to_words());

    let pair = (cli.pair_bytes / 4).max(1) as usize;
    let send: Vec<f32> = (0..pair * n)
        .map(|i| (rank * n + i / pair) as f32)
        .collect();
    let mut recv = vec![-1f32; pair * n];
    comm.all_to_all_host(&send, &mut recv)
        .context("all_to_all")?;
    check(&recv, "all_to_all", |i| ((i / pair) * n + rank) as f32)?;
    drop((send, recv));
    mine.extend(Footprint::now()?.with_peers(&comm).to_words());

    let mut all = vec![0u64; WORDS * n];
    comm.all_gather_host(&mine, &mut all)
        .context("gather the figures")?;
    if rank == 0 {
        report(cli, n, &all)?;
    }
    Ok(())
}

/// Refuses `recv` (the output of `what`) unless each element `i` of it is
/// `want(i)`.
fn check(recv: &[f32], what: &str, want: impl Fn(usize) -> f32) -> Fallible<()> {
    if recv.iter().enumerate().all(|(i, &v)| v == want(i)) {
        Ok(())
    } else {
        Err(format!("{what}: wrong elements"))
    }
}

/// Prints (and writes as JSON) every rank's figures, `WORDS` per rank.
fn report(cli: &InitCli, n: usize, all: &[u64]) -> Fallible<()> {
    let ranks: Vec<&[u64]> = all.chunks(WORDS).collect();
    let (slowest, median) = max_median(ranks.iter().map(|r| r[0]).collect());
    let out = TableOut::new(cli.json.as_deref());
    let say = |line: String| out.say(line);
    say(format!(
        "# streamcomm-bench init: {n} ranks, all_reduce {} B, all_gather {} B, all_to_all {} B per pair",
        cli.bytes, cli.bytes, cli.pair_bytes
    ));
    say(format!(
        "# creation: slowest rank {:.1} ms, median {:.1} ms",
        slowest as f64 / 1e3,
        median as f64 / 1e3
    ));
    say("# per rank, largest / median over the ranks (MB = 10^6 bytes)".into());
    say(format!(
        "{:>12} {:>17} {:>17} {:>17} {:>17} {:>11} {:>11} {:>11} {:>13}",
        "after",
        "VmRSS MB",
        "RssAnon MB",
        "RssShmem MB",
        "VmPin MB",
        "fds",
        "threads",
        "peers",
        "host shm MB"
    ));
    let mut stages = Vec::new();
    for (s, name) in STAGES.iter().enumerate() {
        let at = |r: &[u64]| Footprint::from_words(&r[1 + FIGURES * s..1 + FIGURES * (s + 1)]);
        let figures: Vec<Footprint> = ranks.iter().map(|r| at(r)).collect();
        let col = |f: fn(&Footprint) -> u64| max_median(figures.iter().map(f).collect());
        let mb = |(a, b): (u64, u64)| format!("{:.1} / {:.1}", a as f64 / 1e3, b as f64 / 1e3);
        let count = |(a, b): (u64, u64)| format!("{a} / {b}");
        let (rss, anon, shmem) = (col(|f| f.rss_kb), col(|f| f.anon_kb), col(|f| f.shmem_kb));
        let pinned = col(|f| f.pinned_kb);
        let (fds, threads, peers) = (col(|f| f.fds), col(|f| f.threads), col(|f| f.peers));
        let host = col(|f| f.host_shm_kb);
        say(format!(
            "{name:>12} {:>17} {:>17} {:>17} {:>17} {:>11} {:>11} {:>11} {:>13.0}",
            mb(rss),
            mb(anon),
            mb(shmem),
            mb(pinned),
            count(fds),
            count(threads),
            count(peers),
            host.0 as f64 / 1e3
        ));
        stages.push(serde_json::json!({
            "after": name,
            "rss_kb": {"max": rss.0, "median": rss.1},
            "anon_kb": {"max": anon.0, "median": anon.1},
            "shmem_kb": {"max": shmem.0, "median": shmem.1},
            "pinned_kb": {"max": pinned.0, "median": pinned.1},
            "fds": {"max": fds.0, "median": fds.1},
            "threads": {"max": threads.0, "median": threads.1},
            "peers": {"max": peers.0, "median": peers.1},
            "host_shm_kb": {"max": host.0, "median": host.1},
        }));
    }
    out.json(&serde_json::json!({
        "ranks": n,
        "bytes": cli.bytes,
        "pair_bytes": cli.pair_bytes,
        "create_us": {"max": slowest, "median": median},
        "stages": stages,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields_are_read_in_kb() {
        let status = "Name:\tx\nVmPin:\t 48 kB\nVmRSS:\t  1234 kB\nRssAnon:\t 200 kB\n\
                      RssFile:\t 34 kB\nRssShmem:\t1000 kB\nThreads:\t3\n";
        let f = Footprint::parse(status);
        assert_eq!(
            f,
            Footprint {
                rss_kb: 1234,
                anon_kb: 200,
                shmem_kb: 1000,
                pinned_kb: 48,
                fds: 0,
                threads: 3,
                peers: 0,
                host_shm_kb: 0
            }
        );
        assert_eq!(Footprint::from_words(&f.to_words()), f);
    }

    #[test]
    fn this_process_has_threads_and_descriptors() {
        let f = Footprint::now().expect("/proc/self");
        assert!(f.threads >= 1 && f.fds >= 3 && f.rss_kb > 0, "{f:?}");
    }
}
