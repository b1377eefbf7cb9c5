//! Tests of `udp.rs` (moved out of it as they were).

use super::*;

/// The storage a receive call fills, from a socket2 address (as the kernel writes it).
fn written(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    let a = SockAddr::from(addr);
    // SAFETY: all-zero bytes are a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    // SAFETY: `a` holds `a.len()` bytes, at most a sockaddr_storage's, at `as_ptr`.
    unsafe {
        std::ptr::copy_nonoverlapping(
            a.as_ptr().cast::<u8>(),
            (&mut ss as *mut libc::sockaddr_storage).cast::<u8>(),
            a.len() as usize,
        )
    };
    (ss, a.len())
}

#[test]
fn received_addresses_read_back_and_an_empty_one_is_none() {
    for addr in ["127.0.0.2:4791", "[::1]:49152", "[fe80::1%2]:4791"] {
        let addr: SocketAddr = addr.parse().unwrap();
        let (ss, len) = written(addr);
        // SAFETY: `ss` is initialised whole.
        assert_eq!(unsafe { socket_addr(&ss, len) }, Some(addr));
    }
    let (ss, _) = written("127.0.0.2:4791".parse().unwrap());
    // SAFETY: as above; the length says nothing was written (the bytes after the length
    // are never read: they count as zeros).
    assert_eq!(unsafe { socket_addr(&ss, 0) }, None, "no family");
}

#[test]
fn two_links_on_one_port_different_loopback_addresses() {
    // Port 0: let the kernel pick one for the first, then bind the second to the same.
    let a = UdpLink::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = a.local_addr().port();
    let mut b = match UdpLink::bind(SocketAddr::new("127.0.0.2".parse().unwrap(), port)) {
        Ok(b) => b,
        Err(e) => panic!("binding 127.0.0.2:{port}: {e}"),
    };
    let mut a = a;
    let sport = a.prepare_source_port(0xC123).unwrap();
    a.send(
        Instant::now(),
        &OutDatagram {
            src_port: sport,
            dst: b.local_addr(),
            hop_limit: 0,
            traffic_class: 0,
            payload: b"hello",
        },
    )
    .unwrap();
    let mut buf = [0u8; 64];
    let t = Instant::now();
    loop {
        if let Some(d) = b.recv(Instant::now(), &mut buf).unwrap() {
            assert_eq!(&buf[..d.len], b"hello");
            assert_eq!(d.src, SocketAddr::new("127.0.0.1".parse().unwrap(), sport));
            assert_eq!(d.dst, b.local_addr());
            break;
        }
        assert!(t.elapsed().as_secs() < 5, "datagram not received");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // Nothing for a: it receives only what is sent to its own address.
    assert_eq!(a.recv(Instant::now(), &mut buf).unwrap(), None);
}

#[test]
fn source_port_falls_back_when_taken() {
    let mut a = UdpLink::bind("127.0.0.3:0".parse().unwrap()).unwrap();
    let blocker = UdpSocket::bind("127.0.0.3:0").unwrap();
    let taken = blocker.local_addr().unwrap().port();
    let wanted = 0xC000 | (taken & 0x3FFF);
    if wanted == taken {
        let got = a.prepare_source_port(wanted).unwrap();
        assert_ne!(got, wanted);
        assert!(got >= 0xC000);
    }
    let p = a.prepare_source_port(0xD000).unwrap();
    assert_eq!(a.prepare_source_port(0xD000).unwrap(), p, "stable");
}

/// Receives one datagram on `link` (waiting at most 5 s) and returns its payload, TTL and
/// TOS as the link reports them.
fn recv_with_ip_fields(link: &mut UdpLink) -> (Vec<u8>, u8, u8) {
    let deadline = Instant::now() + std::time::Duration::from_secs(5);
    let mut buf = [0u8; 2048];
    loop {
        if let Some(d) = link.recv(Instant::now(), &mut buf).unwrap() {
            return (buf[..d.len].to_vec(), d.hop_limit, d.traffic_class);
        }
        assert!(Instant::now() < deadline, "datagram not received");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The address vector's hop limit and traffic class reach the IP header, on single sends
/// and on every segment of a GSO send; 0 leaves the kernel's defaults (64, 0).
fn ip_fields_reach_the_wire(local: &str, peer: &str) {
    // The receiving link reports each datagram's TTL and TOS (checked on its own against
    // a plain socket's setsockopt values in `received_ip_fields_are_reported`).
    let mut peer = UdpLink::bind(peer.parse().unwrap()).unwrap();
    let mut a = UdpLink::bind(local.parse().unwrap()).unwrap();
    let sport = a.prepare_source_port(0xC321).unwrap();
    let dst = peer.local_addr();
    let d = |hop_limit, traffic_class, payload| OutDatagram {
        src_port: sport,
        dst,
        hop_limit,
        traffic_class,
        payload,
    };
    let seg = [7u8; 100];
    let batch = [
        d(9, 0x28, &seg),
        d(9, 0x28, &seg),
        d(9, 0x28, &seg[..50]),
        d(0, 0, b"defaults"),
        d(255, 0xB8, b"ef"),
    ];
    assert_eq!(a.send_batch(Instant::now(), &batch).0, batch.len());
    a.send(Instant::now(), &d(1, 0x02, b"single")).unwrap();
    let got: Vec<_> = (0..6).map(|_| recv_with_ip_fields(&mut peer)).collect();
    assert_eq!(got[0], (seg.to_vec(), 9, 0x28));
    assert_eq!(got[1], (seg.to_vec(), 9, 0x28));
    assert_eq!(got[2], (seg[..50].to_vec(), 9, 0x28));
    assert_eq!(got[3], (b"defaults".to_vec(), 64, 0));
    assert_eq!(got[4], (b"ef".to_vec(), 255, 0xB8));
    assert_eq!(got[5], (b"single".to_vec(), 1, 0x02));
}

#[test]
fn ipv4_ttl_and_tos_follow_each_datagram() {
    ip_fields_reach_the_wire("127.0.0.4:0", "127.0.0.5:0");
}

#[test]
fn ipv6_hop_limit_and_traffic_class_follow_each_datagram() {
    ip_fields_reach_the_wire("[::1]:0", "[::1]:0");
}

/// Datagrams received through `recv` and `recv_batch` report the TTL and TOS they
/// arrived with (for the UD GRH area and captures).
fn received_ip_fields_are_reported(local: &str, peer: &str) {
    let mut b = UdpLink::bind(local.parse().unwrap()).unwrap();
    let tx = UdpSocket::bind(peer).unwrap();
    let s = socket2::SockRef::from(&tx);
    if tx.local_addr().unwrap().is_ipv4() {
        set_int_opt(&s, libc::IPPROTO_IP, libc::IP_TTL, 9).unwrap();
        set_int_opt(&s, libc::IPPROTO_IP, libc::IP_TOS, 0x28).unwrap();
    } else {
        set_int_opt(&s, libc::IPPROTO_IPV6, libc::IPV6_UNICAST_HOPS, 9).unwrap();
        set_int_opt(&s, libc::IPPROTO_IPV6, libc::IPV6_TCLASS, 0x28).unwrap();
    }
    tx.send_to(b"one", b.local_addr()).unwrap();
    assert_eq!(recv_with_ip_fields(&mut b), (b"one".to_vec(), 9, 0x28));
    tx.send_to(b"two!", b.local_addr()).unwrap();
    let deadline = Instant::now() + std::time::Duration::from_secs(5);
    let mut batch = RxBatch::new(4, 2048, 8);
    loop {
        b.recv_batch(Instant::now(), &mut batch).unwrap();
        if !batch.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "datagram not received");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let (d, bytes) = batch.get(0);
    assert_eq!(
        (bytes, d.hop_limit, d.traffic_class),
        (&b"two!"[..], 9, 0x28)
    );
}

/// Datagrams whose payload is gathered from a region reach the peer whole, the region's
/// bytes between their own, in a GSO run and alone, beside a whole datagram.
#[test]
fn gathered_payloads_arrive_between_their_datagrams_bytes() {
    let mut peer = UdpLink::bind("127.0.23.1:0".parse().unwrap()).unwrap();
    let mut a = UdpLink::bind("127.0.23.2:0".parse().unwrap()).unwrap();
    assert!(!a.gathers(), "off unless asked for");
    a.enable_gather();
    assert!(a.gathers());
    let sport = a.prepare_source_port(0xC417).unwrap();
    let region = crate::memory::SharedBytes::new(4096);
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    region.write(0, &pattern).unwrap();
    let pinned = region.pin().unwrap();
    let g = |off: u64, at: usize, len: usize| {
        Some(GatherRef {
            at,
            ptr: pinned.ptr(off, len).unwrap(),
            len,
        })
    };
    // Three of one length (a GSO run: 20 + 1000 + 8 bytes each), a shorter one that ends
    // the run, and a whole datagram.
    let own: [&[u8]; 5] = [
        &[1; 28][..],
        &[2; 28][..],
        &[3; 28][..],
        &[4; 12][..],
        b"whole datagram",
    ];
    let gathers = [
        g(0, 20, 1000),
        g(1000, 20, 1000),
        g(2001, 20, 1000),
        g(3001, 4, 17),
        None,
    ];
    let dst = peer.local_addr();
    let ds: Vec<OutDatagram> = own
        .iter()
        .map(|p| OutDatagram {
            src_port: sport,
            dst,
            hop_limit: 0,
            traffic_class: 0,
            payload: p,
        })
        .collect();
    let (sent, err) = a.send_gathered(Instant::now(), &ds, &gathers);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(sent, 5);
    drop(pinned);
    for (p, gr) in own.iter().zip(gathers) {
        let mut want = p.to_vec();
        if let Some(gr) = gr {
            let off = gr.ptr as usize - region.addr() as usize;
            want.splice(gr.at..gr.at, pattern[off..off + gr.len].iter().copied());
        }
        assert_eq!(recv_with_ip_fields(&mut peer).0, want);
    }
}

#[test]
fn ipv4_receives_report_ttl_and_tos() {
    received_ip_fields_are_reported("127.0.0.6:0", "127.0.0.7:0");
}

#[test]
fn ipv6_receives_report_hop_limit_and_traffic_class() {
    received_ip_fields_are_reported("[::1]:0", "[::1]:0");
}
