//! The transport endpoint's demultiplexing (src/transport/endpoint.rs), on crafted datagrams:
//! what it drops it counts, what it takes reaches the right QP or QP1.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::node::*;
use crate::ib::*;
use crate::transport::{Counters, DatagramEvent, Endpoint, IpFields, OneQp, MAX_PACKET};
use crate::wire::icrc::seal_socket_datagram;
use crate::wire::{BthRepr, ExtHeaders, Opcode, PacketRepr};

/// A UC SEND ONLY to `dest_qp` carrying `payload`, sealed for `src` -> `dst`.
fn datagram(dest_qp: u32, psn: u32, src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> Vec<u8> {
    let pkt = PacketRepr {
        bth: BthRepr {
            opcode: Opcode::UC_SEND_ONLY,
            dest_qp,
            psn,
            ..BthRepr::default()
        },
        ext: ExtHeaders::default(),
        payload,
    };
    let mut buf = vec![0u8; pkt.buffer_len()];
    pkt.emit(&mut buf).unwrap();
    assert!(seal_socket_datagram(src, dst, &mut buf));
    buf
}

fn deliver<'a>(to: &mut Node, src: SocketAddr, bytes: &'a [u8]) -> Option<DatagramEvent<'a>> {
    let mut qps = OneQp {
        qp: &mut to.qp,
        mrs: &to.mrs,
    };
    to.endpoint.handle(
        Duration::ZERO,
        src,
        to.addr,
        IpFields::default(),
        bytes,
        &mut qps,
    )
}

#[test]
fn the_endpoint_counts_what_it_drops_and_routes_the_rest() {
    let mut a = node(0x21, "192.0.2.1", QpType::Uc, None);
    let mut b = node(0x22, "192.0.2.2", QpType::Uc, None);
    connect_uc(&mut a, &b, Mtu::Mtu256, AccessFlags::REMOTE_WRITE);
    connect_uc(&mut b, &a, Mtu::Mtu256, AccessFlags::REMOTE_WRITE);
    b.post_recv(1, 0, 64);
    let from_a = SocketAddr::new(a.addr.ip(), 0xC000);
    let psn = 0xFF_FFFE;
    let good = datagram(b.qp.qpn(), psn, from_a, b.addr, b"hello");

    // A flipped bit: the ICRC fails.
    let mut bad = good.clone();
    bad[13] ^= 1;
    assert!(deliver(&mut b, from_a, &bad).is_none());
    assert_eq!(count(&b, "icrc_err"), 1);
    // Sealed, but with an opcode no transport has: the headers do not parse.
    let mut unparsable = vec![0u8; 16];
    unparsable[0] = 0xFF;
    assert!(seal_socket_datagram(from_a, b.addr, &mut unparsable));
    assert!(deliver(&mut b, from_a, &unparsable).is_none());
    assert_eq!(count(&b, "malformed_pkts"), 1);
    // A QP number the set does not have.
    let stray = datagram(0x99, psn, from_a, b.addr, b"hello");
    assert!(deliver(&mut b, from_a, &stray).is_none());
    assert_eq!(count(&b, "unknown_qp_pkts"), 1);
    // The right QP, from an address that is not its peer (rxe check_addr).
    let other: SocketAddr = "192.0.2.9:49152".parse().unwrap();
    let spoofed = datagram(b.qp.qpn(), psn, other, b.addr, b"hello");
    assert!(deliver(&mut b, other, &spoofed).is_none());
    assert_eq!(count(&b, "unknown_qp_pkts"), 2);
    assert_eq!(count(&b, "rcvd_pkts"), 0, "no QP saw any of them");

    // QP1 takes MADs only: a UC SEND is dropped and counted.
    let not_mad = datagram(1, 0, other, b.addr, &[0u8; 256]);
    assert!(deliver(&mut b, other, &not_mad).is_none());
    assert_eq!(count(&b, "gsi_dropped_pkts"), 1);
    // A MAD as QP1 sends it goes back to the caller, addressed for the CM's answer on the
    // RoCE port.
    let mut sender = Endpoint::new(other, 4791, Arc::new(Counters::default()));
    let mut buf = vec![0u8; MAX_PACKET];
    let mad: Vec<u8> = (0..=255).collect();
    let t = sender
        .transmit_mad(b.addr, &mad, Endpoint::gsi_src_port(), &mut buf)
        .unwrap();
    let from_cm = SocketAddr::new(other.ip(), t.src_port);
    match deliver(&mut b, from_cm, &buf[..t.len]) {
        Some(DatagramEvent::Mad { from, mad: got }) => {
            assert_eq!(from, SocketAddr::new(other.ip(), 4791));
            assert_eq!(got, &mad[..]);
        }
        e => panic!("QP1's packet: {e:?}"),
    }

    // The peer's packet reaches the QP.
    assert!(matches!(
        deliver(&mut b, from_a, &good),
        Some(DatagramEvent::Qp(0x22))
    ));
    b.collect();
    assert_eq!(b.recv_wcs.len(), 1);
    assert_eq!(b.recv_bytes(0, 5), b"hello");
}
