//! `streamcomm-bench`: nccl-tests-style benchmarks of streamcomm.
//!
//! ```text
//! streamcomm-bench all_reduce -b 8 -e 64M -f 4 -n 20 -w 5 -c 1 --ranks 2
//! streamcomm-bench barrier --ranks 2 --json barrier.json
//! streamcomm-run -n 4 streamcomm-bench all_gather -d bf16
//! streamcomm-bench all_reduce --ranks 4 --algo tree
//! streamcomm-bench calibrate --out tuning.txt
//! streamcomm-bench model --plot model.svg
//! streamcomm-bench init --ranks 16
//! streamcomm-bench bootstrap --ranks 256
//! ```
//!
//! `docs/guide/benchmarks.md`: every figure is printed next to the machine's own limits,
//! measured in the same run: memcpy bandwidth and the core-to-core round
//! trip, and, when rank 0 reaches rank 1 over tcp (other hosts or network
//! namespaces, or `STREAMCOMM_TRANSPORT=tcp`), the raw TCP round trip and
//! bandwidth between them, measured right after joining
//! (`STREAMCOMM_BENCH_TCP_BYTES` sets the bytes of each raw bandwidth run,
//! default 256M). Exit status: 0 on success, 1 on an error, 2 on
//! a usage error, 3 when `-c 1` found wrong results.

mod barrier;
mod bootstrap;
mod calibrate;
mod check;
mod cli;
mod coll;
mod error;
mod init;
mod latency;
mod launch;
mod link;
mod machine;
mod model;
mod p2p;
mod plot;
mod rawtcp;
mod report;
mod schedule;
mod stats;
mod sweep;
mod table_out;
mod ticks;
mod vstcp;

use std::process::ExitCode;

use clap::Parser;
use streamcomm::host::HostStream;
use streamcomm::launch::LaunchInfo;
use streamcomm::{Communicator, Config};

use crate::cli::{Cli, Collective};
use crate::error::{Context, Fallible};
use crate::launch::Role;
use crate::link::Link;
use crate::machine::MachineLimits;
use crate::report::{Document, Machine, Printer};

/// Exit status for errors.
const EXIT_ERROR: u8 = 1;
/// Exit status for invalid arguments.
const EXIT_USAGE: u8 = 2;
/// Exit status when results were wrong.
const EXIT_WRONG: u8 = 3;

fn main() -> ExitCode {
    match std::env::args().nth(1).as_deref() {
        Some("model") => {
            let cli = model::ModelCli::parse_from(std::env::args().skip(1));
            return match model::run(&cli) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(&e, EXIT_ERROR),
            };
        }
        Some("bootstrap") => {
            return match bootstrap::main(std::env::args_os().skip(1)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(&e, EXIT_ERROR),
            };
        }
        Some("init") => {
            return match init::main(std::env::args_os().skip(1)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(&e, EXIT_ERROR),
            };
        }
        Some("calibrate") => {
            let cli = calibrate::CalibrateCli::parse_from(std::env::args().skip(1));
            let result = match launch::role() {
                Err(e) => Err(e),
                Ok(Role::Launcher) => calibrate::launcher(&cli),
                Ok(Role::Rank(_)) => calibrate::rank(&cli),
            };
            return match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(&e, EXIT_ERROR),
            };
        }
        _ => {}
    }
    let cli = Cli::parse();
    match launch::role() {
        Err(e) => fail(&e, EXIT_ERROR),
        Ok(Role::Launcher) => launcher_main(&cli),
        Ok(Role::Rank(info)) => rank_main(&cli, &info),
    }
}

/// Prints `message` (in one write, so ranks' lines do not interleave) and
/// returns `code`.
fn fail(message: &str, code: u8) -> ExitCode {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("streamcomm-bench: {message}\n").as_bytes());
    ExitCode::from(code)
}

/// Measures the machine, then starts the ranks.
fn launcher_main(cli: &Cli) -> ExitCode {
    let nranks = cli.ranks.unwrap_or(1) as usize;
    if let Err(e) = cli.validate(nranks) {
        return fail(&e, EXIT_USAGE);
    }
    let limits = machine::measure();
    match launch::run_ranks(nranks, &limits) {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(EXIT_ERROR)),
        Err(e) => fail(&e, EXIT_ERROR),
    }
}

/// Runs as one rank of a job.
fn rank_main(cli: &Cli, info: &LaunchInfo) -> ExitCode {
    let rank = info.rank;
    if let Err(e) = cli.validate(info.size) {
        return fail(&format!("rank {rank}: {e}"), EXIT_USAGE);
    }
    if let Some(n) = cli.ranks
        && n as usize != info.size
        && rank == 0
    {
        eprintln!(
            "streamcomm-bench: --ranks {n} ignored: the launcher ({}) started {} ranks",
            info.launcher, info.size
        );
    }
    install_tracing();
    // Before the communicator reads its configuration.
    if let Ok(Some(spec)) = cli.forced_algo() {
        // SAFETY: this runs on the main thread before the rank starts any
        // other (the communicator and its engine come after it, and the
        // tracing subscriber writes from the calling thread), so nothing
        // reads the environment meanwhile.
        unsafe { std::env::set_var("STREAMCOMM_ALGO", spec) };
    }
    match run_rank(cli, info) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(EXIT_WRONG),
        Err(e) => fail(&format!("rank {rank}: {e}"), EXIT_ERROR),
    }
}

/// Installs a `tracing` subscriber when `STREAMCOMM_DEBUG` asks for one.
fn install_tracing() {
    if let Ok(Config {
        debug: Some(filter),
        ..
    }) = Config::from_env()
    {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .try_init();
    }
}

/// The machine's limits on rank 0: the launcher's, or measured now (before
/// the communicator exists, so that no rank of ours is running yet), with
/// who measured them.
fn rank0_limits() -> Fallible<(MachineLimits, &'static str)> {
    Ok(match launch::limits_from_env()? {
        Some(limits) => (limits, "launcher"),
        None => (machine::measure(), "rank 0"),
    })
}

/// The benchmark on this rank; returns the wrong elements found (all ranks).
fn run_rank(cli: &Cli, info: &LaunchInfo) -> Fallible<u64> {
    let limits = if info.rank == 0 {
        Some(rank0_limits()?)
    } else {
        None
    };
    let comm = Communicator::from_env().context("create the communicator")?;
    let stream = HostStream::new().context("create a stream")?;
    let nranks = comm.size();
    let tcp_settings = rawtcp::Settings::new(
        cli.latency_iters,
        comm.config().nchannels,
        comm.config().timeout,
    )?;
    let tcp = rawtcp::measure(&comm, &stream, &tcp_settings)?;
    let machine = limits.map(|(limits, measured_by)| Machine {
        limits,
        measured_by,
        link: Link::of(&comm),
        tcp,
    });
    let mut printer = machine.as_ref().map(|m| {
        let mut p = Printer::new(cli);
        report::print_header(&mut p, cli, nranks, info.launcher, m);
        p
    });

    let (mut rows, mut latency, mut barrier) = (Vec::new(), None, Vec::new());
    let mut sendrecv = Vec::new();
    if cli.collective == Collective::Barrier {
        let algos = cli.barrier_algos().map_err(|e| format!("--algo: {e}"))?;
        let every = algos.len() > 1;
        for algo in algos {
            if let Some(algo) = algo {
                match comm.set_barrier_algo(algo) {
                    // `--algo ALL` measures what this communicator can run
                    // (multicast needs its group joined at creation:
                    // STREAMCOMM_BARRIER_ALGO=multicast) and says what not.
                    Err(streamcomm::Error::Unavailable(why)) if every => {
                        if let Some(p) = printer.as_mut() {
                            p.line("#");
                            p.line(format!("# algorithm: {algo}: not measured: {why}"));
                        }
                        continue;
                    }
                    r => r.context("set the barrier algorithm")?,
                }
            }
            let result = barrier::run(
                &comm,
                &stream,
                cli.barrier_iters,
                cli.stream_barrier_iters(),
                cli.warmup,
            )?;
            if let (Some(p), Some(m)) = (printer.as_mut(), machine.as_ref()) {
                report::print_barrier(p, &result, &m.limits);
            }
            barrier.push(result);
        }
    } else {
        if let (Some(p), Some(m)) = (printer.as_mut(), machine.as_ref())
            && cli.collective != Collective::Sendrecv
        {
            report::print_table_header(p, m.tcp.is_some(), cli.model);
        }
        if cli.collective == Collective::Sendrecv {
            if let Some(p) = printer.as_mut() {
                report::print_p2p_header(p, &comm);
            }
            sendrecv = p2p::run(&comm, &stream, cli, |row| {
                if let (Some(p), Some(m)) = (printer.as_mut(), machine.as_ref()) {
                    report::print_p2p_row(p, row, m);
                }
            })?;
            rows = sendrecv.iter().map(report::p2p_as_row).collect();
            latency = latency::ping_pong(&comm, &stream, cli.latency_iters)?;
        } else {
            rows = sweep::run(&comm, &stream, cli, |row| {
                if let (Some(p), Some(m)) = (printer.as_mut(), machine.as_ref()) {
                    report::print_row(p, cli, row, m);
                }
            })?;
        }
    }

    let mut reported = Ok(());
    if let (Some(p), Some(m)) = (printer.as_mut(), machine.as_ref()) {
        if barrier.is_empty() {
            report::print_summary(p, &rows, latency.as_ref(), m);
        }
        if let Some(target) = &cli.plot {
            let mut refs = vec![("memcpy", m.limits.memcpy_gbps)];
            if let Some(tcp) = &m.tcp {
                refs.push(("raw tcp", tcp.best_gbps));
            }
            reported = plot::sendrecv::write_svg(target, &sendrecv, &refs);
        }
        if let Some(target) = &cli.json {
            let doc = Document::new(cli, nranks, m.clone(), &rows, latency, barrier, sendrecv);
            reported = reported.and_then(|()| doc.write(target));
        }
    }
    // Nobody exits before rank 0 has reported: a launcher stops the job when
    // its first rank exits with a non-zero status.
    comm.barrier_host().context("final barrier")?;
    reported?;
    Ok(report::wrong_total(&rows).unwrap_or(0))
}
