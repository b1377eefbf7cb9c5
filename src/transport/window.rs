//! The requester's send window: how many PSNs may be outstanding, cut on loss and regrown as
//! ACKs arrive (additive increase, multiplicative decrease).
//!
//! Why: recovery is Go-Back-N, so every loss costs a retransmission of everything sent after
//! the lost packet. With rxe's fixed 128-PSN window a 10% loss rate resends a large part of
//! a window per loss (the simulation of 100 64-KiB WRITEs: 23,577 packets resent to deliver
//! 1,600; with this window about 1,100). Shrinking the window while losses occur bounds that
//! waste; without loss the window stays at rxe's 128 PSNs, so loss-free behaviour and the
//! packets on the wire are exactly rxe's. The window is local policy: the peer sees only fewer
//! packets in flight and more AckReq bits, which IBTA permits. Rule 32 in
//! spec-notes/rc-transport.md; goodput in BENCHMARKS.md.

use super::params::{ACKREQ_EVERY, MAX_UNACKED_PSNS};

/// The smallest window. Measured on loopback at 10% loss (64 KiB WRITEs, `-u 4`, AckReq on
/// every packet while shrunk): floors of 2, 4, 8 and 16 PSNs gave 248, 273, 225 and 166 MB/s;
/// smaller windows wait on round trips, larger ones resend more per loss.
pub const MIN_WINDOW: u32 = 4;

/// AIMD window over PSNs.
#[derive(Debug, Clone)]
pub struct SendWindow {
    /// Current limit on outstanding PSNs, `MIN_WINDOW..=MAX_UNACKED_PSNS`.
    limit: u32,
    /// Below this the window grows by one PSN per PSN acknowledged; above it, by one PSN per
    /// window acknowledged.
    threshold: u32,
    /// PSNs acknowledged since the last additive step.
    acked: u32,
}

impl Default for SendWindow {
    fn default() -> SendWindow {
        SendWindow {
            limit: MAX_UNACKED_PSNS,
            threshold: MAX_UNACKED_PSNS,
            acked: 0,
        }
    }
}

impl SendWindow {
    /// PSNs that may be outstanding now.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// How often the requester asks for an ACK: every `ACKREQ_EVERY` packets (rxe) while the
    /// window is full-size; every half window once losses have shrunk it. The window then
    /// slides in steps of half its size, and a lost packet is always followed by later ones
    /// (which draw a sequence NAK from the responder) instead of ending a burst and waiting
    /// out the retransmission timer.
    pub fn ack_every(&self) -> u32 {
        if self.limit >= MAX_UNACKED_PSNS {
            ACKREQ_EVERY + 1
        } else {
            (self.limit / 2).max(1)
        }
    }

    /// A loss was detected (sequence NAK, a gap in responses, or a timeout): halve.
    pub fn on_loss(&mut self) {
        self.threshold = (self.limit / 2).max(MIN_WINDOW);
        self.limit = self.threshold;
        self.acked = 0;
    }

    /// The retransmission timer expired: nothing came back for a whole timeout, so start
    /// again from the floor and grow quickly (one PSN per PSN acknowledged) back to the
    /// threshold. Called after `on_loss` for the same event, which has already halved it.
    pub fn on_timeout(&mut self) {
        self.limit = MIN_WINDOW;
        self.acked = 0;
    }

    /// `n` more PSNs were acknowledged.
    pub fn on_acked(&mut self, n: u32) {
        if self.limit >= MAX_UNACKED_PSNS {
            return;
        }
        if self.limit < self.threshold {
            self.limit = (self.limit + n).min(self.threshold);
            return;
        }
        self.acked += n;
        while self.acked >= self.limit && self.limit < MAX_UNACKED_PSNS {
            self.acked -= self.limit;
            self.limit += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_at_rxe_window_and_stays_there_without_loss() {
        let mut w = SendWindow::default();
        assert_eq!(w.limit(), 128);
        w.on_acked(1000);
        assert_eq!(w.limit(), 128);
    }

    #[test]
    fn loss_halves_down_to_the_floor() {
        let mut w = SendWindow::default();
        w.on_loss();
        assert_eq!(w.limit(), 64);
        for _ in 0..10 {
            w.on_loss();
        }
        assert_eq!(w.limit(), MIN_WINDOW);
    }

    #[test]
    fn grows_one_psn_per_window_acknowledged() {
        let mut w = SendWindow::default();
        w.on_loss(); // 64
        w.on_acked(63);
        assert_eq!(w.limit(), 64);
        w.on_acked(1);
        assert_eq!(w.limit(), 65);
        // 64 more PSNs are not a whole window of 65.
        w.on_acked(64);
        assert_eq!(w.limit(), 65);
        w.on_acked(1);
        assert_eq!(w.limit(), 66);
        // It never exceeds rxe's window.
        w.on_acked(1_000_000);
        assert_eq!(w.limit(), 128);
    }

    #[test]
    fn timeout_restarts_from_the_floor_and_regrows_fast_to_half() {
        let mut w = SendWindow::default();
        w.on_loss();
        w.on_timeout();
        assert_eq!(w.limit(), MIN_WINDOW);
        w.on_acked(10);
        assert_eq!(w.limit(), MIN_WINDOW + 10);
        w.on_acked(1000);
        assert_eq!(w.limit(), 64, "fast growth stops at half the old window");
    }
}
