//! What `softroce perf` measures: bandwidth and latency figures computed as perftest's
//! print_report_bw and print_report_lat, and the CPU utilisation of --cpu_util. How they are
//! printed is `render.rs`.

use std::time::Instant;

use softroce::oob::perftest::BwReport;

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
    pub(super) size: u64,
    pub(super) messages: u64,
    pub(super) seconds: f64,
    pub(super) bw_peak_mib: f64,
    pub(super) bw_avg_mib: f64,
    pub(super) msg_rate_mpps: f64,
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
pub(super) const GBIT: f64 = 125_000_000.0;

/// MB/s (2^20) to the report's unit.
pub(super) fn to_unit(mib: f64, gbits: bool) -> f64 {
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
    pub(super) unsorted: Vec<f64>,
    /// The sorted samples the statistics use, the two largest left out (-H).
    pub(super) sorted: Vec<f64>,
    pub(super) min: f64,
    pub(super) max: f64,
    pub(super) typical: f64,
    pub(super) avg: f64,
    pub(super) stdev: f64,
    pub(super) p99: f64,
    pub(super) p999: f64,
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
}
