//! How `softroce perf` prints: perftest's banners, address lines and result tables, one
//! figure per row (--output), softroce's JSON lines (--json), and perftest's --out_json file;
//! one renderer per format. What is printed is measured in `report.rs`.

use std::io::Write;

use softroce::oob::perftest::KeyMsg;

use super::params::Params;
use super::report::{to_unit, BwFigures, LatStats, Outcome, MIB};
use super::{OutputOnly, PerfOp};
use crate::cli::CliError;

/// How the report is printed, from the flags.
pub(super) struct Output<'a> {
    /// --json: one JSON line per row.
    pub(super) json: bool,
    /// --report-both.
    pub(super) report_both: bool,
    /// --out_json: perftest's JSON report written to this file.
    pub(super) out_json: Option<&'a str>,
    /// The agreed MTU in bytes.
    pub(super) mtu: u32,
    /// This end connected to the server.
    pub(super) is_client: bool,
    /// --output: one figure per row instead of the table.
    pub(super) only: Option<OutputOnly>,
    /// -U: latency samples in the order taken.
    pub(super) unsorted: bool,
    /// -H: the sorted latency samples.
    pub(super) histogram: bool,
    /// --check passed at both ends: the messages and bytes this end verified.
    pub(super) verified: Option<(u64, u64)>,
}

/// The --check verdict line, printed after the report when both ends' checks passed.
fn verdict_line(o: &Output) -> Option<String> {
    let (messages, bytes) = o.verified?;
    Some(if messages > 0 {
        format!(
            " Data check      : passed: {messages} messages ({bytes} bytes) verified here, and the peer's check passed"
        )
    } else {
        " Data check      : passed: the peer verified every message (its check passed; this end has nothing to verify in this test)"
            .to_string()
    })
}

/// perftest's RESULT_FMT, or RESULT_FMT_G under --report_gbits.
fn bw_header(gbits: bool) -> String {
    let u = if gbits { "Gb" } else { "MB" };
    format!(" #bytes     #iterations    BW peak[{u}/sec]    BW average[{u}/sec]   MsgRate[Mpps]")
}

/// perftest's REPORT_FMT row (REPORT_FMT_EXT, six decimals, for a Gb/s average below 0.1),
/// or the one figure --output asks for ("%lf").
fn bw_row(f: &BwFigures, gbits: bool, only: Option<OutputOnly>) -> String {
    let (peak, avg) = (to_unit(f.bw_peak_mib, gbits), to_unit(f.bw_avg_mib, gbits));
    match only {
        Some(OutputOnly::Bandwidth) => return format!("{avg:.6}"),
        Some(OutputOnly::MessageRate) => return format!("{:.6}", f.msg_rate_mpps),
        _ => {}
    }
    let cpu = f.cpu.map_or(String::new(), |c| format!("\t    {c:<3.2}"));
    let row = if gbits && avg < 0.1 {
        format!(
            " {:<7}    {}           {:<7.6}            {:<7.6}            {:<7.6}",
            f.size, f.messages, peak, avg, f.msg_rate_mpps
        )
    } else {
        format!(
            " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
            f.size, f.messages, peak, avg, f.msg_rate_mpps
        )
    };
    row + &cpu
}

/// --run_infinitely: the table's head, then a row every interval as it ends.
pub(super) fn print_forever_row(f: &BwFigures, gbits: bool, first: bool) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    if first {
        writeln!(out, "{}", bw_header(gbits)).map_err(CliError::Output)?;
    }
    writeln!(out, "{}", bw_row(f, gbits, None)).map_err(CliError::Output)?;
    out.flush().map_err(CliError::Output)
}

/// C's "%g": six significant digits, trailing zeros dropped (perftest's -U/-H lines).
fn g6(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let exp = v.abs().log10().floor() as i32;
    if !(-5..6).contains(&exp) {
        let s = format!("{:.5e}", v);
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let m = m.trim_end_matches('0').trim_end_matches('.');
        let e: i32 = e.parse().unwrap_or(0);
        return format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    }
    let s = format!("{:.*}", (5 - exp).max(0) as usize, v);
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// The softroce --json line of one bandwidth row or latency result.
fn json_line(p: &Params, o: &Output, size: u64) -> serde_json::Value {
    serde_json::json!({
        "test": format!("{:?}", p.op).to_lowercase(),
        "program": p.prog.perftest_name(),
        "role": if o.is_client { "client" } else { "server" },
        "lat": p.prog.lat(),
        "bytes": size,
        "iters": p.iters,
        "qps": p.num_qps,
        "mtu": o.mtu,
        "check": p.check,
        "all": p.all,
        "bidirectional": p.duplex,
        "duration_s": p.duration.map(|d| d.as_secs()),
        "check_verified_messages": o.verified.map(|v| v.0),
        "check_verified_bytes": o.verified.map(|v| v.1),
    })
}

/// One JSON object's members in perftest's order, each value already JSON text.
struct JsonObject(Vec<(&'static str, String)>);

impl JsonObject {
    fn str(&mut self, key: &'static str, v: &str) {
        self.0.push((key, serde_json::Value::from(v).to_string()));
    }

    fn int(&mut self, key: &'static str, v: u64) {
        self.0.push((key, v.to_string()));
    }

    /// A figure with `decimals` places, as perftest's "%.2lf"; JSON has no NaN or infinity,
    /// so a figure that is not finite is null.
    fn fixed(&mut self, key: &'static str, v: f64, decimals: usize) {
        let text = if v.is_finite() {
            format!("{v:.decimals$}")
        } else {
            "null".into()
        };
        self.0.push((key, text));
    }

    /// The object, one member per line as perftest writes it.
    fn render(&self) -> String {
        let members: Vec<String> = self
            .0
            .iter()
            .map(|(k, v)| format!("{}: {v}", serde_json::Value::from(*k)))
            .collect();
        format!("{{\n{}\n}}", members.join(",\n"))
    }
}

/// perftest's --out_json report (write_test_info_to_file and write_bw_report_to_file): the
/// keys and layout perftest writes, as standard JSON (quoted keys and strings, no trailing
/// commas), as perftest itself writes it since linux-rdma/perftest PR #239 (4.5's file was not
/// JSON: `json.load` failed on it).
pub(super) fn perftest_json(p: &Params, o: &Output, r: JsonResult) -> String {
    format!(
        "{{\n\"test_info\": {},\n\"results\": {}\n}}\n",
        json_test_info(p, o).render(),
        json_results(p, o, r).render()
    )
}

/// perftest's name of the test in its JSON report (`RDMA_Write_BW_Test`, ...).
fn json_test_name(p: &Params) -> String {
    let verb = match p.op {
        PerfOp::Send => "Send",
        PerfOp::Write => "RDMA_Write",
        PerfOp::Read => "RDMA_Read",
        PerfOp::Atomic => "Atomic",
    };
    let mut test = format!("{verb}_");
    if p.op == PerfOp::Atomic {
        test += if p.cas {
            "CMP_AND_SWAP_"
        } else {
            "FETCH_AND_ADD_"
        };
    }
    if p.prog.lat() {
        test += "Latency_";
    } else {
        if p.duplex {
            test += "Bidirectional_";
        }
        if p.post_list > 1 {
            test += "Post_List_";
        }
        test += "BW_";
    }
    test += "Test";
    test
}

/// The `test_info` object of perftest's JSON report: the test's settings.
fn json_test_info(p: &Params, o: &Output) -> JsonObject {
    let mut t = JsonObject(Vec::new());
    t.str("test", &json_test_name(p));
    t.str("Dual_port", "OFF");
    t.str("Device", "softroce");
    t.int("Number_of_qps", p.num_qps as u64);
    t.str("Transport_type", "IB");
    t.str("Connection_type", p.conn.name());
    t.str("Using_SRQ", "OFF");
    t.str("PCIe_relax_order", "Unsupported");
    t.str("ibv_wr_API", "ON");
    if o.is_client || p.duplex {
        t.int("TX_depth", p.tx_depth as u64);
    }
    if p.post_list > 1 {
        t.int("Post_List", p.post_list as u64);
    }
    if p.op == PerfOp::Send && (!o.is_client || p.duplex) {
        t.int("RX_depth", p.rx_depth as u64);
    }
    if !p.prog.lat() {
        t.int("CQ_Moderation", p.cq_mod as u64);
    }
    t.int("Mtu", o.mtu as u64);
    t.str("Link_type", "Ethernet");
    if matches!(p.op, PerfOp::Read | PerfOp::Atomic) {
        t.int("Outstand_reads", p.outs as u64);
    } else {
        t.int("Max_inline_data", p.inline as u64);
    }
    t.str("rdma_cm_QPs", "OFF");
    t.str("Data_ex_method", "Ethernet");
    t
}

/// The `results` object of perftest's JSON report: the figures --output asks for, or all.
fn json_results(p: &Params, o: &Output, r: JsonResult) -> JsonObject {
    let mut res = JsonObject(Vec::new());
    match (r, o.only) {
        (JsonResult::Bw(f), Some(OutputOnly::Bandwidth)) => {
            res.fixed("bw_avg", to_unit(f.bw_avg_mib, p.gbits), 6);
        }
        (JsonResult::Bw(f), Some(OutputOnly::MessageRate)) => {
            res.fixed("msgRate_avg", f.msg_rate_mpps, 6);
        }
        (JsonResult::Bw(f), _) => {
            let (peak, avg) = (
                to_unit(f.bw_peak_mib, p.gbits),
                to_unit(f.bw_avg_mib, p.gbits),
            );
            // REPORT_FMT_EXT_JSON (six decimals) for a Gb/s average below 0.1.
            let d = if p.gbits && avg < 0.1 { 6 } else { 2 };
            res.int("MsgSize", f.size);
            res.int("n_iterations", f.messages);
            res.fixed("BW_peak", peak, d);
            res.fixed("BW_average", avg, d);
            res.fixed("MsgRate", f.msg_rate_mpps, 6);
            if let Some(c) = f.cpu {
                res.fixed("CPU_util", c, 2);
            }
        }
        (JsonResult::Lat(_, l), Some(OutputOnly::Latency)) => {
            res.fixed("avg_lat", l.avg, 6);
        }
        (JsonResult::Lat(size, l), _) => {
            res.int("MsgSize", size);
            res.int("n_iterations", p.iters);
            for (k, v) in [
                ("t_min", l.min),
                ("t_max", l.max),
                ("t_typical", l.typical),
                ("t_avg", l.avg),
                ("t_stdev", l.stdev),
                ("percentile_99", l.p99),
                ("percentile_99.9", l.p999),
            ] {
                res.fixed(k, v, 2);
            }
        }
    }
    res
}

/// The head of perftest's report (its ctx_print_test_info, in softroce's words): printed once
/// the QPs are connected, before the address lines and the traffic, as perftest prints it.
pub(super) fn print_banner(p: &Params, mtu: u32) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    let w =
        |out: &mut std::io::StdoutLock, s: String| writeln!(out, "{s}").map_err(CliError::Output);
    let line = "-".repeat(87);
    let name = match p.op {
        PerfOp::Send => "Send",
        PerfOp::Write => "RDMA_Write",
        PerfOp::Read => "RDMA_Read",
        PerfOp::Atomic if p.cas => "Atomic CMP_AND_SWAP",
        PerfOp::Atomic => "Atomic FETCH_AND_ADD",
    };
    w(&mut out, line.clone())?;
    w(
        &mut out,
        format!(
            "                    {name} {}{} Test",
            if p.duplex { "Bidirectional " } else { "" },
            if p.prog.lat() { "Latency" } else { "BW" }
        ),
    )?;
    w(
        &mut out,
        format!(
            " Number of qps   : {}\t\tTransport type : IB (RoCEv2, softroce)",
            p.num_qps
        ),
    )?;
    w(
        &mut out,
        format!(
            " Connection type : {}\t\tData check     : {}",
            p.conn.name(),
            if p.check { "ON" } else { "OFF" }
        ),
    )?;
    w(&mut out, format!(" Mtu             : {mtu}[B]"))?;
    if let Some(d) = p.duration {
        w(
            &mut out,
            format!(
                " Duration        : {} sec, margin {} sec",
                d.as_secs(),
                p.margin.as_secs()
            ),
        )?;
    }
    w(&mut out, line)?;
    out.flush().map_err(CliError::Output)
}

/// C's "%#0Nx": `0x` and zero padding to `width` characters in all, but no `0x` for zero.
fn c_alt_hex(v: u64, width: usize) -> String {
    if v == 0 {
        format!("{:0width$}", 0)
    } else {
        format!("{v:#0width$x}")
    }
}

/// perftest's ctx_print_pingpong_data: " local address: LID ... QPN ... PSN ..." (OUT for
/// READ; RKey and VAddr for READ and WRITE), then the GID line, its bytes in decimal as
/// perftest's PERF_GID_FMT prints them.
pub(super) fn address_lines(side: &str, op: PerfOp, k: &KeyMsg) -> String {
    let mut s = format!(
        " {side} address: LID {} QPN {} PSN {}",
        c_alt_hex(k.lid as u64, 4),
        c_alt_hex(k.qpn as u64, 6),
        c_alt_hex(k.psn as u64, 6)
    );
    // perftest's switch falls through from READ to WRITE.
    if op == PerfOp::Read {
        s += &format!(" OUT {}", c_alt_hex(k.out_reads as u64, 4));
    }
    if matches!(op, PerfOp::Read | PerfOp::Write) {
        s += &format!(
            " RKey {} VAddr {}",
            c_alt_hex(k.rkey as u64, 8),
            c_alt_hex(k.vaddr, 16)
        );
    }
    let gid: Vec<String> = k.gid.0.iter().map(|b| format!("{b:02}")).collect();
    s + "\n GID: " + &gid.join(":")
}

/// Prints this end's address lines, then the peer's, as perftest does after connecting.
pub(super) fn print_addresses(
    op: PerfOp,
    mine: &[KeyMsg],
    theirs: &[KeyMsg],
) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    for (side, keys) in [("local", mine), ("remote", theirs)] {
        for k in keys {
            writeln!(out, "{}", address_lines(side, op, k)).map_err(CliError::Output)?;
        }
    }
    out.flush().map_err(CliError::Output)
}

/// perftest's server banner while it waits for its client.
pub(super) fn print_waiting() -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "\n************************************\n* Waiting for client to connect... *\n************************************"
    )
    .and_then(|()| out.flush())
    .map_err(CliError::Output)
}

/// What one --out_json report describes.
#[derive(Clone, Copy)]
pub(super) enum JsonResult<'a> {
    /// A bandwidth row.
    Bw(&'a BwFigures),
    /// A latency row: size and statistics.
    Lat(u64, &'a LatStats),
}

const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

/// -U (every sample in order) and -H (the sorted samples kept), as print_report_lat: a
/// "#, usec" line, then "N, VALUE" lines.
fn lat_samples(o: &Output, l: &LatStats) -> Vec<String> {
    let mut lines = Vec::new();
    for (on, samples) in [(o.unsorted, &l.unsorted), (o.histogram, &l.sorted)] {
        if on {
            lines.push("#, usec".to_string());
            lines.extend(
                samples
                    .iter()
                    .enumerate()
                    .map(|(i, v)| format!("{}, {}", i + 1, g6(*v))),
            );
        }
    }
    lines
}

/// The row perftest's --out_json file describes: the last (perftest rewrites the file at every
/// report, so after -a it holds the last size).
fn last_row(r: &Outcome) -> Option<JsonResult<'_>> {
    match r {
        Outcome::Bw { rows, .. } => rows.last().map(JsonResult::Bw),
        Outcome::Lat(rows) => rows
            .iter()
            .rev()
            .find_map(|(size, l)| l.as_ref().map(|l| JsonResult::Lat(*size, l))),
        Outcome::Passive => None,
    }
}

/// Prints the report in the format the flags ask for (JSON lines under --json, one figure per
/// row under --output, else perftest's table, each its own renderer) and writes perftest's
/// --out_json file.
pub(super) fn print_result(p: &Params, o: &Output, r: &Outcome) -> Result<(), CliError> {
    if let (Some(path), Some(last)) = (o.out_json, last_row(r)) {
        std::fs::write(path, perftest_json(p, o, last)).map_err(|err| CliError::Open {
            path: path.to_string(),
            err,
        })?;
    }
    let lines = if o.json {
        json_rows(p, o, r)
    } else if let Some(only) = o.only {
        figure_rows(p, o, r, only)
    } else {
        table_rows(p, o, r)
    };
    let mut out = std::io::stdout().lock();
    for l in lines {
        writeln!(out, "{l}").map_err(CliError::Output)?;
    }
    out.flush().map_err(CliError::Output)
}

/// --json: one line per row (a passive end's line has no figures).
fn json_rows(p: &Params, o: &Output, r: &Outcome) -> Vec<String> {
    match r {
        Outcome::Bw { rows, both } => rows
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let mut v = json_line(p, o, f.size);
                // perftest's -n is per QP; under -D the count is what the window saw.
                v["messages"] = serde_json::json!(f.messages);
                if p.duration.is_some() {
                    v["iters"] = serde_json::json!(f.messages);
                }
                // -b: the last row's two directions apart (the row is their sum).
                if let (Some((mine, theirs)), true) = (both, i + 1 == rows.len()) {
                    v["local_bw_avg_mibps"] = serde_json::json!(mine.bw_avg_mib);
                    v["remote_bw_avg_mibps"] = serde_json::json!(theirs.bw_avg_mib);
                    v["local_msg_rate_mpps"] = serde_json::json!(mine.msg_rate_mpps);
                    v["remote_msg_rate_mpps"] = serde_json::json!(theirs.msg_rate_mpps);
                }
                v["seconds"] = serde_json::json!(f.seconds);
                v["bw_peak_mibps"] = serde_json::json!(f.bw_peak_mib);
                v["bw_avg_mibps"] = serde_json::json!(f.bw_avg_mib);
                v["bw_avg_mbps"] = serde_json::json!(f.bw_avg_mib * MIB / 1e6);
                v["msg_rate_mpps"] = serde_json::json!(f.msg_rate_mpps);
                v.to_string()
            })
            .collect(),
        Outcome::Lat(rows) => rows
            .iter()
            .map(|(size, l)| {
                let mut v = json_line(p, o, *size);
                if let Some(l) = l {
                    v["lat_us"] = serde_json::json!({
                        "min": l.min,
                        "p50": l.typical,
                        "p99": l.p99,
                        "p999": l.p999,
                        "max": l.max,
                        "avg": l.avg,
                        "stdev": l.stdev,
                    });
                }
                v.to_string()
            })
            .collect(),
        Outcome::Passive => vec![json_line(p, o, p.size).to_string()],
    }
}

/// --output: one figure per row, as perftest's "%lf" (latency: after -U/-H's samples).
fn figure_rows(p: &Params, o: &Output, r: &Outcome, only: OutputOnly) -> Vec<String> {
    match r {
        Outcome::Bw { rows, .. } => rows
            .iter()
            .map(|f| bw_row(f, p.gbits, Some(only)))
            .collect(),
        Outcome::Lat(rows) => rows
            .iter()
            .filter_map(|(_, l)| l.as_ref())
            .flat_map(|l| {
                let mut lines = lat_samples(o, l);
                lines.push(format!("{:.6}", l.avg));
                lines
            })
            .collect(),
        Outcome::Passive => Vec::new(),
    }
}

/// perftest's result table (the banner above it was printed once the QPs connected), then
/// --check's verdict.
fn table_rows(p: &Params, o: &Output, r: &Outcome) -> Vec<String> {
    let line = "-".repeat(87);
    let mut t = vec![line.clone()];
    match r {
        Outcome::Bw { rows, both } => {
            let cpu_head = if p.cpu_util { "    CPU_Util[%]" } else { "" };
            t.push(bw_header(p.gbits) + cpu_head);
            t.extend(rows.iter().map(|f| bw_row(f, p.gbits, None)));
            if let (true, Some((mine, theirs))) = (o.report_both, both) {
                for (title, f) in [(" Local results: ", mine), (" Remote results: ", theirs)] {
                    t.push(line.clone());
                    t.push(format!("\n{title}"));
                    t.push(line.clone());
                    t.push(bw_header(p.gbits));
                    t.push(bw_row(f, p.gbits, None));
                }
            }
        }
        Outcome::Lat(rows) => {
            t.push(LAT_HEADER.into());
            for (size, l) in rows {
                let Some(l) = l else {
                    t.push(" (too few samples for a latency report)".into());
                    continue;
                };
                if o.unsorted || o.histogram {
                    // perftest prints the samples, then the table's head again.
                    t.extend(lat_samples(o, l));
                    t.push(line.clone());
                    t.push(LAT_HEADER.into());
                }
                t.push(format!(
                    " {:<7} {:<10} {:<14.2} {:<12.2} {:<16.2} {:<14.2} {:<15.2} {:<22.2} {:.2}",
                    size, p.iters, l.min, l.max, l.typical, l.avg, l.stdev, l.p99, l.p999
                ));
            }
        }
        Outcome::Passive => t.push(
            " This end is passive: the client measures (as perftest's server prints nothing)."
                .into(),
        ),
    }
    t.push(line);
    t.extend(verdict_line(o));
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g6_prints_as_cs_percent_g() {
        assert_eq!(g6(1.5), "1.5");
        assert_eq!(g6(12.345678), "12.3457");
        assert_eq!(g6(100.0), "100");
        assert_eq!(g6(0.000123456), "0.000123456");
        assert_eq!(g6(1234567.0), "1.23457e+06");
    }

    #[test]
    fn gbits_rows_use_perftests_units_and_output_prints_one_figure() {
        let f = BwFigures {
            size: 65536,
            messages: 10,
            seconds: 1.0,
            bw_peak_mib: 1000.0,
            bw_avg_mib: 1000.0,
            msg_rate_mpps: 0.016,
            cpu: None,
        };
        // 1000 MiB/s = 8.388608 Gb/s.
        assert!(bw_row(&f, true, None).contains("8.39"));
        assert!(bw_header(true).contains("BW average[Gb/sec]"));
        assert_eq!(
            bw_row(&f, false, Some(OutputOnly::Bandwidth)),
            "1000.000000"
        );
        assert_eq!(bw_row(&f, true, Some(OutputOnly::Bandwidth)), "8.388608");
        assert_eq!(bw_row(&f, false, Some(OutputOnly::MessageRate)), "0.016000");
        let r = f.report(true);
        assert!((r.bw_avg - 8.388608).abs() < 1e-9);
        assert!((BwFigures::from_report(&r, true).bw_avg_mib - 1000.0).abs() < 1e-9);
    }
}
