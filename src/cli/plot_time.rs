//! `softroce plot --time CSV`: each flow's rate over time, one panel per run (e.g. a congestion
//! experiment with and without DCQCN, bench/cc-experiment.sh), drawn as SVG by plotters. The
//! CSV has a header naming at least the columns `run`, `flow`, `t_s` and `mbps`, in any order;
//! one row per flow per sample.

use std::collections::BTreeMap;
use std::path::Path;

use plotters::prelude::*;

use super::CliError;

/// The rows of one run: flow -> (seconds, Mb/s), in file order.
type Run = BTreeMap<String, Vec<(f64, f64)>>;

/// Parses the CSV (see the module documentation); runs in order of first appearance.
pub fn parse(origin: &str, text: &str) -> Result<Vec<(String, Run)>, CliError> {
    let bad = |m: String| CliError::Usage(format!("{origin}: {m}"));
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines
        .next()
        .ok_or_else(|| bad("empty; want a CSV with the columns run,flow,t_s,mbps".into()))?;
    let cols: Vec<&str> = header.split(',').map(str::trim).collect();
    let col = |name: &str| {
        cols.iter().position(|c| *c == name).ok_or_else(|| {
            bad(format!(
                "the header has no column {name} (want run, flow, t_s and mbps)"
            ))
        })
    };
    let (run, flow, t, mbps) = (col("run")?, col("flow")?, col("t_s")?, col("mbps")?);
    let mut runs: Vec<(String, Run)> = Vec::new();
    for (n, line) in lines {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let field = |i: usize| {
            f.get(i)
                .copied()
                .ok_or_else(|| bad(format!("line {}: {} fields", n + 1, f.len())))
        };
        let num = |i: usize| -> Result<f64, CliError> {
            let s = field(i)?;
            s.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| bad(format!("line {}: '{s}' is not a number", n + 1)))
        };
        let (r, fl, x, y) = (field(run)?, field(flow)?, num(t)?, num(mbps)?);
        let i = match runs.iter().position(|(name, _)| name == r) {
            Some(i) => i,
            None => {
                runs.push((r.to_string(), Run::new()));
                runs.len() - 1
            }
        };
        runs[i].1.entry(fl.to_string()).or_default().push((x, y));
    }
    if runs.is_empty() {
        return Err(bad("no rows after the header".into()));
    }
    Ok(runs)
}

/// Draws one panel per run, one line per flow, on shared axes.
pub fn draw(out: &Path, runs: &[(String, Run)]) -> Result<(), CliError> {
    let draw_err = |e: DrawingAreaErrorKind<std::io::Error>| {
        CliError::Failed(format!("cannot write the plot to {}: {e}", out.display()))
    };
    let points = || runs.iter().flat_map(|(_, r)| r.values().flatten());
    let t_max = points().map(|p| p.0).fold(0.0, f64::max).max(1e-3);
    let y_max = points().map(|p| p.1).fold(0.0, f64::max).max(1e-3) * 1.1;
    let root = SVGBackend::new(out, (960, 360 * runs.len() as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err)?;
    for (area, (name, flows)) in root.split_evenly((runs.len(), 1)).iter().zip(runs) {
        let mut chart = ChartBuilder::on(area)
            .caption(format!("Rate per flow: {name}"), ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..t_max, 0.0..y_max)
            .map_err(draw_err)?;
        chart
            .configure_mesh()
            .x_desc("time [s]")
            .y_desc("rate [Mb/s]")
            .draw()
            .map_err(draw_err)?;
        for (i, (flow, pts)) in flows.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
                .map_err(draw_err)?
                .label(flow.as_str())
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(draw_err)?;
    }
    root.present().map_err(draw_err)
}

/// `softroce plot --time CSV -o FILE.svg` (the output's name already checked by `plot::run`).
pub fn run(csv: &str, out: &str) -> Result<(), CliError> {
    let bytes = std::fs::read(csv).map_err(|err| CliError::Open {
        path: csv.to_string(),
        err,
    })?;
    let text = String::from_utf8(bytes)
        .map_err(|_| CliError::Usage(format!("{csv}: not a CSV file (it is not text)")))?;
    draw(Path::new(out), &parse(csv, &text)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_grouped_by_run_and_flow_in_any_column_order() {
        let text = "t_s,run,flow,mbps,extra\n0.1,none,q1,10,x\n0.1,none,q2,20,x\n\
                    0.2,none,q1,11,x\n0.1,dcqcn,q1,5,x\n";
        let runs = parse("f", text).unwrap();
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].0, "none");
        assert_eq!(runs[0].1["q1"], vec![(0.1, 10.0), (0.2, 11.0)]);
        assert_eq!(runs[0].1["q2"], vec![(0.1, 20.0)]);
        assert_eq!(runs[1].1["q1"], vec![(0.1, 5.0)]);
        let e = parse("f", "run,flow,mbps\n").unwrap_err().to_string();
        assert!(e.contains("f: the header has no column t_s"), "{e}");
        let e = parse("f", "run,flow,t_s,mbps\na,b,0.1,fast\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2: 'fast' is not a number"), "{e}");
        assert!(parse("f", "run,flow,t_s,mbps\n").is_err());
        assert!(parse("f", "").is_err());
    }

    #[test]
    fn draws_an_svg_with_a_panel_per_run() {
        let dir = std::env::temp_dir().join(format!("softroce-plot-time-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("t.svg");
        let runs = parse(
            "f",
            "run,flow,t_s,mbps\nnone,q1,0,1\nnone,q1,1,2\ndcqcn,q1,0,3\n",
        )
        .unwrap();
        draw(&out, &runs).unwrap();
        let svg = std::fs::read_to_string(&out).unwrap();
        assert!(svg.contains("Rate per flow: none") && svg.contains("Rate per flow: dcqcn"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
