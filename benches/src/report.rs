//! What rank 0 prints, and the JSON document.
//!
//! The table follows nccl-tests' layout (size, count, type, redop, root,
//! time, algbw, busbw, #wrong) so the numbers read the same way, plus one
//! column of our own: bus bandwidth as a fraction of this machine's
//! single-thread memcpy bandwidth, measured in the same run (`docs/guide/benchmarks.md`:
//! absolute figures mean little on machines whose cores move, ratios do).
//! Latencies are also given as multiples of the core-to-core round trip.
//! When rank 0 reaches rank 1 over tcp, the header also gives the raw TCP
//! figures between them, and the table and summary the run's figures as
//! fractions of those ([`crate::vstcp`]).

use std::io::Write;

use crate::barrier::{BarrierResult, BarrierStats};
use crate::cli::{Cli, Collective, human_bytes};
use crate::error::{Context, Fallible};
use crate::latency::Latency;
use crate::link::Link;
use crate::machine::MachineLimits;
use crate::p2p::P2pRow;
use crate::rawtcp::RawTcp;
use crate::stats::{Percentiles, fraction};
use crate::sweep::Row;
use crate::vstcp::{self, VsTcp};

/// Where the human-readable report goes: stdout, or stderr when the JSON
/// document takes stdout.
pub(crate) struct Printer {
    out: Box<dyn Write>,
}

impl Printer {
    /// A printer for this run's `--json` choice.
    pub(crate) fn new(cli: &Cli) -> Printer {
        let out: Box<dyn Write> = if cli.json.as_deref() == Some("-") {
            Box::new(std::io::stderr())
        } else {
            Box::new(std::io::stdout())
        };
        Printer { out }
    }

    /// Prints one line (output errors, e.g. a closed pipe, are ignored: the
    /// benchmark's exit code still tells the outcome).
    pub(crate) fn line(&mut self, text: impl std::fmt::Display) {
        let _ = writeln!(self.out, "{text}");
        let _ = self.out.flush();
    }
}

/// The machine's limits as reported, with who measured them, and the path
/// between ranks 0 and 1.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct Machine {
    /// The figures.
    #[serde(flatten)]
    pub limits: MachineLimits,
    /// `"launcher"` (before the ranks started) or `"rank 0"`.
    pub measured_by: &'static str,
    /// The transport from rank 0 to rank 1.
    #[serde(flatten)]
    pub link: Link,
    /// Raw TCP between ranks 0 and 1 (`null` unless they talk tcp).
    pub tcp: Option<RawTcp>,
}

/// The run's header: what is measured, and the machine's limits.
pub(crate) fn print_header(
    p: &mut Printer,
    cli: &Cli,
    nranks: usize,
    launcher: &str,
    machine: &Machine,
) {
    let mut what = format!(
        "# streamcomm-bench {}: {nranks} ranks (started by {launcher})",
        cli.collective.name()
    );
    if cli.collective != Collective::Barrier {
        what += &format!(", type {}", cli.dtype);
        if cli.collective.has_op() {
            what += &format!(", op {}", cli.op);
        }
        if cli.collective.has_root() {
            what += &format!(", root {}", cli.root);
        }
    }
    p.line(what);
    if cli.collective != Collective::Barrier {
        p.line(format!(
            "# sizes {} .. {} x{}, {} iterations after {} warm-up, check {}",
            human_bytes(cli.min_bytes),
            human_bytes(cli.max_bytes),
            cli.step_factor,
            cli.iters,
            cli.warmup,
            if cli.check() { "on" } else { "off" }
        ));
    }
    let l = &machine.limits;
    let by = if machine.measured_by == "launcher" {
        "the launcher before starting the ranks"
    } else {
        "rank 0 before joining"
    };
    p.line(format!(
        "# memcpy {:.1} GB/s (single thread), core-to-core round trip {:.2} us (p99 {:.2} us), measured by {by}",
        l.memcpy_gbps, l.c2c_round_trip_us, l.c2c_round_trip_p99_us
    ));
    p.line(format!("# transport to rank 1: {}", machine.link));
    if let Some(tcp) = &machine.tcp {
        for line in vstcp::header_lines(tcp) {
            p.line(line);
        }
    }
}

/// Column headings of the sweep table (with a `busbw/tcp` column when
/// `tcp` is measured, and the cost model's two columns with `--model`).
pub(crate) fn print_table_header(p: &mut Printer, tcp: bool, model: bool) {
    let extra = |s: &str| {
        if tcp {
            format!(" {s:>9}")
        } else {
            String::new()
        }
    };
    let model_cols = |a: &str, b: &str| {
        if model {
            format!(" {a:>11} {b:>10}")
        } else {
            String::new()
        }
    };
    p.line("#");
    p.line("# out-of-place: separate send and receive buffers (nccl-tests' out-of-place columns; in-place is not timed)");
    p.line(format!(
        "# {:>10} {:>12} {:>6} {:>6} {:>5} {:>11} {:>8} {:>8} {:>7} {:>9}{} {:>18}{}",
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "busbw/",
        extra("busbw/"),
        "algorithm",
        model_cols("model", "model/")
    ));
    let units = format!(
        "# {:>10} {:>12} {:>6} {:>6} {:>5} {:>11} {:>8} {:>8} {:>7} {:>9}{} {:>18}{}",
        "(B)",
        "(elements)",
        "",
        "",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        "",
        "memcpy",
        extra("tcp"),
        "",
        model_cols("(us)", "time")
    );
    p.line(units.trim_end());
}

/// One row of the sweep table.
pub(crate) fn print_row(p: &mut Printer, cli: &Cli, row: &Row, machine: &Machine) {
    let limits = &machine.limits;
    let op = if cli.collective.has_op() {
        cli.op.name()
    } else {
        "none"
    };
    let root = if cli.collective.has_root() {
        cli.root as i64
    } else {
        -1
    };
    let wrong = row.wrong.map_or("N/A".to_string(), |w| w.to_string());
    let vs_tcp = machine.tcp.as_ref().map_or(String::new(), |t| {
        format!(" {:>9.3}", fraction(row.busbw, t.best_gbps))
    });
    let algo = row.algo.unwrap_or("-");
    let model = if cli.model {
        let (t, ratio) = row
            .predicted_us
            .map_or(("-".to_string(), "-".to_string()), |t| {
                (
                    format!("{t:.2}"),
                    format!("{:.2}", fraction(t, row.time_us)),
                )
            });
        format!(" {t:>11} {ratio:>10}")
    } else {
        String::new()
    };
    p.line(format!(
        "  {:>10} {:>12} {:>6} {:>6} {:>5} {:>11.2} {:>8.3} {:>8.3} {:>7} {:>9.3}{vs_tcp} {algo:>18}{model}",
        row.bytes,
        row.count,
        cli.dtype.name(),
        op,
        root,
        row.time_us,
        row.algbw,
        row.busbw,
        wrong,
        fraction(row.busbw, limits.memcpy_gbps)
    ));
}

/// The sendrecv table's header: what each column is.
pub(crate) fn print_p2p_header(p: &mut Printer, comm: &streamcomm::Communicator) {
    let c = comm.config();
    p.line(format!(
        "# sendrecv between ranks 0 and 1 over {}: eager limit {} B (STREAMCOMM_P2P_EAGER_LIMIT), direct rendezvous writes {}",
        comm.transport_to(1).map_or("-", streamcomm::Transport::as_str),
        c.p2p_eager_limit,
        if c.p2p_direct { "on" } else { "off" }
    ));
    p.line(format!(
        "# {:>12} {:>10} {:>9} {:>9} {:>8} {:>10} {:>9} {:>9} {:>7}",
        "size",
        "protocol",
        "lat p50",
        "lat p99",
        "p50/c2c",
        "bandwidth",
        "bw/memcpy",
        "per-chan",
        "#wrong"
    ));
    p.line(format!(
        "# {:>12} {:>10} {:>9} {:>9} {:>8} {:>10} {:>9} {:>9} {:>7}",
        "(B)", "", "(us)", "(us)", "(x)", "(GB/s)", "", "(GB/s)", ""
    ));
}

/// One row of the sendrecv table.
pub(crate) fn print_p2p_row(p: &mut Printer, row: &P2pRow, machine: &Machine) {
    let per_channel = row
        .per_channel_gbps
        .map_or("-".to_string(), |g| format!("{g:.3}"));
    p.line(format!(
        "  {:>12} {:>10} {:>9.2} {:>9.2} {:>8.1} {:>10.3} {:>9.2} {:>9} {:>7}",
        row.bytes,
        row.protocol,
        row.latency.p50,
        row.latency.p99,
        fraction(row.latency.p50, machine.limits.c2c_round_trip_us),
        row.bandwidth_gbps,
        fraction(row.bandwidth_gbps, machine.limits.memcpy_gbps),
        per_channel,
        row.wrong
    ));
}

/// A sendrecv row as a sweep row (time of one message at the measured
/// bandwidth), for the summary and the comparison with raw tcp.
pub(crate) fn p2p_as_row(r: &P2pRow) -> Row {
    Row {
        bytes: r.bytes,
        count: r.bytes as usize,
        time_us: r.bytes as f64 / r.bandwidth_gbps.max(1e-12) / 1e3,
        algbw: r.bandwidth_gbps,
        busbw: r.bandwidth_gbps,
        wrong: Some(r.wrong),
        algo: None,
        predicted_us: None,
    }
}

/// The lines after the table: average bus bandwidth, wrong elements, and
/// the sendrecv latency where measured; then the comparison with raw tcp.
pub(crate) fn print_summary(
    p: &mut Printer,
    rows: &[Row],
    latency: Option<&Latency>,
    machine: &Machine,
) {
    let limits = &machine.limits;
    p.line(format!(
        "# Avg bus bandwidth    : {:.3} GB/s",
        average_busbw(rows)
    ));
    let modelled: Vec<f64> = rows
        .iter()
        .filter_map(|r| r.predicted_us.map(|t| t / r.time_us))
        .collect();
    if !modelled.is_empty() {
        let close = modelled
            .iter()
            .filter(|&&q| (q - 1.0).abs() <= 0.35)
            .count();
        p.line(format!(
            "# Model within 35%     : {close} of {} rows",
            modelled.len()
        ));
    }
    if let Some(total) = wrong_total(rows) {
        let verdict = if total == 0 { "OK" } else { "FAILED" };
        p.line(format!("# Wrong elements       : {total} {verdict}"));
    }
    if let Some(l) = latency {
        p.line(format!(
            "# sendrecv {} B one-way latency (half round trip, ranks 0<->1, {} iterations): p50 {:.2} us ({:.1}x c2c round trip), p99 {:.2} us, max {:.2} us",
            l.bytes,
            l.iters,
            l.one_way.p50,
            fraction(l.one_way.p50, limits.c2c_round_trip_us),
            l.one_way.p99,
            l.one_way.max
        ));
        p.line(format!(
            "# sendrecv {} B one-way latency, host calls (send_host/recv_host): p50 {:.2} us ({:.1}x c2c round trip), p99 {:.2} us, max {:.2} us",
            l.bytes,
            l.host_one_way.p50,
            fraction(l.host_one_way.p50, limits.c2c_round_trip_us),
            l.host_one_way.p99,
            l.host_one_way.max
        ));
    }
    if let Some(tcp) = &machine.tcp {
        for line in vstcp::summary_lines(&VsTcp::new(tcp, rows, latency)) {
            p.line(line);
        }
    }
}

/// The barrier table: percentiles in µs, then as multiples of the
/// core-to-core round trip.
pub(crate) fn print_barrier(p: &mut Printer, result: &BarrierResult, limits: &MachineLimits) {
    p.line("#");
    p.line(format!("# algorithm: {}", result.algo));
    p.line(format!(
        "# {:<8} {:<8} {:>7} {:>9} {:>9} {:>9} {:>9}   {:>7} {:>7} {:>7} {:>7}",
        "barrier", "view", "iters", "p50", "p99", "p99.9", "max", "p50", "p99", "p99.9", "max"
    ));
    p.line(format!(
        "# {:<8} {:<8} {:>7} {:>9} {:>9} {:>9} {:>9}   {:>31}",
        "", "", "", "(us)", "(us)", "(us)", "(us)", "(x c2c round trip)"
    ));
    for (name, stats) in [("host", &result.host), ("stream", &result.stream)] {
        barrier_line(p, name, "rank 0", stats, &stats.rank0, limits);
        barrier_line(p, name, "slowest", stats, &stats.slowest, limits);
    }
    if let Some(r) = &result.retransmits {
        p.line(format!(
            "# multicast: {:.3} questions and {:.3} re-sent arrivals per barrier (all ranks)",
            r.questions_per_barrier, r.resends_per_barrier
        ));
    }
    p.line("# host: barrier_host(); stream: barrier(&stream) + synchronize(); slowest: each percentile's max over ranks");
}

fn barrier_line(
    p: &mut Printer,
    name: &str,
    view: &str,
    stats: &BarrierStats,
    pct: &Percentiles,
    limits: &MachineLimits,
) {
    let x = pct.scaled(limits.c2c_round_trip_us);
    p.line(format!(
        "  {:<8} {:<8} {:>7} {:>9.2} {:>9.2} {:>9.2} {:>9.2}   {:>7.1} {:>7.1} {:>7.1} {:>7.1}",
        name, view, stats.iters, pct.p50, pct.p99, pct.p999, pct.max, x.p50, x.p99, x.p999, x.max
    ));
}

/// A row as written to JSON: the printed figures.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub(crate) struct JsonRow {
    /// The row.
    #[serde(flatten)]
    pub row: Row,
    /// `busbw / memcpy bandwidth`.
    pub busbw_vs_memcpy: f64,
    /// `busbw / best raw tcp bandwidth` (`null` unless ranks 0 and 1 talk tcp).
    pub busbw_vs_tcp: Option<f64>,
}

/// The JSON document (`--json`).
#[derive(Debug, serde::Serialize)]
pub(crate) struct Document {
    /// The machine's limits.
    pub machine: Machine,
    /// The operation measured.
    pub collective: &'static str,
    /// Number of ranks.
    pub ranks: usize,
    /// Element type.
    pub dtype: &'static str,
    /// Reduction operator (reductions only).
    pub op: Option<&'static str>,
    /// Root (broadcast and reduce only).
    pub root: Option<usize>,
    /// Timed iterations per size.
    pub iters: u64,
    /// Warm-up iterations per size.
    pub warmup: u64,
    /// Whether results were checked.
    pub check: bool,
    /// One entry per size.
    pub rows: Vec<JsonRow>,
    /// Mean bus bandwidth over the rows, GB/s (`null` without rows).
    pub avg_busbw: Option<f64>,
    /// Wrong elements over all rows and ranks (`null` without `-c 1`).
    pub wrong_total: Option<u64>,
    /// The sendrecv ping-pong latency.
    pub sendrecv_latency: Option<Latency>,
    /// The figures as fractions of raw tcp's (`null` unless ranks 0 and 1
    /// talk tcp).
    pub vs_tcp: Option<VsTcp>,
    /// The barrier benchmark, one entry per algorithm measured.
    pub barrier: Vec<BarrierResult>,
    /// The sendrecv sweep: latency and bandwidth per size, with the protocol.
    pub sendrecv: Vec<P2pRow>,
}

impl Document {
    /// The document for a run.
    pub(crate) fn new(
        cli: &Cli,
        nranks: usize,
        machine: Machine,
        rows: &[Row],
        latency: Option<Latency>,
        barrier: Vec<BarrierResult>,
        sendrecv: Vec<P2pRow>,
    ) -> Document {
        let sweep = cli.collective != Collective::Barrier;
        let vs_tcp = machine
            .tcp
            .as_ref()
            .map(|t| VsTcp::new(t, rows, latency.as_ref()));
        let tcp_gbps = machine.tcp.as_ref().map(|t| t.best_gbps);
        Document {
            collective: cli.collective.name(),
            ranks: nranks,
            dtype: cli.dtype.name(),
            op: cli.collective.has_op().then(|| cli.op.name()),
            root: cli.collective.has_root().then_some(cli.root),
            iters: cli.iters,
            warmup: cli.warmup,
            check: cli.check() && sweep,
            rows: rows
                .iter()
                .map(|&row| JsonRow {
                    row,
                    busbw_vs_memcpy: fraction(row.busbw, machine.limits.memcpy_gbps),
                    busbw_vs_tcp: tcp_gbps.map(|t| fraction(row.busbw, t)),
                })
                .collect(),
            avg_busbw: (!rows.is_empty()).then(|| average_busbw(rows)),
            wrong_total: wrong_total(rows).filter(|_| sweep),
            sendrecv_latency: latency,
            vs_tcp,
            barrier,
            sendrecv,
            machine,
        }
    }

    /// Writes the document to `target` (`-` for stdout).
    ///
    /// # Errors
    /// When the file cannot be written.
    pub(crate) fn write(&self, target: &str) -> Fallible<()> {
        let text = serde_json::to_string_pretty(self).context("encode the JSON document")?;
        if target == "-" {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{text}")
                .and_then(|()| out.flush())
                .context("write the JSON document to stdout")
        } else {
            std::fs::write(target, text + "\n").with_context(|| format!("write {target}"))
        }
    }
}

/// Sum of wrong elements over rows; `None` when unchecked.
pub(crate) fn wrong_total(rows: &[Row]) -> Option<u64> {
    rows.iter().map(|r| r.wrong).sum()
}

fn average_busbw(rows: &[Row]) -> f64 {
    if rows.is_empty() {
        return 0.0;
    }
    rows.iter().map(|r| r.busbw).sum::<f64>() / rows.len() as f64
}
