//! A grid of log-log line charts under one title: one panel per chart, one
//! line per series, a legend per panel. The cost model's plot draws its
//! predicted times with it.

use plotters::coord::Shift;
use plotters::prelude::*;

/// One line of a panel.
pub(crate) struct Series {
    /// Legend text.
    pub name: String,
    /// `(x, y)` points; only those with both positive are drawn (log scales).
    pub points: Vec<(f64, f64)>,
}

/// One chart.
pub(crate) struct Panel {
    /// Title above the chart.
    pub title: String,
    /// Its lines.
    pub series: Vec<Series>,
}

/// Size of one panel, pixels.
const PANEL: (u32, u32) = (420, 300);
/// Height of the title above the grid, pixels.
const TITLE: u32 = 30;
const COLORS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];

/// The SVG document: `title` above `panels` in rows of `per_row`, x (bytes)
/// and y both on log scales. A panel without a positive point stays empty.
///
/// # Errors
/// When plotters cannot draw (its message).
pub(crate) fn render(title: &str, panels: &[Panel], per_row: usize) -> Result<String, String> {
    let per_row = per_row.max(1);
    let rows = panels.len().div_ceil(per_row).max(1);
    let size = (PANEL.0 * per_row as u32, PANEL.1 * rows as u32 + TITLE);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        draw(&root, title, panels, (rows, per_row)).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    panels: &[Panel],
    grid: (usize, usize),
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let (top, body) = root.split_vertically(TITLE);
    top.titled(title, ("sans-serif", 17))?;
    for (area, panel) in body.split_evenly(grid).iter().zip(panels) {
        draw_panel(area, panel)?;
    }
    Ok(())
}

/// The x and y ranges of the panel's positive points, widened to whole
/// decades on y; `None` when it has none.
fn ranges(panel: &Panel) -> Option<((f64, f64), (f64, f64))> {
    let points = panel
        .series
        .iter()
        .flat_map(|s| s.points.iter())
        .filter(|(x, y)| *x > 0.0 && *y > 0.0);
    let (mut xmin, mut xmax, mut ymin, mut ymax) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in points {
        (xmin, xmax) = (xmin.min(x), xmax.max(x));
        (ymin, ymax) = (ymin.min(y), ymax.max(y));
    }
    if xmin > xmax {
        return None;
    }
    let low = 10f64.powf(ymin.log10().floor());
    let high = 10f64.powf(ymax.log10().ceil()).max(low * 10.0);
    Some(((xmin, xmax.max(xmin * 2.0)), (low, high)))
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let Some(((xmin, xmax), (ymin, ymax))) = ranges(panel) else {
        return Ok(());
    };
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 15))
        .margin(8)
        .x_label_area_size(24)
        .y_label_area_size(48)
        .build_cartesian_2d((xmin..xmax).log_scale(), (ymin..ymax).log_scale())?;
    chart
        .configure_mesh()
        .x_label_formatter(&|x| bytes_label(*x))
        .y_label_formatter(&|y| format!("{y:e}"))
        .label_style(("sans-serif", 13))
        .draw()?;
    for (i, series) in panel.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let style = color.stroke_width(2);
        chart
            .draw_series(LineSeries::new(
                series
                    .points
                    .iter()
                    .copied()
                    .filter(|(x, y)| *x > 0.0 && *y > 0.0),
                style,
            ))?
            .label(series.name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 13))
        .border_style(BLACK.mix(0.3))
        .background_style(WHITE.mix(0.8))
        .draw()?;
    Ok(())
}

/// A byte count as a short axis label in decimal units, as the log scale's
/// ticks are powers of ten: `8B`, `100B`, `1kB`, `10MB`, `1.5GB`.
fn bytes_label(bytes: f64) -> String {
    let units = [(1e9, "GB"), (1e6, "MB"), (1e3, "kB")];
    let (value, unit) = units
        .iter()
        .find(|(size, _)| bytes >= *size)
        .map_or((bytes, "B"), |&(size, unit)| (bytes / size, unit));
    if (value - value.round()).abs() < 0.05 {
        format!("{value:.0}{unit}")
    } else {
        format!("{value:.1}{unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn panel(title: &str, series: &[(&str, &[(f64, f64)])]) -> Panel {
        Panel {
            title: title.into(),
            series: series
                .iter()
                .map(|(name, points)| Series {
                    name: name.to_string(),
                    points: points.to_vec(),
                })
                .collect(),
        }
    }

    /// The contents of the SVG's `<text>` elements, trimmed.
    fn texts(svg: &str) -> Vec<&str> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                t.split_once('>')
                    .and_then(|(_, rest)| rest.split_once("</text>"))
            })
            .map(|(text, _)| text.trim())
            .collect()
    }

    #[test]
    fn renders_panels_and_series() {
        let line: &[(f64, f64)] = &[(8.0, 1.0), (1024.0, 10.0), (1e6, 1000.0)];
        let panels = [
            panel(
                "a<b",
                &[("ring", line), ("tree", &[(8.0, 2.0), (1e6, 30.0)])],
            ),
            panel("second", &[("chain", line)]),
            // Nothing positive: an empty panel, not an error.
            panel("empty", &[("none", &[(0.0, 1.0), (8.0, 0.0)])]),
        ];
        let svg = render("model <title>", &panels, 2).expect("render");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        let texts = texts(&svg);
        for text in [
            "model &lt;title&gt;",
            "a&lt;b",
            "second",
            "ring",
            "tree",
            "chain",
        ] {
            assert!(texts.contains(&text), "{text:?} missing from {texts:?}");
        }
        assert!(!texts.contains(&"none"), "the empty panel has no legend");
        // A line per series, plus one per legend entry.
        assert!(svg.matches("<polyline").count() >= 3, "{svg}");
        // Two panels a row, two rows.
        assert!(svg.contains("width=\"840\"") && svg.contains("height=\"630\""));
    }

    #[test]
    fn byte_labels() {
        assert_eq!(bytes_label(8.0), "8B");
        assert_eq!(bytes_label(100.0), "100B");
        assert_eq!(bytes_label(1000.0), "1kB");
        assert_eq!(bytes_label(1e7), "10MB");
        assert_eq!(bytes_label(1.5e9), "1.5GB");
    }
}
