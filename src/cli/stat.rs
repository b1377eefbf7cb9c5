//! `softroce stat`: the live counters of running softroce processes, read without stopping
//! them (src/driver/stats.rs), in the manner of `rdma statistic show`: one line per device,
//! `--qp` adds one per QP, `--watch` repeats every interval.

use std::io::Write;
use std::time::{Duration, Instant};

use clap::Args;
use softroce::driver::stats::{self, DeviceStats, StatError};

use super::CliError;

/// `softroce stat` flags.
#[derive(Debug, Args)]
pub struct StatArgs {
    /// The process to show (its PID); every softroce process of this user when omitted.
    pub pid: Option<u32>,
    /// Every softroce process of this user (the default without a PID).
    #[arg(long, conflicts_with = "pid")]
    pub all: bool,
    /// Also one line per QP: type, state, peer QP, PSNs, outstanding PSNs, send queue,
    /// DCQCN rate.
    #[arg(long)]
    pub qp: bool,
    /// Repeat every `--interval` seconds until interrupted (or `--count` snapshots).
    #[arg(long)]
    pub watch: bool,
    /// Seconds between snapshots with `--watch`.
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// With `--watch`, stop after this many snapshots (0: until interrupted).
    #[arg(long, default_value_t = 0)]
    pub count: u64,
}

/// The `qp` fields' names, in the order the snapshot gives them.
const QP_FIELDS: [&str; 9] = [
    "qpn",
    "type",
    "state",
    "dest_qpn",
    "sq_psn",
    "rq_psn",
    "outstanding",
    "send_queue",
    "rate_mbps",
];

fn render(pid: u32, devs: &[DeviceStats], qp: bool, out: &mut String) {
    use std::fmt::Write as _;
    for d in devs {
        let _ = write!(out, "pid {pid} link {}", d.addr);
        for (n, v) in &d.counters {
            let _ = write!(out, " {n} {v}");
        }
        out.push('\n');
        if qp {
            for q in &d.qps {
                let _ = write!(out, "pid {pid} link {}", d.addr);
                for (n, v) in QP_FIELDS.iter().zip(q) {
                    let _ = write!(out, " {n} {v}");
                }
                out.push('\n');
            }
        }
    }
}

/// Runs `softroce stat`.
pub fn run(a: &StatArgs) -> Result<(), CliError> {
    if !(a.interval > 0.0 && a.interval.is_finite()) {
        return Err(CliError::Usage(
            "--interval must be a positive number".into(),
        ));
    }
    let every = Duration::from_secs_f64(a.interval);
    let mut shown = 0u64;
    loop {
        let started = Instant::now();
        let mut text = String::new();
        match a.pid {
            Some(pid) => match stats::query(pid) {
                Ok(d) => render(pid, &d, a.qp, &mut text),
                Err(StatError::NoProcess(p)) => {
                    return Err(CliError::Failed(format!(
                        "no softroce process {p} with open devices (looked in {})",
                        stats::stat_dir().display()
                    )))
                }
                Err(e) => return Err(CliError::Failed(format!("process {pid}: {e}"))),
            },
            None => {
                for pid in stats::list() {
                    // A process may exit between the listing and the query: skip it.
                    if let Ok(d) = stats::query(pid) {
                        render(pid, &d, a.qp, &mut text);
                    }
                }
            }
        }
        if a.watch {
            text.push('\n');
        }
        let mut o = std::io::stdout().lock();
        o.write_all(text.as_bytes()).map_err(CliError::Output)?;
        o.flush().map_err(CliError::Output)?;
        shown += 1;
        if !a.watch || (a.count != 0 && shown >= a.count) {
            return Ok(());
        }
        std::thread::sleep(every.saturating_sub(started.elapsed()));
    }
}
