//! The General Services Interface (QP1) of a device: the UD queue pair that carries management
//! datagrams, here the communication manager's. The MADs the transport's endpoint takes for
//! QP1 go to the device's [`cm::CmEndpoint`]; the MADs it wants sent, the transport's endpoint
//! builds into UD SEND ONLY packets from QP1 to QP1
//! ([`crate::transport::Endpoint::transmit_mad`]).
//!
//! QP1 is not a [`crate::transport::QpCore`]: it has no work requests, receive buffers or
//! completions of its own, as in Linux, where the MAD layer owns QP1 and no application posts
//! to it. The engine hands it packets and asks it for packets; the rdma_cm-shaped API above
//! calls the endpoint under this module's lock and waits for its events on a condition
//! variable.

use std::net::SocketAddr;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::cm::{CmEndpoint, CmEvent, EndpointConfig};

/// QP1's number (the transport's endpoint hands its packets back to the driver).
pub use crate::transport::GSI_QPN;

/// The device's QP1: its CM endpoint and the time base the endpoint runs on.
#[derive(Debug)]
pub(crate) struct Gsi {
    pub(crate) cm: CmEndpoint,
    /// An rdma_cm event channel takes this device's CM events (one at a time).
    pub(crate) channel_open: bool,
    origin: Instant,
}

/// QP1 and the condition variable that the API waits on for CM events.
#[derive(Debug)]
pub(crate) struct GsiShared {
    state: Mutex<Gsi>,
    /// Notified whenever the endpoint may have new events.
    pub(crate) events: Condvar,
}

impl GsiShared {
    pub(crate) fn new(_local: SocketAddr) -> GsiShared {
        GsiShared {
            state: Mutex::new(Gsi {
                // Communication and transaction IDs from the kernel's random generator (the
                // default), so that no device's IDs follow from another's or from the clock.
                cm: CmEndpoint::new(EndpointConfig::default()),
                channel_open: false,
                origin: Instant::now(),
            }),
            events: Condvar::new(),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Gsi> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits up to `timeout` for a CM event and takes it.
    pub(crate) fn wait_event(&self, timeout: Duration) -> Option<CmEvent> {
        let end = Instant::now() + timeout;
        let mut g = self.lock();
        loop {
            if let Some(e) = g.cm.poll_event() {
                return Some(e);
            }
            g = self.wait_until(g, end)?;
        }
    }

    /// Waits, with `g` released, until the engine next wakes QP1's waiters or `end` comes;
    /// None (the lock given back) once `end` has passed.
    pub(crate) fn wait_until<'a>(
        &'a self,
        g: MutexGuard<'a, Gsi>,
        end: Instant,
    ) -> Option<MutexGuard<'a, Gsi>> {
        let now = Instant::now();
        if now >= end {
            return None;
        }
        Some(
            self.events
                .wait_timeout(g, end - now)
                .unwrap_or_else(|e| e.into_inner())
                .0,
        )
    }
}

impl Gsi {
    /// The endpoint's clock: time since this QP1 was made.
    pub(crate) fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// When the endpoint next needs the engine, as an instant.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.cm.poll_timeout().map(|t| self.origin + t)
    }

    /// Takes a MAD that arrived for QP1 (the transport's endpoint checked the packet);
    /// `from` is the sender's address with the port its CM answers on.
    pub(crate) fn handle_mad(&mut self, from: SocketAddr, mad: &[u8]) {
        let now = self.now();
        self.cm.handle_mad(now, from, mad);
    }

    /// Runs the endpoint's timers if due.
    pub(crate) fn handle_timeout(&mut self) {
        let now = self.now();
        if self.cm.poll_timeout().is_some_and(|t| t <= now) {
            self.cm.handle_timeout(now);
        }
    }
}
