//! What `softroce perf` measures and prints: bandwidth and latency figures computed as
//! perftest's print_report_bw and print_report_lat, and perftest's result tables (or one JSON
//! line).

use std::io::Write;
use std::time::Instant;

use softroce::oob::perftest::BwReport;

use super::{Params, PerfOp};
use crate::cli::CliError;

/// Timestamps of one bandwidth run.
pub(super) struct BwRun {
    /// When each message was posted (client) or, on a receiving server, when the first one
    /// arrived.
    pub(super) posted: Vec<Instant>,
    /// When each message completed, in completion order.
    pub(super) completed: Vec<Instant>,
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
}

impl BwFigures {
    pub(super) fn from_report(r: &BwReport) -> BwFigures {
        let seconds = if r.msg_rate > 0.0 {
            r.iters as f64 / (r.msg_rate * 1e6)
        } else {
            0.0
        };
        BwFigures {
            size: r.size,
            messages: r.iters,
            seconds,
            bw_peak_mib: r.bw_peak,
            bw_avg_mib: r.bw_avg,
            msg_rate_mpps: r.msg_rate,
        }
    }
}

pub(super) const MIB: f64 = (1u64 << 20) as f64;
/// perftest's cq_mod: the peak is searched over windows of this many messages.
const PEAK_WINDOW: usize = 100;

impl BwRun {
    /// Average, peak and rate of `size`-byte messages.
    pub(super) fn figures(&self, size: u64) -> BwFigures {
        let n = self.completed.len();
        let (Some(first), Some(last)) = (self.posted.first(), self.completed.last()) else {
            return BwFigures {
                size,
                messages: 0,
                seconds: 0.0,
                bw_peak_mib: 0.0,
                bw_avg_mib: 0.0,
                msg_rate_mpps: 0.0,
            };
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
            bw_peak_mib: size as f64 / best / MIB,
            bw_avg_mib: bytes / secs / MIB,
            msg_rate_mpps: n as f64 / secs / 1e6,
        }
    }

    /// The report perftest's client sends its server.
    pub(super) fn report(&self, size: u64) -> BwReport {
        let f = self.figures(size);
        BwReport {
            size,
            iters: f.messages,
            bw_peak: f.bw_peak_mib,
            bw_avg: f.bw_avg_mib,
            msg_rate: f.msg_rate_mpps,
        }
    }
}

/// Latency statistics in microseconds, computed as perftest's print_report_lat.
#[derive(Debug, Clone, Copy)]
pub(super) struct LatStats {
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
        let mut delta: Vec<f64> = posted
            .windows(2)
            .map(|w| w[1].duration_since(w[0]).as_secs_f64() * 1e6 / rtt_factor)
            .collect();
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
    Bw(BwFigures),
    Lat(Option<LatStats>),
    /// The passive end of ib_read_lat / ib_atomic_lat: only the client measures.
    Passive,
}

pub(super) fn print_result(
    json: bool,
    p: &Params,
    mtu: u32,
    is_client: bool,
    r: &Outcome,
) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    let w =
        |out: &mut std::io::StdoutLock, s: String| writeln!(out, "{s}").map_err(CliError::Output);
    if json {
        let mut v = serde_json::json!({
            "test": format!("{:?}", p.op).to_lowercase(),
            "program": p.prog.perftest_name(),
            "role": if is_client { "client" } else { "server" },
            "lat": p.prog.lat(),
            "bytes": p.size,
            "iters": p.iters,
            "qps": p.num_qps,
            "mtu": mtu,
            "check": p.check,
        });
        match r {
            Outcome::Bw(f) => {
                v["seconds"] = serde_json::json!(f.seconds);
                v["bw_peak_mibps"] = serde_json::json!(f.bw_peak_mib);
                v["bw_avg_mibps"] = serde_json::json!(f.bw_avg_mib);
                v["bw_avg_mbps"] = serde_json::json!(f.bw_avg_mib * MIB / 1e6);
                v["msg_rate_mpps"] = serde_json::json!(f.msg_rate_mpps);
            }
            Outcome::Lat(Some(l)) => {
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
            Outcome::Lat(None) | Outcome::Passive => {}
        }
        return w(&mut out, v.to_string());
    }
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
            "                    {name} {} Test",
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
            match p.conn {
                super::Connection::Rc => "RC",
                super::Connection::Uc => "UC",
            },
            if p.check { "ON" } else { "OFF" }
        ),
    )?;
    w(&mut out, format!(" Mtu             : {mtu}[B]"))?;
    w(&mut out, line.clone())?;
    match r {
        Outcome::Bw(f) => {
            w(
                &mut out,
                " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
                    .into(),
            )?;
            w(
                &mut out,
                format!(
                    " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
                    f.size, f.messages, f.bw_peak_mib, f.bw_avg_mib, f.msg_rate_mpps
                ),
            )?;
        }
        Outcome::Lat(Some(l)) => {
            w(&mut out, " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ".into())?;
            w(
                &mut out,
                format!(
                    " {:<7} {:<10} {:<14.2} {:<12.2} {:<16.2} {:<14.2} {:<15.2} {:<22.2} {:.2}",
                    p.size, p.iters, l.min, l.max, l.typical, l.avg, l.stdev, l.p99, l.p999
                ),
            )?;
        }
        Outcome::Lat(None) => w(&mut out, " (too few samples for a latency report)".into())?,
        Outcome::Passive => w(
            &mut out,
            " This end is passive: the client measures (as perftest's server prints nothing)."
                .into(),
        )?,
    }
    w(&mut out, line)
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
    }
}
