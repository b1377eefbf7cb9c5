//! `softroce plot` and `softroce perf ... --plot`: bandwidth and message rate against message
//! size (log2 axis), one line per run with a legend naming each, drawn as SVG by plotters.
//! Runs are read from the JSON lines `softroce perf --json` prints (one per size under -a).

use std::path::Path;

use clap::Args;
use plotters::prelude::*;

use super::CliError;

/// The options of `softroce plot`.
#[derive(Debug, Clone, Args)]
pub struct PlotArgs {
    /// The SVG file to write.
    #[arg(short = 'o', long = "out", value_name = "FILE.svg")]
    pub out: String,
    /// Runs to draw: FILE or FILE=LABEL, each FILE the `--json` output of one `softroce perf`
    /// run (the label defaults to the file name).
    #[arg(required_unless_present = "time", value_name = "FILE[=LABEL]")]
    pub runs: Vec<String>,
    /// Instead: rates over time from a CSV with the columns run, flow, t_s and mbps (as
    /// bench/cc-experiment.sh writes), one panel per run, one line per flow.
    #[arg(long, value_name = "CSV", conflicts_with = "runs")]
    pub time: Option<String>,
}

/// One line of the picture: a run's rows.
#[derive(Debug, Clone)]
pub struct Series {
    /// The legend entry.
    pub label: String,
    /// (message size in bytes, average bandwidth in MB/s (2^20), message rate in Mpps),
    /// sorted by size.
    pub points: Vec<(u64, f64, f64)>,
}

impl Series {
    /// Reads the rows of `--json` output: lines with `bytes`, `bw_avg_mibps` and
    /// `msg_rate_mpps`; other JSON lines are skipped. `origin` names the input in errors.
    pub fn from_json_lines(label: &str, origin: &str, text: &str) -> Result<Series, CliError> {
        let mut points = Vec::new();
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let v: serde_json::Value = serde_json::from_str(line).map_err(|e| {
                CliError::Usage(format!(
                    "{origin}: not a JSON-lines file of `softroce perf --json` results (line {}: {e})",
                    n + 1
                ))
            })?;
            if let (Some(size), Some(bw), Some(rate)) = (
                v["bytes"].as_u64(),
                v["bw_avg_mibps"].as_f64(),
                v["msg_rate_mpps"].as_f64(),
            ) {
                if size > 0 && bw.is_finite() && rate.is_finite() {
                    points.push((size, bw, rate));
                }
            }
        }
        if points.is_empty() {
            return Err(CliError::Usage(format!(
                "{origin}: no bandwidth rows (lines with bytes, bw_avg_mibps and msg_rate_mpps, as `softroce perf ... --json` prints)"
            )));
        }
        points.sort_by_key(|p| p.0);
        Ok(Series {
            label: label.to_string(),
            points,
        })
    }
}

/// "2", "1K", "8M": the x axis labels.
fn size_label(log2: f64) -> String {
    let b = 2f64.powf(log2.round()) as u64;
    match b {
        b if b >= 1 << 20 => format!("{}M", b >> 20),
        b if b >= 1 << 10 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

/// Checks, before any work, that `out` can be created: its directory exists and is a
/// directory (so that a run is not lost to a typo in the path at its very end).
pub fn check_output(out: &Path) -> Result<(), CliError> {
    let dir = match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(CliError::Usage(format!(
            "cannot write the plot to {}: the directory {} does not exist",
            out.display(),
            dir.display()
        )));
    }
    if out.is_dir() {
        return Err(CliError::Usage(format!(
            "cannot write the plot to {}: it is a directory",
            out.display()
        )));
    }
    Ok(())
}

/// Draws bandwidth (top) and message rate (bottom) against message size to `out`.
pub fn draw(out: &Path, series: &[Series]) -> Result<(), CliError> {
    let draw_err = |e: DrawingAreaErrorKind<std::io::Error>| {
        CliError::Failed(format!("cannot write the plot to {}: {e}", out.display()))
    };
    let root = SVGBackend::new(out, (960, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err)?;
    let panels = root.split_evenly((2, 1));
    let lo = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| (p.0 as f64).log2()))
        .fold(f64::INFINITY, f64::min);
    let hi = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| (p.0 as f64).log2()))
        .fold(f64::NEG_INFINITY, f64::max);
    let (lo, hi) = if lo < hi {
        (lo, hi)
    } else {
        (lo - 1.0, lo + 1.0)
    };
    type Pick = fn(&(u64, f64, f64)) -> f64;
    // Bandwidth grows with size and message rate falls: each legend where its lines are low.
    let figures: [(&str, &str, Pick, SeriesLabelPosition); 2] = [
        (
            "Bandwidth by message size",
            "BW average [MB/s]",
            |p| p.1,
            SeriesLabelPosition::UpperLeft,
        ),
        (
            "Message rate by message size",
            "Message rate [Mpps]",
            |p| p.2,
            SeriesLabelPosition::UpperRight,
        ),
    ];
    for (area, (caption, y_desc, pick, legend_at)) in panels.iter().zip(figures) {
        let top = series
            .iter()
            .flat_map(|s| s.points.iter().map(pick))
            .fold(0.0, f64::max)
            .max(1e-9)
            * 1.1;
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(lo..hi, 0.0..top)
            .map_err(draw_err)?;
        chart
            .configure_mesh()
            .x_desc("message size [bytes] (log2)")
            .y_desc(y_desc)
            .x_labels((hi - lo) as usize + 1)
            .x_label_formatter(&|x| size_label(*x))
            .draw()
            .map_err(draw_err)?;
        for (i, s) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    s.points.iter().map(|p| ((p.0 as f64).log2(), pick(p))),
                    color.stroke_width(2),
                ))
                .map_err(draw_err)?
                .label(s.label.as_str())
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(legend_at)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(draw_err)?;
    }
    root.present().map_err(draw_err)
}

/// Runs `softroce plot`.
pub fn run(args: &PlotArgs) -> Result<(), CliError> {
    check_output(Path::new(&args.out))?;
    if let Some(csv) = &args.time {
        return super::plot_time::run(csv, &args.out);
    }
    let mut series = Vec::new();
    for r in &args.runs {
        let (path, label) = match r.split_once('=') {
            Some((p, l)) => (p, l.to_string()),
            None => (
                r.as_str(),
                Path::new(r)
                    .file_stem()
                    .map_or(r.clone(), |s| s.to_string_lossy().into_owned()),
            ),
        };
        let bytes = std::fs::read(path).map_err(|err| CliError::Open {
            path: path.to_string(),
            err,
        })?;
        let text = String::from_utf8(bytes).map_err(|_| {
            CliError::Usage(format!(
                "{path}: not a JSON-lines file of `softroce perf --json` results (it is not text)"
            ))
        })?;
        series.push(Series::from_json_lines(&label, path, &text)?);
    }
    draw(Path::new(&args.out), &series)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_read_sorted_and_other_lines_skipped() {
        let text = "{\"bytes\":4,\"bw_avg_mibps\":2.0,\"msg_rate_mpps\":0.5}\n\
                    {\"lat\":true}\n\
                    {\"bytes\":2,\"bw_avg_mibps\":1.0,\"msg_rate_mpps\":0.5}\n";
        let s = Series::from_json_lines("run", "f", text).unwrap();
        assert_eq!(s.points, vec![(2, 1.0, 0.5), (4, 2.0, 0.5)]);
        assert!(Series::from_json_lines("x", "f", "{\"lat\":true}").is_err());
        let e = Series::from_json_lines("x", "f", "not json").unwrap_err();
        assert!(e.to_string().starts_with("f: not a JSON-lines file"), "{e}");
        assert_eq!(size_label(10.0), "1K");
        assert_eq!(size_label(23.0), "8M");
        assert_eq!(size_label(1.0), "2");
    }
}
