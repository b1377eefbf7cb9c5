//! Tests of `impair.rs` (moved out of it as they were).

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
