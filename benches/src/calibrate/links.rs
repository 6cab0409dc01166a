//! `streamcomm-bench calibrate` started by a launcher across hosts: the
//! links between hosts, measured where they are.
//!
//! Run as the ranks of a job on two hosts or more (`streamcomm-run --nnodes
//! 2 ... -- streamcomm-bench calibrate --out tuning.txt`, or torchrun,
//! Slurm, Open MPI), the ranks time the calls a calibration on one machine
//! times over loopback tcp, over the links between their hosts, and rank 0
//! solves the links' parameters through the model as that calibration does
//! (`tcp.alpha_us` from the broadcast, `tcp.latency_us` from the calls that
//! end waiting) and writes them into `--out`, keeping the file's other
//! parameters and notes (run `calibrate` alone on one host first: it
//! measures those) or, where there is no file yet, the built-in defaults
//! with this host's cores. `tcp.beta_ns_per_byte` is
//! the geometric mean of what two large calls give: the broadcast, whose
//! bytes cross one way, and a recursive-doubling all-gather of the same
//! bytes, whose ranks exchange theirs both ways at once (across two pretend
//! hosts, 2026-12-01: 1.1-1.3 ns/B from the broadcast alone, against the
//! 0.75-0.85 ns/B at which the model best predicted the measured points, one
//! rank a host and hierarchical alike). Loopback is not the network:
//! across two pretend hosts (network namespaces on a bridge, 2 cores,
//! 2026-12-01) a tcp step's latency was 57-75 µs where loopback gave
//! 38-43 µs. The hosts are taken to have cores of their own (pretend
//! hosts sharing one machine's cores measure the same with one rank each,
//! the case of the measurement in `docs/measurements/tcp.md`).

use super::*;
use streamcomm::Transport;

/// Times the calls are timed, each a fit of its own; the median of each
/// parameter is kept (single rounds gave 0.7-1.2 ns/B minutes apart).
pub(super) const ROUNDS: usize = 5;

/// The start of the note this writes into the file (a note of an earlier
/// run is replaced).
const LINKS_NOTE: &str = "links between hosts measured by streamcomm-bench calibrate";

/// Refuses a communicator whose rank reaches every other rank over shared
/// memory: there is no link between hosts to measure.
///
/// # Errors
/// Naming what to run instead.
pub(super) fn check(comm: &Communicator) -> Fallible<()> {
    let across =
        (0..comm.size()).any(|p| matches!(comm.transport_to(p), Some(t) if t != Transport::Shm));
    if across {
        return Ok(());
    }
    Err(format!(
        "calibrate under a launcher measures the links between hosts, but rank {} reaches \
         all {} ranks over shared memory (one host): run `streamcomm-bench calibrate` \
         without a launcher to calibrate this machine",
        comm.rank(),
        comm.size()
    ))
}

/// Rank 0: solves the links' parameters from what it measured and writes
/// them into `cli.out` (see the module's docs).
///
/// # Errors
/// The file cannot be read, parsed or written.
pub(super) fn update(
    cli: &CalibrateCli,
    comm: &Communicator,
    rounds: &[(Measured, f64)],
) -> Fallible<()> {
    let Some((m, _)) = rounds.first() else {
        return Err("no round of calls was timed".into());
    };
    // The file's own notes (what measured the rest, the slot size) are
    // kept, after its header line.
    let mut notes: Vec<String> = Vec::new();
    let (base, from) = if cli.out.exists() {
        let text = std::fs::read_to_string(&cli.out)
            .with_context(|| format!("read {}", cli.out.display()))?;
        let params = CostParams::parse(&text)
            .map_err(|e| format!("tuning file {}: {e}", cli.out.display()))?;
        notes.extend(
            text.lines()
                .skip(1)
                .filter_map(|l| l.strip_prefix("# "))
                .filter(|l| !l.starts_with(LINKS_NOTE))
                .map(str::to_string),
        );
        (params, cli.out.display().to_string())
    } else {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let params = CostParams {
            cores,
            ..CostParams::default()
        };
        (params, "the built-in defaults".to_string())
    };
    // Hosts as the links see them: the ranks rank 0 reaches over shared
    // memory share its host (ranks on one machine whose links are forced
    // onto tcp are hosts of their own, as for the model).
    let per_host = 1
        + (0..comm.size())
            .filter(|&p| comm.transport_to(p) == Some(Transport::Shm))
            .count();
    let hosts = m.ranks.div_ceil(per_host.max(1));
    let shape = Shape::new(m.ranks, per_host, m.slot);
    let fits: Vec<CostParams> = rounds
        .iter()
        .map(|(m, exchange)| solve(base, m, *exchange, &shape))
        .collect();
    let mid = |f: fn(&CostParams) -> f64| median(fits.iter().map(f).collect());
    let mut beta = mid(|p| p.tcp.beta);
    if beta <= 0.0 {
        // The large calls took no longer than their steps alone predict
        // (seen with the cores busy with other work): the byte cost is not
        // in these timings. A cost of zero would make every large call
        // look free to the model, so the file's value stays.
        eprintln!(
            "streamcomm-bench: the large calls did not separate a cost per byte from the step cost in most rounds (the machine busy?); kept {:.3} ns/B from {from}",
            base.tcp.beta * 1e9
        );
        beta = base.tcp.beta;
    }
    let params = CostParams {
        tcp: LinkCost {
            alpha: mid(|p| p.tcp.alpha),
            beta,
        },
        tcp_latency: mid(|p| p.tcp_latency),
        ..base
    };
    eprintln!(
        "streamcomm-bench: links between {hosts} hosts ({} ranks, {per_host} a host): a step costs {:.2} us and arrives after {:.2} us, {:.3} ns/B (medians of {} rounds)",
        m.ranks,
        params.tcp.alpha * 1e6,
        params.tcp_latency * 1e6,
        params.tcp.beta * 1e9,
        rounds.len(),
    );
    notes.push(format!(
        "{LINKS_NOTE} across {hosts} hosts ({} ranks, {per_host} a host); the others from {from}",
        m.ranks
    ));
    std::fs::write(&cli.out, params.to_file(&notes))
        .with_context(|| format!("write {}", cli.out.display()))?;
    eprintln!("streamcomm-bench: wrote {}", cli.out.display());
    Ok(())
}

/// Seconds per call of a recursive-doubling all-gather of about `big`
/// bytes in all (a block a rank; on every rank, rank 0's is kept).
///
/// # Errors
/// Library errors.
pub(super) fn time_exchange(
    cli: &CalibrateCli,
    comm: &Communicator,
    stream: &HostStream,
    big: usize,
) -> Fallible<f64> {
    let bytes = Call::AllGather.bytes_near(big, comm.size());
    per_call(
        comm,
        stream,
        Call::AllGather,
        bytes,
        (cli.iters / 10).max(5),
    )
}

/// `base` with the links' step, byte and latency solved from `m` and the
/// all-gather's `exchange` seconds per call, measured on `shape`.
fn solve(base: CostParams, m: &Measured, exchange: f64, shape: &Shape) -> CostParams {
    let fit = Fit {
        shape: *shape,
        base,
        tcp: true,
    };
    let (alpha, one_way) = fit.solve(&m.small, m.large, m.big);
    let bytes = Call::AllGather.bytes_near(m.big, m.ranks);
    let mut params = CostParams {
        tcp: LinkCost {
            alpha,
            beta: one_way,
        },
        ..base
    };
    // The exchange's time depends a little on the latency, the latency's
    // calls a little on the byte: alternate.
    for _ in 0..4 {
        let latency = latency_for(&params, m, shape);
        params.tcp_latency = if latency > 0.0 { latency } else { alpha };
        let both_ways = bisect(
            |b| {
                let p = CostParams {
                    tcp: LinkCost { alpha, beta: b },
                    ..params
                };
                Call::AllGather.predict(&p, bytes, shape).unwrap_or(0.0)
            },
            exchange,
        );
        params.tcp.beta = geometric_mean([one_way, both_ways].into_iter());
    }
    params
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solves_back_the_links_of_two_hosts_of_two_ranks() {
        // Four ranks, two a host: the calls mix shared memory and tcp, and
        // the fit keeps the shared memory's parameters it was given.
        let (ranks, slot) = (4, 1 << 16);
        let shape = Shape::new(ranks, 2, slot);
        let truth = CostParams {
            cores: 2,
            wake: 0.0,
            tcp: LinkCost {
                alpha: 12e-6,
                beta: 0.9e-9,
            },
            tcp_latency: 65e-6,
            ..CostParams::default()
        };
        let m = modelled(&truth, &shape, 64 << 16);
        let ag = Call::AllGather;
        let exchange = ag
            .predict(&truth, ag.bytes_near(m.big, ranks), &shape)
            .unwrap();
        let base = CostParams {
            tcp: LinkCost {
                alpha: 30e-6,
                beta: 0.5e-9,
            },
            tcp_latency: 40e-6,
            ..truth
        };
        let got = solve(base, &m, exchange, &shape);
        let near = |a: f64, b: f64| (a / b - 1.0).abs() < 1e-6;
        assert!(near(got.tcp.alpha, truth.tcp.alpha), "{got:?}");
        assert!(near(got.tcp.beta, truth.tcp.beta), "{got:?}");
        assert!(near(got.tcp_latency, truth.tcp_latency), "{got:?}");
        assert_eq!(got.shm, truth.shm);
        // An exchange twice as slow as the model says moves the byte half
        // as much as the exchange alone would (the geometric mean with the
        // broadcast's): by the square root of what its round between hosts
        // must take more, its round inside the hosts unchanged.
        let slow = solve(base, &m, 2.0 * exchange, &shape);
        let moved = slow.tcp.beta / truth.tcp.beta;
        assert!(moved > 2f64.sqrt() && moved < 2.0, "{moved}");
    }
}
