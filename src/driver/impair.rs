//! A link wrapper that impairs traffic as a bad network would: drops, duplicates, reorders,
//! corrupts and delays packets, at set probabilities with a seeded generator so that a run can
//! be reproduced. It sits around the socket, outside the protocol, and counts what it did in
//! the device counters (`injected_*`).
//!
//! Corruption flips one bit of the RoCE packet, so the receiver's ICRC check must catch it.
//! Held packets (delayed, reordered, duplicate copies, queued) live in a bounded pool of reused
//! buffers: beyond [`MAX_HELD`] a packet that would be held is dropped instead, and counted.
//!
//! A [`Bottleneck`] is a switch port in the path: a FIFO drained at a fixed rate that marks
//! ECN Congestion Experienced on ECN-capable packets arriving while it holds more than K bytes
//! (DCTCP-style step marking, or RED's probability ramp up to Kmax) and drops packets arriving
//! to a full queue, one queue per direction. A mark on a sent packet reaches the peer in the IP header (the link sends each
//! datagram's TOS), one on a received packet is handed up with it, as the kernel reports it.

use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::link::{InDatagram, Link, OutDatagram};
use crate::transport::cc::{ECN_CE, ECN_MASK};
use crate::transport::Counters;

/// Most packets held at once.
pub const MAX_HELD: usize = 4096;
/// How long a reordered packet waits for a successor before it goes anyway.
pub const REORDER_HOLD: Duration = Duration::from_micros(500);

/// Which packets an impairment applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Packets sent.
    Send,
    /// Packets received.
    Recv,
    /// Both.
    Both,
}

/// What to inflict.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Impairment {
    /// Probability of dropping a packet.
    pub drop: f64,
    /// Probability of delivering a packet twice.
    pub dup: f64,
    /// Probability of holding a packet back behind the next one.
    pub reorder: f64,
    /// Probability of flipping one bit.
    pub corrupt: f64,
    /// Delay added to every packet.
    pub delay: Duration,
    /// Seed of the random choices.
    pub seed: u64,
    /// Which direction.
    pub apply_to: Direction,
    /// A rate-limited, ECN-marking queue in the path (in each direction `apply_to` names).
    pub bottleneck: Option<Bottleneck>,
}

/// A rate-limited FIFO with ECN step marking and tail drop (see the module documentation).
/// Sizes count IP packets: the RoCE packet plus its UDP and IP headers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bottleneck {
    /// The rate the queue drains at, bytes per second (above 0).
    pub rate_bytes_per_sec: f64,
    /// The queue's capacity in bytes: a packet that would take it beyond is dropped.
    pub limit_bytes: u64,
    /// The marking threshold K in bytes: an ECN-capable packet (ECT(0) or ECT(1)) that
    /// arrives while the queue holds more than K bytes leaves marked CE (with probability
    /// `mark_max_prob` growing towards `mark_max_bytes`, when that lies above K: RED).
    pub mark_bytes: u64,
    /// RED's Kmax: between K and this depth a packet is marked with a probability rising
    /// linearly from 0 to `mark_max_prob`, above it always. At most K: step marking (DCTCP).
    pub mark_max_bytes: u64,
    /// RED's Pmax, the marking probability at `mark_max_bytes` (0..=1).
    pub mark_max_prob: f64,
}

impl Bottleneck {
    /// The probability that an ECN-capable packet arriving to `depth` queued bytes is marked.
    fn mark_probability(&self, depth: u64) -> f64 {
        if depth <= self.mark_bytes {
            0.0
        } else if depth > self.mark_max_bytes {
            1.0
        } else {
            self.mark_max_prob * (depth - self.mark_bytes) as f64
                / (self.mark_max_bytes - self.mark_bytes) as f64
        }
    }
}

/// One direction's queue: the instant the bytes in it will have drained. The depth at any
/// instant follows from it, so no per-packet state is kept beyond the held packets.
#[derive(Debug, Default, Clone, Copy)]
struct Queue {
    drained_at: Option<Instant>,
}

impl Queue {
    /// Bytes still queued at `now`.
    fn depth(&self, now: Instant, rate: f64) -> u64 {
        match self.drained_at {
            Some(t) if t > now => ((t - now).as_secs_f64() * rate).round() as u64,
            _ => 0,
        }
    }
}

/// What the queue did with an arriving packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Enqueued {
    /// Dropped: the queue was full.
    Dropped,
    /// Queued; leaves at this instant, with this TOS.
    Leaves(Instant, u8),
}

#[derive(Debug)]
struct Held {
    release: Instant,
    /// Released right after the next packet in its direction (reordering).
    after_next: bool,
    outgoing: bool,
    route: Route,
    buf: Vec<u8>,
}

/// Where a held packet goes when released, and with which IP header fields.
#[derive(Debug, Clone, Copy)]
struct Route {
    /// Source port of an outgoing packet (0 for incoming ones).
    src_port: u16,
    /// The other end: destination of an outgoing packet, source of an incoming one.
    peer: SocketAddr,
    local: SocketAddr,
    /// TTL and TOS the packet is sent or was received with.
    hop_limit: u8,
    traffic_class: u8,
}

impl Route {
    fn incoming(d: InDatagram) -> Route {
        Route {
            src_port: 0,
            peer: d.src,
            local: d.dst,
            hop_limit: d.hop_limit,
            traffic_class: d.traffic_class,
        }
    }
}

/// The impairing wrapper.
#[derive(Debug)]
pub struct ImpairLink<L: Link> {
    inner: L,
    cfg: Impairment,
    rng: u64,
    counters: Arc<Counters>,
    held: VecDeque<Held>,
    pool: Vec<Vec<u8>>,
    /// The bottleneck's queues: packets sent, packets received.
    queues: [Queue; 2],
}

impl<L: Link> ImpairLink<L> {
    /// Wraps `inner`; injections are counted in `counters`.
    pub fn new(inner: L, cfg: Impairment, counters: Arc<Counters>) -> Self {
        ImpairLink {
            inner,
            rng: cfg.seed ^ 0x6A09_E667_F3BC_C908,
            cfg,
            counters,
            held: VecDeque::new(),
            pool: Vec::new(),
            queues: [Queue::default(); 2],
        }
    }

    /// A packet of `len` bytes (the RoCE packet) with IP TOS `tos` arrives at the bottleneck
    /// of its direction at `now`: dropped if the queue is full, else queued behind what is
    /// there, marked CE if ECN-capable and the queue is above K. Counted either way.
    fn enqueue(
        &mut self,
        outgoing: bool,
        ipv6: bool,
        len: usize,
        tos: u8,
        now: Instant,
    ) -> Enqueued {
        let Some(b) = self.cfg.bottleneck else {
            return Enqueued::Leaves(now, tos);
        };
        // IP and UDP headers: the queue holds IP packets.
        let bytes = len as u64 + if ipv6 { 48 } else { 28 };
        let depth = self.queues[usize::from(!outgoing)].depth(now, b.rate_bytes_per_sec);
        if depth + bytes > b.limit_bytes {
            Counters::inc(&self.counters.bottleneck_dropped);
            return Enqueued::Dropped;
        }
        let ecn_capable = !matches!(tos & ECN_MASK, 0 | ECN_CE);
        let p = b.mark_probability(depth);
        let tos = if ecn_capable && (p >= 1.0 || self.chance(p)) {
            Counters::inc(&self.counters.bottleneck_marked);
            tos | ECN_CE
        } else {
            tos
        };
        let c = &self.counters;
        let q = &mut self.queues[usize::from(!outgoing)];
        let start = q.drained_at.filter(|&t| t > now).unwrap_or(now);
        let leaves = start + Duration::from_secs_f64(bytes as f64 / b.rate_bytes_per_sec);
        q.drained_at = Some(leaves);
        Counters::inc(&c.bottleneck_pkts);
        c.bottleneck_queue_sum
            .fetch_add(depth, std::sync::atomic::Ordering::Relaxed);
        c.bottleneck_queue_max
            .fetch_max(depth + bytes, std::sync::atomic::Ordering::Relaxed);
        Enqueued::Leaves(leaves, tos)
    }

    fn next_u64(&mut self) -> u64 {
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    fn applies(&self, outgoing: bool) -> bool {
        match self.cfg.apply_to {
            Direction::Both => true,
            Direction::Send => outgoing,
            Direction::Recv => !outgoing,
        }
    }

    fn corrupt(&mut self, data: &mut [u8]) {
        if data.is_empty() {
            return;
        }
        let r = self.next_u64();
        let i = (r % data.len() as u64) as usize;
        data[i] ^= 1 << ((r >> 32) % 8);
        Counters::inc(&self.counters.injected_corrupt);
    }

    /// Holds a copy of a packet; false when the pool is full (the packet is then lost).
    fn hold(
        &mut self,
        data: &[u8],
        release: Instant,
        after_next: bool,
        outgoing: bool,
        route: Route,
    ) -> bool {
        if self.held.len() >= MAX_HELD {
            Counters::inc(&self.counters.injected_drop);
            return false;
        }
        let mut buf = self.pool.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(data);
        let h = Held {
            release,
            after_next,
            outgoing,
            route,
            buf,
        };
        // Keep the queue sorted by release time (stable for equal times).
        let pos = self.held.partition_point(|x| x.release <= h.release);
        self.held.insert(pos, h);
        true
    }

    /// A packet went by in one direction: reordered packets of that direction may follow.
    fn passed(&mut self, outgoing: bool, now: Instant) {
        let mut moved = false;
        for h in self
            .held
            .iter_mut()
            .filter(|h| h.after_next && h.outgoing == outgoing)
        {
            h.after_next = false;
            h.release = now;
            moved = true;
        }
        if moved {
            self.held.make_contiguous().sort_by_key(|h| h.release);
        }
    }

    /// Sends the held outgoing packets that are due.
    fn release_sends(&mut self, now: Instant) -> io::Result<()> {
        // `held` is sorted by release time: only its due prefix need be looked at.
        while let Some(i) = self
            .held
            .iter()
            .take_while(|h| h.release <= now)
            .position(|h| h.outgoing)
        {
            let h = self.held.remove(i).expect("index from position");
            let d = OutDatagram {
                src_port: h.route.src_port,
                dst: h.route.peer,
                hop_limit: h.route.hop_limit,
                traffic_class: h.route.traffic_class,
                payload: &h.buf,
            };
            let r = self.inner.send(now, &d);
            self.pool.push(h.buf);
            r?;
        }
        Ok(())
    }

    /// When a packet leaves that the queue lets go at `left` (`now` without a bottleneck):
    /// any delay or reordering hold of its own starts then.
    fn after_queue(
        hold: Option<(Instant, bool)>,
        left: Instant,
        now: Instant,
    ) -> Option<(Instant, bool)> {
        match hold {
            Some((at, after_next)) => Some((left + at.saturating_duration_since(now), after_next)),
            None if left > now => Some((left, false)),
            None => None,
        }
    }

    /// Decides the fate of one packet; returns (deliver now, corrupt, duplicate, hold until).
    fn fate(&mut self, outgoing: bool, now: Instant) -> Fate {
        if !self.applies(outgoing) {
            return Fate::default();
        }
        if self.chance(self.cfg.drop) {
            Counters::inc(&self.counters.injected_drop);
            return Fate {
                drop: true,
                ..Fate::default()
            };
        }
        let corrupt = self.chance(self.cfg.corrupt);
        let dup = self.chance(self.cfg.dup);
        let reorder = self.chance(self.cfg.reorder);
        let hold_until = if reorder {
            Counters::inc(&self.counters.injected_reorder);
            Some((now + self.cfg.delay + REORDER_HOLD, true))
        } else if !self.cfg.delay.is_zero() {
            Counters::inc(&self.counters.injected_delay);
            Some((now + self.cfg.delay, false))
        } else {
            None
        };
        if dup {
            Counters::inc(&self.counters.injected_dup);
        }
        Fate {
            drop: false,
            corrupt,
            dup,
            hold_until,
        }
    }
}

#[derive(Debug, Default)]
struct Fate {
    drop: bool,
    corrupt: bool,
    dup: bool,
    hold_until: Option<(Instant, bool)>,
}

impl<L: Link> Link for ImpairLink<L> {
    fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr()
    }

    fn prepare_source_port(&mut self, wanted: u16) -> io::Result<u16> {
        self.inner.prepare_source_port(wanted)
    }

    fn send(&mut self, now: Instant, d: &OutDatagram) -> io::Result<()> {
        self.release_sends(now)?;
        let f = self.fate(true, now);
        if f.drop {
            return Ok(());
        }
        let local = self.inner.local_addr();
        let mut copy;
        let mut payload = d.payload;
        if f.corrupt {
            copy = d.payload.to_vec();
            self.corrupt(&mut copy);
            payload = &copy;
        }
        let mut route = Route {
            src_port: d.src_port,
            peer: d.dst,
            local,
            hop_limit: d.hop_limit,
            traffic_class: d.traffic_class,
        };
        let mut hold_until = f.hold_until;
        if self.applies(true) {
            match self.enqueue(true, d.dst.is_ipv6(), payload.len(), d.traffic_class, now) {
                Enqueued::Dropped => return Ok(()),
                Enqueued::Leaves(at, tos) => {
                    route.traffic_class = tos;
                    hold_until = Self::after_queue(hold_until, at, now);
                }
            }
        }
        match hold_until {
            Some((at, after_next)) => {
                self.hold(payload, at, after_next, true, route);
                if f.dup {
                    self.hold(payload, at, false, true, route);
                }
            }
            None => {
                let out = OutDatagram { payload, ..*d };
                self.inner.send(now, &out)?;
                if f.dup {
                    self.inner.send(now, &out)?;
                }
                self.passed(true, now);
                self.release_sends(now)?;
            }
        }
        Ok(())
    }

    fn recv(&mut self, now: Instant, buf: &mut [u8]) -> io::Result<Option<InDatagram>> {
        self.release_sends(now)?;
        loop {
            // Held incoming packets first, when due.
            if let Some(i) = self
                .held
                .iter()
                .take_while(|h| h.release <= now)
                .position(|h| !h.outgoing)
            {
                let h = self.held.remove(i).expect("index from position");
                let len = h.buf.len().min(buf.len());
                buf[..len].copy_from_slice(&h.buf[..len]);
                let d = InDatagram {
                    len,
                    src: h.route.peer,
                    dst: h.route.local,
                    hop_limit: h.route.hop_limit,
                    traffic_class: h.route.traffic_class,
                };
                self.pool.push(h.buf);
                return Ok(Some(d));
            }
            let Some(d) = self.inner.recv(now, buf)? else {
                return Ok(None);
            };
            let f = self.fate(false, now);
            if f.drop {
                continue;
            }
            let mut d = d;
            let mut hold_until = f.hold_until;
            if self.applies(false) {
                match self.enqueue(false, d.src.is_ipv6(), d.len, d.traffic_class, now) {
                    Enqueued::Dropped => continue,
                    Enqueued::Leaves(at, tos) => {
                        d.traffic_class = tos;
                        hold_until = Self::after_queue(hold_until, at, now);
                    }
                }
            }
            if f.corrupt {
                let mut tmp = std::mem::take(&mut self.pool.pop().unwrap_or_default());
                tmp.clear();
                tmp.extend_from_slice(&buf[..d.len]);
                self.corrupt(&mut tmp);
                buf[..d.len].copy_from_slice(&tmp);
                self.pool.push(tmp);
            }
            match hold_until {
                Some((at, after_next)) => {
                    let data = buf[..d.len].to_vec();
                    self.hold(&data, at, after_next, false, Route::incoming(d));
                    if f.dup {
                        self.hold(&data, at, false, false, Route::incoming(d));
                    }
                    continue;
                }
                None => {
                    if f.dup {
                        let data = buf[..d.len].to_vec();
                        self.hold(&data, now, false, false, Route::incoming(d));
                    }
                    self.passed(false, now);
                    return Ok(Some(d));
                }
            }
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let own = self.held.front().map(|h| h.release);
        match (own, self.inner.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn register(&mut self, registry: &mio::Registry, token: mio::Token) -> io::Result<()> {
        self.inner.register(registry, token)
    }

    fn join_group(&mut self, group: IpAddr, socket: UdpSocket) -> io::Result<()> {
        self.inner.join_group(group, socket)
    }

    fn leave_group(&mut self, group: IpAddr) {
        self.inner.leave_group(group)
    }
}

#[cfg(test)]
mod tests;
