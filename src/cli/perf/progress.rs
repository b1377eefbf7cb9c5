//! Progress of a run that lasts: a line on stderr every few seconds once a run has taken more
//! than a few, so that a test slowed by loss (each retransmission timeout waits 4.096 us x
//! 2^-u; 67 ms at perftest's default -u 14) does not look hung. The line says what the
//! transport is doing: packets both ways, retransmissions and the timeouts behind them.

use std::cell::Cell;
use std::time::{Duration, Instant};

use softroce::verbs::Context;

/// When the first line comes, and how often the next ones do.
const FIRST_AFTER: Duration = Duration::from_secs(3);
const EVERY: Duration = Duration::from_secs(3);

/// Counts work completions and prints the progress line when it is due.
#[derive(Debug)]
pub(super) struct Progress {
    start: Instant,
    next: Cell<Instant>,
    completions: Cell<u64>,
    /// -u, for the line's hint.
    qp_timeout: u8,
}

/// The local ACK timeout of exponent `u` (IBTA: 4.096 us x 2^u), for people.
pub(super) fn ack_timeout_text(u: u8) -> String {
    if u == 0 {
        return "none".into();
    }
    let us = 4.096 * f64::powi(2.0, u as i32);
    if us >= 1e6 {
        format!("{:.1} s", us / 1e6)
    } else if us >= 1e3 {
        format!("{:.1} ms", us / 1e3)
    } else {
        format!("{us:.0} us")
    }
}

impl Progress {
    /// Starts the clock of a run whose QPs have local ACK timeout exponent `qp_timeout`.
    pub(super) fn new(qp_timeout: u8) -> Progress {
        let start = Instant::now();
        Progress {
            start,
            next: Cell::new(start + FIRST_AFTER),
            completions: Cell::new(0),
            qp_timeout,
        }
    }

    /// Counts `n` work completions.
    pub(super) fn completed(&self, n: usize) {
        self.completions.set(self.completions.get() + n as u64);
    }

    /// Prints the progress line if it is due.
    pub(super) fn tick(&self, ctx: &Context) {
        let now = Instant::now();
        if now < self.next.get() {
            return;
        }
        self.next.set(now + EVERY);
        eprintln!("{}", self.line(ctx, now));
    }

    fn line(&self, ctx: &Context, now: Instant) -> String {
        let c = |name: &str| ctx.counter(name).unwrap_or(0);
        let elapsed = now.duration_since(self.start);
        let mut s = format!("perf: {} s: ", elapsed.as_secs());
        // A passive end (the server of WRITE, READ, atomics) completes nothing itself.
        if self.completions.get() > 0 {
            s += &format!("{} work completions; ", self.completions.get());
        }
        s += &format!(
            "{} packets sent, {} received",
            c("sent_pkts"),
            c("rcvd_pkts")
        );
        let (resent, timeouts, naks) = (c("retransmit_pkts"), c("timeouts"), c("rcvd_nak"));
        if resent + timeouts + naks > 0 {
            s += &format!(
                "; {resent} retransmitted after {timeouts} ACK timeouts ({} each, -u {}) and {naks} NAKs",
                ack_timeout_text(self.qp_timeout),
                self.qp_timeout
            );
            // Most of the time gone to waiting out timeouts: say what shortens them.
            let waited = timeouts as f64 * 4.096e-6 * f64::powi(2.0, self.qp_timeout as i32);
            if self.qp_timeout > 8 && waited > elapsed.as_secs_f64() / 4.0 {
                s += &format!(
                    " (about {waited:.0} s of waiting; a lower -u, e.g. -u 8 = 1 ms, recovers sooner on a short path)"
                );
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_timeouts_read_as_perftest_documents_them() {
        assert_eq!(ack_timeout_text(14), "67.1 ms");
        assert_eq!(ack_timeout_text(8), "1.0 ms");
        assert_eq!(ack_timeout_text(4), "66 us");
        assert_eq!(ack_timeout_text(0), "none");
        assert_eq!(ack_timeout_text(20), "4.3 s");
    }
}
