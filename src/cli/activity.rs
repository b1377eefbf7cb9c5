//! How long the peer has been silent, from the device's received-packet counter: the tools'
//! waits that must not end while the peer still sends (a passive side during the peer's test,
//! a QP lingering for retransmissions) and must end once it has stopped.

use std::time::{Duration, Instant};

use softroce::verbs::Context;

/// Watches `rcvd_pkts`: every change restarts the silence.
#[derive(Debug)]
pub struct PeerActivity {
    pkts: Option<u64>,
    last: Instant,
}

impl PeerActivity {
    /// Starts watching now (counting as activity).
    pub fn new(ctx: &Context) -> PeerActivity {
        PeerActivity {
            pkts: ctx.counter("rcvd_pkts"),
            last: Instant::now(),
        }
    }

    /// How long nothing has arrived, as of now.
    pub fn silent_for(&mut self, ctx: &Context) -> Duration {
        let now = ctx.counter("rcvd_pkts");
        if now != self.pkts {
            self.pkts = now;
            self.last = Instant::now();
        }
        self.last.elapsed()
    }
}
