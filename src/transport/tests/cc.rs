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

    /// `cnp_dscp` gives CNPs a DSCP of their own (with ECT(0)); the data keeps the address
    /// vector's, and the CNP, resealed over its own TOS, still passes the peer's ICRC check.
    #[test]
    fn cnp_dscp_sets_the_cnps_class_only() {
        let mut p = Pair::new(Mtu::Mtu1024);
        let rkey = p.b.mr.rkey;
        let ea = endpoint(p.a.addr, &p.a.qp.counters, true);
        let mut eb = endpoint(p.b.addr, &p.b.qp.counters, true);
        eb.set_congestion_control(CcConfig {
            cnp_dscp: Some(48),
            ..CcConfig::on()
        });
        post_send(
            &mut p,
            1,
            WrOpcode::RdmaWrite {
                remote_addr: IOVA,
                rkey,
            },
            0,
            4096,
        );
        let mut buf = vec![0u8; MAX_PACKET];
        let now = Duration::from_millis(1);
        let t = ea.poll_transmit(now, &mut p.a.qp, &mut buf).unwrap();
        let data = buf[..t.len].to_vec();
        let src = SocketAddr::new(p.a.addr.ip(), t.src_port);
        let ce = IpFields {
            hop_limit: 64,
            traffic_class: t.traffic_class | ECN_CE,
        };
        let mut qps = OneQp {
            qp: &mut p.b.qp,
            mrs: &p.b.mrs,
        };
        eb.handle(now, src, p.b.addr, ce, &data, &mut qps).unwrap();
        let mut cnp = None;
        while let Some(t) = eb.poll_transmit(now, &mut p.b.qp, &mut buf) {
            if PacketRepr::parse(&buf[..t.len]).unwrap().bth.opcode == Opcode::CNP {
                assert_eq!(t.traffic_class, 48 << 2 | ECN_ECT0, "the CNP's class");
                cnp = Some((buf[..t.len].to_vec(), t));
            } else {
                assert_eq!(t.traffic_class, ECN_ECT0, "an ACK keeps the AV's DSCP 0");
            }
        }
        let (bytes, t) = cnp.expect("a CNP");
        let mut qps = OneQp {
            qp: &mut p.a.qp,
            mrs: &p.a.mrs,
        };
        let from = SocketAddr::new(p.b.addr.ip(), t.src_port);
        let ip = IpFields {
            hop_limit: 64,
            traffic_class: t.traffic_class,
        };
        ea.handle(now, from, p.a.addr, ip, &bytes, &mut qps)
            .unwrap();
        assert_eq!(p.a.qp.counters.rp_cnp_handled.load(Ordering::Relaxed), 1);
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

/// The same bottleneck with real RC QPs end to end: every packet is emitted, sealed and
/// parsed by the endpoints, the switch sets CE in the IP fields the receiver's endpoint is
/// handed, the receiving QPs' notification points send CNPs, the senders' endpoints take them
/// and pace their QPs. The senders write without pause (their send queues kept full).
mod qps {
    use std::collections::VecDeque;
    use std::net::SocketAddr;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Duration;

    use super::super::{connect_qp, sge, side, Side, IOVA};
    use crate::ib::{Mtu, SendFlags, SendWr, WcStatus, WrOpcode};
    use crate::transport::cc::{CcConfig, ECN_CE, ECN_MASK};
    use crate::transport::{CqSide, Endpoint, IpFields, OneQp, MAX_PACKET};

    const LINE_MBPS: f64 = 10_000.0;
    const PROP: Duration = Duration::from_micros(2);
    const KMIN: usize = 5 * 1024;
    const KMAX: usize = 100 * 1024;
    const PMAX: f64 = 0.01;
    const BUFFER: usize = 150 * 1024;
    const STEP: Duration = Duration::from_nanos(200);

    struct Flight {
        at: Duration,
        flow: usize,
        bytes: Vec<u8>,
        src_port: u16,
        tclass: u8,
    }

    struct Outcome {
        delivered: Vec<u64>,
        drops: u64,
        max_queue: usize,
        cnps_sent: u64,
        cnps_handled: u64,
        failed_wcs: usize,
    }

    fn tx(bytes: usize) -> Duration {
        Duration::from_secs_f64(bytes as f64 * 8.0 / (LINE_MBPS * 1e6))
    }

    /// Drops, queue and deliveries count from `from` on: before the first CNPs arrive, the
    /// senders' first windows (128 packets each, at the line rate) overflow the buffer with
    /// or without congestion control (a real fabric's PFC absorbs that burst).
    fn run(n: usize, cc: bool, from: Duration, end: Duration) -> Outcome {
        let cfg = if cc {
            CcConfig::on()
        } else {
            CcConfig::default()
        };
        let mut snd: Vec<Side> = (0..n)
            .map(|i| side(0x20 + i as u32, &format!("192.0.2.{}", 10 + i)))
            .collect();
        let mut rcv: Vec<Side> = (0..n)
            .map(|i| side(0x40 + i as u32, &format!("192.0.2.{}", 100 + i)))
            .collect();
        for i in 0..n {
            connect_qp(&mut snd[i], &rcv[i], Mtu::Mtu1024, 14, 7, 7);
            connect_qp(&mut rcv[i], &snd[i], Mtu::Mtu1024, 14, 7, 7);
        }
        let ep = |s: &Side| {
            let mut e = Endpoint::new(s.addr, 4791, Arc::clone(&s.qp.counters));
            e.set_congestion_control(cfg);
            e
        };
        let snd_ep: Vec<Endpoint> = snd.iter().map(ep).collect();
        let rcv_ep: Vec<Endpoint> = rcv.iter().map(ep).collect();
        let mut nic_free = vec![Duration::ZERO; n];
        let mut to_switch: VecDeque<Flight> = VecDeque::new();
        let mut queue: VecDeque<Flight> = VecDeque::new();
        let mut queued = 0usize;
        let mut link_free = Duration::ZERO;
        let mut back: VecDeque<Flight> = VecDeque::new();
        let mut rng: u64 = 0x0123_4567_89AB_CDEF;
        let mut out = Outcome {
            delivered: vec![0; n],
            drops: 0,
            max_queue: 0,
            cnps_sent: 0,
            cnps_handled: 0,
            failed_wcs: 0,
        };
        let mut buf = vec![0u8; MAX_PACKET];
        let mut wr_id = 0u64;
        let mut now = Duration::ZERO;
        while now < end {
            for i in 0..n {
                // Keep the send queue full of 64 KiB WRITEs.
                while snd[i].qp.send_queue_len() < 8 {
                    wr_id += 1;
                    let sg = [sge(&snd[i], 0, 64 * 1024)];
                    let wr = SendWr {
                        wr_id,
                        sg_list: &sg,
                        opcode: WrOpcode::RdmaWrite {
                            remote_addr: IOVA,
                            rkey: rcv[i].mr.rkey,
                        },
                        send_flags: SendFlags::SIGNALED,
                    };
                    let s = &mut snd[i];
                    s.qp.post_send(&wr, &s.mrs).unwrap();
                }
                for s in [&mut snd[i], &mut rcv[i]] {
                    if s.qp.poll_timeout().is_some_and(|t| t <= now) {
                        s.qp.handle_timeout(now);
                    }
                    while let Some((side, wc)) = s.qp.poll_completion() {
                        if wc.status != WcStatus::Success {
                            out.failed_wcs += 1;
                        }
                        let _ = side == CqSide::Send;
                    }
                }
                // The sender's NIC: one packet at a time at the line rate.
                if now >= nic_free[i] {
                    if let Some(t) = snd_ep[i].poll_transmit(now, &mut snd[i].qp, &mut buf) {
                        nic_free[i] = now + tx(t.len);
                        to_switch.push_back(Flight {
                            at: now + PROP,
                            flow: i,
                            bytes: buf[..t.len].to_vec(),
                            src_port: t.src_port,
                            tclass: t.traffic_class,
                        });
                    }
                }
                // The receiver answers (ACKs, CNPs) on an uncongested path.
                while let Some(t) = rcv_ep[i].poll_transmit(now, &mut rcv[i].qp, &mut buf) {
                    back.push_back(Flight {
                        at: now + PROP * 2,
                        flow: i,
                        bytes: buf[..t.len].to_vec(),
                        src_port: t.src_port,
                        tclass: t.traffic_class,
                    });
                }
            }
            // Switch ingress: RED marking of ECN-capable packets, tail drop.
            while to_switch.front().is_some_and(|f| f.at <= now) {
                let mut f = to_switch.pop_front().unwrap();
                if queued + f.bytes.len() > BUFFER {
                    if now >= from {
                        out.drops += 1;
                    }
                    continue;
                }
                let p = if queued <= KMIN {
                    0.0
                } else if queued >= KMAX {
                    1.0
                } else {
                    PMAX * (queued - KMIN) as f64 / (KMAX - KMIN) as f64
                };
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let hit = p > 0.0 && (rng >> 11) as f64 / (1u64 << 53) as f64 <= p;
                if hit && f.tclass & ECN_MASK != 0 {
                    f.tclass |= ECN_CE;
                }
                queued += f.bytes.len();
                if now >= from {
                    out.max_queue = out.max_queue.max(queued);
                }
                queue.push_back(f);
            }
            // Switch egress to the receivers.
            while now >= link_free && !queue.is_empty() {
                let f = queue.pop_front().unwrap();
                queued -= f.bytes.len();
                link_free = now.max(link_free) + tx(f.bytes.len());
                if now >= from {
                    out.delivered[f.flow] += f.bytes.len() as u64;
                }
                let r = &mut rcv[f.flow];
                let src = SocketAddr::new(snd[f.flow].addr.ip(), f.src_port);
                let ip = IpFields {
                    hop_limit: 64,
                    traffic_class: f.tclass,
                };
                let mut set = OneQp {
                    qp: &mut r.qp,
                    mrs: &r.mrs,
                };
                rcv_ep[f.flow].handle(now, src, r.addr, ip, &f.bytes, &mut set);
            }
            // The reverse path.
            while back.front().is_some_and(|f| f.at <= now) {
                let f = back.pop_front().unwrap();
                let s = &mut snd[f.flow];
                let src = SocketAddr::new(rcv[f.flow].addr.ip(), f.src_port);
                let mut set = OneQp {
                    qp: &mut s.qp,
                    mrs: &s.mrs,
                };
                snd_ep[f.flow].handle(now, src, s.addr, IpFields::default(), &f.bytes, &mut set);
            }
            now += STEP;
        }
        for i in 0..n {
            out.cnps_sent += rcv[i].qp.counters.np_cnp_sent.load(Ordering::Relaxed);
            out.cnps_handled += snd[i].qp.counters.rp_cnp_handled.load(Ordering::Relaxed);
        }
        out
    }

    /// With congestion control on, the receivers' CNPs pace the senders: after the first
    /// burst the queue stays under the buffer, nothing is dropped, the link stays busy and
    /// the share is fair. Without it the same senders keep overflowing the buffer.
    #[test]
    fn rc_qps_paced_by_cnps_keep_the_queue_bounded() {
        let (from, end) = (Duration::from_millis(5), Duration::from_millis(25));
        let on = run(3, true, from, end);
        let total: u64 = on.delivered.iter().sum();
        let capacity = LINE_MBPS * 1e6 / 8.0 * (end - from).as_secs_f64();
        eprintln!(
            "cc on: delivered {:?} ({:.2} of the link) max queue {} drops {} cnps {}/{}",
            on.delivered,
            total as f64 / capacity,
            on.max_queue,
            on.drops,
            on.cnps_sent,
            on.cnps_handled
        );
        assert!(on.cnps_sent > 0 && on.cnps_handled == on.cnps_sent);
        assert_eq!(on.drops, 0, "max queue {}", on.max_queue);
        assert!(on.max_queue < BUFFER);
        assert!(total as f64 > 0.6 * capacity);
        assert!(super::jain(&on.delivered) >= 0.95, "{:?}", on.delivered);
        assert_eq!(on.failed_wcs, 0);

        let off = run(3, false, from, end);
        eprintln!(
            "cc off: delivered {:?} max queue {} drops {} cnps {}",
            off.delivered, off.max_queue, off.drops, off.cnps_sent
        );
        assert_eq!(off.cnps_sent, 0);
        assert!(off.drops > 0, "without CC the buffer overflows");
        assert!(super::jain(&off.delivered) < super::jain(&on.delivered));
    }
}
