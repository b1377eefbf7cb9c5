//! The engine thread of a device context: owns the link (socket stack), the clock and the
//! timers, and runs the transport core of every QP.
//!
//! Loop: wait (mio) until a datagram arrives, the application rings the doorbell, or the next
//! deadline passes; then receive every datagram that is ready (verify ICRC, parse, hand to the
//! QP its destination QP names, if the sender is that QP's peer), fire due timers, and let
//! every QP with work transmit and deliver its completions to its CQs.
//!
//! Why one engine thread and a mutex per QP: a post must validate synchronously to return
//! typed errors, so the application thread touches the QP state; everything that involves the
//! socket or time stays on one thread, so the per-packet path takes only the QP's own
//! (uncontended in the common case) lock and no other. Busy-polling and transmitting from the
//! application thread are planned optimisations that this split allows.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token};

use super::link::{Link, OutDatagram};
use super::timer::Timer;
use crate::transport::{Counters, CqSide, QpCore, MAX_PACKET};
use crate::verbs::device::{Device, QpEntry};
use crate::wire::icrc::{verify_socket_datagram, SocketVerdict};
use crate::wire::PacketRepr;

/// Token of the socket in the poll set.
pub(crate) const SOCKET: Token = Token(0);
/// Token of the waker (doorbell).
pub(crate) const WAKER: Token = Token(1);
/// Token of the deadline timer.
const TIMER: Token = Token(2);

/// Datagrams received per loop iteration before timers and transmission get a turn.
const RX_BATCH: usize = 256;
/// Packets one QP may send per service, so that one busy QP cannot starve the others.
const TX_BATCH: usize = 256;

pub(crate) struct Engine {
    dev: Arc<Device>,
    poll: Poll,
    /// Wakes the loop at the next deadline with microsecond resolution (timer.rs says why
    /// the poll timeout cannot).
    timer: Timer,
    link: Box<dyn Link + Send>,
    origin: Instant,
    rx: Vec<u8>,
    tx: Vec<u8>,
    /// Source ports already prepared on the link, per QP.
    ports: HashMap<u32, u16>,
    /// A QP hit the transmit batch limit: it has more to send, so the loop must not block.
    more_tx: bool,
}

impl Engine {
    pub(crate) fn new(
        dev: Arc<Device>,
        poll: Poll,
        link: Box<dyn Link + Send>,
    ) -> io::Result<Engine> {
        let mut timer = Timer::new()?;
        poll.registry()
            .register(&mut timer, TIMER, Interest::READABLE)?;
        Ok(Engine {
            dev,
            poll,
            timer,
            link,
            origin: Instant::now(),
            rx: vec![0u8; 65536],
            tx: vec![0u8; MAX_PACKET],
            ports: HashMap::new(),
            more_tx: false,
        })
    }

    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    pub(crate) fn run(mut self) {
        let mut events = Events::with_capacity(64);
        let mut more_rx = false;
        while !self.dev.closed.load(Ordering::Acquire) {
            let timeout = if more_rx || self.more_tx {
                Some(Duration::ZERO)
            } else {
                let next = self.next_deadline();
                let now = Instant::now();
                if self
                    .timer
                    .fire_by(next.map(|d| self.origin + d), now)
                    .is_err()
                {
                    // Without the timerfd, fall back on the poll timeout (millisecond
                    // resolution, but deadlines still fire).
                    next.map(|d| (self.origin + d).saturating_duration_since(now))
                } else {
                    None
                }
            };
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    // The poll set is broken; nothing can make progress. Close the device so
                    // that callers get DeviceClosed instead of hanging.
                    self.dev.closed.store(true, Ordering::Release);
                    break;
                }
            }
            if events.iter().any(|e| e.token() == TIMER) {
                self.timer.clear();
            }
            self.more_tx = false;
            more_rx = self.receive();
            // The doorbell only wakes the loop: every QP is serviced below.
            self.dev
                .doorbell
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clear();
            self.service_all();
        }
    }

    /// The earliest deadline among the QPs and the link.
    fn next_deadline(&self) -> Option<Duration> {
        let qps = self.dev.qps.read().unwrap_or_else(|e| e.into_inner());
        let mut next = self
            .link
            .poll_timeout()
            .map(|i| i.saturating_duration_since(self.origin));
        for e in qps.values() {
            let t = e
                .core
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .poll_timeout();
            next = match (next, t) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        next
    }

    /// Receives what is ready. Returns true if the batch limit was hit (more may be waiting).
    fn receive(&mut self) -> bool {
        for _ in 0..RX_BATCH {
            let d = match self.link.recv(Instant::now(), &mut self.rx) {
                Ok(Some(d)) => d,
                Ok(None) => return false,
                Err(_) => return false,
            };
            let now = self.now();
            let payload = &self.rx[..d.len];
            let counters = &self.dev.counters;
            if verify_socket_datagram(d.src, d.dst, payload) == SocketVerdict::Bad {
                Counters::inc(&counters.icrc_err);
                continue;
            }
            let pkt = match PacketRepr::parse(payload) {
                Ok(p) => p,
                Err(_) => {
                    Counters::inc(&counters.malformed_pkts);
                    continue;
                }
            };
            let entry = self
                .dev
                .qps
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .get(&pkt.bth.dest_qp)
                .cloned();
            let Some(entry) = entry else {
                Counters::inc(&counters.unknown_qp_pkts);
                continue;
            };
            let mut core = entry.core.lock().unwrap_or_else(|e| e.into_inner());
            // Only the connected peer may talk to an RC QP.
            if core.peer().map(|p| p.ip()) != Some(d.src.ip()) {
                Counters::inc(&counters.unknown_qp_pkts);
                continue;
            }
            {
                let mrs = self.dev.mrs.read().unwrap_or_else(|e| e.into_inner());
                core.handle_packet(now, &pkt, &mrs);
            }
            // Answer at once: ACKs and READ responses should not wait for the next loop.
            let qpn = pkt.bth.dest_qp;
            self.more_tx |= Self::service_qp(
                &self.dev,
                &mut *self.link,
                &mut self.tx,
                &mut self.ports,
                now,
                qpn,
                &entry,
                &mut core,
            );
        }
        true
    }

    fn service_all(&mut self) {
        let entries: Vec<(u32, QpEntry)> = self
            .dev
            .qps
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        self.ports
            .retain(|qpn, _| entries.iter().any(|(k, _)| k == qpn));
        let now = self.now();
        for (qpn, entry) in entries {
            let mut core = entry.core.lock().unwrap_or_else(|e| e.into_inner());
            if core.poll_timeout().is_some_and(|t| t <= now) {
                core.handle_timeout(now);
            }
            self.more_tx |= Self::service_qp(
                &self.dev,
                &mut *self.link,
                &mut self.tx,
                &mut self.ports,
                now,
                qpn,
                &entry,
                &mut core,
            );
        }
    }

    /// Sends what the QP has to send and delivers its completions. Returns true when the
    /// batch limit stopped it with packets still to send.
    #[allow(clippy::too_many_arguments)]
    fn service_qp(
        dev: &Device,
        link: &mut (dyn Link + Send),
        tx: &mut [u8],
        ports: &mut HashMap<u32, u16>,
        now: Duration,
        qpn: u32,
        entry: &QpEntry,
        core: &mut QpCore,
    ) -> bool {
        let mut more = false;
        if core.peer().is_some() {
            let want = core.src_port();
            if ports.get(&qpn) != Some(&want) {
                match link.prepare_source_port(want) {
                    Ok(got) => {
                        core.set_src_port(got);
                        ports.insert(qpn, got);
                    }
                    Err(_) => Counters::inc(&dev.counters.send_err),
                }
            }
            let at = Instant::now();
            more = true;
            for _ in 0..TX_BATCH {
                let Some(t) = core.poll_transmit(now, tx) else {
                    more = false;
                    break;
                };
                let d = OutDatagram {
                    src_port: t.src_port,
                    dst: t.dst,
                    payload: &tx[..t.len],
                };
                if link.send(at, &d).is_err() {
                    // Lost like a packet dropped on the wire; retransmission recovers it.
                    Counters::inc(&dev.counters.send_err);
                }
            }
        }
        let mut send = Vec::new();
        let mut recv = Vec::new();
        while let Some((side, wc)) = core.poll_completion() {
            match side {
                CqSide::Send => send.push(wc),
                CqSide::Recv => recv.push(wc),
            }
        }
        if !send.is_empty() {
            entry.send_cq.push_all(send);
        }
        if !recv.is_empty() {
            entry.recv_cq.push_all(recv);
        }
        more
    }
}
