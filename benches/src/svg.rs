//! A minimal SVG line chart: log-log panels in a grid, one polyline per
//! series, a legend per panel. Enough for the model's plot without pulling
//! a plotting library into the workspace.

/// One line of a panel.
pub struct Series {
    /// Legend text.
    pub name: String,
    /// `(x, y)` points, both positive (log scales).
    pub points: Vec<(f64, f64)>,
}

/// One chart.
pub struct Panel {
    /// Title above the chart.
    pub title: String,
    /// Its lines.
    pub series: Vec<Series>,
}

const W: f64 = 420.0;
const H: f64 = 300.0;
const MARGIN: (f64, f64, f64, f64) = (60.0, 20.0, 30.0, 40.0); // left, right, top, bottom
const COLORS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];

/// The SVG document: `panels` in rows of `per_row`.
pub fn render(title: &str, panels: &[Panel], per_row: usize) -> String {
    let rows = panels.len().div_ceil(per_row.max(1));
    let (width, height) = (W * per_row as f64, H * rows as f64 + 30.0);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"11\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">{}</text>\n",
        width / 2.0,
        escape(title)
    );
    for (i, p) in panels.iter().enumerate() {
        let (col, row) = (i % per_row, i / per_row);
        s.push_str(&panel(p, col as f64 * W, 30.0 + row as f64 * H));
    }
    s.push_str("</svg>\n");
    s
}

fn panel(p: &Panel, x0: f64, y0: f64) -> String {
    let all = p.series.iter().flat_map(|s| s.points.iter());
    let (mut xmin, mut xmax, mut ymin, mut ymax) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in all {
        if x > 0.0 && y > 0.0 {
            xmin = xmin.min(x.log10());
            xmax = xmax.max(x.log10());
            ymin = ymin.min(y.log10());
            ymax = ymax.max(y.log10());
        }
    }
    if xmin > xmax {
        return String::new();
    }
    let (ymin, ymax) = (ymin.floor(), ymax.ceil().max(ymin.floor() + 1.0));
    let (l, r, t, b) = MARGIN;
    let (pw, ph) = (W - l - r, H - t - b);
    let px = |x: f64| x0 + l + (x.log10() - xmin) / (xmax - xmin).max(1e-9) * pw;
    let py = |y: f64| y0 + t + ph - (y.log10() - ymin) / (ymax - ymin) * ph;
    let mut s = format!(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"12\">{}</text>\n\
         <rect x=\"{}\" y=\"{}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"#888\"/>\n",
        x0 + l + pw / 2.0,
        y0 + t - 8.0,
        escape(&p.title),
        x0 + l,
        y0 + t
    );
    // Decade ticks on y, every 2^10 on x.
    let mut e = ymin as i32;
    while e as f64 <= ymax {
        let y = py(10f64.powi(e));
        s.push_str(&format!(
            "<line x1=\"{}\" x2=\"{}\" y1=\"{y}\" y2=\"{y}\" stroke=\"#eee\"/>\
             <text x=\"{}\" y=\"{}\" text-anchor=\"end\">1e{e}</text>\n",
            x0 + l,
            x0 + l + pw,
            x0 + l - 4.0,
            y + 4.0
        ));
        e += 1;
    }
    for (v, label) in [
        (8.0f64, "8B"),
        (1024.0, "1K"),
        (1048576.0, "1M"),
        (1073741824.0, "1G"),
    ] {
        if v.log10() >= xmin - 1e-9 && v.log10() <= xmax + 1e-9 {
            let x = px(v);
            s.push_str(&format!(
                "<line x1=\"{x}\" x2=\"{x}\" y1=\"{}\" y2=\"{}\" stroke=\"#eee\"/>\
                 <text x=\"{x}\" y=\"{}\" text-anchor=\"middle\">{label}</text>\n",
                y0 + t,
                y0 + t + ph,
                y0 + t + ph + 14.0
            ));
        }
    }
    for (i, series) in p.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<String> = series
            .points
            .iter()
            .filter(|(x, y)| *x > 0.0 && *y > 0.0)
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        s.push_str(&format!(
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.8\" points=\"{}\"/>\n\
             <text x=\"{}\" y=\"{}\" fill=\"{color}\">{}</text>\n",
            pts.join(" "),
            x0 + l + 6.0,
            y0 + t + 14.0 + 13.0 * i as f64,
            escape(&series.name)
        ));
    }
    s
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_panels_and_series() {
        let p = Panel {
            title: "a<b".into(),
            series: vec![Series {
                name: "ring".into(),
                points: vec![(8.0, 1.0), (1024.0, 10.0), (1e6, 1000.0)],
            }],
        };
        let svg = render("t", &[p], 1);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("a&lt;b") && svg.contains("<polyline") && svg.contains(">ring<"));
    }
}
