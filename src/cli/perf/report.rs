//! What `softroce perf` measures and prints: bandwidth and latency figures computed as
//! perftest's print_report_bw and print_report_lat, and perftest's result tables (or one JSON
//! line).

use std::io::Write;
use std::time::Instant;

use softroce::oob::perftest::{BwReport, KeyMsg};

use super::params::Params;
use super::{OutputOnly, PerfOp};
use crate::cli::plot::Series;
use crate::cli::CliError;

/// Timestamps of one bandwidth run.
pub(super) struct BwRun {
    /// When each message was posted (client) or, on a receiving server, when the first one
    /// arrived.
    pub(super) posted: Vec<Instant>,
    /// When each message completed, in completion order.
    pub(super) completed: Vec<Instant>,
    /// Under -D: the messages completed within the sampled window, and its length in
    /// seconds (no per-message timestamps, and no peak, as perftest's noPeak).
    pub(super) sampled: Option<(u64, f64)>,
    /// --cpu_util: the CPU utilisation over the sampled window, percent.
    pub(super) cpu: Option<f64>,
}

/// Bandwidth figures in perftest's units (MB = 2^20 bytes).
#[derive(Debug, Clone, Copy)]
pub(super) struct BwFigures {
    size: u64,
    messages: u64,
    seconds: f64,
    bw_peak_mib: f64,
    bw_avg_mib: f64,
    msg_rate_mpps: f64,
    /// --cpu_util: the sampled window's CPU utilisation, percent.
    pub(super) cpu: Option<f64>,
}

impl BwFigures {
    /// No messages (the report a passive end sends).
    pub(super) fn empty(size: u64) -> BwFigures {
        BwFigures {
            size,
            messages: 0,
            seconds: 0.0,
            bw_peak_mib: 0.0,
            bw_avg_mib: 0.0,
            msg_rate_mpps: 0.0,
            cpu: None,
        }
    }

    /// The report perftest sends its peer.
    /// In MB/s, or in Gb/s under --report_gbits (perftest sends its report in its unit).
    pub(super) fn report(&self, gbits: bool) -> BwReport {
        BwReport {
            size: self.size,
            iters: self.messages,
            bw_peak: to_unit(self.bw_peak_mib, gbits),
            bw_avg: to_unit(self.bw_avg_mib, gbits),
            msg_rate: self.msg_rate_mpps,
        }
    }

    /// A bidirectional row: both ends' figures added, this end's message count (perftest's
    /// print_full_bw_report with a remote report).
    pub(super) fn plus(&self, theirs: &BwFigures) -> BwFigures {
        BwFigures {
            bw_peak_mib: self.bw_peak_mib + theirs.bw_peak_mib,
            bw_avg_mib: self.bw_avg_mib + theirs.bw_avg_mib,
            msg_rate_mpps: self.msg_rate_mpps + theirs.msg_rate_mpps,
            ..*self
        }
    }

    /// The figures read back from a peer's report.
    pub(super) fn from_report(r: &BwReport, gbits: bool) -> BwFigures {
        let seconds = if r.msg_rate > 0.0 {
            r.iters as f64 / (r.msg_rate * 1e6)
        } else {
            0.0
        };
        BwFigures {
            size: r.size,
            messages: r.iters,
            seconds,
            bw_peak_mib: from_unit(r.bw_peak, gbits),
            bw_avg_mib: from_unit(r.bw_avg, gbits),
            msg_rate_mpps: r.msg_rate,
            cpu: None,
        }
    }
}

pub(super) const MIB: f64 = (1u64 << 20) as f64;
/// --report_gbits: perftest's format_factor for Gb/s, bytes per unit.
const GBIT: f64 = 125_000_000.0;

/// MB/s (2^20) to the report's unit.
fn to_unit(mib: f64, gbits: bool) -> f64 {
    if gbits {
        mib * MIB / GBIT
    } else {
        mib
    }
}

/// The report's unit back to MB/s (2^20).
fn from_unit(v: f64, gbits: bool) -> f64 {
    if gbits {
        v * GBIT / MIB
    } else {
        v
    }
}
/// perftest's cq_mod: the peak is searched over windows of this many messages.
const PEAK_WINDOW: usize = 100;

impl BwRun {
    /// Average, peak and rate of `size`-byte messages.
    pub(super) fn figures(&self, size: u64, no_peak: bool) -> BwFigures {
        if let Some((n, secs)) = self.sampled {
            return BwFigures {
                size,
                messages: n,
                seconds: secs,
                bw_peak_mib: 0.0,
                bw_avg_mib: size as f64 * n as f64 / secs / MIB,
                msg_rate_mpps: n as f64 / secs / 1e6,
                cpu: self.cpu,
            };
        }
        let n = self.completed.len();
        let (Some(first), Some(last)) = (self.posted.first(), self.completed.last()) else {
            return BwFigures::empty(size);
        };
        let secs = last.duration_since(*first).as_secs_f64().max(1e-9);
        let bytes = size as f64 * n as f64;
        // perftest's peak: the best time per message over runs from a post to a completion
        // (print_report_bw), here over windows that start and end on multiples of cq_mod.
        let mut best = secs / n as f64;
        if self.posted.len() == n {
            let mut i = 0;
            while i < n {
                let mut j = (i + PEAK_WINDOW - 1).min(n - 1);
                while j < n {
                    let t = self.completed[j]
                        .saturating_duration_since(self.posted[i])
                        .as_secs_f64()
                        / (j - i + 1) as f64;
                    if t > 0.0 && t < best {
                        best = t;
                    }
                    j += PEAK_WINDOW;
                }
                i += PEAK_WINDOW;
            }
        }
        BwFigures {
            size,
            messages: n as u64,
            seconds: secs,
            bw_peak_mib: if no_peak {
                0.0
            } else {
                size as f64 / best / MIB
            },
            bw_avg_mib: bytes / secs / MIB,
            msg_rate_mpps: n as f64 / secs / 1e6,
            cpu: None,
        }
    }
}

/// Latency statistics in microseconds, computed as perftest's print_report_lat.
#[derive(Debug, Clone)]
pub(super) struct LatStats {
    /// Every sample in the order taken (-U).
    unsorted: Vec<f64>,
    /// The sorted samples the statistics use, the two largest left out (-H).
    sorted: Vec<f64>,
    min: f64,
    max: f64,
    typical: f64,
    avg: f64,
    stdev: f64,
    p99: f64,
    p999: f64,
}

impl LatStats {
    /// `posted` holds the time each iteration started; `rtt_factor` is 2 where one sample is
    /// a round trip (send, write) and 1 where it is one operation (read, atomic).
    pub(super) fn from_posted(posted: &[Instant], rtt_factor: f64) -> Option<LatStats> {
        if posted.len() < 4 {
            return None;
        }
        let unsorted: Vec<f64> = posted
            .windows(2)
            .map(|w| w[1].duration_since(w[0]).as_secs_f64() * 1e6 / rtt_factor)
            .collect();
        let mut delta = unsorted.clone();
        delta.sort_by(f64::total_cmp);
        // LAT_MEASURE_TAIL: the two largest samples are left out.
        let m = delta.len() - 2;
        let typical = if m % 2 == 0 {
            (delta[m / 2 - 1] + delta[m / 2]) / 2.0
        } else {
            delta[m / 2]
        };
        let avg = delta[..m].iter().sum::<f64>() / m as f64;
        let var = delta[..m].iter().map(|d| (d - avg).powi(2)).sum::<f64>() / m as f64;
        let at = |q: f64| delta[((m as f64 * q).ceil() as usize).min(m)];
        Some(LatStats {
            sorted: delta[..m].to_vec(),
            unsorted,
            min: delta[0],
            max: delta[m],
            typical,
            avg,
            stdev: var.sqrt(),
            p99: at(0.99),
            p999: at(0.999),
        })
    }
}

/// What a run produced.
pub(super) enum Outcome {
    /// Bandwidth: one row per size (under -b, both ends' figures added), and under -b this
    /// end's and the peer's last figures apart (for --report-both).
    Bw {
        rows: Vec<BwFigures>,
        both: Option<(BwFigures, BwFigures)>,
    },
    /// Latency: one row per size (-a) or one, each with its statistics (none when too few
    /// samples).
    Lat(Vec<(u64, Option<LatStats>)>),
    /// The passive end of ib_read_lat / ib_atomic_lat: only the client measures.
    Passive,
}

impl Outcome {
    /// The bandwidth rows as a line of `--plot`.
    pub(super) fn series(&self, label: String) -> Result<Series, CliError> {
        match self {
            Outcome::Bw { rows, .. } if !rows.is_empty() => Ok(Series {
                label,
                points: rows
                    .iter()
                    .map(|f| (f.size, f.bw_avg_mib, f.msg_rate_mpps))
                    .collect(),
            }),
            _ => Err(CliError::Usage(
                "--plot draws bandwidth rows; this end of the test has none".into(),
            )),
        }
    }
}

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

/// /proc/stat's "cpu" line: (user, idle) jiffies, the two fields perftest's get_cpu_stats
/// reads.
pub(super) fn cpu_stat() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let mut w = text.lines().next()?.split_whitespace().skip(1);
    let user = w.next()?.parse().ok()?;
    let idle = w.nth(2)?.parse().ok()?;
    Some((user, idle))
}

/// perftest's calc_cpu_util: user time over user + idle time between two readings, percent.
pub(super) fn cpu_util(start: Option<(u64, u64)>, end: Option<(u64, u64)>) -> Option<f64> {
    let ((u0, i0), (u1, i1)) = (start?, end?);
    let (du, di) = (u1.saturating_sub(u0), i1.saturating_sub(i0));
    Some(if du + di == 0 {
        0.0
    } else {
        du as f64 / (du + di) as f64 * 100.0
    })
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
    let mut t = JsonObject(Vec::new());
    t.str("test", &test);
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
    format!(
        "{{\n\"test_info\": {},\n\"results\": {}\n}}\n",
        t.render(),
        res.render()
    )
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
fn lat_samples(out: &mut impl Write, o: &Output, l: &LatStats) -> Result<(), CliError> {
    for (on, samples) in [(o.unsorted, &l.unsorted), (o.histogram, &l.sorted)] {
        if on {
            writeln!(out, "#, usec").map_err(CliError::Output)?;
            for (i, v) in samples.iter().enumerate() {
                writeln!(out, "{}, {}", i + 1, g6(*v)).map_err(CliError::Output)?;
            }
        }
    }
    Ok(())
}

/// Prints the report: perftest's table, one figure per row (--output) or JSON lines (--json);
/// writes perftest's --out_json file.
pub(super) fn print_result(p: &Params, o: &Output, r: &Outcome) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    let w =
        |out: &mut std::io::StdoutLock, s: String| writeln!(out, "{s}").map_err(CliError::Output);
    // perftest rewrites the file at every report: after -a it holds the last size.
    let last = match r {
        Outcome::Bw { rows, .. } => rows.last().map(JsonResult::Bw),
        Outcome::Lat(rows) => rows
            .iter()
            .rev()
            .find_map(|(size, l)| l.as_ref().map(|l| JsonResult::Lat(*size, l))),
        Outcome::Passive => None,
    };
    if let (Some(path), Some(last)) = (o.out_json, last) {
        std::fs::write(path, perftest_json(p, o, last)).map_err(|err| CliError::Open {
            path: path.to_string(),
            err,
        })?;
    }
    if o.json {
        match r {
            Outcome::Bw { rows, both } => {
                for (i, f) in rows.iter().enumerate() {
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
                    w(&mut out, v.to_string())?;
                }
                return Ok(());
            }
            Outcome::Lat(rows) => {
                for (size, l) in rows {
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
                    w(&mut out, v.to_string())?;
                }
                return Ok(());
            }
            Outcome::Passive => return w(&mut out, json_line(p, o, p.size).to_string()),
        }
    }
    if let Some(only) = o.only {
        match r {
            Outcome::Bw { rows, .. } => {
                for f in rows {
                    w(&mut out, bw_row(f, p.gbits, Some(only)))?;
                }
            }
            Outcome::Lat(rows) => {
                for l in rows.iter().filter_map(|(_, l)| l.as_ref()) {
                    lat_samples(&mut out, o, l)?;
                    w(&mut out, format!("{:.6}", l.avg))?;
                }
            }
            Outcome::Passive => {}
        }
        return Ok(());
    }
    let line = "-".repeat(87);
    w(&mut out, line.clone())?;
    match r {
        Outcome::Bw { rows, both } => {
            let cpu_head = if p.cpu_util { "    CPU_Util[%]" } else { "" };
            w(&mut out, bw_header(p.gbits) + cpu_head)?;
            for f in rows {
                w(&mut out, bw_row(f, p.gbits, None))?;
            }
            if let (true, Some((mine, theirs))) = (o.report_both, both) {
                for (title, f) in [(" Local results: ", mine), (" Remote results: ", theirs)] {
                    w(&mut out, line.clone())?;
                    w(&mut out, format!("\n{title}"))?;
                    w(&mut out, line.clone())?;
                    w(&mut out, bw_header(p.gbits))?;
                    w(&mut out, bw_row(f, p.gbits, None))?;
                }
            }
        }
        Outcome::Lat(rows) => {
            w(&mut out, LAT_HEADER.into())?;
            for (size, l) in rows {
                let Some(l) = l else {
                    w(&mut out, " (too few samples for a latency report)".into())?;
                    continue;
                };
                if o.unsorted || o.histogram {
                    // perftest prints the samples, then the table's head again.
                    lat_samples(&mut out, o, l)?;
                    w(&mut out, line.clone())?;
                    w(&mut out, LAT_HEADER.into())?;
                }
                w(
                    &mut out,
                    format!(
                        " {:<7} {:<10} {:<14.2} {:<12.2} {:<16.2} {:<14.2} {:<15.2} {:<22.2} {:.2}",
                        size, p.iters, l.min, l.max, l.typical, l.avg, l.stdev, l.p99, l.p999
                    ),
                )?;
            }
        }
        Outcome::Passive => w(
            &mut out,
            " This end is passive: the client measures (as perftest's server prints nothing)."
                .into(),
        )?,
    }
    w(&mut out, line)?;
    match verdict_line(o) {
        Some(v) => w(&mut out, v),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn latency_report_follows_print_report_lat() {
        // Ten posts 1, 2, ..., 9 us apart and a 100 us outlier: nine samples, the two largest
        // (100 and 9) dropped, seven left: 1..=7 (even/odd median rules apply to those).
        let t0 = Instant::now();
        let mut posted = vec![t0];
        let mut t = t0;
        for gap in [1u64, 2, 3, 4, 5, 6, 7, 9, 100] {
            t += Duration::from_micros(gap);
            posted.push(t);
        }
        let l = LatStats::from_posted(&posted, 1.0).unwrap();
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
        assert!(close(l.min, 1.0), "{l:?}");
        assert!(close(l.typical, 4.0), "{l:?}");
        assert!(close(l.avg, 4.0), "{l:?}");
        // t_max is the first sample past the kept ones, as perftest prints delta[measure_cnt].
        assert!(close(l.max, 9.0), "{l:?}");
        assert!(close(l.p99, 9.0), "{l:?}");
        let half = LatStats::from_posted(&posted, 2.0).unwrap();
        assert!(close(half.typical, 2.0));
        assert!(LatStats::from_posted(&posted[..3], 1.0).is_none());
        // -U keeps the order taken; -H the sorted samples the statistics use.
        assert_eq!(l.unsorted.len(), 9);
        assert!(close(l.unsorted[8], 100.0) && close(l.unsorted[0], 1.0));
        assert_eq!(l.sorted.len(), 7);
        assert!(l.sorted.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn cpu_utilisation_is_user_over_user_and_idle() {
        assert_eq!(cpu_util(Some((100, 1000)), Some((130, 1090))), Some(25.0));
        assert_eq!(cpu_util(Some((1, 1)), Some((1, 1))), Some(0.0));
        assert_eq!(cpu_util(None, Some((1, 1))), None);
        let (u, i) = cpu_stat().expect("/proc/stat");
        assert!(u + i > 0);
    }

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
