//! `--plot file.svg` for the sendrecv sweep: latency and bandwidth curves.
//!
//! Left: one-way latency p50 and p99 against message size (log-log);
//! right: unidirectional bandwidth against message size (log x), with the
//! machine's memcpy bandwidth (and raw tcp, where measured) as horizontal
//! references. Eager and rendezvous points are drawn in different colours,
//! so the protocol switch is visible where the curves bend.

use plotters::prelude::*;

use crate::error::Fallible;
use crate::p2p::P2pRow;

const EAGER: RGBColor = RGBColor(31, 119, 180);
const RENDEZVOUS: RGBColor = RGBColor(214, 39, 40);

/// Writes the two charts of `rows` to `path`; `refs` are labelled
/// horizontal lines on the bandwidth chart (GB/s).
///
/// # Errors
/// When the rows are empty or the file cannot be written.
pub(crate) fn write_svg(path: &str, rows: &[P2pRow], refs: &[(&str, f64)]) -> Fallible<()> {
    if rows.is_empty() {
        return Err("--plot: no rows to plot".into());
    }
    draw(path, rows, refs).map_err(|e| format!("--plot {path}: {e}"))
}

fn color(row: &P2pRow) -> RGBColor {
    if row.protocol == "rendezvous" {
        RENDEZVOUS
    } else {
        EAGER
    }
}

fn draw(
    path: &str,
    rows: &[P2pRow],
    refs: &[(&str, f64)],
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (1200, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(600);
    let xmin = rows.iter().map(|r| r.bytes.max(1)).min().unwrap_or(1) as f64;
    let xmax = (rows.iter().map(|r| r.bytes.max(1)).max().unwrap_or(2) as f64).max(xmin * 2.0);

    let lat = |r: &P2pRow| r.latency.p50.max(1e-3);
    let lat99 = |r: &P2pRow| r.latency.p99.max(1e-3);
    let lmin = rows.iter().map(lat).fold(f64::MAX, f64::min) / 1.5;
    let lmax = rows.iter().map(lat99).fold(0.0, f64::max) * 1.5;
    let mut chart = ChartBuilder::on(&left)
        .caption("sendrecv one-way latency (us)", ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((xmin..xmax).log_scale(), (lmin..lmax).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("message bytes")
        .y_desc("us")
        .draw()?;
    for (name, f, style) in [
        (
            "p50",
            &lat as &dyn Fn(&P2pRow) -> f64,
            BLACK.stroke_width(2),
        ),
        ("p99", &lat99, BLACK.mix(0.4).stroke_width(1)),
    ] {
        chart
            .draw_series(LineSeries::new(
                rows.iter().map(|r| (r.bytes.max(1) as f64, f(r))),
                style,
            ))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        chart.draw_series(
            rows.iter()
                .map(|r| Circle::new((r.bytes.max(1) as f64, f(r)), 3, color(r).filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;

    let bw = |r: &P2pRow| r.bandwidth_gbps.max(1e-6);
    let bmax = rows
        .iter()
        .map(bw)
        .chain(refs.iter().map(|r| r.1))
        .fold(0.0, f64::max)
        * 1.15;
    let mut chart = ChartBuilder::on(&right)
        .caption(
            "unidirectional bandwidth (GB/s); blue eager, red rendezvous",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((xmin..xmax).log_scale(), 0.0..bmax)?;
    chart
        .configure_mesh()
        .x_desc("message bytes")
        .y_desc("GB/s")
        .draw()?;
    chart.draw_series(LineSeries::new(
        rows.iter().map(|r| (r.bytes.max(1) as f64, bw(r))),
        BLACK.stroke_width(2),
    ))?;
    chart.draw_series(
        rows.iter()
            .map(|r| Circle::new((r.bytes.max(1) as f64, bw(r)), 3, color(r).filled())),
    )?;
    for (i, (name, value)) in refs.iter().enumerate() {
        let style = Palette99::pick(i + 2).stroke_width(1);
        chart
            .draw_series(LineSeries::new(vec![(xmin, *value), (xmax, *value)], style))?
            .label(format!("{name} {value:.2} GB/s"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Percentiles;

    #[test]
    fn writes_an_svg_with_both_charts() {
        let rows: Vec<P2pRow> = (0..12)
            .map(|i| P2pRow {
                bytes: 1 << (2 * i),
                protocol: if i > 8 { "rendezvous" } else { "eager" },
                latency_iters: 10,
                latency: Percentiles::from_array([1.0 + i as f64, 2.0 + i as f64, 3.0, 4.0]),
                window: 4,
                windows: 2,
                bandwidth_gbps: 0.1 * i as f64,
                per_channel_gbps: None,
                wrong: 0,
            })
            .collect();
        let path = std::env::temp_dir().join(format!("streamcomm-plot-{}.svg", std::process::id()));
        let path = path.to_str().unwrap();
        write_svg(path, &rows, &[("memcpy", 5.0)]).unwrap();
        let svg = std::fs::read_to_string(path).unwrap();
        std::fs::remove_file(path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..60.min(svg.len())]);
        assert!(svg.contains("sendrecv one-way latency"));
        assert!(svg.contains("memcpy 5.00 GB/s"));
        assert!(svg.matches("<circle").count() >= 36, "points drawn");
        assert!(write_svg(path, &[], &[]).is_err());
    }
}
