//! The notification point: a receiving QP that answers CE-marked packets with CNPs, at most
//! one per `min_time_between_cnps` (DCQCN section 3.2; mlx5 `min_time_between_cnps`).

use std::time::Duration;

/// One connected QP's notification point state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NotificationPoint {
    /// When the last CNP was sent, if one was.
    last_cnp: Option<Duration>,
}

impl NotificationPoint {
    /// A CE-marked packet arrived at `now`: returns whether a CNP goes to the sender now
    /// (none was sent in the last `min_interval`). The packet itself is handled as any other.
    pub fn on_ce(&mut self, now: Duration, min_interval: Duration) -> bool {
        let due = match self.last_cnp {
            None => true,
            Some(t) => now.saturating_sub(t) >= min_interval,
        };
        if due {
            self.last_cnp = Some(now);
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_one_cnp_per_interval() {
        let us = Duration::from_micros;
        let mut np = NotificationPoint::default();
        let sent: Vec<u64> = (0..200u64).filter(|&t| np.on_ce(us(t), us(50))).collect();
        assert_eq!(sent, vec![0, 50, 100, 150]);
        // A zero interval answers every marked packet.
        let mut np = NotificationPoint::default();
        assert!((0..5).all(|_| np.on_ce(us(7), Duration::ZERO)));
    }
}
