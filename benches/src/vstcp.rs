//! The run's figures as fractions of raw TCP's, when ranks 0 and 1 talk tcp.
//!
//! Over tcp the limit is the network path, not memcpy: bus bandwidth is
//! compared with the best raw socket bandwidth measured between the same
//! two ranks in the same run (one socket, or `nchannels` in parallel, the
//! better), and the sendrecv latency with the raw 8-byte round trip — both
//! the one-way latency (what the latency line prints) and the library's
//! whole round trip. Small messages are also judged against half the
//! busy-polling raw round trip: a blocking socket pays a wake-up per read,
//! which flatters any library that spins.

use crate::latency::Latency;
use crate::rawtcp::RawTcp;
use crate::stats::fraction;
use crate::sweep::Row;

/// The comparison, as written to JSON (`vs_tcp`).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub(crate) struct VsTcp {
    /// Raw tcp bandwidth the busbw figures are divided by, GB/s.
    pub tcp_gbps: f64,
    /// Raw tcp round trip p50 the latency figures are divided by, µs.
    pub tcp_round_trip_us: f64,
    /// Size of the largest row, bytes.
    pub largest_bytes: Option<u64>,
    /// busbw of the largest row / raw tcp bandwidth.
    pub busbw_vs_tcp_at_largest: Option<f64>,
    /// Size of the row with the best busbw, bytes.
    pub best_bytes: Option<u64>,
    /// Best busbw over rows / raw tcp bandwidth.
    pub best_busbw_vs_tcp: Option<f64>,
    /// Raw tcp exchange bandwidth (both directions at once), GB/s each way.
    pub tcp_exchange_gbps: f64,
    /// busbw of the largest row / raw tcp exchange bandwidth.
    pub busbw_vs_exchange_at_largest: Option<f64>,
    /// sendrecv one-way latency p50 / raw tcp round trip p50.
    pub latency_one_way_vs_tcp_round_trip: Option<f64>,
    /// sendrecv round trip p50 (twice the one-way) / raw tcp round trip p50.
    pub latency_round_trip_vs_tcp_round_trip: Option<f64>,
    /// Raw tcp one-way time when both sides busy-poll: half the
    /// busy-polling round trip p50, µs. Small tcp messages are judged
    /// against this.
    pub tcp_busy_one_way_us: f64,
    /// sendrecv one-way p50 through streams / the busy-polling one-way.
    pub stream_one_way_vs_busy_one_way: Option<f64>,
    /// sendrecv one-way p50 with host calls / the busy-polling one-way.
    pub host_one_way_vs_busy_one_way: Option<f64>,
}

impl VsTcp {
    /// The ratios of `rows` and `latency` to `tcp`'s figures.
    pub(crate) fn new(tcp: &RawTcp, rows: &[Row], latency: Option<&Latency>) -> VsTcp {
        let largest = rows.iter().max_by_key(|r| r.bytes);
        let best = rows.iter().max_by(|a, b| a.busbw.total_cmp(&b.busbw));
        let one_way = latency.map(|l| l.one_way.p50);
        let busy_one_way = tcp.busy_round_trip_us / 2.0;
        VsTcp {
            tcp_gbps: tcp.best_gbps,
            tcp_round_trip_us: tcp.round_trip_us,
            largest_bytes: largest.map(|r| r.bytes),
            busbw_vs_tcp_at_largest: largest.map(|r| fraction(r.busbw, tcp.best_gbps)),
            best_bytes: best.map(|r| r.bytes),
            best_busbw_vs_tcp: best.map(|r| fraction(r.busbw, tcp.best_gbps)),
            tcp_exchange_gbps: tcp.exchange_gbps,
            busbw_vs_exchange_at_largest: largest.map(|r| fraction(r.busbw, tcp.exchange_gbps)),
            latency_one_way_vs_tcp_round_trip: one_way.map(|l| fraction(l, tcp.round_trip_us)),
            latency_round_trip_vs_tcp_round_trip: one_way
                .map(|l| fraction(2.0 * l, tcp.round_trip_us)),
            tcp_busy_one_way_us: busy_one_way,
            stream_one_way_vs_busy_one_way: one_way.map(|l| fraction(l, busy_one_way)),
            host_one_way_vs_busy_one_way: latency
                .map(|l| fraction(l.host_one_way.p50, busy_one_way)),
        }
    }
}

/// The header lines describing the raw tcp figures.
pub(crate) fn header_lines(tcp: &RawTcp) -> [String; 2] {
    let mut figures = format!(
        "# raw tcp between ranks 0 and 1: round trip {:.1} us (p99 {:.1} us), busy-polling {:.1} us (p99 {:.1} us), 1 socket {:.2} GB/s",
        tcp.round_trip_us,
        tcp.round_trip_p99_us,
        tcp.busy_round_trip_us,
        tcp.busy_round_trip_p99_us,
        tcp.single_socket_gbps
    );
    if tcp.sockets > 1 {
        figures += &format!(
            ", {} sockets {:.2} GB/s",
            tcp.sockets, tcp.multi_socket_gbps
        );
    }
    figures += &format!("; both ways at once {:.2} GB/s each way", tcp.exchange_gbps);
    let how = format!(
        "#   ({} round trips of {} B; {} per bandwidth run in {} writes, best of {}; rank 1 listening on {}; measured after joining, before the sweep)",
        tcp.round_trips,
        tcp.message_bytes,
        crate::cli::human_bytes(tcp.bytes),
        crate::cli::human_bytes(tcp.write_bytes as u64),
        tcp.runs,
        tcp.addr
    );
    [figures, how]
}

/// The summary lines after the table.
pub(crate) fn summary_lines(v: &VsTcp) -> Vec<String> {
    let mut lines = Vec::new();
    if let (Some(at), Some(largest), Some(best), Some(best_bytes)) = (
        v.busbw_vs_tcp_at_largest,
        v.largest_bytes,
        v.best_busbw_vs_tcp,
        v.best_bytes,
    ) {
        lines.push(format!(
            "# busbw/tcp            : {at:.3} at {} (largest size), best {best:.3} at {}, of raw tcp {:.2} GB/s",
            crate::cli::human_bytes(largest),
            crate::cli::human_bytes(best_bytes),
            v.tcp_gbps
        ));
    }
    if let (Some(x), Some(largest)) = (v.busbw_vs_exchange_at_largest, v.largest_bytes) {
        lines.push(format!(
            "# busbw/tcp exchange   : {x:.3} at {} of raw tcp both ways at once {:.2} GB/s each way",
            crate::cli::human_bytes(largest),
            v.tcp_exchange_gbps
        ));
    }
    if let (Some(one_way), Some(round_trip)) = (
        v.latency_one_way_vs_tcp_round_trip,
        v.latency_round_trip_vs_tcp_round_trip,
    ) {
        lines.push(format!(
            "# latency/tcp          : one-way p50 {one_way:.2}x raw tcp round trip ({:.1} us); sendrecv round trip (2 x one-way) {round_trip:.2}x",
            v.tcp_round_trip_us
        ));
    }
    if let (Some(streams), Some(host)) = (
        v.stream_one_way_vs_busy_one_way,
        v.host_one_way_vs_busy_one_way,
    ) {
        lines.push(format!(
            "# latency/tcp busy-poll: one-way p50 through streams {streams:.2}x, with host calls {host:.2}x the busy-polling raw tcp one-way ({:.1} us, half its round trip)",
            v.tcp_busy_one_way_us
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Percentiles;

    fn tcp() -> RawTcp {
        RawTcp {
            addr: "10.0.0.2:1234".into(),
            message_bytes: 8,
            round_trips: 100,
            round_trip_us: 20.0,
            round_trip_p99_us: 30.0,
            busy_round_trip_us: 10.0,
            busy_round_trip_p99_us: 12.0,
            bytes: 256 << 20,
            write_bytes: 1 << 20,
            runs: 2,
            single_socket_gbps: 2.0,
            sockets: 2,
            multi_socket_gbps: 4.0,
            best_gbps: 4.0,
            exchange_gbps: 2.0,
        }
    }

    fn row(bytes: u64, busbw: f64) -> Row {
        Row {
            bytes,
            count: 0,
            time_us: 1.0,
            algbw: busbw,
            busbw,
            wrong: Some(0),
            algo: None,
            predicted_us: None,
        }
    }

    #[test]
    fn ratios() {
        let rows = [row(1 << 20, 3.0), row(64 << 20, 2.0)];
        let latency = Latency {
            bytes: 8,
            iters: 10,
            one_way: Percentiles {
                p50: 15.0,
                ..Percentiles::default()
            },
            host_one_way: Percentiles {
                p50: 7.5,
                ..Percentiles::default()
            },
        };
        let v = VsTcp::new(&tcp(), &rows, Some(&latency));
        assert_eq!(v.largest_bytes, Some(64 << 20));
        assert_eq!(v.busbw_vs_tcp_at_largest, Some(0.5));
        assert_eq!(v.best_bytes, Some(1 << 20));
        assert_eq!(v.best_busbw_vs_tcp, Some(0.75));
        assert_eq!(v.latency_one_way_vs_tcp_round_trip, Some(0.75));
        assert_eq!(v.latency_round_trip_vs_tcp_round_trip, Some(1.5));
        assert_eq!(v.busbw_vs_exchange_at_largest, Some(1.0));
        assert_eq!(v.tcp_busy_one_way_us, 5.0);
        assert_eq!(v.stream_one_way_vs_busy_one_way, Some(3.0));
        assert_eq!(v.host_one_way_vs_busy_one_way, Some(1.5));
        assert_eq!(summary_lines(&v).len(), 4);
        let v = VsTcp::new(&tcp(), &[], None);
        assert!(summary_lines(&v).is_empty());
    }

    #[test]
    fn header_names_both_socket_counts() {
        let [figures, _] = header_lines(&tcp());
        assert!(
            figures.contains("1 socket 2.00 GB/s, 2 sockets 4.00 GB/s"),
            "{figures}"
        );
        let one = RawTcp {
            sockets: 1,
            ..tcp()
        };
        assert!(!header_lines(&one)[0].contains("sockets"));
    }
}
