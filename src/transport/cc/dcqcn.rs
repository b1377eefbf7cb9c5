//! The reaction point: DCQCN's per-QP rate limiter (Zhu et al., SIGCOMM 2015, section 3.1 and
//! figure 8), driven by CNPs, the bytes the QP sends and the time.
//!
//! On a CNP the target rate takes the current rate and the current rate is cut by `alpha / 2`
//! (alpha: the estimate of how congested the path is, raised on every CNP and decayed every
//! `dce_tcp_rtt` without one). Then two counters raise the rate back: a timer stage every
//! `rpg_time_reset` and a byte stage every `rpg_byte_reset` bytes sent. Each stage moves the
//! current rate halfway to the target (fast recovery) while both counters are below
//! `rpg_threshold` (F); after that the target itself grows by `rpg_ai_rate` (additive
//! increase) or, once both counters are past F, by `rpg_hai_rate` times how far past
//! (hyper increase). A QP never congested sends unpaced, at the line rate.

use std::time::Duration;

/// DCQCN reaction point parameters, under mlx5's names (spec-notes/congestion.md gives each
/// default's source). Rates in Mb/s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DcqcnParams {
    /// The rate a QP starts at and never exceeds (mlx5 `rp_max_rate`, 0 there meaning the
    /// port's line rate; softroce has no line rate of its own, so it is configured).
    pub max_rate_mbps: f64,
    /// Period of the rate increase timer (the paper's T).
    pub rpg_time_reset: Duration,
    /// Bytes sent per byte-counter stage (the paper's B).
    pub rpg_byte_reset: u64,
    /// Stages of fast recovery before additive increase (the paper's F).
    pub rpg_threshold: u32,
    /// Additive increase step (the paper's R_AI), Mb/s.
    pub rpg_ai_rate_mbps: f64,
    /// Hyper increase step (the paper's R_HAI), Mb/s.
    pub rpg_hai_rate_mbps: f64,
    /// The largest cut of one CNP, in percent of the current rate.
    pub rpg_min_dec_fac: u32,
    /// The rate a QP is never cut below, Mb/s.
    pub rpg_min_rate_mbps: f64,
    /// The gain g of alpha's moving average, in 1/1024 (fixed point with 10 fraction bits, as
    /// mlx5 takes it).
    pub dce_tcp_g: u32,
    /// Period of alpha's update (the paper's K).
    pub dce_tcp_rtt: Duration,
    /// Alpha at the first CNP, in 1/1024.
    pub initial_alpha_value: u32,
    /// The least time between two rate cuts; CNPs within it only count for alpha.
    pub rate_reduce_monitor_period: Duration,
}

impl Default for DcqcnParams {
    fn default() -> Self {
        DcqcnParams {
            max_rate_mbps: 10_000.0,
            rpg_time_reset: Duration::from_micros(55),
            rpg_byte_reset: 10 * 1024 * 1024,
            rpg_threshold: 5,
            rpg_ai_rate_mbps: 40.0,
            rpg_hai_rate_mbps: 400.0,
            rpg_min_dec_fac: 50,
            rpg_min_rate_mbps: 1.0,
            dce_tcp_g: 4,
            dce_tcp_rtt: Duration::from_micros(55),
            initial_alpha_value: 1023,
            rate_reduce_monitor_period: Duration::from_micros(4),
        }
    }
}

/// One QP's reaction point (see the module documentation).
#[derive(Debug, Clone)]
pub struct ReactionPoint {
    p: DcqcnParams,
    /// Current rate (RC), Mb/s.
    rc: f64,
    /// Target rate (RT), Mb/s.
    rt: f64,
    /// Congestion estimate, 0..=1.
    alpha: f64,
    /// Between the first CNP and full recovery: the rate is limited and the stages run.
    limited: bool,
    /// Timer stages since the last cut.
    t_stage: u32,
    /// Byte-counter stages since the last cut.
    bc_stage: u32,
    /// Bytes sent in the current byte-counter stage.
    bytes: u64,
    next_increase: Option<Duration>,
    next_alpha: Option<Duration>,
    /// A CNP arrived in the current alpha period.
    cnp_in_period: bool,
    last_cut: Option<Duration>,
    /// The earliest instant the next packet may leave.
    next_send: Duration,
}

/// Below this alpha no update is worth a timer.
const ALPHA_FLOOR: f64 = 1.0 / 1024.0;

impl ReactionPoint {
    /// A reaction point at the line rate, never congested.
    pub fn new(p: DcqcnParams) -> ReactionPoint {
        ReactionPoint {
            p,
            rc: p.max_rate_mbps,
            rt: p.max_rate_mbps,
            alpha: p.initial_alpha_value as f64 / 1024.0,
            limited: false,
            t_stage: 0,
            bc_stage: 0,
            bytes: 0,
            next_increase: None,
            next_alpha: None,
            cnp_in_period: false,
            last_cut: None,
            next_send: Duration::ZERO,
        }
    }

    /// The current rate, Mb/s.
    pub fn rate_mbps(&self) -> f64 {
        self.rc
    }

    /// The target rate, Mb/s.
    pub fn target_mbps(&self) -> f64 {
        self.rt
    }

    /// The congestion estimate alpha, 0..=1.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// Whether the QP is paced (below its line rate since a CNP).
    pub fn is_limited(&self) -> bool {
        self.limited
    }

    fn g(&self) -> f64 {
        self.p.dce_tcp_g as f64 / 1024.0
    }

    /// A CNP for this QP arrived at `now`. Returns whether it cut the rate (a CNP within
    /// `rate_reduce_monitor_period` of the last cut only raises alpha).
    pub fn on_cnp(&mut self, now: Duration) -> bool {
        self.cnp_in_period = true;
        if self
            .last_cut
            .is_some_and(|t| now.saturating_sub(t) < self.p.rate_reduce_monitor_period)
        {
            return false;
        }
        if !self.limited {
            // The first CNP of a congestion episode: alpha starts from its initial value
            // unless an earlier episode's estimate is still decaying.
            if self.next_alpha.is_none() {
                self.alpha = self.p.initial_alpha_value as f64 / 1024.0;
            }
            self.limited = true;
            // Pacing starts now, not at some instant of the unpaced past.
            self.next_send = now;
        }
        let cut = (1.0 - self.alpha / 2.0).max(1.0 - self.p.rpg_min_dec_fac as f64 / 100.0);
        self.rt = self.rc;
        self.rc = (self.rc * cut).max(self.p.rpg_min_rate_mbps);
        let g = self.g();
        self.alpha = ((1.0 - g) * self.alpha + g).min(1.0);
        self.t_stage = 0;
        self.bc_stage = 0;
        self.bytes = 0;
        self.next_increase = Some(now + self.p.rpg_time_reset);
        self.next_alpha = Some(now + self.p.dce_tcp_rtt);
        self.cnp_in_period = false;
        self.last_cut = Some(now);
        true
    }

    /// One rate increase event (a timer or byte-counter stage completed).
    fn increase(&mut self) {
        let f = self.p.rpg_threshold;
        let (lo, hi) = (
            self.t_stage.min(self.bc_stage),
            self.t_stage.max(self.bc_stage),
        );
        if hi < f {
            // Fast recovery: towards the rate before the cut.
        } else if lo > f {
            self.rt += (lo - f) as f64 * self.p.rpg_hai_rate_mbps;
        } else {
            self.rt += self.p.rpg_ai_rate_mbps;
        }
        let max = self.p.max_rate_mbps;
        self.rt = self.rt.min(max);
        self.rc = ((self.rt + self.rc) / 2.0).min(max);
        if max - self.rc < max * 1e-4 {
            // Recovered: back to the line rate, unpaced, the stages stop.
            self.rc = max;
            self.rt = max;
            self.limited = false;
            self.next_increase = None;
        }
    }

    /// `bytes` (a whole packet) left at `now`: moves the transmit budget on and feeds the
    /// byte counter.
    pub fn on_sent(&mut self, now: Duration, bytes: usize) {
        if !self.limited {
            return;
        }
        let secs = bytes as f64 * 8.0 / (self.rc * 1e6);
        self.next_send = self.next_send.max(now) + Duration::from_secs_f64(secs);
        self.bytes += bytes as u64;
        if self.bytes >= self.p.rpg_byte_reset {
            self.bytes = 0;
            self.bc_stage = self.bc_stage.saturating_add(1);
            self.increase();
        }
    }

    /// The earliest instant the QP's next packet may leave (`Duration::ZERO` when unpaced).
    pub fn send_at(&self) -> Duration {
        if self.limited {
            self.next_send
        } else {
            Duration::ZERO
        }
    }

    /// Whether a packet may leave at `now`.
    pub fn may_send(&self, now: Duration) -> bool {
        self.send_at() <= now
    }

    /// The earliest instant [`Self::handle_timeout`] has work.
    pub fn poll_timeout(&self) -> Option<Duration> {
        match (self.next_increase, self.next_alpha) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Runs the timers due at `now`: alpha's decay and the rate increase timer.
    pub fn handle_timeout(&mut self, now: Duration) {
        if let Some(t) = self.next_alpha.filter(|&t| t <= now) {
            if !self.cnp_in_period {
                self.alpha *= 1.0 - self.g();
            }
            self.cnp_in_period = false;
            self.next_alpha = if self.limited || self.alpha >= ALPHA_FLOOR {
                Some(t.max(now.saturating_sub(self.p.dce_tcp_rtt)) + self.p.dce_tcp_rtt)
            } else {
                None
            };
        }
        if let Some(t) = self.next_increase.filter(|&t| t <= now) {
            self.t_stage = self.t_stage.saturating_add(1);
            self.next_increase =
                Some(t.max(now.saturating_sub(self.p.rpg_time_reset)) + self.p.rpg_time_reset);
            self.increase();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn a_cnp_cuts_by_half_alpha_and_recovery_goes_halfway_each_stage() {
        let p = DcqcnParams {
            max_rate_mbps: 1000.0,
            initial_alpha_value: 1024,
            dce_tcp_g: 0,
            ..DcqcnParams::default()
        };
        let mut rp = ReactionPoint::new(p);
        assert!(!rp.is_limited() && rp.may_send(Duration::ZERO));
        assert!(rp.on_cnp(us(10)));
        // alpha = 1: the cut is alpha / 2 = 50 %.
        assert_eq!((rp.rate_mbps(), rp.target_mbps()), (500.0, 1000.0));
        // A second CNP inside the monitor period does not cut again.
        assert!(!rp.on_cnp(us(12)));
        assert_eq!(rp.rate_mbps(), 500.0);
        // Fast recovery: each timer stage halves the distance to the target.
        assert_eq!(rp.poll_timeout(), Some(us(10 + 55)));
        rp.handle_timeout(us(65));
        assert_eq!(rp.rate_mbps(), 750.0);
        rp.handle_timeout(us(120));
        assert_eq!(rp.rate_mbps(), 875.0);
    }

    #[test]
    fn additive_then_hyper_increase_after_threshold() {
        let p = DcqcnParams {
            max_rate_mbps: 100_000.0,
            initial_alpha_value: 1024,
            rpg_byte_reset: 1000,
            ..DcqcnParams::default()
        };
        let mut rp = ReactionPoint::new(p);
        // Two cuts, so the target lies below the line rate and can grow.
        rp.on_cnp(Duration::ZERO);
        rp.on_cnp(us(10));
        let rt0 = rp.target_mbps();
        assert!(rt0 < 60_000.0);
        // Timer stages 1..=4 (both counters below F = 5): fast recovery, the target stays.
        for k in 1..=4 {
            rp.handle_timeout(us(10 + 55 * k));
        }
        assert_eq!(rp.target_mbps(), rt0);
        // The fifth reaches F: additive increase.
        rp.handle_timeout(us(285));
        assert_eq!(rp.target_mbps(), rt0 + 40.0);
        // Byte stages bc = 1..=5 with t = 5 (one counter at F, neither both past it):
        // additive.
        for _ in 0..5 {
            rp.on_sent(us(300), 1000);
        }
        assert_eq!(rp.target_mbps(), rt0 + 6.0 * 40.0);
        // t = 6, bc = 5: still additive (min = 5 is not past F).
        rp.handle_timeout(us(340));
        assert_eq!(rp.target_mbps(), rt0 + 7.0 * 40.0);
        // bc = 6 with t = 6: both past F, hyper increase by (6 - 5) * R_HAI.
        rp.on_sent(us(341), 1000);
        assert_eq!(rp.target_mbps(), rt0 + 7.0 * 40.0 + 400.0);
    }

    #[test]
    fn alpha_rises_on_cnps_and_decays_without() {
        let mut rp = ReactionPoint::new(DcqcnParams::default());
        rp.on_cnp(Duration::ZERO);
        let a1 = rp.alpha();
        rp.handle_timeout(us(55));
        let a2 = rp.alpha();
        assert!(a2 < a1, "no CNP in the period: alpha decays ({a1} -> {a2})");
        rp.on_cnp(us(60));
        assert!(rp.alpha() > a2);
    }

    #[test]
    fn pacing_spaces_packets_at_the_current_rate_and_the_floor_holds() {
        let p = DcqcnParams {
            max_rate_mbps: 1000.0,
            initial_alpha_value: 1024,
            rpg_min_rate_mbps: 100.0,
            rate_reduce_monitor_period: Duration::ZERO,
            ..DcqcnParams::default()
        };
        let mut rp = ReactionPoint::new(p);
        rp.on_cnp(Duration::ZERO);
        // 500 Mb/s: a 1000-byte packet takes 16 us.
        rp.on_sent(Duration::ZERO, 1000);
        assert_eq!(rp.send_at(), us(16));
        assert!(!rp.may_send(us(15)) && rp.may_send(us(16)));
        for _ in 0..50 {
            rp.on_cnp(us(1));
        }
        assert_eq!(rp.rate_mbps(), 100.0, "never below rpg_min_rate");
    }

    #[test]
    fn recovers_to_the_line_rate_and_stops_pacing() {
        let mut rp = ReactionPoint::new(DcqcnParams::default());
        rp.on_cnp(Duration::ZERO);
        let mut now = Duration::ZERO;
        for _ in 0..10_000 {
            let Some(t) = rp.poll_timeout() else { break };
            now = t;
            rp.handle_timeout(now);
        }
        assert!(!rp.is_limited(), "recovered by {now:?}");
        assert_eq!(rp.rate_mbps(), 10_000.0);
        assert_eq!(rp.send_at(), Duration::ZERO);
    }
}
