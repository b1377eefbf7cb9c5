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
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    /// A link that records what is sent and replays a script of received datagrams.
    #[derive(Default)]
    struct Script {
        sent: Vec<Vec<u8>>,
        /// The TOS each sent datagram went with.
        sent_tos: Vec<u8>,
        incoming: VecDeque<Vec<u8>>,
        /// The TOS the incoming datagrams arrive with.
        in_tos: u8,
    }

    impl Link for Script {
        fn local_addr(&self) -> SocketAddr {
            "127.0.0.1:4791".parse().unwrap()
        }
        fn prepare_source_port(&mut self, wanted: u16) -> io::Result<u16> {
            Ok(wanted)
        }
        fn send(&mut self, _now: Instant, d: &OutDatagram) -> io::Result<()> {
            self.sent.push(d.payload.to_vec());
            self.sent_tos.push(d.traffic_class);
            Ok(())
        }
        fn recv(&mut self, _now: Instant, buf: &mut [u8]) -> io::Result<Option<InDatagram>> {
            Ok(self.incoming.pop_front().map(|p| {
                buf[..p.len()].copy_from_slice(&p);
                InDatagram {
                    len: p.len(),
                    src: "127.0.0.2:49152".parse().unwrap(),
                    dst: "127.0.0.1:4791".parse().unwrap(),
                    hop_limit: 0,
                    traffic_class: self.in_tos,
                }
            }))
        }
        fn register(&mut self, _r: &mio::Registry, _t: mio::Token) -> io::Result<()> {
            Ok(())
        }
    }

    fn cfg(drop: f64, dup: f64, reorder: f64, corrupt: f64, delay_us: u64) -> Impairment {
        Impairment {
            drop,
            dup,
            reorder,
            corrupt,
            delay: Duration::from_micros(delay_us),
            seed: 42,
            apply_to: Direction::Both,
            bottleneck: None,
        }
    }

    fn send_n(link: &mut ImpairLink<Script>, n: u32) {
        let dst: SocketAddr = "127.0.0.2:4791".parse().unwrap();
        let t0 = Instant::now();
        for i in 0..n {
            let p = i.to_be_bytes();
            link.send(
                t0,
                &OutDatagram {
                    src_port: 0xC000,
                    dst,
                    hop_limit: 0,
                    traffic_class: 0,
                    payload: &p,
                },
            )
            .unwrap();
        }
        // Release anything still held.
        link.send(
            t0 + Duration::from_secs(10),
            &OutDatagram {
                src_port: 0xC000,
                dst,
                hop_limit: 0,
                traffic_class: 0,
                payload: &[0xFF; 4],
            },
        )
        .unwrap();
    }

    #[test]
    fn drop_rate_matches_and_is_reproducible() {
        let run = || {
            let c = Arc::new(Counters::default());
            let mut l = ImpairLink::new(
                Script::default(),
                cfg(0.05, 0.0, 0.0, 0.0, 0),
                Arc::clone(&c),
            );
            send_n(&mut l, 20_000);
            (
                l.inner.sent.clone(),
                c.injected_drop.load(Ordering::Relaxed),
            )
        };
        let (a, dropped) = run();
        let (b, _) = run();
        assert_eq!(a, b, "same seed, same fate");
        assert!(
            (800..1200).contains(&dropped),
            "{dropped} of 20000 dropped at 5%"
        );
        assert_eq!(a.len() as u64, 20_001 - dropped);
    }

    #[test]
    fn duplicates_and_reorders_lose_nothing() {
        let c = Arc::new(Counters::default());
        let mut l = ImpairLink::new(
            Script::default(),
            cfg(0.0, 0.1, 0.1, 0.0, 0),
            Arc::clone(&c),
        );
        send_n(&mut l, 5000);
        let sent = &l.inner.sent;
        let dups = c.injected_dup.load(Ordering::Relaxed) as usize;
        assert_eq!(sent.len(), 5001 + dups);
        let mut seen: Vec<u32> = sent[..sent.len() - 1]
            .iter()
            .filter(|p| p.as_slice() != [0xFF; 4])
            .map(|p| u32::from_be_bytes(p[..4].try_into().unwrap()))
            .collect();
        let in_order = seen.windows(2).all(|w| w[0] <= w[1]);
        assert!(!in_order, "some packets were reordered");
        seen.sort();
        seen.dedup();
        assert_eq!(seen, (0..5000).collect::<Vec<_>>(), "every packet arrived");
        assert!(c.injected_reorder.load(Ordering::Relaxed) > 300);
    }

    #[test]
    fn corruption_flips_exactly_one_bit() {
        let c = Arc::new(Counters::default());
        let mut l = ImpairLink::new(
            Script::default(),
            cfg(0.0, 0.0, 0.0, 1.0, 0),
            Arc::clone(&c),
        );
        let dst: SocketAddr = "127.0.0.2:4791".parse().unwrap();
        let p = [0u8; 64];
        l.send(
            Instant::now(),
            &OutDatagram {
                src_port: 1,
                dst,
                hop_limit: 0,
                traffic_class: 0,
                payload: &p,
            },
        )
        .unwrap();
        let ones: u32 = l.inner.sent[0].iter().map(|b| b.count_ones()).sum();
        assert_eq!(ones, 1);
    }

    #[test]
    fn delay_holds_received_packets() {
        let c = Arc::new(Counters::default());
        let mut script = Script::default();
        script.incoming.push_back(vec![1, 2, 3, 4]);
        let mut l = ImpairLink::new(script, cfg(0.0, 0.0, 0.0, 0.0, 1000), c);
        let t0 = Instant::now();
        let mut buf = [0u8; 16];
        assert!(l.recv(t0, &mut buf).unwrap().is_none());
        let due = l.poll_timeout().unwrap();
        assert!(due >= t0 + Duration::from_micros(1000));
        assert!(l
            .recv(t0 + Duration::from_micros(999), &mut buf)
            .unwrap()
            .is_none());
        let d = l.recv(due, &mut buf).unwrap().unwrap();
        assert_eq!(&buf[..d.len], &[1, 2, 3, 4]);
    }

    #[test]
    fn held_packets_are_bounded() {
        let c = Arc::new(Counters::default());
        let mut l = ImpairLink::new(
            Script::default(),
            cfg(0.0, 0.0, 0.0, 0.0, 10_000_000),
            Arc::clone(&c),
        );
        let dst: SocketAddr = "127.0.0.2:4791".parse().unwrap();
        let t0 = Instant::now();
        for _ in 0..MAX_HELD + 10 {
            l.send(
                t0,
                &OutDatagram {
                    src_port: 1,
                    dst,
                    hop_limit: 0,
                    traffic_class: 0,
                    payload: &[0; 8],
                },
            )
            .unwrap();
        }
        assert_eq!(l.held.len(), MAX_HELD);
        assert_eq!(c.injected_drop.load(Ordering::Relaxed), 10);
    }

    fn bottleneck(rate: f64, limit: u64, mark: u64, apply_to: Direction) -> Impairment {
        Impairment {
            apply_to,
            bottleneck: Some(Bottleneck {
                rate_bytes_per_sec: rate,
                limit_bytes: limit,
                mark_bytes: mark,
                mark_max_bytes: mark,
                mark_max_prob: 1.0,
            }),
            ..cfg(0.0, 0.0, 0.0, 0.0, 0)
        }
    }

    fn get(c: &Counters, name: &str) -> u64 {
        c.get(name).unwrap()
    }

    /// A burst into a 1 MB/s queue of 10 packets' room with K = 3 packets: the first four
    /// pass unmarked, the next six are marked CE, the rest dropped; packets leave one per
    /// millisecond (1000 bytes each with their IP and UDP headers), marks only on
    /// ECN-capable ones.
    #[test]
    fn the_bottleneck_paces_marks_above_k_and_drops_at_the_limit() {
        let c = Arc::new(Counters::default());
        let mut l = ImpairLink::new(
            Script::default(),
            bottleneck(1e6, 10_000, 3_000, Direction::Send),
            Arc::clone(&c),
        );
        let dst: SocketAddr = "127.0.0.2:4791".parse().unwrap();
        let p = [7u8; 972];
        let send = |l: &mut ImpairLink<Script>, at: Instant, tos: u8| {
            l.send(
                at,
                &OutDatagram {
                    src_port: 1,
                    dst,
                    hop_limit: 0,
                    traffic_class: tos,
                    payload: &p,
                },
            )
            .unwrap()
        };
        let t0 = Instant::now();
        for _ in 0..20 {
            send(&mut l, t0, 0x02);
        }
        assert!(l.inner.sent.is_empty(), "nothing leaves before its time");
        assert_eq!(get(&c, "bottleneck_pkts"), 10);
        assert_eq!(get(&c, "bottleneck_marked"), 6);
        assert_eq!(get(&c, "bottleneck_dropped"), 10);
        assert_eq!(get(&c, "bottleneck_queue_max"), 10_000);
        assert_eq!(get(&c, "bottleneck_queue_sum"), 45_000);
        assert_eq!(l.poll_timeout(), Some(t0 + Duration::from_millis(1)));
        let ms = |n| t0 + Duration::from_millis(n);
        let mut buf = [0u8; 16];
        l.recv(ms(5) - Duration::from_micros(1), &mut buf).unwrap();
        assert_eq!(l.inner.sent_tos, [0x02; 4], "four left by 5 ms");
        l.recv(ms(5), &mut buf).unwrap();
        assert_eq!(l.inner.sent_tos, [0x02, 0x02, 0x02, 0x02, 0x03]);
        // 5 ms in: 5000 bytes queued, above K. Not ECN-capable: queued unmarked; ECT(1):
        // marked.
        send(&mut l, ms(5), 0x00);
        send(&mut l, ms(5), 0x01);
        assert_eq!(get(&c, "bottleneck_marked"), 7);
        l.recv(ms(100), &mut buf).unwrap();
        assert_eq!(l.inner.sent.len(), 12);
        assert_eq!(&l.inner.sent_tos[5..], [3, 3, 3, 3, 3, 0x00, 0x03]);
        assert!(l.inner.sent.iter().all(|s| s[..] == p[..]));
        assert!(l.poll_timeout().is_none());
    }

    /// The receive direction has its own queue: packets arriving ECT(0) faster than it drains
    /// are handed up CE-marked, each at its departure time; sends are not queued.
    #[test]
    fn the_bottleneck_marks_received_packets_for_the_transport() {
        let c = Arc::new(Counters::default());
        let mut script = Script {
            in_tos: 0x02,
            ..Script::default()
        };
        for i in 0..4u8 {
            script.incoming.push_back(vec![i; 472]);
        }
        let mut l = ImpairLink::new(
            script,
            bottleneck(1e6, 100_000, 0, Direction::Recv),
            Arc::clone(&c),
        );
        let t0 = Instant::now();
        let mut buf = [0u8; 1024];
        assert!(l.recv(t0, &mut buf).unwrap().is_none(), "all queued");
        let mut got = Vec::new();
        for us in [499, 500, 1000, 1500, 2000] {
            while let Some(d) = l.recv(t0 + Duration::from_micros(us), &mut buf).unwrap() {
                got.push((us, buf[0], d.traffic_class));
            }
        }
        // 500 bytes each at 1 MB/s: one every 500 us; the first found an empty queue.
        assert_eq!(
            got,
            [
                (500, 0, 0x02),
                (1000, 1, 0x03),
                (1500, 2, 0x03),
                (2000, 3, 0x03)
            ]
        );
        // Sends pass straight through.
        l.send(
            t0,
            &OutDatagram {
                src_port: 1,
                dst: "127.0.0.2:4791".parse().unwrap(),
                hop_limit: 0,
                traffic_class: 0x02,
                payload: &[1; 100],
            },
        )
        .unwrap();
        assert_eq!(l.inner.sent_tos, [0x02]);
        assert_eq!(get(&c, "bottleneck_marked"), 3);
    }

    /// RED between Kmin = 10 000 and Kmax = 30 000 bytes with Pmax 0.5: none marked at or
    /// below Kmin, about Pmax/2 half way, every one above Kmax; the probability ramp itself.
    #[test]
    fn red_marks_with_a_probability_rising_from_kmin_to_kmax() {
        let b = Bottleneck {
            rate_bytes_per_sec: 1e6,
            limit_bytes: 1 << 30,
            mark_bytes: 10_000,
            mark_max_bytes: 30_000,
            mark_max_prob: 0.5,
        };
        assert_eq!(b.mark_probability(10_000), 0.0);
        assert_eq!(b.mark_probability(20_000), 0.25);
        assert_eq!(b.mark_probability(30_000), 0.5);
        assert_eq!(b.mark_probability(30_001), 1.0);
        // Through the link: packets arriving at a fixed depth (the clock moves on by one
        // packet time for each, so the queue stays where it is).
        let marked_at = |depth: u64| {
            let c = Arc::new(Counters::default());
            let mut l = ImpairLink::new(
                Script::default(),
                Impairment {
                    apply_to: Direction::Send,
                    bottleneck: Some(b),
                    ..cfg(0.0, 0.0, 0.0, 0.0, 0)
                },
                Arc::clone(&c),
            );
            let dst: SocketAddr = "127.0.0.2:4791".parse().unwrap();
            let p = [0u8; 972];
            let t0 = Instant::now();
            let n = 4000u64;
            for i in 0..(depth / 1000 + n) {
                // The first depth/1000 packets fill the queue at t0; then one per ms.
                let at = t0 + Duration::from_millis(i.saturating_sub(depth / 1000));
                l.send(
                    at,
                    &OutDatagram {
                        src_port: 1,
                        dst,
                        hop_limit: 0,
                        traffic_class: 0x02,
                        payload: &p,
                    },
                )
                .unwrap();
            }
            (c.bottleneck_marked.load(Ordering::Relaxed), n)
        };
        // Below Kmin: never.
        assert_eq!(marked_at(9_000).0, 0);
        // At 20 000 bytes (half way): about a quarter of the packets.
        let (m, n) = marked_at(20_000);
        let share = m as f64 / n as f64;
        assert!((0.2..0.3).contains(&share), "{m} of {n} marked at 20 000 B");
    }
}
