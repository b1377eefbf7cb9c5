//! `softroce plot`: the picture of several `softroce perf --json` runs.

use std::process::Command;

#[test]
fn plot_draws_one_line_per_run_with_its_label_in_both_panels() {
    let dir = std::env::temp_dir().join(format!("softroce-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let row = |size: u64, bw: f64| {
        format!(
            "{{\"bytes\":{size},\"bw_avg_mibps\":{bw},\"msg_rate_mpps\":{}}}\n",
            bw / size as f64
        )
    };
    let a = dir.join("a.jsonl");
    let b = dir.join("b.jsonl");
    std::fs::write(
        &a,
        (1..24)
            .map(|i| row(1 << i, i as f64 * 10.0))
            .collect::<String>(),
    )
    .unwrap();
    std::fs::write(
        &b,
        (1..12)
            .map(|i| row(1 << i, i as f64 * 3.0))
            .collect::<String>(),
    )
    .unwrap();
    let svg = dir.join("out.svg");
    let out = Command::new(env!("CARGO_BIN_EXE_softroce"))
        .arg("plot")
        .arg("-o")
        .arg(&svg)
        .arg(format!("{}=softroce loopback", a.display()))
        .arg(format!("{}=TCP baseline", b.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg"));
    // Each label once per panel's legend; two panels, two lines each.
    assert_eq!(text.matches("softroce loopback").count(), 2, "{text}");
    assert_eq!(text.matches("TCP baseline").count(), 2);
    assert_eq!(
        text.lines()
            .filter(|l| l.contains("stroke-width=\"2\" points=") && l.matches(',').count() > 2)
            .count(),
        4
    );
    assert!(text.contains("Bandwidth by message size") && text.contains("Message rate"));
    assert!(text.contains(">\n8M\n<") || text.contains("8M"));

    // A file without bandwidth rows is refused by name.
    let bad = dir.join("lat.jsonl");
    std::fs::write(&bad, "{\"lat\":true}\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_softroce"))
        .arg("plot")
        .arg("-o")
        .arg(dir.join("bad.svg"))
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no bandwidth rows"));
    let _ = std::fs::remove_dir_all(&dir);
}
