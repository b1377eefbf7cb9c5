//! UD rules (spec-notes/uc-ud-srq.md): DETH, Q_Keys, one-MTU messages, the GRH area of
//! receive buffers, completions with the source QP, drops counted under rxe's names.

use std::net::IpAddr;

use super::node::*;
use crate::ib::*;
use crate::transport::qp::rxe_hash_port;
use crate::wire::Opcode;

const QKEY: u32 = 0x1111_1111;

fn ud(qpn: u32, ip: &str) -> Node {
    let mut n = node(qpn, ip, QpType::Ud, None);
    ready_ud(&mut n, QKEY);
    n
}

fn dest(to: &Node, qkey: u32) -> UdDest {
    UdDest {
        ah: AhAttr {
            dgid: Gid::from_ip(to.addr.ip()),
            hop_limit: 64,
            ..Default::default()
        },
        remote_qpn: to.qp.qpn(),
        remote_qkey: qkey,
    }
}

#[test]
fn send_carries_deth_and_lands_after_the_ipv4_grh_area() {
    let mut a = ud(0x31, "192.0.2.1");
    let mut b = ud(0x32, "192.0.2.2");
    b.post_recv(1, 0, 40 + 100);
    b.post_recv(2, 1024, 40 + 100);
    a.post_ud(10, WrOpcode::Send, 100, &dest(&b, QKEY)).unwrap();
    a.post_ud(
        11,
        WrOpcode::SendWithImm { imm: 0xFEED },
        1,
        &dest(&b, QKEY),
    )
    .unwrap();
    let seen = transfer(&mut a, &mut b, &[]);
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].opcode, Opcode::UD_SEND_ONLY);
    assert_eq!(seen[1].opcode, Opcode::UD_SEND_ONLY_WITH_IMMEDIATE);
    for s in &seen {
        assert_eq!(s.dest_qp, 0x32);
        let d = s.deth.expect("DETH");
        assert_eq!((d.qkey, d.src_qp), (QKEY, 0x31));
        assert!(!s.ack_req);
        assert_eq!(s.src_port, rxe_hash_port(0x31), "rxe's per-QP source port");
    }
    // Sends complete once sent.
    assert_eq!(a.send_wcs.len(), 2);
    assert!(a.send_wcs.iter().all(|w| w.status == WcStatus::Success));
    let wcs = &b.recv_wcs;
    assert_eq!(wcs.len(), 2);
    assert_eq!(
        (wcs[0].wr_id, wcs[0].byte_len, wcs[0].imm_data),
        (1, 140, None)
    );
    assert_eq!(
        (wcs[1].wr_id, wcs[1].byte_len, wcs[1].imm_data),
        (2, 41, Some(0xFEED))
    );
    assert!(wcs
        .iter()
        .all(|w| w.src_qp == 0x31 && w.grh && w.qp_num == 0x32));
    // GRH area: 20 zero bytes, then the IPv4 header as it arrived.
    let grh = b.recv_bytes(0, 40);
    assert_eq!(&grh[..20], &[0u8; 20]);
    let ip = &grh[20..];
    assert_eq!(ip[0], 0x45);
    assert_eq!(ip[9], 17, "UDP");
    assert_eq!(&ip[12..16], &[192, 0, 2, 1]);
    assert_eq!(&ip[16..20], &[192, 0, 2, 2]);
    // Total length: IP 20 + UDP 8 + BTH 12 + DETH 8 + 100 + ICRC 4.
    assert_eq!(
        u16::from_be_bytes([ip[2], ip[3]]),
        20 + 8 + 12 + 8 + 100 + 4
    );
    let sum: u32 = ip
        .chunks(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]) as u32)
        .sum();
    assert_eq!(
        (sum & 0xFFFF) + (sum >> 16),
        0xFFFF,
        "header checksum verifies"
    );
    assert_eq!(b.recv_bytes(40, 100), a.sent_bytes(0, 100));
}

#[test]
fn each_send_leaves_with_its_address_handles_traffic_class_and_the_routes_hop_limit() {
    let mut a = ud(0x31, "192.0.2.1");
    let mut b = ud(0x32, "192.0.2.2");
    b.post_recv(1, 0, 40 + 16);
    b.post_recv(2, 1024, 40 + 16);
    let mut marked = dest(&b, QKEY);
    marked.ah.hop_limit = 3;
    marked.ah.traffic_class = 0x62;
    a.post_ud(10, WrOpcode::Send, 16, &marked).unwrap();
    a.post_ud(11, WrOpcode::Send, 16, &dest(&b, QKEY)).unwrap();
    let seen = transfer(&mut a, &mut b, &[]);
    // The kernel's route gives an IPv4 packet its TTL whatever the AH says (0 here: the
    // socket's 64); the class is the AH's.
    let ip: Vec<(u8, u8)> = seen.iter().map(|s| s.ip).collect();
    assert_eq!(ip, [(0, 0x62), (0, 0)]);
    // The GRH area shows the IPv4 header as it arrived: TOS at byte 1, TTL at byte 8.
    let first = b.recv_bytes(0, 40);
    assert_eq!((first[20 + 8], first[20 + 1]), (64, 0x62));
    let second = b.recv_bytes(1024, 40);
    assert_eq!((second[20 + 8], second[20 + 1]), (64, 0));
}

#[test]
fn link_local_and_multicast_destinations_keep_the_address_handles_hop_limit() {
    use crate::transport::wire_hop_limit;
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    assert_eq!(wire_hop_limit(ip("fe80::2"), 3), 3);
    assert_eq!(wire_hop_limit(ip("febf::2"), 3), 3);
    assert_eq!(wire_hop_limit(ip("ff02::1"), 9), 9);
    assert_eq!(wire_hop_limit(ip("fec0::2"), 3), 0, "site-local is routed");
    assert_eq!(wire_hop_limit(ip("2001:db8::2"), 3), 0);
    assert_eq!(wire_hop_limit(ip("::ffff:192.0.2.2"), 3), 0);
    assert_eq!(wire_hop_limit(ip("192.0.2.2"), 255), 0);
    // ib_resolve_eth_dmac keeps the hop limit of any multicast address vector.
    assert_eq!(wire_hop_limit(ip("230.0.0.1"), 5), 5);
    assert_eq!(wire_hop_limit(ip("224.0.0.251"), 1), 1);
    let mut a = ud(0x31, "fe80::1");
    let mut b = ud(0x32, "fe80::2");
    b.post_recv(1, 0, 40 + 16);
    let mut d = dest(&b, QKEY);
    d.ah.hop_limit = 3;
    a.post_ud(10, WrOpcode::Send, 16, &d).unwrap();
    let seen = transfer(&mut a, &mut b, &[]);
    assert_eq!(seen[0].ip, (3, 0));
    assert_eq!(b.recv_bytes(0, 40)[7], 3, "the IPv6 header's hop limit");
}

#[test]
fn ipv6_grh_area_is_the_ipv6_header() {
    let mut a = ud(0x31, "2001:db8::1");
    let mut b = ud(0x32, "2001:db8::2");
    b.post_recv(1, 0, 40 + 16);
    a.post_ud(10, WrOpcode::Send, 16, &dest(&b, QKEY)).unwrap();
    transfer(&mut a, &mut b, &[]);
    assert_eq!(b.recv_wcs.len(), 1);
    let grh = b.recv_bytes(0, 40);
    assert_eq!(grh[0] >> 4, 6);
    assert_eq!(grh[6], 17);
    let src: IpAddr = "2001:db8::1".parse().unwrap();
    let IpAddr::V6(s6) = src else { unreachable!() };
    assert_eq!(&grh[8..24], &s6.octets());
    assert_eq!(b.recv_bytes(40, 16), a.sent_bytes(0, 16));
}

#[test]
fn wrong_qkey_is_dropped_and_counted_and_high_bit_means_the_qps_own() {
    let mut a = ud(0x31, "192.0.2.1");
    let mut b = ud(0x32, "192.0.2.2");
    b.post_recv(1, 0, 256);
    a.post_ud(10, WrOpcode::Send, 10, &dest(&b, 0x2222))
        .unwrap();
    transfer(&mut a, &mut b, &[]);
    assert!(b.recv_wcs.is_empty());
    assert_eq!(count(&b, "qkey_viol_cntr"), 1);
    // Bit 31 set: the sender's QP Q_Key goes in the DETH.
    a.post_ud(11, WrOpcode::Send, 10, &dest(&b, 0x8000_0000))
        .unwrap();
    let seen = transfer(&mut a, &mut b, &[]);
    assert_eq!(seen[0].deth.unwrap().qkey, QKEY);
    assert_eq!(b.recv_wcs.len(), 1);
    assert_eq!(count(&b, "qkey_viol_cntr"), 1);
}

#[test]
fn a_message_over_one_mtu_is_refused_at_post() {
    let mut a = ud(0x31, "192.0.2.1");
    let b = ud(0x32, "192.0.2.2");
    let mtu = crate::ib::DeviceLimits::default().max_mtu.bytes();
    let r = a.post_ud(10, WrOpcode::Send, mtu + 1, &dest(&b, QKEY));
    assert_eq!(
        r,
        Err(VerbsError::UdMessageTooLong {
            len: mtu as u64 + 1,
            mtu
        })
    );
    assert_eq!(a.qp.send_queue_len(), 0);
    a.post_ud(11, WrOpcode::Send, mtu, &dest(&b, QKEY)).unwrap();
}

#[test]
fn ud_posts_need_a_destination_and_a_send_opcode() {
    let mut a = ud(0x31, "192.0.2.1");
    let b = ud(0x32, "192.0.2.2");
    assert!(matches!(
        a.post(1, WrOpcode::Send, 0, 8),
        Err(VerbsError::InvalidWr(_))
    ));
    let w = WrOpcode::RdmaWrite {
        remote_addr: 0,
        rkey: 0,
    };
    assert!(matches!(
        a.post_ud(1, w, 8, &dest(&b, QKEY)),
        Err(VerbsError::InvalidWr(_))
    ));
    let mut c = node(0x33, "192.0.2.3", QpType::Uc, None);
    assert!(matches!(
        c.post_ud(1, WrOpcode::Send, 8, &dest(&b, QKEY)),
        Err(VerbsError::InvalidWr(_))
    ));
}

#[test]
fn packets_for_a_qp_in_reset_or_init_are_dropped_as_bad_state() {
    let mut a = ud(0x31, "192.0.2.1");
    let mut b = node(0x32, "192.0.2.2", QpType::Ud, None);
    a.post_ud(10, WrOpcode::Send, 8, &dest(&b, QKEY)).unwrap();
    transfer(&mut a, &mut b, &[]);
    assert_eq!(count(&b, "bad_state_pkts"), 1, "RESET");
    init(&mut b, AccessFlags::EMPTY, Some(QKEY));
    b.post_recv(1, 0, 256);
    a.post_ud(11, WrOpcode::Send, 8, &dest(&b, QKEY)).unwrap();
    transfer(&mut a, &mut b, &[]);
    assert_eq!(count(&b, "bad_state_pkts"), 2, "INIT");
    assert!(b.recv_wcs.is_empty());
}

#[test]
fn any_sender_reaches_a_ud_qp_and_each_completion_names_its_source() {
    let mut a = ud(0x31, "192.0.2.1");
    let mut c = ud(0x33, "192.0.2.3");
    let mut b = ud(0x32, "192.0.2.2");
    assert!(b.qp.accepts_from("198.51.100.9".parse().unwrap()));
    b.post_recv(1, 0, 256);
    b.post_recv(2, 256, 256);
    a.post_ud(10, WrOpcode::Send, 8, &dest(&b, QKEY)).unwrap();
    c.post_ud(20, WrOpcode::Send, 8, &dest(&b, QKEY)).unwrap();
    transfer(&mut a, &mut b, &[]);
    transfer(&mut c, &mut b, &[]);
    let src: Vec<u32> = b.recv_wcs.iter().map(|w| w.src_qp).collect();
    assert_eq!(src, vec![0x31, 0x33]);
    assert_eq!(&b.recv_bytes(256 + 20 + 12, 4), &[192, 0, 2, 3]);
}

#[test]
fn no_wqe_or_a_small_buffer_drops_the_datagram() {
    let mut a = ud(0x31, "192.0.2.1");
    let mut b = ud(0x32, "192.0.2.2");
    a.post_ud(10, WrOpcode::Send, 100, &dest(&b, QKEY)).unwrap();
    transfer(&mut a, &mut b, &[]);
    assert_eq!(count(&b, "dropped_msg_pkts"), 1);
    // 100 bytes of payload need 140 bytes with the GRH area.
    b.post_recv(1, 0, 139);
    a.post_ud(11, WrOpcode::Send, 100, &dest(&b, QKEY)).unwrap();
    transfer(&mut a, &mut b, &[]);
    assert_eq!(count(&b, "dropped_msg_pkts"), 2);
    assert!(b.recv_wcs.is_empty());
    assert_eq!(b.qp.recv_queue_len(), 1, "the WQE is not consumed");
    a.post_ud(12, WrOpcode::Send, 99, &dest(&b, QKEY)).unwrap();
    transfer(&mut a, &mut b, &[]);
    assert_eq!(b.recv_wcs.len(), 1);
    assert_eq!(b.recv_wcs[0].byte_len, 139);
}

/// Hostile input: random UD packets (both UD opcodes and UC/RC ones, right and wrong Q_Keys,
/// DETH missing, payloads up to past the MTU) at a UD QP: nothing panics, nothing is sent,
/// every accepted datagram completes with its GRH area, the rest are counted drops.
#[test]
fn random_ud_packets_never_panic_and_every_drop_is_counted() {
    use crate::wire::{BthRepr, DethRepr, ExtHeaders, ImmDtRepr, Opcode, PacketRepr};
    use std::time::Duration;
    let mut b = ud(0x32, "192.0.2.2");
    let big = vec![7u8; 4200];
    let mut rng = 0x0123_4567_89AB_CDEFu64;
    let mut next = || {
        rng = rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    for i in 0..2000u64 {
        if b.qp.recv_queue_len() < 8 {
            b.post_recv(i, (i % 6) * 4200, 4200);
        }
        let r = next();
        let opcode = [
            Opcode::UD_SEND_ONLY,
            Opcode::UD_SEND_ONLY_WITH_IMMEDIATE,
            Opcode::UC_SEND_ONLY,
            Opcode::RC_SEND_ONLY,
        ][(r % 4) as usize];
        let deth = match (r >> 8) % 4 {
            0 => None,
            1 => Some(DethRepr {
                qkey: 0x2222,
                src_qp: 7,
            }),
            _ => Some(DethRepr {
                qkey: QKEY,
                src_qp: 7,
            }),
        };
        let len = [0usize, 1, 1000, 4096, 4097, 4200][((r >> 16) % 6) as usize];
        let pkt = PacketRepr {
            bth: BthRepr {
                opcode,
                psn: (r >> 24) as u32 & 0xFF_FFFF,
                dest_qp: 0x32,
                ..BthRepr::default()
            },
            ext: ExtHeaders {
                deth,
                imm: ((r >> 50) % 2 == 0).then_some(ImmDtRepr { imm: 1 }),
                ..ExtHeaders::default()
            },
            payload: &big[..len],
        };
        b.qp.handle_packet(Duration::ZERO, &pkt, &b.mrs);
        b.collect();
        assert!(b.qp.queue_depths().completions == 0);
    }
    let mut buf = vec![0u8; crate::transport::MAX_PACKET];
    assert!(b.qp.poll_transmit(Duration::ZERO, &mut buf).is_none());
    let done = b.recv_wcs.len() as u64;
    assert!(done > 100, "some datagrams were good: {done}");
    assert!(b.recv_wcs.iter().all(|w| w.status == WcStatus::Success
        && w.grh
        && w.src_qp == 7
        && w.byte_len <= 40 + 4096));
    let dropped = [
        "wrong_transport_pkts",
        "qkey_viol_cntr",
        "malformed_pkts",
        "dropped_msg_pkts",
    ]
    .iter()
    .map(|n| count(&b, n))
    .sum::<u64>();
    assert_eq!(
        done + dropped,
        2000,
        "every packet either completes or is a counted drop"
    );
}

/// A device's QPs by number, each with its own node, and the groups they are attached to: the
/// set the engine hands the endpoint, in plain values.
struct Device<'a> {
    nodes: Vec<&'a mut Node>,
    groups: Vec<(IpAddr, Vec<u32>)>,
}

impl crate::transport::QpSet for Device<'_> {
    fn with_qp<R>(
        &mut self,
        qpn: u32,
        f: impl FnOnce(&mut crate::transport::QpCore, &crate::transport::MrTable) -> R,
    ) -> Option<R> {
        let n = self.nodes.iter_mut().find(|n| n.qp.qpn() == qpn)?;
        Some(f(&mut n.qp, &n.mrs))
    }

    fn multicast_members(&mut self, group: IpAddr) -> crate::transport::Members {
        let mut m = crate::transport::Members::default();
        for (_, qpns) in self.groups.iter().filter(|(g, _)| *g == group) {
            for &q in qpns {
                m.push(q);
            }
        }
        m
    }
}

#[test]
fn a_multicast_send_reaches_every_attached_qp_through_its_own_checks() {
    use crate::transport::{DatagramEvent, IpFields, MAX_PACKET};
    use std::net::SocketAddr;
    let group: IpAddr = "230.0.0.9".parse().unwrap();
    let mut a = ud(0x31, "192.0.2.1");
    let mut b = ud(0x32, "192.0.2.2");
    let mut c = ud(0x33, "192.0.2.2");
    // d is in the group with another Q_Key: it drops its copy, the others still get theirs.
    let mut d = node(0x34, "192.0.2.2", QpType::Ud, None);
    ready_ud(&mut d, 0x2222);
    let mut e = ud(0x35, "192.0.2.2"); // not attached
    for n in [&mut b, &mut c, &mut d, &mut e] {
        n.post_recv(1, 0, 40 + 64);
    }
    let to_group = UdDest {
        ah: AhAttr {
            dgid: Gid::from_ip(group),
            hop_limit: 5,
            ..Default::default()
        },
        remote_qpn: crate::wire::bth::MULTICAST_QPN,
        remote_qkey: QKEY,
    };
    a.post_ud(7, WrOpcode::Send, 64, &to_group).unwrap();
    let mut buf = vec![0u8; MAX_PACKET];
    let t = a
        .endpoint
        .poll_transmit(std::time::Duration::ZERO, &mut a.qp, &mut buf)
        .unwrap();
    assert_eq!(
        t.dst,
        SocketAddr::new(group, 4791),
        "to the group's address"
    );
    assert_eq!(
        t.hop_limit, 5,
        "a multicast address vector keeps its hop limit"
    );
    let from = SocketAddr::new(a.addr.ip(), t.src_port);
    let ip = IpFields {
        hop_limit: 5,
        traffic_class: 0,
    };
    let counters = std::sync::Arc::clone(&b.counters);
    let endpoint = crate::transport::Endpoint::new(b.addr, 4791, std::sync::Arc::clone(&counters));
    let mut dev = Device {
        nodes: vec![&mut b, &mut c, &mut d, &mut e],
        groups: vec![(group, vec![0x32, 0x33, 0x34])],
    };
    let ev = endpoint.handle(
        std::time::Duration::ZERO,
        from,
        SocketAddr::new(group, 4791),
        ip,
        &buf[..t.len],
        &mut dev,
    );
    let Some(DatagramEvent::Multicast(took)) = ev else {
        panic!("{ev:?}");
    };
    assert_eq!(took.as_slice(), &[0x32, 0x33, 0x34]);
    // QPN 0xFFFFFF sent to the device's own (unicast) address: nobody's packet.
    let unicast = UdDest {
        ah: AhAttr {
            dgid: Gid::from_ip("192.0.2.2".parse().unwrap()),
            ..to_group.ah
        },
        ..to_group
    };
    a.post_ud(8, WrOpcode::Send, 64, &unicast).unwrap();
    let t = a
        .endpoint
        .poll_transmit(std::time::Duration::ZERO, &mut a.qp, &mut buf)
        .unwrap();
    let unknown = || {
        counters
            .unknown_qp_pkts
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let before = unknown();
    assert!(endpoint
        .handle(
            std::time::Duration::ZERO,
            from,
            t.dst,
            ip,
            &buf[..t.len],
            &mut dev,
        )
        .is_none());
    assert_eq!(unknown(), before + 1);
    drop(dev);
    for n in [&mut b, &mut c, &mut d, &mut e] {
        n.collect();
    }
    for n in [&b, &c] {
        assert_eq!(n.recv_wcs.len(), 1);
        assert_eq!(
            (
                n.recv_wcs[0].status,
                n.recv_wcs[0].src_qp,
                n.recv_wcs[0].byte_len
            ),
            (WcStatus::Success, 0x31, 40 + 64)
        );
        // The GRH area's destination is the group.
        assert_eq!(n.recv_bytes(36, 4), vec![230, 0, 0, 9]);
    }
    assert!(d.recv_wcs.is_empty() && e.recv_wcs.is_empty());
    assert_eq!(
        d.counters
            .qkey_viol_cntr
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}
