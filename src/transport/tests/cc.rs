//! DCQCN on a shared bottleneck, in virtual time: N always-backlogged senders (reaction
//! points, paced) into one switch port whose queue marks ECN CE as the paper's switches do
//! (RED-style: no marks below Kmin, probability rising to Pmax at Kmax, every packet above),
//! and drops what does not fit its buffer; the receiver (one notification point per flow)
//! answers CE marks with CNPs, which reach the sender one propagation delay later.
//! The flows start staggered, so fairness is earned, not given by symmetry.

use std::collections::VecDeque;
use std::time::Duration;

use crate::transport::cc::{CcConfig, NotificationPoint, ReactionPoint};

const PKT: usize = 1000;
const LINE_MBPS: f64 = 10_000.0;
const PROP: Duration = Duration::from_micros(2);
/// RED marking of the DCQCN paper's evaluation (section 5): Kmin 5 KB, Kmax 200 KB, Pmax 1 %.
const KMIN: usize = 5 * 1024;
const KMAX: usize = 200 * 1024;
const PMAX: f64 = 0.01;
const BUFFER: usize = 400 * 1024;

struct Outcome {
    /// Bytes each flow got through the bottleneck in the measured window.
    delivered: Vec<u64>,
    drops: u64,
    /// Largest queue in the measured window.
    max_queue: usize,
    cnps: u64,
}

fn tx_time(bytes: usize, mbps: f64) -> Duration {
    Duration::from_secs_f64(bytes as f64 * 8.0 / (mbps * 1e6))
}

fn run(n: usize, cc: bool, end: Duration, measure_from: Duration) -> Outcome {
    let cfg = CcConfig::on();
    let mut rps: Vec<ReactionPoint> = (0..n).map(|_| ReactionPoint::new(cfg.rp)).collect();
    let mut nps = vec![NotificationPoint::default(); n];
    let start: Vec<Duration> = (0..n)
        .map(|i| Duration::from_millis(5 * i as u64))
        .collect();
    let mut nic_free = start.clone();
    // (arrival at the switch, flow)
    let mut to_switch: VecDeque<(Duration, usize)> = VecDeque::new();
    // (flow, CE)
    let mut queue: VecDeque<(usize, bool)> = VecDeque::new();
    let mut link_free = Duration::ZERO;
    // (arrival at the sender, flow)
    let mut cnps: VecDeque<(Duration, usize)> = VecDeque::new();
    let mut rng: u64 = 0x5DEE_CE66_D1CE_5EED;
    let mut out = Outcome {
        delivered: vec![0; n],
        drops: 0,
        max_queue: 0,
        cnps: 0,
    };
    let mut now = Duration::ZERO;
    for _ in 0..20_000_000u64 {
        // Senders.
        for f in 0..n {
            if now >= nic_free[f] && rps[f].may_send(now) {
                nic_free[f] = now + tx_time(PKT, LINE_MBPS);
                rps[f].on_sent(now, PKT);
                // Arrivals at one instant stay in order (stable insert).
                let at = now + PROP;
                let i = to_switch.partition_point(|&(t, _)| t <= at);
                to_switch.insert(i, (at, f));
            }
        }
        // Switch ingress: mark on enqueue, drop tail when full.
        while to_switch.front().is_some_and(|&(t, _)| t <= now) {
            let (_, f) = to_switch.pop_front().unwrap();
            let q = queue.len() * PKT;
            if q + PKT > BUFFER {
                out.drops += 1;
                continue;
            }
            let p = if q <= KMIN {
                0.0
            } else if q >= KMAX {
                1.0
            } else {
                PMAX * (q - KMIN) as f64 / (KMAX - KMIN) as f64
            };
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let ce = (rng >> 11) as f64 / (1u64 << 53) as f64 <= p && p > 0.0;
            queue.push_back((f, ce));
            if now >= measure_from {
                out.max_queue = out.max_queue.max(queue.len() * PKT);
            }
        }
        // Switch egress to the receiver; its notification points answer CE marks.
        while now >= link_free && !queue.is_empty() {
            let (f, ce) = queue.pop_front().unwrap();
            link_free = now.max(link_free) + tx_time(PKT, LINE_MBPS);
            if now >= measure_from {
                out.delivered[f] += PKT as u64;
            }
            if ce && nps[f].on_ce(now, cfg.min_time_between_cnps) {
                cnps.push_back((now + PROP * 2, f));
            }
        }
        // CNPs back at the senders.
        while cnps.front().is_some_and(|&(t, _)| t <= now) {
            let (_, f) = cnps.pop_front().unwrap();
            out.cnps += 1;
            if cc {
                rps[f].on_cnp(now);
            }
        }
        for rp in rps.iter_mut() {
            if rp.poll_timeout().is_some_and(|t| t <= now) {
                rp.handle_timeout(now);
            }
        }
        // The next event.
        let mut next = end;
        for f in 0..n {
            next = next.min(nic_free[f].max(rps[f].send_at()).max(now));
            if let Some(t) = rps[f].poll_timeout() {
                next = next.min(t);
            }
        }
        for t in [
            to_switch.front().map(|p| p.0),
            cnps.front().map(|p| p.0),
            (!queue.is_empty()).then_some(link_free),
        ]
        .into_iter()
        .flatten()
        {
            next = next.min(t);
        }
        if next >= end {
            return out;
        }
        // Every sender is always backlogged, so `next` can equal `now` only if something was
        // left undone; moving on keeps the loop live.
        now = next.max(now + Duration::from_nanos(1));
    }
    panic!("the simulation did not reach its end");
}

fn jain(x: &[u64]) -> f64 {
    let s: f64 = x.iter().map(|&v| v as f64).sum();
    let s2: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    s * s / (x.len() as f64 * s2)
}

/// With DCQCN the four flows converge to a fair share of the bottleneck (Jain's index at
/// least 0.95 over the last 20 ms), the link stays busy and the queue stays under the
/// buffer (no drops) once every flow has started.
#[test]
fn dcqcn_converges_to_a_fair_share_with_a_bounded_queue() {
    let end = Duration::from_millis(60);
    let from = Duration::from_millis(40);
    let o = run(4, true, end, from);
    let j = jain(&o.delivered);
    let total: u64 = o.delivered.iter().sum();
    let capacity = LINE_MBPS * 1e6 / 8.0 * (end - from).as_secs_f64();
    eprintln!(
        "dcqcn: delivered {:?} jain {j:.3} utilisation {:.3} max queue {} B drops {} cnps {}",
        o.delivered,
        total as f64 / capacity,
        o.max_queue,
        o.drops,
        o.cnps
    );
    assert!(j >= 0.95, "Jain's index {j} over {:?}", o.delivered);
    assert!(total as f64 >= 0.8 * capacity, "utilisation");
    assert!(
        o.max_queue < BUFFER,
        "queue {} reached the buffer",
        o.max_queue
    );
    assert_eq!(o.drops, 0);
    assert!(o.cnps > 0);
}

/// Without congestion control the same flows fill the buffer and lose packets.
#[test]
fn without_dcqcn_the_queue_fills_and_packets_drop() {
    let o = run(
        4,
        false,
        Duration::from_millis(30),
        Duration::from_millis(20),
    );
    eprintln!(
        "no cc: delivered {:?} max queue {} B drops {}",
        o.delivered, o.max_queue, o.drops
    );
    assert!(o.drops > 1000, "drops {}", o.drops);
    assert!(o.max_queue + PKT > BUFFER, "queue {}", o.max_queue);
}

mod endpoint {
    use std::net::SocketAddr;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Duration;

    use super::super::{post_send, Pair, IOVA};
    use crate::ib::{Mtu, WrOpcode};
    use crate::transport::cc::{CcConfig, ECN_CE, ECN_ECT0};
    use crate::transport::{DatagramEvent, Endpoint, IpFields, OneQp, MAX_PACKET};
    use crate::wire::{Opcode, PacketRepr};

    fn endpoint(addr: SocketAddr, c: &Arc<crate::transport::Counters>, on: bool) -> Endpoint {
        let mut e = Endpoint::new(addr, 4791, Arc::clone(c));
        if on {
            e.set_congestion_control(CcConfig::on());
        }
        e
    }

    /// The notification point answers a CE-marked packet with one CNP to the sender's QP (BTH
    /// 0x81, BECN, 16 reserved bytes, ECT(0)), at most one per interval; the reaction point
    /// takes the CNP, cuts the QP's rate and paces its packets, which leave ECN-capable.
    #[test]
    fn ce_mark_cnp_and_pacing_through_the_endpoints() {
        let mut p = Pair::new(Mtu::Mtu1024);
        let rkey = p.b.mr.rkey;
        let ea = endpoint(p.a.addr, &p.a.qp.counters, true);
        let eb = endpoint(p.b.addr, &p.b.qp.counters, true);
        post_send(
            &mut p,
            1,
            WrOpcode::RdmaWrite {
                remote_addr: IOVA,
                rkey,
            },
            0,
            64 * 1024,
        );
        let mut buf = vec![0u8; MAX_PACKET];
        let now = Duration::from_millis(1);
        let t = ea.poll_transmit(now, &mut p.a.qp, &mut buf).unwrap();
        assert_eq!(t.traffic_class & 0b11, ECN_ECT0, "data leaves ECT(0)");
        let data = buf[..t.len].to_vec();
        let src = SocketAddr::new(p.a.addr.ip(), t.src_port);
        let ce = IpFields {
            hop_limit: 64,
            traffic_class: t.traffic_class | ECN_CE,
        };
        let deliver = |p: &mut Pair, at: Duration, bytes: &[u8]| {
            let mut qps = OneQp {
                qp: &mut p.b.qp,
                mrs: &p.b.mrs,
            };
            assert!(matches!(
                eb.handle(at, src, p.b.addr, ce, bytes, &mut qps),
                Some(DatagramEvent::Qp(_))
            ));
        };
        deliver(&mut p, now, &data);
        let c = Arc::clone(&p.b.qp.counters);
        assert_eq!(c.np_ecn_marked_roce_packets.load(Ordering::Relaxed), 1);
        // B's first packet is the CNP (ahead of its ACK).
        let t = eb.poll_transmit(now, &mut p.b.qp, &mut buf).unwrap();
        let cnp = PacketRepr::parse(&buf[..t.len]).unwrap();
        assert_eq!(cnp.bth.opcode, Opcode::CNP);
        assert_eq!(cnp.bth.dest_qp, p.a.qp.qpn());
        assert!(cnp.bth.becn);
        assert_eq!(t.len, 12 + 16 + 4, "BTH, 16 reserved bytes, ICRC");
        assert_eq!(t.traffic_class & 0b11, ECN_ECT0);
        assert_eq!(c.np_cnp_sent.load(Ordering::Relaxed), 1);
        let cnp_bytes = buf[..t.len].to_vec();
        let cnp_src = SocketAddr::new(p.b.addr.ip(), t.src_port);
        // A second marked packet within min_time_between_cnps: counted, not answered.
        deliver(&mut p, now + Duration::from_micros(10), &data);
        let c = Arc::clone(&p.b.qp.counters);
        assert_eq!(c.np_ecn_marked_roce_packets.load(Ordering::Relaxed), 2);
        while let Some(t) = eb.poll_transmit(now, &mut p.b.qp, &mut buf) {
            assert_ne!(
                PacketRepr::parse(&buf[..t.len]).unwrap().bth.opcode,
                Opcode::CNP
            );
        }
        assert_eq!(c.np_cnp_sent.load(Ordering::Relaxed), 1);

        // The CNP at A: the reaction point cuts the rate and paces.
        let mut qps = OneQp {
            qp: &mut p.a.qp,
            mrs: &p.a.mrs,
        };
        let ev = ea.handle(
            now,
            cnp_src,
            p.a.addr,
            IpFields::default(),
            &cnp_bytes,
            &mut qps,
        );
        assert!(matches!(ev, Some(DatagramEvent::Qp(_))));
        let c = Arc::clone(&p.a.qp.counters);
        assert_eq!(c.rp_cnp_handled.load(Ordering::Relaxed), 1);
        assert_eq!(c.wrong_transport_pkts.load(Ordering::Relaxed), 0);
        let rate = p.a.qp.cc_rate_mbps().expect("limited after a CNP");
        assert!(rate < CcConfig::on().rp.max_rate_mbps);
        let t1 = ea.poll_transmit(now, &mut p.a.qp, &mut buf).unwrap();
        assert!(
            ea.poll_transmit(now, &mut p.a.qp, &mut buf).is_none(),
            "the next packet waits for the transmit budget"
        );
        let gap = Duration::from_secs_f64(t1.len as f64 * 8.0 / (rate * 1e6));
        let due = p.a.qp.poll_timeout().expect("the pacing deadline");
        assert!(due <= now + gap && due > now, "{due:?} vs {:?}", now + gap);
        p.a.qp.handle_timeout(due);
        assert!(ea.poll_transmit(due, &mut p.a.qp, &mut buf).is_some());
    }

    /// With congestion control off (the default) packets keep the address vector's traffic
    /// class, CE marks are counted but not answered and a CNP is counted and ignored.
    #[test]
    fn off_means_rxe_behaviour() {
        let mut p = Pair::new(Mtu::Mtu1024);
        let rkey = p.b.mr.rkey;
        let ea = endpoint(p.a.addr, &p.a.qp.counters, false);
        let eb = endpoint(p.b.addr, &p.b.qp.counters, false);
        post_send(
            &mut p,
            1,
            WrOpcode::RdmaWrite {
                remote_addr: IOVA,
                rkey,
            },
            0,
            8192,
        );
        let mut buf = vec![0u8; MAX_PACKET];
        let now = Duration::from_millis(1);
        let t = ea.poll_transmit(now, &mut p.a.qp, &mut buf).unwrap();
        assert_eq!(t.traffic_class, 0, "the AV's traffic class, untouched");
        let src = SocketAddr::new(p.a.addr.ip(), t.src_port);
        let ce = IpFields {
            hop_limit: 64,
            traffic_class: ECN_CE,
        };
        let data = buf[..t.len].to_vec();
        let mut qps = OneQp {
            qp: &mut p.b.qp,
            mrs: &p.b.mrs,
        };
        eb.handle(now, src, p.b.addr, ce, &data, &mut qps).unwrap();
        let c = Arc::clone(&p.b.qp.counters);
        assert_eq!(c.np_ecn_marked_roce_packets.load(Ordering::Relaxed), 1);
        while let Some(t) = eb.poll_transmit(now, &mut p.b.qp, &mut buf) {
            assert_ne!(
                PacketRepr::parse(&buf[..t.len]).unwrap().bth.opcode,
                Opcode::CNP
            );
        }
        assert_eq!(c.np_cnp_sent.load(Ordering::Relaxed), 0);
        // A CNP from B (built by an endpoint with CC on) reaches A's endpoint with CC off.
        let eb_on = endpoint(p.b.addr, &p.b.qp.counters, true);
        let mut qps = OneQp {
            qp: &mut p.b.qp,
            mrs: &p.b.mrs,
        };
        eb_on.handle(now, src, p.b.addr, ce, &data, &mut qps);
        let t = eb_on.poll_transmit(now, &mut p.b.qp, &mut buf).unwrap();
        assert_eq!(
            PacketRepr::parse(&buf[..t.len]).unwrap().bth.opcode,
            Opcode::CNP
        );
        let cnp = buf[..t.len].to_vec();
        let mut qps = OneQp {
            qp: &mut p.a.qp,
            mrs: &p.a.mrs,
        };
        let from = SocketAddr::new(p.b.addr.ip(), t.src_port);
        ea.handle(now, from, p.a.addr, IpFields::default(), &cnp, &mut qps)
            .unwrap();
        let c = Arc::clone(&p.a.qp.counters);
        assert_eq!(c.rp_cnp_ignored.load(Ordering::Relaxed), 1);
        assert_eq!(c.rp_cnp_handled.load(Ordering::Relaxed), 0);
        assert!(p.a.qp.cc_rate_mbps().is_none());
        assert!(
            ea.poll_transmit(now, &mut p.a.qp, &mut buf).is_some(),
            "unpaced"
        );
    }
}
