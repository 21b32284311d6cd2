//! The handoff chart: latency CDFs on a log axis, as a standalone SVG.

use std::fmt::Write as _;

use crate::measure::percentile;

/// A CDF of latency samples on a log axis, as a standalone SVG.
pub fn cdf_svg(series: &[(&str, &str, &[f64])]) -> String {
    let (width, height, left, bottom, top, right) = (720.0, 360.0, 60.0, 40.0, 30.0, 20.0);
    // The legend goes under the plot, one row per series, clear of the curves.
    #[allow(clippy::cast_precision_loss)]
    let total_height = height + 16.0 * series.len() as f64 + 8.0;
    let all = series.iter().flat_map(|(_, _, s)| s.iter().copied());
    let lo = all
        .clone()
        .fold(f64::INFINITY, f64::min)
        .max(1.0)
        .log10()
        .floor();
    let hi = all.fold(1.0, f64::max).log10().ceil().max(lo + 1.0);
    let x_of = |us: f64| left + (us.max(1.0).log10() - lo) / (hi - lo) * (width - left - right);
    let y_of = |q: f64| top + (1.0 - q) * (height - top - bottom);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{total_height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{left}\" y=\"18\" font-size=\"14\">Handoff: release call to next holder (CDF; 4 contenders, the raw floor 1 waiter)</text>\n"
    );
    #[allow(clippy::cast_possible_truncation)]
    for decade in (lo as i32)..=(hi as i32) {
        let us = 10f64.powi(decade);
        let label = if us >= 1000.0 {
            format!("{} ms", us / 1000.0)
        } else {
            format!("{us} µs")
        };
        let _ = writeln!(
            svg,
            "<line x1=\"{0:.1}\" y1=\"{1}\" x2=\"{0:.1}\" y2=\"{2}\" stroke=\"#ddd\"/><text x=\"{0:.1}\" y=\"{3}\" text-anchor=\"middle\">{label}</text>",
            x_of(us),
            top,
            height - bottom,
            height - bottom + 16.0
        );
    }
    for q in [0.0, 0.5, 1.0] {
        let _ = writeln!(
            svg,
            "<line x1=\"{left}\" y1=\"{0:.1}\" x2=\"{1}\" y2=\"{0:.1}\" stroke=\"#ddd\"/><text x=\"{2}\" y=\"{3:.1}\" text-anchor=\"end\">{q}</text>",
            y_of(q),
            width - right,
            left - 6.0,
            y_of(q) + 4.0
        );
    }
    for (i, (name, colour, samples)) in series.iter().enumerate() {
        let mut points = String::new();
        #[allow(clippy::cast_precision_loss)]
        let n = samples.len().max(1) as f64;
        for (k, us) in samples.iter().enumerate() {
            #[allow(clippy::cast_precision_loss)]
            let q = (k + 1) as f64 / n;
            let _ = write!(points, "{:.1},{:.1} ", x_of(*us), y_of(q));
        }
        #[allow(clippy::cast_precision_loss)]
        let ly = height + 6.0 + 16.0 * i as f64;
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{points}\"/>\n\
             <rect x=\"{0}\" y=\"{1:.1}\" width=\"12\" height=\"3\" fill=\"{colour}\"/><text x=\"{2}\" y=\"{3:.1}\">{name} (p50 {4:.0} µs)</text>",
            left,
            ly - 4.0,
            left + 18.0,
            ly,
            percentile(samples, 0.5)
        );
    }
    svg.push_str("</svg>\n");
    svg
}
