//! PNG plots for the report, drawn with `plotters` (bitmap backend; the DejaVu Sans font is
//! embedded, so nothing is needed from the system).

use plotters::prelude::*;
use std::path::Path;

const WIDTH: u32 = 1000;
const HEIGHT: u32 = 560;
const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Registers the embedded font under the family name the plots use.
pub fn init() {
    plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
        .unwrap_or_else(|_| panic!("the embedded DejaVu Sans font does not load"));
}

/// One series of a plot: a name and one value per group (or x), `None` where not measured.
pub struct Series<'a> {
    /// The legend's text.
    pub name: &'a str,
    /// Values in ns.
    pub values: Vec<Option<f64>>,
}

/// Log-scale range covering every value, widened to whole decades.
fn decades(series: &[Series]) -> (f64, f64) {
    let (lo, hi) = series
        .iter()
        .flat_map(|s| s.values.iter().flatten())
        .fold((f64::MAX, f64::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    if lo > hi {
        return (1.0, 10.0);
    }
    (
        10f64.powf(lo.max(1e-3).log10().floor()),
        10f64.powf(hi.max(1e-3).log10().ceil().max(lo.log10().floor() + 1.0)),
    )
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// A grouped bar chart with a logarithmic ns axis: one cluster per group, one bar per series.
pub fn bars(path: &Path, title: &str, groups: &[&str], series: &[Series]) -> DrawResult {
    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let (lo, hi) = decades(series);
    // A decade of headroom keeps the legend clear of the bars.
    let hi = hi * 10.0;
    let n = groups.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(72)
        .build_cartesian_2d(0f64..n, (lo..hi).log_scale())?;
    let names = groups.to_vec();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor();
            if (x - i - 0.5).abs() < 1e-6 && i >= 0.0 {
                names
                    .get(i as usize)
                    .map_or(String::new(), |s| s.to_string())
            } else {
                String::new()
            }
        })
        .y_desc("ns per call (log scale)")
        .y_label_formatter(&|v| format_ns(*v))
        .label_style(("sans-serif", 15))
        .draw()?;
    let width = 0.8 / series.len().max(1) as f64;
    for (k, s) in series.iter().enumerate() {
        let color = PALETTE[k % PALETTE.len()];
        let rects = s.values.iter().enumerate().filter_map(|(g, v)| {
            let v = (*v)?;
            let x0 = g as f64 + 0.1 + k as f64 * width;
            Some(Rectangle::new(
                [(x0, lo), (x0 + width * 0.92, v.max(lo))],
                color.filled(),
            ))
        });
        chart
            .draw_series(rects)?
            .label(s.name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
    }
    finish(&mut chart, &root)
}

/// Lines over a logarithmic x axis of byte sizes and a logarithmic ns axis.
pub fn lines(path: &Path, title: &str, sizes: &[f64], series: &[Series]) -> DrawResult {
    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let (lo, hi) = decades(series);
    let (x0, x1) = (
        sizes.iter().copied().fold(f64::MAX, f64::min) / 1.5,
        sizes.iter().copied().fold(f64::MIN, f64::max) * 1.5,
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(72)
        .build_cartesian_2d((x0..x1).log_scale(), (lo..hi).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("argument size (bytes, log scale)")
        .y_desc("ns per call (log scale)")
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| format_ns(*v))
        .label_style(("sans-serif", 15))
        .draw()?;
    for (k, s) in series.iter().enumerate() {
        let color = PALETTE[k % PALETTE.len()];
        let points: Vec<(f64, f64)> = sizes
            .iter()
            .zip(&s.values)
            .filter_map(|(&x, v)| v.map(|v| (x, v)))
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(3)))?
            .label(s.name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], color.stroke_width(3)));
        chart.draw_series(
            points
                .into_iter()
                .map(|p| Circle::new(p, 5, color.filled())),
        )?;
    }
    finish(&mut chart, &root)
}

/// Draws the legend (upper left) and writes the image.
fn finish<'a, X, Y>(
    chart: &mut ChartContext<'a, BitMapBackend<'a>, Cartesian2d<X, Y>>,
    root: &DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>,
) -> DrawResult
where
    X: Ranged,
    Y: Ranged,
{
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()?;
    root.present()?;
    Ok(())
}

fn format_ns(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.0} ms", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.0} µs", v / 1e3)
    } else if v >= 1.0 {
        format!("{v:.0} ns")
    } else {
        format!("{v:.1} ns")
    }
}
