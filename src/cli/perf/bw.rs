//! The bandwidth programs (ib_send_bw, ib_write_bw, ib_read_bw, ib_atomic_bw): the requester
//! keeps tx_depth work requests in flight per QP; the SEND server keeps rx_depth receives
//! posted; the passive RDMA server waits, verifies under --check and prints the client's report.

use std::time::{Duration, Instant};

use softroce::ib::*;
use softroce::oob::perftest::{Exchange, KeyMsg};
use std::result::Result;

use super::params::{Params, Program};
use super::pattern::check_region;
use super::render::print_forever_row;
use super::report::{cpu_stat, cpu_util, BwFigures, BwRun, Outcome};
use super::resources::{Test, PREALLOCATED_TIMESTAMPS};
use super::PerfOp;
use crate::cli::CliError;

impl Test<'_> {
    /// Runs a bandwidth program after connecting, through the report exchange and the close:
    /// one size (-s) or all (-a), one direction or both (-b), as perftest's *_bw mains.
    pub(super) fn run_bw(&mut self, mut x: Exchange, k0: &KeyMsg) -> Result<Outcome, CliError> {
        let p = self.p;
        let mut rows = Vec::new();
        let mut both = None;
        match p.prog {
            Program::WriteBw | Program::ReadBw | Program::AtomicBw if p.duplex => {
                // Both ends are requesters: a barrier before each size (and, as perftest from
                // version 4.6 on, after it under -a), then the reports are summed.
                for size in p.sizes() {
                    self.set_size(size);
                    if self.warm {
                        self.warm_up()?;
                    }
                    self.hs(&mut x, k0)?;
                    let run = self.bandwidth_client()?;
                    let mine = self.figures(&run, size);
                    if p.all {
                        self.hs(&mut x, k0)?;
                    }
                    let theirs = x.bw_reports(&mine.report(p.gbits)).map_err(CliError::Oob)?;
                    let theirs = BwFigures::from_report(&theirs, p.gbits);
                    rows.push(mine.plus(&theirs));
                    both = Some((mine, theirs));
                }
                self.close(x, k0)?;
            }
            Program::WriteBw | Program::ReadBw | Program::AtomicBw => {
                let mut last = None;
                if self.is_client {
                    for size in p.sizes() {
                        self.set_size(size);
                        if self.warm {
                            self.warm_up()?;
                        }
                        let run = self.bandwidth_client()?;
                        let f = self.figures(&run, size);
                        rows.push(f);
                        last = Some(f);
                    }
                }
                self.hs(&mut x, k0)?;
                if p.check && !self.is_client {
                    self.verify_server();
                }
                self.verdicts(&mut x)?;
                let report = last
                    .unwrap_or_else(|| BwFigures::empty(p.size))
                    .report(p.gbits);
                let theirs = x.bw_reports(&report).map_err(CliError::Oob)?;
                self.close(x, k0)?;
                // The passive server prints the client's (last) report.
                if !self.is_client {
                    rows.push(BwFigures::from_report(&theirs, p.gbits));
                }
            }
            Program::SendBw => {
                for size in p.sizes() {
                    if p.all {
                        // ib_send_bw -a: receives, a barrier, the size, a barrier.
                        self.set_size(size);
                        self.post_receives()?;
                        self.hs(&mut x, k0)?;
                    }
                    if p.duplex {
                        // Both directions at once, then the reports summed (send_bw.c).
                        let run = self.bandwidth_bi()?;
                        let mine = self.figures(&run, size);
                        let theirs = x.bw_reports(&mine.report(p.gbits)).map_err(CliError::Oob)?;
                        let theirs = BwFigures::from_report(&theirs, p.gbits);
                        rows.push(mine.plus(&theirs));
                        both = Some((mine, theirs));
                    } else {
                        let m = if self.is_client {
                            self.bandwidth_client()?
                        } else {
                            self.bandwidth_server(&mut x)?
                        };
                        rows.push(self.figures(&m, size));
                    }
                    if p.all {
                        self.hs(&mut x, k0)?;
                    }
                }
                self.verdicts(&mut x)?;
                self.close(x, k0)?;
            }
            other => {
                return Err(CliError::Failed(format!(
                    "{} is not a bandwidth program",
                    other.perftest_name()
                )))
            }
        }
        Ok(Outcome::Bw { rows, both })
    }

    /// The requester side of ib_{send,write,read,atomic}_bw: tx_depth WRs in flight per QP,
    /// posted -l at a time with a completion every -Q, for -n iterations or, under -D, until
    /// the duration ends (completions counted only between the margins, as perftest's
    /// SAMPLE_STATE). RC completes a QP's WRs in order, so a completion for WR k accounts for
    /// every earlier unsignaled one.
    pub(super) fn bandwidth_client(&mut self) -> Result<BwRun, CliError> {
        let n = self.conns.len();
        let mut meter = Meter::new(&self.p);
        let timed = !meter.endless();
        let iters = if timed { self.p.iters } else { u64::MAX };
        let mut run = meter.start(self.p.iters as usize * n);
        let mut wcs = vec![WorkCompletion::default(); 64];
        let mut posted = vec![0u64; n];
        let mut done = vec![0u64; n];
        let mut last = Instant::now();
        let mut ended = false;
        loop {
            if !ended {
                self.fill(&mut posted, &done, iters, timed.then_some(&mut run))?;
            }
            // perftest's duration mode stops at END_STATE without waiting for what is still
            // in flight (its last WRs may be unsignaled).
            if ended || (0..n).all(|c| done[c] == posted[c] && posted[c] >= iters) {
                break;
            }
            let k = self.poll(&mut wcs, &mut last)?;
            let now = Instant::now();
            ended = meter.ended(now);
            for wc in &wcs[..k] {
                let c = self.conn_of(wc)?;
                let newly = (wc.wr_id + 1).saturating_sub(done[c]);
                done[c] = done[c].max(wc.wr_id + 1);
                meter.count(&mut run, newly, now);
                let r = self.check_completion(c, wc.wr_id);
                self.note(r);
            }
            meter.tick(&mut run, now)?;
        }
        meter.finish(&mut run);
        Ok(run)
    }

    /// Fills every QP's send queue up to tx_depth, a post list at a time, with WRs up to
    /// `iters`; notes their post times in `timed`.
    fn fill(
        &self,
        posted: &mut [u64],
        done: &[u64],
        iters: u64,
        mut timed: Option<&mut BwRun>,
    ) -> Result<(), CliError> {
        let depth = self.p.tx_depth as u64;
        let list = self.p.post_list as u64;
        for c in 0..posted.len() {
            while posted[c] < iters && posted[c] - done[c] + list.min(iters - posted[c]) <= depth {
                let k = list.min(iters - posted[c]);
                if let Some(run) = timed.as_deref_mut() {
                    let now = Instant::now();
                    run.posted.extend((0..k).map(|_| now));
                }
                self.post_ops(c, posted[c], k, true)?;
                posted[c] += k;
            }
        }
        Ok(())
    }

    /// ib_send_bw -b (perftest's run_iter_bi): each end sends -n messages per QP and receives
    /// as many, keeping rx_depth receives posted; the client sends at once, the server once its
    /// first message has arrived. The sends are timed as in [`Test::bandwidth_client`].
    pub(super) fn bandwidth_bi(&mut self) -> Result<BwRun, CliError> {
        let n = self.conns.len();
        let iters = self.p.iters;
        let mut run = Meter::new(&self.p).start(iters as usize * n);
        let mut wcs = vec![WorkCompletion::default(); 64];
        let (mut posted, mut done, mut got) = (vec![0u64; n], vec![0u64; n], vec![0u64; n]);
        let mut may_send = self.is_client;
        let mut last = Instant::now();
        while (0..n).any(|c| done[c] < iters || got[c] < iters) {
            if may_send {
                self.fill(&mut posted, &done, iters, Some(&mut run))?;
            }
            let k = self.poll(&mut wcs, &mut last)?;
            let now = Instant::now();
            for wc in &wcs[..k] {
                let c = self.conn_of(wc)?;
                if wc.opcode == WcOpcode::Recv {
                    got[c] += 1;
                    may_send = true;
                    let next = wc.wr_id + self.p.rx_depth as u64;
                    if next < iters {
                        self.post_recv(c, next)?;
                    }
                } else {
                    let newly = (wc.wr_id + 1).saturating_sub(done[c]);
                    done[c] = done[c].max(wc.wr_id + 1);
                    run.completed.extend((0..newly).map(|_| now));
                }
            }
        }
        Ok(run)
    }

    /// A run's figures under this test's peak rule (-N).
    fn figures(&self, run: &BwRun, size: u64) -> BwFigures {
        run.figures(size, self.p.no_peak)
    }

    /// perftest's perform_warm_up: tx_depth WRs per QP (at most -n), waited for, before the
    /// measured run.
    pub(super) fn warm_up(&mut self) -> Result<(), CliError> {
        let k = (self.p.tx_depth as u64).min(self.p.iters).max(1);
        for c in 0..self.conns.len() {
            for iter in 0..k {
                self.post_op(c, iter)?;
            }
        }
        let mut wcs = vec![WorkCompletion::default(); 64];
        let mut left = k * self.conns.len() as u64;
        let mut last = Instant::now();
        while left > 0 {
            left -= self.poll(&mut wcs, &mut last)? as u64;
        }
        Ok(())
    }

    /// The receiving server of ib_send_bw: keeps rx_depth receives posted per QP and times
    /// from the first arrival to the last, as perftest's run_iter_bw_server; under -D it
    /// counts the arrivals between the margins of its own clock, reposting every receive so
    /// that the sender's last messages still find one.
    pub(super) fn bandwidth_server(&mut self, x: &mut Exchange) -> Result<BwRun, CliError> {
        let n = self.conns.len();
        let mut meter = Meter::new(&self.p);
        let total = self.p.iters as usize * n;
        let mut run = meter.start(total);
        run.posted = Vec::with_capacity(1);
        let mut wcs = vec![WorkCompletion::default(); 64];
        let mut got = vec![0u64; n];
        // --check: (QP, message, bytes) of the arrivals, verified once the run is over.
        let mut unchecked: Vec<(usize, u64, u32)> = Vec::new();
        let mut last = Instant::now();
        let mut look = Instant::now();
        loop {
            if got.iter().sum::<u64>() == 0 && look.elapsed() > Duration::from_millis(200) {
                look = Instant::now();
                if let Some(e) = self.sender_gone(x) {
                    return Err(e);
                }
            }
            let done = if meter.endless() {
                meter.ended(Instant::now())
            } else {
                run.completed.len() >= total
            };
            if done {
                break;
            }
            let k = self
                .poll(&mut wcs, &mut last)
                .map_err(|e| self.stalled(e, got.iter().sum(), total as u64))?;
            let now = Instant::now();
            if k > 0 && run.posted.is_empty() {
                run.posted.push(now);
            }
            for wc in &wcs[..k] {
                let c = self.conn_of(wc)?;
                let msg = wc.wr_id;
                if self.p.check {
                    // Checked after the run: --check gives every message a region of its own
                    // (and excludes -D), so nothing overwrites it, and a check here would hold
                    // back the reposts until the sender ran out of receives (RNR NAKs and
                    // retransmissions under -q 4, issue #23).
                    unchecked.push((c, msg, wc.byte_len));
                }
                got[c] += 1;
                meter.count(&mut run, 1, now);
                let next = msg + self.p.rx_depth as u64;
                if next < self.p.iters || meter.endless() {
                    self.post_recv(c, next)?;
                }
            }
            meter.tick(&mut run, now)?;
        }
        meter.finish(&mut run);
        // A UD completion counts the GRH room too.
        let want = self.p.size + self.p.grh_room();
        for (c, msg, byte_len) in unchecked {
            let r = if byte_len as u64 != want {
                Err(format!(
                    "message {msg}: {byte_len} bytes received, expected {want}"
                ))
            } else {
                check_region(&self.conns[c].mr, self.payload_at(msg), self.p.size, msg)
                    .map(|()| (1, self.p.size))
            };
            self.note(r);
        }
        Ok(run)
    }

    /// Under --check, the server verifies what the client wrote or what the atomics left.
    pub(super) fn verify_server(&mut self) {
        let p = self.p;
        // UC: the client's completion says its WRITE left, not that it arrived; give packets
        // still in flight a moment to land before judging (a lost one never will).
        let settle = std::time::Duration::from_secs(if p.conn == super::Connection::Uc {
            2
        } else {
            0
        });
        let start = Instant::now();
        for c in 0..self.conns.len() {
            let mr = &self.conns[c].mr;
            let write_ok = || {
                (0..p.iters).try_for_each(|iter| {
                    check_region(
                        mr,
                        self.layout.half + self.layout.offset(iter),
                        p.size,
                        iter,
                    )
                })
            };
            let r = match p.op {
                PerfOp::Write => loop {
                    let r = write_ok();
                    if r.is_ok() || start.elapsed() >= settle {
                        break r.map(|()| (p.iters, p.iters * p.size));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(5));
                },
                // The final value accounts for every operation.
                PerfOp::Atomic => match mr.load_u64(self.layout.half) {
                    Ok(v) if v == p.iters => Ok((p.iters, 8)),
                    Ok(v) => Err(format!(
                        "atomic check failed: the target holds {v} after {} operations",
                        p.iters
                    )),
                    Err(e) => Err(e.to_string()),
                },
                _ => Ok((0, 0)),
            };
            self.note(r);
        }
    }
}

/// How a bandwidth loop counts its completions: every message timed (-n), only those of the
/// sampled window (-D, with --cpu_util's readings at its edges), or a row printed every -D
/// seconds forever (--run_infinitely).
struct Meter {
    clock: Option<Clock>,
    /// --run_infinitely: when the current interval started, and how long each lasts.
    interval: Option<(Instant, Duration)>,
    /// The first interval's row prints the table's head.
    first_row: bool,
    cpu_util: bool,
    cpu_start: Option<(u64, u64)>,
    cpu_end: Option<(u64, u64)>,
    size: u64,
    gbits: bool,
}

impl Meter {
    fn new(p: &Params) -> Meter {
        let every = p.duration.unwrap_or(Duration::from_secs(5));
        Meter {
            clock: p
                .duration
                .filter(|_| !p.forever)
                .map(|d| Clock::new(d, p.margin)),
            interval: p.forever.then(|| (Instant::now(), every)),
            first_row: true,
            cpu_util: p.cpu_util,
            cpu_start: None,
            cpu_end: None,
            size: p.size,
            gbits: p.gbits,
        }
    }

    /// Not a fixed count of messages.
    fn endless(&self) -> bool {
        self.clock.is_some() || self.interval.is_some()
    }

    /// The run's record: room for `total` timestamps when every message is timed.
    fn start(&self, total: usize) -> BwRun {
        let window = match (self.clock, self.interval) {
            (Some(c), _) => Some((0, c.sample_seconds())),
            (None, Some((_, every))) => Some((0, every.as_secs_f64())),
            (None, None) => None,
        };
        BwRun {
            posted: Vec::with_capacity(if window.is_some() {
                0
            } else {
                total.min(PREALLOCATED_TIMESTAMPS)
            }),
            completed: Vec::with_capacity(if window.is_some() {
                0
            } else {
                total.min(PREALLOCATED_TIMESTAMPS)
            }),
            sampled: window,
            cpu: None,
        }
    }

    /// Whether a -D run has reached its end (reading the CPU at the window's edges).
    fn ended(&mut self, now: Instant) -> bool {
        let Some(c) = self.clock else { return false };
        let phase = c.phase(now);
        if self.cpu_util {
            if phase == Phase::Sample && self.cpu_start.is_none() {
                self.cpu_start = cpu_stat();
            }
            if matches!(phase, Phase::StopSample | Phase::End)
                && self.cpu_start.is_some()
                && self.cpu_end.is_none()
            {
                self.cpu_end = cpu_stat();
            }
        }
        phase == Phase::End
    }

    /// Counts `newly` completed messages at `now`.
    fn count(&self, run: &mut BwRun, newly: u64, now: Instant) {
        let counts = self.clock.map_or(true, |c| c.phase(now) == Phase::Sample);
        match &mut run.sampled {
            Some((n, _)) if counts => *n += newly,
            Some(_) => {}
            None => run.completed.extend((0..newly).map(|_| now)),
        }
    }

    /// --run_infinitely: prints the interval's row once it has lasted its seconds.
    fn tick(&mut self, run: &mut BwRun, now: Instant) -> Result<(), CliError> {
        let Some((start, every)) = self.interval else {
            return Ok(());
        };
        let secs = now.saturating_duration_since(start);
        if secs < every {
            return Ok(());
        }
        if let Some((n, _)) = run.sampled {
            run.sampled = Some((n, secs.as_secs_f64()));
            let f = run.figures(self.size, true);
            print_forever_row(&f, self.gbits, self.first_row)?;
            run.sampled = Some((0, secs.as_secs_f64()));
        }
        self.first_row = false;
        self.interval = Some((now, every));
        Ok(())
    }

    /// Records --cpu_util's figure.
    fn finish(&self, run: &mut BwRun) {
        run.cpu = cpu_util(self.cpu_start, self.cpu_end);
    }
}

/// Where a -D run is: perftest's START_STATE (the first margin), SAMPLE_STATE, then
/// STOP_SAMPLE_STATE (the last margin) and END_STATE, driven by alarms there and by the
/// monotonic clock here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Warming up: completions are not counted.
    Start,
    /// Completions are counted.
    Sample,
    /// Cooling down: not counted.
    StopSample,
    /// No more work requests are posted.
    End,
}

/// The clock of a -D run, started when the traffic starts.
#[derive(Debug, Clone, Copy)]
pub(super) struct Clock {
    start: Instant,
    duration: Duration,
    margin: Duration,
}

impl Clock {
    /// Starts now.
    pub(super) fn new(duration: Duration, margin: Duration) -> Clock {
        Clock {
            start: Instant::now(),
            duration,
            margin,
        }
    }

    /// The phase at `now`.
    pub(super) fn phase(&self, now: Instant) -> Phase {
        let t = now.saturating_duration_since(self.start);
        if t < self.margin {
            Phase::Start
        } else if t + self.margin < self.duration {
            Phase::Sample
        } else if t < self.duration {
            Phase::StopSample
        } else {
            Phase::End
        }
    }

    /// The length of the sampled window: duration - 2 x margin.
    pub(super) fn sample_seconds(&self) -> f64 {
        self.duration
            .saturating_sub(2 * self.margin)
            .as_secs_f64()
            .max(1e-9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_duration_clock_samples_between_the_margins() {
        let c = Clock::new(Duration::from_secs(8), Duration::from_secs(2));
        let at = |s: u64| c.phase(c.start + Duration::from_millis(s));
        assert_eq!(at(0), Phase::Start);
        assert_eq!(at(1999), Phase::Start);
        assert_eq!(at(2000), Phase::Sample);
        assert_eq!(at(5999), Phase::Sample);
        assert_eq!(at(6000), Phase::StopSample);
        assert_eq!(at(8000), Phase::End);
        assert!((c.sample_seconds() - 4.0).abs() < 1e-9);
    }
}
