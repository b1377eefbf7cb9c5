//! A hostile peer over real sockets: a plain UDP socket on its own loopback address crafts RoCE
//! packets with valid ICRCs (softroce::wire emits them, the test seals them as the kernel's
//! IP and UDP headers require) and aims them at softroce QPs connected to it through the verbs
//! API. It checks what a RoCE endpoint owes a peer it cannot trust (issue 11): no packet
//! touches memory it was not granted, every bad request gets the NAK the spec requires and
//! moves the QP to the state the spec requires, packets failing a header check are dropped
//! without a reply and counted, forged responses cannot rewind or stall a requester, floods
//! leave other QPs working, the responder answers in rxe's order, and `--pcap` records every
//! datagram that arrived. Every wait is bounded (at most 2 s, the rping runs' 30 s).
//!
//! The connection manager faces the same peer (issues 21, 26): two `softroce rping` processes
//! connect, and CM messages naming their connection with the right communication IDs are sent
//! from a third address (which must change nothing) and from the peer's (which must end it).
//! The same attack is made on librdmacm's rping (Debian's rdmacm-utils) serving on the
//! shim, whose `librdmacm.so.1` `softroce run` provides, with softroce's rping as its client:
//! that test needs the shim built (`cargo test` from the workspace root builds it) and `rping`
//! on PATH.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use softroce::driver::DeviceConfig;
use softroce::ib::*;
use softroce::verbs::*;
use softroce::wire::{
    icrc, AckSyndrome, AethRepr, AtomicEthRepr, BthRepr, DethRepr, ExtHeaders, NakCode, Opcode,
    PacketRepr, RethRepr,
};

const FULL: AccessFlags = AccessFlags(
    AccessFlags::LOCAL_WRITE.0
        | AccessFlags::REMOTE_WRITE.0
        | AccessFlags::REMOTE_READ.0
        | AccessFlags::REMOTE_ATOMIC.0,
);
const MR_LEN: usize = 64 * 1024;
/// The PSN the hostile peer's requests start at (the victim QP's rq_psn).
const HOSTILE_PSN: u32 = 0x00_1000;
/// The victim's first request PSN.
const VICTIM_PSN: u32 = 0x50_0000;
/// How long "no reply" is waited for.
const SILENCE: Duration = Duration::from_millis(150);

/// 127.0.`net`.`host`.
fn ip(net: u8, host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, net, host))
}

/// The peer that crafts its own packets.
struct Hostile {
    sock: UdpSocket,
    addr: SocketAddr,
    /// The softroce device it attacks.
    target: SocketAddr,
}

impl Hostile {
    /// Emits `pkt` with a valid ICRC for the IPv4 and UDP headers the kernel will build
    /// (identification 0 and DF, as for any single datagram a socket sends).
    fn seal(&self, pkt: &PacketRepr) -> Vec<u8> {
        common::sealed(pkt, self.addr, self.target)
    }

    fn send(&self, pkt: &PacketRepr) {
        let bytes = self.seal(pkt);
        self.send_raw(&bytes);
    }

    fn send_raw(&self, bytes: &[u8]) {
        self.sock.send_to(bytes, self.target).unwrap();
    }

    /// The next packet received within `within`, parsed: (opcode, PSN, AETH, payload length).
    fn recv(&self, within: Duration) -> Option<Reply> {
        let end = Instant::now() + within;
        let mut buf = [0u8; 8192];
        loop {
            let left = end.checked_duration_since(Instant::now())?;
            if left.is_zero() {
                return None;
            }
            self.sock.set_read_timeout(Some(left)).unwrap();
            let Ok((n, from)) = self.sock.recv_from(&mut buf) else {
                return None;
            };
            if from.ip() != self.target.ip() {
                continue;
            }
            let pkt = PacketRepr::parse(&buf[..n]).expect("softroce sends packets that parse");
            return Some(Reply {
                opcode: pkt.bth.opcode,
                psn: pkt.bth.psn,
                dest_qp: pkt.bth.dest_qp,
                aeth: pkt.ext.aeth.map(|a| a.kind()),
                payload: pkt.payload.len(),
            });
        }
    }

    /// Everything received within `within`.
    fn drain(&self, within: Duration) -> Vec<Reply> {
        let end = Instant::now() + within;
        let mut out = Vec::new();
        while let Some(r) = self.recv(end.saturating_duration_since(Instant::now())) {
            out.push(r);
            assert!(out.len() < 100_000);
        }
        out
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Reply {
    opcode: Opcode,
    psn: u32,
    dest_qp: u32,
    aeth: Option<AckSyndrome>,
    payload: usize,
}

/// A softroce device under attack, a second one it has an honest connection to, and the
/// hostile socket; all on 127.0.`net`.0/24 and one UDP port.
struct Lab {
    victim: Context,
    honest: Context,
    hostile: Hostile,
    net: u8,
}

fn lab(net: u8) -> Lab {
    for _ in 0..50 {
        let sock = UdpSocket::bind(SocketAddr::new(ip(net, 5), 0)).unwrap();
        let port = sock.local_addr().unwrap().port();
        let v = Context::open(&DeviceConfig::new(SocketAddr::new(ip(net, 1), port)));
        let h = Context::open(&DeviceConfig::new(SocketAddr::new(ip(net, 2), port)));
        if let (Ok(victim), Ok(honest)) = (v, h) {
            let target = victim.local_addr();
            return Lab {
                victim,
                honest,
                hostile: Hostile {
                    addr: sock.local_addr().unwrap(),
                    sock,
                    target,
                },
                net,
            };
        }
    }
    panic!("no free UDP port");
}

struct Qp {
    qp: QueuePair,
    cq: CompletionQueue,
}

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 32,
        max_recv_wr: 32,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    }
}

/// A QP of `pd` connected (RTS) to `peer_qpn` at `peer_gid`.
fn connect(pd: &ProtectionDomain, ctx: &Context, peer_qpn: u32, peer_gid: Gid) -> Qp {
    let cq = ctx.create_cq(64).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            cap: cap(),
            qp_type: QpType::Rc,
            sq_sig_all: false,
        })
        .unwrap();
    qp.init(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC)
        .unwrap();
    let c = RcConnect {
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
        timeout: 18, // 1.07 s: no retransmission within a test's waits
        ..RcConnect::new(peer_qpn, HOSTILE_PSN, peer_gid, VICTIM_PSN)
    };
    qp.ready_to_receive(&c).unwrap();
    qp.ready_to_send(&c).unwrap();
    Qp { qp, cq }
}

fn hostile_gid(l: &Lab) -> Gid {
    Gid::from_ip(l.hostile.addr.ip())
}

/// A request from the hostile peer to `qpn`.
fn request<'a>(
    qpn: u32,
    psn: u32,
    opcode: Opcode,
    ext: ExtHeaders,
    payload: &'a [u8],
) -> PacketRepr<'a> {
    PacketRepr {
        bth: BthRepr {
            opcode,
            psn,
            dest_qp: qpn,
            ack_req: true,
            ..BthRepr::default()
        },
        ext,
        payload,
    }
}

fn reth(va: u64, rkey: u32, len: u32) -> ExtHeaders {
    ExtHeaders {
        reth: Some(RethRepr { va, rkey, len }),
        ..ExtHeaders::default()
    }
}

fn atomic(va: u64, rkey: u32) -> ExtHeaders {
    ExtHeaders {
        atomic: Some(AtomicEthRepr {
            va,
            rkey,
            swap_add: 0x0101_0101_0101_0101,
            compare: 0,
        }),
        ..ExtHeaders::default()
    }
}

fn wait(cq: &CompletionQueue) -> WorkCompletion {
    common::wait_one(cq, Duration::from_secs(2))
}

/// An honest WRITE and SEND between the two softroce devices complete: other QPs progress.
fn honest_pair_works(l: &Lab, round: u8) {
    let pv = l.victim.alloc_pd().unwrap();
    let ph = l.honest.alloc_pd().unwrap();
    let mv = pv.register_mr(4096, FULL).unwrap();
    let mh = ph.register_mr(4096, FULL).unwrap();
    let cqv = l.victim.create_cq(16).unwrap();
    let cqh = l.honest.create_cq(16).unwrap();
    let mk = |pd: &ProtectionDomain, cq: &CompletionQueue| {
        pd.create_qp(&QpInitAttr {
            send_cq: cq,
            recv_cq: cq,
            cap: cap(),
            qp_type: QpType::Rc,
            sq_sig_all: false,
        })
        .unwrap()
    };
    let qv = mk(&pv, &cqv);
    let qh = mk(&ph, &cqh);
    for (q, peer, gid) in [
        (&qv, &qh, l.honest.gid(1).unwrap()),
        (&qh, &qv, l.victim.gid(1).unwrap()),
    ] {
        q.init(AccessFlags::REMOTE_WRITE).unwrap();
        let c = RcConnect::new(peer.qp_num(), 7, gid, 7);
        q.ready_to_receive(&c).unwrap();
        q.ready_to_send(&c).unwrap();
    }
    let data = vec![round; 3000];
    mh.write(0, &data).unwrap();
    qh.post_send(&[SendWr {
        wr_id: 1,
        sg_list: &[mh.sge(0, 3000)],
        opcode: WrOpcode::RdmaWrite {
            remote_addr: mv.addr(),
            rkey: mv.rkey(),
        },
        send_flags: SendFlags::SIGNALED,
    }])
    .unwrap();
    let wc = wait(&cqh);
    assert_eq!(wc.status, WcStatus::Success, "honest WRITE");
    assert_eq!(mv.to_vec(0, 3000).unwrap(), data);
}

/// The victim's memory regions, byte for byte.
fn snapshot(mrs: &[&MemoryRegion]) -> Vec<Vec<u8>> {
    mrs.iter().map(|m| m.to_vec(0, m.len()).unwrap()).collect()
}

#[test]
fn memory_protection_violations_get_the_spec_nak_and_touch_nothing() {
    let l = lab(31);
    let pd = l.victim.alloc_pd().unwrap();
    let other_pd = l.victim.alloc_pd().unwrap();
    let mr = pd.register_mr(MR_LEN, FULL).unwrap();
    mr.fill(0, MR_LEN as u64, 0x11).unwrap();
    let foreign = other_pd.register_mr(4096, FULL).unwrap();
    let read_only = pd
        .register_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)
        .unwrap();
    let no_atomic = pd
        .register_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
        .unwrap();
    let gone_rkey = {
        let m = pd.register_mr(4096, FULL).unwrap();
        m.rkey()
    }; // dropped: deregistered
    let mut rereg = pd.register_mr(4096, FULL).unwrap();
    let stale_rkey = rereg.rkey();
    rereg.reregister(FULL).unwrap();
    assert_ne!(rereg.rkey(), stale_rkey);
    let regions = [&mr, &foreign, &read_only, &no_atomic, &rereg];
    let before = snapshot(&regions);

    let data = [0xEEu8; 64];
    let base = mr.addr();
    let write = |va, rkey, len: u32| {
        (
            Opcode::RC_RDMA_WRITE_ONLY,
            reth(va, rkey, len),
            len.min(64) as usize,
        )
    };
    let read = |va, rkey, len| (Opcode::RC_RDMA_READ_REQUEST, reth(va, rkey, len), 0);
    let cas = |va, rkey| (Opcode::RC_COMPARE_SWAP, atomic(va, rkey), 0);
    let cases: Vec<(&str, (Opcode, ExtHeaders, usize), NakCode)> = vec![
        (
            "unknown rkey",
            write(base, mr.rkey() ^ 0x5500, 64),
            NakCode::RemoteAccessError,
        ),
        (
            "rkey of another PD",
            write(foreign.addr(), foreign.rkey(), 64),
            NakCode::RemoteAccessError,
        ),
        (
            "WRITE to a read-only MR",
            write(read_only.addr(), read_only.rkey(), 64),
            NakCode::RemoteAccessError,
        ),
        (
            "atomic on an MR without the atomic right",
            cas(no_atomic.addr(), no_atomic.rkey()),
            NakCode::RemoteAccessError,
        ),
        (
            "WRITE past the end",
            write(base + MR_LEN as u64 - 32, mr.rkey(), 64),
            NakCode::RemoteAccessError,
        ),
        (
            "WRITE whose va + len wraps",
            write(u64::MAX - 31, mr.rkey(), 64),
            NakCode::RemoteAccessError,
        ),
        (
            "READ whose va + len wraps",
            read(u64::MAX - 31, mr.rkey(), 64),
            NakCode::RemoteAccessError,
        ),
        (
            "READ larger than the MR",
            read(base, mr.rkey(), MR_LEN as u32 + 1),
            NakCode::RemoteAccessError,
        ),
        (
            "deregistered MR",
            write(base, gone_rkey, 64),
            NakCode::RemoteAccessError,
        ),
        (
            "stale rkey after re-registration",
            write(rereg.addr(), stale_rkey, 64),
            NakCode::RemoteAccessError,
        ),
        (
            "unaligned atomic",
            cas(base + 4, mr.rkey()),
            NakCode::InvalidRequest,
        ),
    ];
    for (i, (what, (op, ext, n), nak)) in cases.into_iter().enumerate() {
        // A QP per case: the NAK moves it to ERROR.
        let hostile_qpn = 0x100 + i as u32;
        let q = connect(&pd, &l.victim, hostile_qpn, hostile_gid(&l));
        let qpn = q.qp.qp_num();
        l.hostile
            .send(&request(qpn, HOSTILE_PSN, op, ext, &data[..n]));
        let r = l
            .hostile
            .recv(Duration::from_secs(2))
            .unwrap_or_else(|| panic!("{what}: a NAK"));
        assert_eq!(r.opcode, Opcode::RC_ACK, "{what}");
        assert_eq!(r.dest_qp, hostile_qpn, "{what}");
        assert_eq!(r.psn, HOSTILE_PSN, "{what}: NAK for the request");
        assert_eq!(r.aeth, Some(AckSyndrome::Nak(nak)), "{what}");
        // rxe do_class_ac_error sets goto_error: the responder's QP goes to ERROR.
        let end = Instant::now() + Duration::from_secs(10);
        while q.qp.query().qp_state != QpState::Err && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(q.qp.query().qp_state, QpState::Err, "{what}");
        assert_eq!(snapshot(&regions), before, "{what}: memory unchanged");
        // The QP in ERROR answers nothing more.
        let next = request(
            qpn,
            HOSTILE_PSN,
            Opcode::RC_RDMA_WRITE_ONLY,
            reth(base, mr.rkey(), 8),
            &data[..8],
        );
        l.hostile.send(&next);
        assert_eq!(
            l.hostile.recv(SILENCE),
            None,
            "{what}: QP in ERROR is silent"
        );
        assert_eq!(snapshot(&regions), before, "{what}: memory unchanged");
        drop(q);
    }
    honest_pair_works(&l, 1);
}

#[test]
fn packets_failing_a_header_check_are_dropped_silently_and_counted() {
    let l = lab(32);
    let pd = l.victim.alloc_pd().unwrap();
    let mr = pd.register_mr(MR_LEN, FULL).unwrap();
    let q = connect(&pd, &l.victim, 0x200, hostile_gid(&l));
    let qpn = q.qp.qp_num();
    let sge = [mr.sge(0, 4096)];
    q.qp.post_recv(&[RecvWr {
        wr_id: 1,
        sg_list: &sge,
    }])
    .unwrap();
    let before = snapshot(&[&mr]);
    let data = [0x77u8; 64];
    let c = |name: &str| l.victim.counter(name).unwrap();
    let good_write = request(
        qpn,
        HOSTILE_PSN,
        Opcode::RC_RDMA_WRITE_ONLY,
        reth(mr.addr(), mr.rkey(), 64),
        &data,
    );

    // (what, counter, bytes)
    let mut cases: Vec<(&str, &str, Vec<u8>)> = Vec::new();
    let mut uc = good_write;
    uc.bth.opcode = Opcode::UC_RDMA_WRITE_ONLY;
    cases.push((
        "UC WRITE ONLY, valid rkey and PSN",
        "wrong_transport_pkts",
        l.hostile.seal(&uc),
    ));
    let uc_send = request(
        qpn,
        HOSTILE_PSN,
        Opcode::UC_SEND_ONLY,
        ExtHeaders::default(),
        &data,
    );
    cases.push((
        "UC SEND ONLY",
        "wrong_transport_pkts",
        l.hostile.seal(&uc_send),
    ));
    let ud_send = request(
        qpn,
        HOSTILE_PSN,
        Opcode::UD_SEND_ONLY,
        ExtHeaders {
            deth: Some(DethRepr {
                qkey: 0x8000_0000,
                src_qp: 0x200,
            }),
            ..ExtHeaders::default()
        },
        &data,
    );
    // An RC QP has no Q_Key: a UD packet, whatever its Q_Key, is another transport's.
    cases.push((
        "UD SEND ONLY with a Q_Key",
        "wrong_transport_pkts",
        l.hostile.seal(&ud_send),
    ));
    let mut bad_pkey = good_write;
    bad_pkey.bth.pkey = 0x1234;
    cases.push(("P_Key 0x1234", "bad_pkey_cntr", l.hostile.seal(&bad_pkey)));
    let mut bad_icrc = l.hostile.seal(&good_write);
    let n = bad_icrc.len();
    bad_icrc[n - 1] ^= 0x40;
    cases.push(("bad ICRC", "icrc_err", bad_icrc));
    cases.push(("8 bytes", "icrc_err", vec![0x0A, 0, 0xFF, 0xFF, 0, 0, 0, 1]));
    let sealed = l.hostile.seal(&good_write);
    cases.push(("truncated to 20 bytes", "icrc_err", sealed[..20].to_vec()));
    // A pad count larger than the payload, sealed with a valid ICRC.
    let mut padded = l.hostile.seal(&request(
        qpn,
        HOSTILE_PSN,
        Opcode::RC_SEND_ONLY,
        ExtHeaders::default(),
        &[],
    ));
    padded[1] |= 0x30; // pad count 3, no payload
    let pkt_len = padded.len();
    reseal(&l.hostile, &mut padded[..pkt_len]);
    cases.push(("pad count beyond the payload", "malformed_pkts", padded));
    let mut tver = l.hostile.seal(&good_write);
    tver[1] |= 0x01; // transport version 1
    reseal(&l.hostile, &mut tver);
    cases.push(("transport version 1", "malformed_pkts", tver));

    for (what, counter, bytes) in &cases {
        let was = c(counter);
        l.hostile.send_raw(bytes);
        assert_eq!(
            l.hostile.recv(SILENCE),
            None,
            "{what}: no reaction on the wire"
        );
        assert_eq!(c(counter), was + 1, "{what}: counted under {counter}");
        assert_eq!(snapshot(&[&mr]), before, "{what}: memory untouched");
    }

    // From an address that is not the QP's peer: a valid packet in every other respect.
    let intruder = Hostile {
        sock: UdpSocket::bind(SocketAddr::new(ip(l.net, 6), l.hostile.addr.port())).unwrap(),
        addr: SocketAddr::new(ip(l.net, 6), l.hostile.addr.port()),
        target: l.hostile.target,
    };
    let was = c("unknown_qp_pkts");
    intruder.send(&good_write);
    assert_eq!(intruder.recv(SILENCE), None, "intruder: no reply");
    assert_eq!(
        l.hostile.recv(Duration::from_millis(1)),
        None,
        "nor to the real peer"
    );
    assert_eq!(c("unknown_qp_pkts"), was + 1);
    assert_eq!(snapshot(&[&mr]), before);

    // A QP in INIT (and one in RESET) has no peer yet: dropped, counted.
    let cq = l.victim.create_cq(4).unwrap();
    let fresh = pd
        .create_qp(&QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            cap: cap(),
            qp_type: QpType::Rc,
            sq_sig_all: false,
        })
        .unwrap();
    let mut to_fresh = good_write;
    to_fresh.bth.dest_qp = fresh.qp_num();
    let was = c("unknown_qp_pkts");
    l.hostile.send(&to_fresh);
    assert_eq!(l.hostile.recv(SILENCE), None, "RESET");
    fresh.init(AccessFlags::REMOTE_WRITE).unwrap();
    l.hostile.send(&to_fresh);
    assert_eq!(l.hostile.recv(SILENCE), None, "INIT");
    assert_eq!(c("unknown_qp_pkts"), was + 2);
    assert_eq!(snapshot(&[&mr]), before);

    // None of it disturbed the QP: the valid WRITE at the same PSN is executed and ACKed, and
    // the receive WR is still there for a SEND.
    assert_eq!(q.qp.query().qp_state, QpState::Rts);
    assert_eq!(q.qp.query().rq_psn, HOSTILE_PSN);
    l.hostile.send(&good_write);
    let r = l.hostile.recv(Duration::from_secs(2)).expect("an ACK");
    assert!(matches!(r.aeth, Some(AckSyndrome::Ack { .. })), "{r:?}");
    assert_eq!(mr.to_vec(0, 64).unwrap(), data);
    l.hostile.send(&request(
        qpn,
        HOSTILE_PSN + 1,
        Opcode::RC_SEND_ONLY,
        ExtHeaders::default(),
        &data[..10],
    ));
    let wc = wait(&q.cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (1, WcStatus::Success, 10)
    );
    honest_pair_works(&l, 2);
}

/// Computes the ICRC of a packet from `h` to its target, in place: for `Hostile::seal` and for
/// packets a test edited after sealing.
fn reseal(h: &Hostile, bytes: &mut [u8]) {
    assert!(icrc::seal_socket_datagram(h.addr, h.target, bytes));
}

fn response(qpn: u32, psn: u32, opcode: Opcode, aeth: AethRepr, payload: &[u8]) -> PacketRepr<'_> {
    PacketRepr {
        bth: BthRepr {
            opcode,
            psn: psn & 0xFF_FFFF,
            dest_qp: qpn,
            ..BthRepr::default()
        },
        ext: ExtHeaders {
            aeth: Some(aeth),
            ..ExtHeaders::default()
        },
        payload,
    }
}

#[test]
fn forged_responses_outside_the_window_cannot_rewind_or_stall_the_requester() {
    let l = lab(33);
    let pd = l.victim.alloc_pd().unwrap();
    let mr = pd.register_mr(MR_LEN, FULL).unwrap();
    let q = connect(&pd, &l.victim, 0x300, hostile_gid(&l));
    let qpn = q.qp.qp_num();
    let post = |wr_id| {
        q.qp.post_send(&[SendWr {
            wr_id,
            sg_list: &[mr.sge(0, 100)],
            opcode: WrOpcode::Send,
            send_flags: SendFlags::SIGNALED,
        }])
        .unwrap();
    };
    // The first SEND completes normally: the window moves past VICTIM_PSN.
    post(1);
    let r = l.hostile.recv(Duration::from_secs(2)).expect("the SEND");
    assert_eq!((r.opcode, r.psn), (Opcode::RC_SEND_ONLY, VICTIM_PSN));
    l.hostile.send(&response(
        qpn,
        VICTIM_PSN,
        Opcode::RC_ACK,
        AethRepr::ack(0),
        &[],
    ));
    assert_eq!(wait(&q.cq).status, WcStatus::Success);
    // The second is in flight and unacknowledged.
    post(2);
    let r = l
        .hostile
        .recv(Duration::from_secs(2))
        .expect("the second SEND");
    let psn = VICTIM_PSN + 1;
    assert_eq!(r.psn, psn);
    let stale_before = l.victim.counter("stale_resp_pkts").unwrap();
    let forged: Vec<PacketRepr> = vec![
        // RNR NAKs 1000 PSNs behind the window (the defect: rewind and loop), one with timer
        // code 0 (the defect: a 655 ms stall), repeated.
        response(
            qpn,
            psn.wrapping_sub(1000),
            Opcode::RC_ACK,
            AethRepr::rnr_nak(1, 0),
            &[],
        ),
        response(
            qpn,
            psn.wrapping_sub(1000),
            Opcode::RC_ACK,
            AethRepr::rnr_nak(0, 0),
            &[],
        ),
        response(
            qpn,
            psn.wrapping_sub(3),
            Opcode::RC_ACK,
            AethRepr::rnr_nak(0, 0),
            &[],
        ),
        // Sequence and fatal NAKs behind it, ACKs and NAKs beyond it.
        response(
            qpn,
            psn.wrapping_sub(500),
            Opcode::RC_ACK,
            AethRepr::nak(NakCode::PsnSequenceError, 0),
            &[],
        ),
        response(
            qpn,
            psn.wrapping_sub(2),
            Opcode::RC_ACK,
            AethRepr::nak(NakCode::RemoteAccessError, 0),
            &[],
        ),
        response(qpn, psn + 50, Opcode::RC_ACK, AethRepr::ack(0), &[]),
        response(
            qpn,
            psn + 1,
            Opcode::RC_ACK,
            AethRepr::nak(NakCode::InvalidRequest, 0),
            &[],
        ),
        // READ responses and an atomic ACK for PSNs outside the window.
        response(
            qpn,
            psn.wrapping_sub(10),
            Opcode::RC_RDMA_READ_RESPONSE_ONLY,
            AethRepr::ack(0),
            &[9; 16],
        ),
        response(
            qpn,
            psn + 5,
            Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            AethRepr::ack(0),
            &[9; 1024],
        ),
    ];
    for f in &forged {
        l.hostile.send(f);
    }
    // Nothing is resent: no rewind, no loop (the old requester resent from PSN - 1000 at once).
    let seen = l.hostile.drain(Duration::from_millis(300));
    assert_eq!(seen, vec![], "no request resent after forged responses");
    let end = Instant::now() + Duration::from_secs(10);
    while l.victim.counter("stale_resp_pkts").unwrap() < stale_before + forged.len() as u64
        && Instant::now() < end
    {
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(
        l.victim.counter("stale_resp_pkts").unwrap(),
        stale_before + forged.len() as u64
    );
    assert_eq!(q.qp.query().qp_state, QpState::Rts);
    assert_eq!(q.qp.query().sq_psn, psn + 1, "no rewind");
    assert!(q.cq.is_empty(), "nothing completed by a forged ACK");
    // A new SEND goes out with the next PSN: no rewind and no RNR wait (the old requester
    // waited 655 ms, then sent it 1000 PSNs behind and never completed). The transport tests
    // check the absence of the wait directly (src/transport/tests/hostile.rs).
    post(3);
    let r = l
        .hostile
        .recv(Duration::from_secs(2))
        .expect("the third SEND");
    assert_eq!((r.opcode, r.psn), (Opcode::RC_SEND_ONLY, psn + 1));
    // The real ACK completes both.
    l.hostile.send(&response(
        qpn,
        psn + 1,
        Opcode::RC_ACK,
        AethRepr::ack(0),
        &[],
    ));
    for wr_id in [2, 3] {
        let wc = wait(&q.cq);
        assert_eq!((wc.wr_id, wc.status), (wr_id, WcStatus::Success));
    }
    assert_eq!(l.victim.counter("rcvd_rnr_err").unwrap(), 0);
}

#[test]
fn floods_stay_bounded_and_other_qps_progress() {
    let l = lab(34);
    let pd = l.victim.alloc_pd().unwrap();
    let mr = pd.register_mr(MR_LEN, FULL).unwrap();
    mr.fill(0, MR_LEN as u64, 0x42).unwrap();
    let q = connect(&pd, &l.victim, 0x400, hostile_gid(&l));
    let qpn = q.qp.qp_num();
    let c = |name: &str| l.victim.counter(name).unwrap();

    // Sent in bursts of 32, each let through before the next, so that the kernel's socket
    // buffer (the first bound on a flood: what does not fit is dropped before softroce sees
    // it) does not hide packets from the counters this test checks.
    let paced = |packets: &mut dyn Iterator<Item = Vec<u8>>, counter: &str| {
        let mut sent = c(counter);
        loop {
            let burst: Vec<Vec<u8>> = packets.take(32).collect();
            if burst.is_empty() {
                break;
            }
            for b in &burst {
                l.hostile.send_raw(b);
            }
            sent += burst.len() as u64;
            // Generous: the wait ends as soon as the burst is counted; a loaded 2-core CI
            // machine once took longer than 2 s to schedule the engine's thread.
            let end = Instant::now() + Duration::from_secs(10);
            while c(counter) < sent && Instant::now() < end {
                std::thread::sleep(Duration::from_micros(200));
            }
            assert_eq!(
                c(counter),
                sent,
                "{counter}: every packet of the burst counted"
            );
        }
    };

    // Junk: 2000 datagrams of every length up to 100 bytes, none with a valid ICRC. Over IPv4
    // a receiver solves for the identification, so one datagram in 65,536 of them would pass
    // for this run's source port by chance: such a one is changed until it does not.
    let from = l.hostile.sock.local_addr().unwrap();
    let junk = |i: u32| {
        let mut j: Vec<u8> = (0..i % 101).map(|k| (k * 7 + i) as u8).collect();
        while !j.is_empty()
            && softroce::wire::icrc::verify_socket_datagram(from, l.hostile.target, &j)
                != softroce::wire::icrc::SocketVerdict::Bad
        {
            j[0] = j[0].wrapping_add(1);
        }
        j
    };
    paced(&mut (0..2000u32).map(junk), "icrc_err");
    // Out-of-sequence requests: 2000 WRITEs far ahead draw one sequence NAK.
    let data = [0u8; 64];
    let ahead = |i: u32| {
        l.hostile.seal(&request(
            qpn,
            HOSTILE_PSN + 100 + i,
            Opcode::RC_RDMA_WRITE_ONLY,
            reth(mr.addr(), mr.rkey(), 64),
            &data,
        ))
    };
    paced(&mut (0..2000u32).map(ahead), "out_of_seq_request");
    let replies = l.hostile.drain(Duration::from_millis(300));
    let naks: Vec<_> = replies
        .iter()
        .filter(|r| r.aeth == Some(AckSyndrome::Nak(NakCode::PsnSequenceError)))
        .collect();
    assert_eq!(naks.len(), 1, "one NAK per gap: {replies:?}");
    assert_eq!(naks[0].psn, HOSTILE_PSN);
    assert_eq!(replies.len(), 1);
    honest_pair_works(&l, 3);

    // A huge READ within the region (the whole 64 KiB, 64 packets) then a storm of 2000
    // duplicates of it: each duplicate supersedes the replay still queued, so what is queued
    // stays one READ's worth of responses, streamed from the region without a copy.
    let read = l.hostile.seal(&request(
        qpn,
        HOSTILE_PSN,
        Opcode::RC_RDMA_READ_REQUEST,
        reth(mr.addr(), mr.rkey(), MR_LEN as u32),
        &[],
    ));
    l.hostile.send_raw(&read);
    let first = l
        .hostile
        .recv(Duration::from_secs(2))
        .expect("the READ's response");
    assert_eq!(
        (first.opcode, first.psn),
        (Opcode::RC_RDMA_READ_RESPONSE_FIRST, HOSTILE_PSN)
    );
    paced(
        &mut std::iter::repeat_with(|| read.clone()).take(2000),
        "duplicate_request",
    );
    // The replies overflow the hostile socket's buffer; what arrives is bounded by one
    // READ's worth of responses per request.
    let replies = l.hostile.drain(Duration::from_millis(300));
    let bytes: usize = replies.iter().map(|r| r.payload).sum();
    assert!(
        bytes <= 2001 * MR_LEN,
        "at most one response per request: {bytes}"
    );
    assert_eq!(c("duplicate_request"), 2000);
    // The QP is still in order: the next request is at PSN + 64.
    assert_eq!(q.qp.query().rq_psn, HOSTILE_PSN + 64);
    assert_eq!(q.qp.query().qp_state, QpState::Rts);
    assert!(
        mr.to_vec(0, MR_LEN).unwrap().iter().all(|&b| b == 0x42),
        "READs write nothing"
    );
    honest_pair_works(&l, 4);
}

#[test]
fn the_responder_answers_in_rxe_order_and_re_acks_duplicates_without_ack_req() {
    let l = lab(35);
    let pd = l.victim.alloc_pd().unwrap();
    let mr = pd.register_mr(MR_LEN, FULL).unwrap();
    // Resources before length: an over-long SEND ONLY at a QP with no receive WR draws an RNR
    // NAK (rxe's check_resource runs before check_length), and the PSN is not consumed.
    let q = connect(&pd, &l.victim, 0x500, hostile_gid(&l));
    let qpn = q.qp.qp_num();
    let big = vec![0u8; 2048]; // MTU 1024
    l.hostile.send(&request(
        qpn,
        HOSTILE_PSN,
        Opcode::RC_SEND_ONLY,
        ExtHeaders::default(),
        &big,
    ));
    let r = l.hostile.recv(Duration::from_secs(2)).expect("a NAK");
    assert!(matches!(r.aeth, Some(AckSyndrome::RnrNak { .. })), "{r:?}");
    assert_eq!(q.qp.query().rq_psn, HOSTILE_PSN);
    assert_eq!(q.qp.query().qp_state, QpState::Rts);

    // A WRITE, then its duplicate without AckReq: re-ACKed all the same (rxe duplicate_request).
    let data = [5u8; 32];
    let w = request(
        qpn,
        HOSTILE_PSN,
        Opcode::RC_RDMA_WRITE_ONLY,
        reth(mr.addr(), mr.rkey(), 32),
        &data,
    );
    l.hostile.send(&w);
    let r = l.hostile.recv(Duration::from_secs(2)).expect("an ACK");
    assert!(matches!(r.aeth, Some(AckSyndrome::Ack { .. })), "{r:?}");
    let mut dup = w;
    dup.bth.ack_req = false;
    l.hostile.send(&dup);
    let r = l.hostile.recv(Duration::from_secs(2)).expect("a re-ACK");
    assert!(matches!(r.aeth, Some(AckSyndrome::Ack { .. })), "{r:?}");
    assert_eq!(r.psn, HOSTILE_PSN);
    assert_eq!(l.victim.counter("duplicate_request").unwrap(), 1);
    assert_eq!(mr.to_vec(0, 32).unwrap(), data);
}

#[test]
fn a_capture_shows_every_datagram_that_arrived_short_ones_included() {
    let dir = std::env::temp_dir().join(format!("softroce-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("short.pcap");
    let sock = UdpSocket::bind(SocketAddr::new(ip(36, 5), 0)).unwrap();
    let port = sock.local_addr().unwrap().port();
    let mut cfg = DeviceConfig::new(SocketAddr::new(ip(36, 1), port));
    cfg.pcap = Some(path.clone());
    let victim = Context::open(&cfg).unwrap();
    let hostile = Hostile {
        addr: sock.local_addr().unwrap(),
        sock,
        target: victim.local_addr(),
    };
    let sent: Vec<Vec<u8>> = vec![vec![], vec![0x42], vec![7; 15], vec![9; 16], vec![1; 40]];
    for d in &sent {
        hostile.send_raw(d);
    }
    let end = Instant::now() + Duration::from_secs(2);
    while victim.counter("icrc_err").unwrap() < sent.len() as u64 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(victim.counter("icrc_err").unwrap(), sent.len() as u64);
    drop(victim); // flushes the capture
    let bytes = std::fs::read(&path).unwrap();
    let mut r = softroce::capture::CaptureReader::new(&bytes[..]).unwrap();
    let mut got = Vec::new();
    while let Some(f) = r.next_frame().unwrap() {
        // Ethernet 14 + IPv4 20 + UDP 8.
        got.push(f.data[42..].to_vec());
    }
    assert_eq!(got, sent, "every datagram, in order, byte for byte");
    let _ = std::fs::remove_dir_all(&dir);
}

mod common;

/// A UDP port free on 127.0.`net`.1 and 127.0.`net`.2.
fn free_pair_port(net: u8) -> u16 {
    for _ in 0..100 {
        let u = UdpSocket::bind(SocketAddr::new(ip(net, 1), 0)).unwrap();
        let port = u.local_addr().unwrap().port();
        if UdpSocket::bind(SocketAddr::new(ip(net, 2), port)).is_ok() {
            return port;
        }
    }
    panic!("no UDP port free on both addresses");
}

/// Sends the CM message `msg` to QP1 at `to` from `from_ip` (any UDP port: RoCE's source port
/// is entropy, so the receiver knows its peer by the IP address), as a UD SEND ONLY with the
/// GSI Q_Key and a valid ICRC.
fn send_mad(from_ip: IpAddr, to: SocketAddr, msg: &softroce::wire::cm::CmMessage) {
    let mut mad = [0u8; softroce::wire::mad::LEN];
    msg.emit(0x1234, &mut mad).unwrap();
    let pkt = common::qp1_packet(Opcode::UD_SEND_ONLY, softroce::wire::deth::GSI_QKEY, &mad);
    let sock = UdpSocket::bind(SocketAddr::new(from_ip, 0)).unwrap();
    let buf = common::sealed(&pkt, sock.local_addr().unwrap(), to);
    sock.send_to(&buf, to).unwrap();
}

/// The DREQ that ends the connection between comm IDs `client_id` and `server_id`, sent to
/// the server (whose CM ignores one that names another QP than `server_qpn`).
fn dreq_to_server(
    client_id: u32,
    server_id: u32,
    server_qpn: u32,
) -> softroce::wire::cm::CmMessage {
    use softroce::wire::cm::{CmDreq, CmMessage, DREQ_PRIVATE_DATA_LEN};
    CmMessage::Dreq(CmDreq {
        local_comm_id: client_id,
        remote_comm_id: server_id,
        remote_qpn: server_qpn,
        private_data: [0; DREQ_PRIVATE_DATA_LEN],
    })
}

/// A consumer's REJ of a REP, from comm ID `from` to comm ID `to`.
fn rej_of_rep(from: u32, to: u32) -> softroce::wire::cm::CmMessage {
    use softroce::wire::cm::{message_ref, rej_reason, CmMessage, CmRej};
    use softroce::wire::cm::{REJ_ARI_LEN, REJ_PRIVATE_DATA_LEN};
    CmMessage::Rej(CmRej {
        local_comm_id: from,
        remote_comm_id: to,
        message_rejected: message_ref::REP,
        rejected_info_length: 0,
        reason: rej_reason::CONSUMER_DEFINED,
        ari: [0; REJ_ARI_LEN],
        private_data: [0; REJ_PRIVATE_DATA_LEN],
    })
}

/// What a third host at `stranger` that learned a connection's comm IDs and the server's QPN
/// sends to end it: `dreq` and a REJ to the server, a REJ to the client.
fn forge_teardown(
    stranger: IpAddr,
    (server, client): (SocketAddr, SocketAddr),
    (client_id, server_id): (u32, u32),
    dreq: &softroce::wire::cm::CmMessage,
) {
    send_mad(stranger, server, dreq);
    send_mad(stranger, server, &rej_of_rep(client_id, server_id));
    send_mad(stranger, client, &rej_of_rep(server_id, client_id));
}

/// `cm_id local comm ID 0x.. remote comm ID 0x.. qpn 0x..` (rping -d): (local, remote, qpn).
fn parse_ids(line: &str) -> (u32, u32, u32) {
    let w: Vec<&str> = line.split_whitespace().collect();
    let hex = |s: &str| u32::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    (hex(w[4]), hex(w[8]), hex(w[10]))
}

/// Pings the client has reported so far (it prints one line per ping with -v).
fn pings_seen(out: &mut common::Lines, at_least: usize, limit: Duration) -> usize {
    let mut n = out
        .seen
        .iter()
        .filter(|l| l.starts_with("ping data"))
        .count();
    let end = Instant::now() + limit;
    while n < at_least {
        let left = end.saturating_duration_since(Instant::now());
        if out.wait_for(left, |l| l.starts_with("ping data")).is_none() {
            break;
        }
        n += 1;
    }
    n
}

#[test]
fn a_dreq_or_rej_from_a_third_address_leaves_rping_running_and_the_peers_dreq_ends_it() {
    let net = 40;
    let port = free_pair_port(net);
    let (client_ip, server_ip, stranger_ip) = (ip(net, 1), ip(net, 2), ip(net, 5));
    let server_addr = SocketAddr::new(server_ip, port);
    let rping = |args: &[String]| {
        Command::new(common::bin())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let roce = ["--roce-port".to_string(), port.to_string()];
    let mut server = rping(
        &[
            vec![
                "rping",
                "-s",
                "-d",
                "-a",
                &server_ip.to_string(),
                "--counters",
            ]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>(),
            roce.to_vec(),
        ]
        .concat(),
    );
    let mut sout = common::Lines::new(server.stdout.take().unwrap());
    assert!(
        sout.wait_for(Duration::from_secs(10), |l| l == "rdma_listen")
            .is_some(),
        "{:?}",
        sout.seen
    );
    // Pings without end: only a disconnection stops them.
    let mut client = rping(
        &[
            vec![
                "rping".to_string(),
                "-c".into(),
                "-v".into(),
                "-d".into(),
                "-C".into(),
                "0".into(),
                "-a".into(),
                server_ip.to_string(),
                "-I".into(),
                client_ip.to_string(),
            ],
            roce.to_vec(),
        ]
        .concat(),
    );
    let mut cout = common::Lines::new(client.stdout.take().unwrap());
    let ids = |out: &mut common::Lines| {
        let line = out
            .wait_for(Duration::from_secs(10), |l| l.starts_with("cm_id "))
            .unwrap_or_else(|| panic!("no comm IDs in {:?}", out.seen));
        parse_ids(&line)
    };
    let (server_id, client_id, server_qpn) = ids(&mut sout);
    let (client_id2, server_id2, _) = ids(&mut cout);
    assert_eq!((client_id, server_id), (client_id2, server_id2));
    assert!(pings_seen(&mut cout, 10, Duration::from_secs(10)) >= 10);

    // A third host that learned both IDs (and the QPN) sends what would end the connection.
    let dreq = dreq_to_server(client_id, server_id, server_qpn);
    forge_teardown(
        stranger_ip,
        (server_addr, SocketAddr::new(client_ip, port)),
        (client_id, server_id),
        &dreq,
    );
    // Pings sent after the forgeries reached each engine after them (one socket, in order);
    // 300 more round trips, each of which reads the CM's events, show they changed nothing.
    let before = pings_seen(&mut cout, 0, Duration::ZERO);
    let after = pings_seen(&mut cout, before + 300, Duration::from_secs(20));
    assert!(
        after >= before + 300,
        "{before} -> {after}: {:?}",
        cout.seen.last()
    );
    assert!(server.try_wait().unwrap().is_none(), "the server stopped");
    assert!(client.try_wait().unwrap().is_none(), "the client stopped");

    // The same DREQ from the peer's address: the server stops at once, as librdmacm's does.
    send_mad(client_ip, server_addr, &dreq);
    let t = Instant::now();
    let s = common::finish(server, "rping server", Duration::from_secs(10));
    let stopped_in = t.elapsed();
    let serr = String::from_utf8_lossy(&s.stderr).into_owned();
    assert!(serr.contains("server DISCONNECT EVENT..."), "{serr}");
    // Its exit includes its time-wait (1 s) after answering with the DREP.
    assert!(stopped_in < Duration::from_secs(5), "{stopped_in:?}");
    let counters = serr
        .lines()
        .find(|l| l.starts_with("cm counters:"))
        .unwrap_or_else(|| panic!("{serr}"));
    assert!(counters.contains(" cm_wrong_peer=2"), "{counters}");
    // The client's pings now go unanswered; it fails with the transport's retries, or is
    // ended here.
    let _ = client.kill();
    let _ = client.wait();
}

/// Waits (at most 2 s) until the CM behind `ch` has received `n` MADs in all.
fn cm_received(ch: &softroce::rdma_cm::EventChannel, n: u64) {
    let end = Instant::now() + Duration::from_secs(2);
    while ch.cm_counters().mads_received < n {
        assert!(
            Instant::now() < end,
            "the CM received {:?}",
            ch.cm_counters()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// One SEND each way over an rdma_cm connection.
fn exchange(
    a: (&QueuePair, &CompletionQueue, &MemoryRegion),
    b: (&QueuePair, &CompletionQueue, &MemoryRegion),
) {
    for (from, to) in [(a, b), (b, a)] {
        let rsge = [to.2.sge(0, 64)];
        to.0.post_recv(&[RecvWr {
            wr_id: 2,
            sg_list: &rsge,
        }])
        .unwrap();
        let sge = [from.2.sge(0, 16)];
        from.0
            .post_send(&[SendWr {
                wr_id: 1,
                sg_list: &sge,
                opcode: WrOpcode::Send,
                send_flags: SendFlags::SIGNALED,
            }])
            .unwrap();
        assert_eq!(wait(from.1).status, WcStatus::Success);
        let wc = wait(to.1);
        assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 16));
    }
}

#[test]
fn forged_replayed_and_flooded_cm_messages_from_a_third_address_leave_connections_alone() {
    use softroce::cm::{CmEndpoint, ConnectParams, EndpointConfig};
    use softroce::rdma_cm::{ConnParam, EventChannel, EventKind};
    use softroce::wire::cm::{rdma_tcp_service_id, CmIds, CmMessage};
    const PORT: u16 = 7174;
    const BACKLOG: usize = 4;
    let l = lab(41);
    let (chv, chh) = (
        EventChannel::new(&l.victim).unwrap(),
        EventChannel::new(&l.honest).unwrap(),
    );
    let get = |ch: &EventChannel, kind: EventKind| {
        let e = ch.get_event(Duration::from_secs(2)).unwrap();
        assert_eq!(e.kind, kind);
        e
    };
    let listener = chv.create_id();
    listener.bind_addr(PORT).unwrap();
    listener.listen(BACKLOG).unwrap();
    let side = |ctx: &Context| {
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(16).unwrap();
        let mr = pd.register_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
        (pd, cq, mr)
    };
    let (vpd, vcq, vmr) = side(&l.victim);
    let (hpd, hcq, hmr) = side(&l.honest);
    let qp_init = |cq| QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        cap: cap(),
        qp_type: QpType::Rc,
        sq_sig_all: false,
    };
    // The honest peer connects.
    let hid = chh.create_id();
    hid.resolve_addr(l.victim.local_addr().ip(), PORT).unwrap();
    get(&chh, EventKind::AddrResolved);
    hid.resolve_route().unwrap();
    get(&chh, EventKind::RouteResolved);
    let hqp = hid.create_qp(&hpd, &qp_init(&hcq)).unwrap();
    hid.connect(&ConnParam::default()).unwrap();
    let vid = get(&chv, EventKind::ConnectRequest).id;
    let vqp = vid.create_qp(&vpd, &qp_init(&vcq)).unwrap();
    vid.accept(&ConnParam::default()).unwrap();
    get(&chh, EventKind::Established);
    get(&chv, EventKind::Established);
    exchange((&hqp, &hcq, &hmr), (&vqp, &vcq, &vmr));
    let (v_id, h_id) = vid.comm_ids().unwrap();
    assert_eq!(hid.comm_ids(), Some((h_id, v_id)));

    let to = l.hostile.target;
    let stranger = l.hostile.addr.ip();
    let received = chv.cm_counters().mads_received;
    // Forged with both IDs right: a DREQ, a REJ, an RTU and a DREP.
    let ids = CmIds {
        local_comm_id: h_id,
        remote_comm_id: v_id,
        private_data: [0; softroce::wire::cm::RTU_PRIVATE_DATA_LEN],
    };
    let forged = [
        dreq_to_server(h_id, v_id, vqp.qp_num()),
        rej_of_rep(h_id, v_id),
        CmMessage::Rtu(ids),
        CmMessage::Drep(ids),
    ];
    for m in &forged {
        send_mad(stranger, to, m);
    }
    // A replay of the honest peer's REQ (its comm ID and CA GUID, the EUI-64 of 02:00 and its
    // IPv4 address) from the stranger: not a duplicate to answer, not a new connection.
    let mut factory = CmEndpoint::new(EndpointConfig {
        comm_id_seed: Some(41),
        max_connections: 2000,
        ..EndpointConfig::default()
    });
    let IpAddr::V4(honest_v4) = l.honest.local_addr().ip() else {
        unreachable!()
    };
    let o = honest_v4.octets();
    let honest_guid = u64::from_be_bytes([0, 0, o[0], 0xff, 0xfe, o[1], o[2], o[3]]);
    let p = ConnectParams::rc(rdma_tcp_service_id(PORT), 0x99, 0, [0; 16], [0; 16]);
    factory.connect(Duration::ZERO, to, &p).unwrap();
    let (_, m) = CmMessage::parse(&factory.poll_transmit().unwrap().mad).unwrap();
    let CmMessage::Req(req) = m else { panic!() };
    let replay = CmMessage::Req(softroce::wire::cm::CmReq {
        local_comm_id: h_id,
        local_ca_guid: honest_guid,
        ..req
    });
    send_mad(stranger, to, &replay);
    cm_received(&chv, received + 5);
    assert_eq!(chv.cm_counters().wrong_peer, 5, "{:?}", chv.cm_counters());
    // A REQ flood from the same host: the backlog bounds what it leaves behind.
    let flood = 1000u64;
    for i in 0..flood {
        let p = ConnectParams::rc(
            rdma_tcp_service_id(PORT),
            0x100 + i as u32,
            0,
            Gid::from_ip(stranger).0,
            Gid::from_ip(to.ip()).0,
        );
        factory.connect(Duration::ZERO, to, &p).unwrap();
        let out = factory.poll_transmit().unwrap();
        let (_, m) = CmMessage::parse(&out.mad).unwrap();
        send_mad(stranger, to, &m);
    }
    // Malformed MADs: a MAD's length of bytes that are no MAD (base version 0x5a).
    let garbage = [0x5au8; softroce::wire::mad::LEN];
    for _ in 0..50 {
        l.hostile.send(&common::qp1_packet(
            Opcode::UD_SEND_ONLY,
            softroce::wire::deth::GSI_QKEY,
            &garbage,
        ));
    }
    cm_received(&chv, received + 5 + flood + 50);
    let c = chv.cm_counters();
    assert_eq!(c.req_dropped, flood - BACKLOG as u64, "{c:?}");
    assert_eq!(c.bad_mads, 50, "{c:?}");
    // The application sees the backlog's worth of requests and turns them down.
    for _ in 0..BACKLOG {
        let e = get(&chv, EventKind::ConnectRequest);
        assert_eq!(e.id.remote_addr().unwrap().ip(), stranger);
        e.id.reject(b"no").unwrap();
    }
    assert!(chv.get_event(Duration::from_millis(50)).is_err());
    // The honest connection is untouched: still RTS both ways, still carrying data.
    assert_eq!(vqp.query().qp_state, QpState::Rts);
    assert_eq!(hqp.query().qp_state, QpState::Rts);
    exchange((&hqp, &hcq, &hmr), (&vqp, &vcq, &vmr));
    assert!(
        chh.get_event(Duration::ZERO).is_err(),
        "the honest side heard nothing"
    );
    // With the backlog free again, the honest peer opens a second connection.
    let hid2 = chh.create_id();
    hid2.resolve_addr(l.victim.local_addr().ip(), PORT).unwrap();
    get(&chh, EventKind::AddrResolved);
    hid2.resolve_route().unwrap();
    get(&chh, EventKind::RouteResolved);
    hid2.create_qp(&hpd, &qp_init(&hcq)).unwrap();
    hid2.connect(&ConnParam::default()).unwrap();
    let vid2 = get(&chv, EventKind::ConnectRequest).id;
    vid2.create_qp(&vpd, &qp_init(&vcq)).unwrap();
    vid2.accept(&ConnParam::default()).unwrap();
    get(&chh, EventKind::Established);
    get(&chv, EventKind::Established);
    // And the honest peer's own DREQ still ends the first: DISCONNECTED, with the QP left
    // to the application (as the kernel's rdma_cm), which then disconnects it too.
    hid.disconnect().unwrap();
    get(&chv, EventKind::Disconnected);
    assert_eq!(vqp.query().qp_state, QpState::Rts);
    vid.disconnect().unwrap();
    assert_eq!(vqp.query().qp_state, QpState::Err);
}

// Memory windows (issue 22, spec-notes/memory-windows.md): a hostile peer holding a window's
// key may use it only while the window is bound, only through the QP a type 2 window is bound
// to, and only inside the window with the window's rights.

/// A victim region that windows can be bound to (no remote rights of its own), filled with
/// 0x22.
fn bindable(pd: &ProtectionDomain) -> MemoryRegion {
    let win = pd
        .register_mr(MR_LEN, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND)
        .unwrap();
    win.fill(0, MR_LEN as u64, 0x22).unwrap();
    // A key (rkey = lkey, spec-notes/beyond-rxe.md rule 5), but no remote rights of its own.
    assert_eq!(win.rkey(), win.lkey());
    win
}

/// Binds a type 2 window over `len` bytes at `off` of `win` on `q` (a local operation: the
/// peer sees no packet).
fn bind_type2(
    pd: &ProtectionDomain,
    q: &Qp,
    win: &MemoryRegion,
    off: u64,
    len: u64,
) -> MemoryWindow {
    let mw = pd.alloc_mw(MwType::Type2).unwrap();
    let op = mw.bind_wr(
        0x77,
        Some(win),
        win.addr() + off,
        len,
        AccessFlags::REMOTE_WRITE,
    );
    q.qp.post_send(&[SendWr {
        wr_id: 0xB1,
        sg_list: &[],
        opcode: op,
        send_flags: SendFlags::SIGNALED,
    }])
    .unwrap();
    let wc = wait(&q.cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (0xB1, WcStatus::Success, WcOpcode::BindMw)
    );
    mw
}

/// The hostile peer's reply to one request, as an AETH syndrome.
fn answer_to(l: &Lab, pkt: &PacketRepr, what: &str) -> AckSyndrome {
    l.hostile.send(pkt);
    let r = l
        .hostile
        .recv(Duration::from_secs(2))
        .unwrap_or_else(|| panic!("{what}: an answer"));
    assert_eq!(r.opcode, Opcode::RC_ACK, "{what}");
    r.aeth.unwrap()
}

fn wait_error(q: &Qp, what: &str) {
    let end = Instant::now() + Duration::from_secs(10);
    while q.qp.query().qp_state != QpState::Err && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(q.qp.query().qp_state, QpState::Err, "{what}");
}

fn send_inv(qpn: u32, psn: u32, rkey: u32, payload: &[u8]) -> PacketRepr<'_> {
    request(
        qpn,
        psn,
        Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
        ExtHeaders {
            ieth: Some(softroce::wire::IethRepr { rkey }),
            ..ExtHeaders::default()
        },
        payload,
    )
}

#[test]
fn a_windows_key_is_refused_once_the_window_is_invalidated() {
    let l = lab(45);
    let pd = l.victim.alloc_pd().unwrap();
    let win = bindable(&pd);
    let data = [0xEEu8; 64];
    let wr = |qpn, psn, rkey| {
        request(
            qpn,
            psn,
            Opcode::RC_RDMA_WRITE_ONLY,
            reth(win.addr(), rkey, 64),
            &data,
        )
    };

    // By the victim's LOCAL_INV.
    let q = connect(&pd, &l.victim, 0x400, hostile_gid(&l));
    let qpn = q.qp.qp_num();
    let mw = bind_type2(&pd, &q, &win, 0, 4096);
    let key = mw.rkey();
    assert!(matches!(
        answer_to(&l, &wr(qpn, HOSTILE_PSN, key), "bound"),
        AckSyndrome::Ack { .. }
    ));
    assert_eq!(win.to_vec(0, 64).unwrap(), data.to_vec());
    win.fill(0, 64, 0x22).unwrap();
    q.qp.post_send(&[SendWr {
        wr_id: 0xB2,
        sg_list: &[],
        opcode: WrOpcode::LocalInv { rkey: key },
        send_flags: SendFlags::SIGNALED,
    }])
    .unwrap();
    assert_eq!(wait(&q.cq).status, WcStatus::Success);
    let before = snapshot(&[&win]);
    assert_eq!(
        answer_to(&l, &wr(qpn, HOSTILE_PSN + 1, key), "after LOCAL_INV"),
        AckSyndrome::Nak(NakCode::RemoteAccessError)
    );
    wait_error(&q, "after LOCAL_INV");
    assert_eq!(snapshot(&[&win]), before, "nothing landed");

    // By the peer's own SEND with invalidate: the key it gave up stays given up.
    let q = connect(&pd, &l.victim, 0x401, hostile_gid(&l));
    let qpn = q.qp.qp_num();
    let mw = bind_type2(&pd, &q, &win, 0, 4096);
    let key = mw.rkey();
    let rbuf = pd.register_mr(4096, FULL).unwrap();
    q.qp.post_recv(&[RecvWr {
        wr_id: 0xC1,
        sg_list: &[rbuf.sge(0, 4096)],
    }])
    .unwrap();
    assert!(matches!(
        answer_to(
            &l,
            &send_inv(qpn, HOSTILE_PSN, key, &data[..16]),
            "SEND_INV"
        ),
        AckSyndrome::Ack { .. }
    ));
    let wc = wait(&q.cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.invalidated_rkey),
        (0xC1, WcStatus::Success, Some(key))
    );
    assert!(!mw.is_bound());
    assert_eq!(
        answer_to(&l, &wr(qpn, HOSTILE_PSN + 1, key), "after SEND_INV"),
        AckSyndrome::Nak(NakCode::RemoteAccessError)
    );
    assert_eq!(snapshot(&[&win]), before, "nothing landed");
    honest_pair_works(&l, 7);
}

#[test]
fn a_type_2_window_is_refused_on_every_qp_but_its_own() {
    let l = lab(46);
    let pd = l.victim.alloc_pd().unwrap();
    let win = bindable(&pd);
    let data = [0xEEu8; 64];
    let owner = connect(&pd, &l.victim, 0x410, hostile_gid(&l));
    let mw = bind_type2(&pd, &owner, &win, 0, 4096);
    let key = mw.rkey();
    let before = snapshot(&[&win]);
    // The hostile peer's other connection to the same PD: no WRITE through the window...
    let other = connect(&pd, &l.victim, 0x411, hostile_gid(&l));
    let pkt = request(
        other.qp.qp_num(),
        HOSTILE_PSN,
        Opcode::RC_RDMA_WRITE_ONLY,
        reth(win.addr(), key, 64),
        &data,
    );
    assert_eq!(
        answer_to(&l, &pkt, "WRITE from another QP"),
        AckSyndrome::Nak(NakCode::RemoteAccessError)
    );
    wait_error(&other, "WRITE from another QP");
    assert_eq!(snapshot(&[&win]), before, "nothing landed");
    // ...and no invalidating it either.
    let third = connect(&pd, &l.victim, 0x412, hostile_gid(&l));
    let rbuf = pd.register_mr(4096, FULL).unwrap();
    third
        .qp
        .post_recv(&[RecvWr {
            wr_id: 0xC2,
            sg_list: &[rbuf.sge(0, 4096)],
        }])
        .unwrap();
    let pkt = send_inv(third.qp.qp_num(), HOSTILE_PSN, key, &data[..16]);
    assert_eq!(
        answer_to(&l, &pkt, "SEND_INV from another QP"),
        AckSyndrome::Nak(NakCode::InvalidRequest)
    );
    let wc = wait(&third.cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.invalidated_rkey),
        (0xC2, WcStatus::RemInvReqErr, None)
    );
    assert!(mw.is_bound(), "still bound");
    // Its own QP still serves it.
    let pkt = request(
        owner.qp.qp_num(),
        HOSTILE_PSN,
        Opcode::RC_RDMA_WRITE_ONLY,
        reth(win.addr(), key, 64),
        &data,
    );
    assert!(matches!(
        answer_to(&l, &pkt, "WRITE on the owner"),
        AckSyndrome::Ack { .. }
    ));
    assert_eq!(win.to_vec(0, 64).unwrap(), data.to_vec());
    honest_pair_works(&l, 8);
}

#[test]
fn access_outside_a_window_or_beyond_its_rights_is_nakked_and_touches_nothing() {
    let l = lab(47);
    let pd = l.victim.alloc_pd().unwrap();
    let win = bindable(&pd);
    // A type 1 window over [4096, 12288) with the WRITE right only: it serves every QP of
    // the PD, so each case gets a fresh QP (the NAK moves it to ERROR).
    let binder = connect(&pd, &l.victim, 0x420, hostile_gid(&l));
    let mw = pd.alloc_mw(MwType::Type1).unwrap();
    let key = binder
        .qp
        .bind_mw(
            &mw,
            &MwBind {
                wr_id: 0xB3,
                send_flags: SendFlags::SIGNALED,
                mr: Some(&win),
                addr: win.addr() + 4096,
                length: 8192,
                access: AccessFlags::REMOTE_WRITE,
            },
        )
        .unwrap();
    assert_eq!(wait(&binder.cq).status, WcStatus::Success);
    let before = snapshot(&[&win]);
    let data = [0xEEu8; 64];
    let lo = win.addr() + 4096;
    let hi = lo + 8192;
    let write = |va, len: u32| {
        (
            Opcode::RC_RDMA_WRITE_ONLY,
            reth(va, key, len),
            len.min(64) as usize,
        )
    };
    let cases: Vec<(&str, (Opcode, ExtHeaders, usize))> = vec![
        ("WRITE one byte before the window", write(lo - 1, 2)),
        ("WRITE across the window's end", write(hi - 32, 64)),
        ("WRITE just past the window", write(hi, 8)),
        ("WRITE at the region's start", write(win.addr(), 64)),
        (
            "READ without the window's READ right",
            (Opcode::RC_RDMA_READ_REQUEST, reth(lo, key, 64), 0),
        ),
        (
            "atomic without the window's atomic right",
            (Opcode::RC_COMPARE_SWAP, atomic(lo, key), 0),
        ),
        ("WRITE whose va + len wraps", write(u64::MAX - 31, 64)),
        (
            "WRITE with the window's key byte flipped",
            (
                Opcode::RC_RDMA_WRITE_ONLY,
                reth(lo, key ^ 0x01, 64),
                64usize,
            ),
        ),
    ];
    for (i, (what, (op, ext, n))) in cases.into_iter().enumerate() {
        let q = connect(&pd, &l.victim, 0x430 + i as u32, hostile_gid(&l));
        let pkt = request(q.qp.qp_num(), HOSTILE_PSN, op, ext, &data[..n]);
        assert_eq!(
            answer_to(&l, &pkt, what),
            AckSyndrome::Nak(NakCode::RemoteAccessError),
            "{what}"
        );
        wait_error(&q, what);
        assert_eq!(snapshot(&[&win]), before, "{what}: memory unchanged");
    }
    // Inside the window, with its right, from yet another QP: it lands.
    let q = connect(&pd, &l.victim, 0x440, hostile_gid(&l));
    let pkt = request(
        q.qp.qp_num(),
        HOSTILE_PSN,
        Opcode::RC_RDMA_WRITE_ONLY,
        reth(hi - 64, key, 64),
        &data,
    );
    assert!(matches!(
        answer_to(&l, &pkt, "inside"),
        AckSyndrome::Ack { .. }
    ));
    assert_eq!(win.to_vec(4096 + 8192 - 64, 64).unwrap(), data.to_vec());
    honest_pair_works(&l, 9);
}

/// Whether a UDP socket is bound to `addr` (IPv4): a shimmed rping server's device, which it
/// opens just before `rdma_listen` registers the listener.
fn udp_bound(addr: SocketAddr) -> bool {
    let IpAddr::V4(v4) = addr.ip() else {
        return false;
    };
    let want = format!(
        "{:08X}:{:04X}",
        u32::from_le_bytes(v4.octets()),
        addr.port()
    );
    std::fs::read_to_string("/proc/net/udp").is_ok_and(|t| {
        t.lines()
            .skip(1)
            .any(|l| l.split_whitespace().nth(1) == Some(want.as_str()))
    })
}

/// The first QPN that `pick` finds in a CM message of a capture being written (its buffered
/// writer flushes every few KiB, so the frame after the last complete one may be cut short:
/// reading stops there).
fn cm_qpn(
    pcap: &std::path::Path,
    pick: impl Fn(&softroce::wire::cm::CmMessage) -> Option<u32>,
) -> Option<u32> {
    use softroce::wire::cm::CmMessage;
    let bytes = std::fs::read(pcap).ok()?;
    let mut r = softroce::capture::CaptureReader::new(&bytes[..]).ok()?;
    while let Ok(Some(f)) = r.next_frame() {
        // Ethernet 14 + IPv4 20 + UDP 8.
        let Some(pkt) = f.data.get(42..).and_then(|b| PacketRepr::parse(b).ok()) else {
            continue;
        };
        if pkt.bth.dest_qp != 1 {
            continue;
        }
        if let Some(q) = CmMessage::parse(pkt.payload)
            .ok()
            .and_then(|(_, m)| pick(&m))
        {
            return Some(q);
        }
    }
    None
}

/// The responder's QPN in the REP with `server_id` (see [`cm_qpn`]).
fn rep_qpn(pcap: &std::path::Path, server_id: u32) -> Option<u32> {
    use softroce::wire::cm::CmMessage;
    cm_qpn(pcap, |m| match m {
        CmMessage::Rep(rep) if rep.local_comm_id == server_id => Some(rep.local_qpn),
        _ => None,
    })
}

/// The requester's QPN in the REQ with `client_id` (see [`cm_qpn`]).
fn req_qpn(pcap: &std::path::Path, client_id: u32) -> Option<u32> {
    use softroce::wire::cm::CmMessage;
    cm_qpn(pcap, |m| match m {
        CmMessage::Req(req) if req.local_comm_id == client_id => Some(req.local_qpn),
        _ => None,
    })
}

/// A child process killed and reaped when dropped.
struct Reap(std::process::Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Debian's rping (ROLE `-s` or `-c`, to or at `server_ip`'s rdma_cm port `cm_port`, -v, 64-byte
/// pings until stopped) under the shim on a device at `bind`, its lines written one at a time
/// (stdbuf); `softroce run` kills it when run itself is killed. The caller sets its output.
fn shimmed_rping(bind: SocketAddr, role: &str, server_ip: IpAddr, cm_port: &str) -> Command {
    let mut c = Command::new(common::bin());
    c.args(["run", "--no-device-view", "--bind", &bind.to_string()])
        .arg("--lib")
        .arg(common::shim_lib())
        .arg("--")
        .arg(common::program("stdbuf", "coreutils"))
        .arg("-oL")
        .arg(common::program("rping", "rdmacm-utils"))
        .args([role, "-a", &server_ip.to_string(), "-p", cm_port])
        .args(["-v", "-C", "100000", "-S", "64"])
        .stdin(Stdio::null());
    c
}

/// The complete lines holding `needle` in `path`, the file a child writes its output to
/// line by line, once there are `at_least` of them (waiting at most `limit`). Read from a file
/// (not a pipe, which may still hold lines written earlier), a count includes every line the
/// child had written when it was taken, so lines beyond it were written after that moment.
fn lines_in(path: &std::path::Path, needle: &str, at_least: usize, limit: Duration) -> Vec<String> {
    let end = Instant::now() + limit;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        // The last piece is a line still being written, or empty.
        let mut lines: Vec<&str> = text.split('\n').collect();
        lines.pop();
        let got: Vec<String> = lines
            .into_iter()
            .filter(|l| l.contains(needle))
            .map(String::from)
            .collect();
        if got.len() >= at_least || Instant::now() >= end {
            return got;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn librdmacm_rping_on_the_shim_outlives_a_dreq_and_rej_from_a_third_address_not_the_peers_dreq() {
    let net = 48;
    let port = free_pair_port(net);
    let (client_ip, server_ip, stranger_ip) = (ip(net, 1), ip(net, 2), ip(net, 5));
    let server_addr = SocketAddr::new(server_ip, port);
    let cm_port = "7448";
    let dir = std::env::temp_dir().join(format!("softroce-cmhostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (sfile, cfile, pcap) = (
        dir.join("server.out"),
        dir.join("client.out"),
        dir.join("client.pcap"),
    );
    let mut server = shimmed_rping(server_addr, "-s", server_ip, cm_port)
        .stdout(std::fs::File::create(&sfile).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut serr = common::Lines::new(server.stderr.take().unwrap());
    let up_by = Instant::now() + Duration::from_secs(30);
    while !udp_bound(server_addr) {
        assert!(
            Instant::now() < up_by && server.try_wait().unwrap().is_none(),
            "the shimmed rping server did not open its device: {:?}",
            serr.rest(Duration::from_secs(1))
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // softroce's rping connects with -d (the comm IDs) and a capture (the server's QPN, from
    // the REP: librdmacm's rping prints neither, and the CM ignores a DREQ naming another
    // QP); a client that came between the device's bind and rdma_listen is rejected and
    // runs again.
    let mut tries = 0;
    let (mut client, line) = loop {
        tries += 1;
        let mut c = Command::new(common::bin())
            .args([
                "rping", "-c", "-v", "-d", "-C", "0", "-S", "64", "-p", cm_port,
            ])
            .args(["-a", &server_ip.to_string(), "-I", &client_ip.to_string()])
            .args(["--roce-port", &port.to_string()])
            .arg("--pcap")
            .arg(&pcap)
            .stdout(std::fs::File::create(&cfile).unwrap())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let ids_by = Instant::now() + Duration::from_secs(30);
        let line = loop {
            if let Some(l) = lines_in(&cfile, "cm_id ", 1, Duration::ZERO).pop() {
                break Some(l);
            }
            if c.try_wait().unwrap().is_some() || Instant::now() >= ids_by {
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        if let Some(line) = line {
            break (c, line);
        }
        let o = common::finish(c, "rping client", Duration::from_secs(30));
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(
            tries < 3 && err.contains("REJECTED"),
            "no comm IDs from the client:\n{}\n{err}",
            std::fs::read_to_string(&cfile).unwrap_or_default()
        );
    };
    let (client_id, server_id, _) = parse_ids(&line);
    let (sping, cping) = ("server ping data: rdma-ping-", "ping data: rdma-ping-");
    let ten = Duration::from_secs(20);
    assert!(lines_in(&cfile, cping, 10, ten).len() >= 10);
    assert!(lines_in(&sfile, sping, 10, ten).len() >= 10);
    let qpn_by = Instant::now() + Duration::from_secs(20);
    let server_qpn = loop {
        if let Some(q) = rep_qpn(&pcap, server_id) {
            break q;
        }
        assert!(Instant::now() < qpn_by, "no REP in the client's capture");
        std::thread::sleep(Duration::from_millis(20));
    };

    // A third host that learned both IDs and the server's QPN sends what would end the
    // connection, to the server (DREQ, REJ) and to the client (REJ).
    let dreq = dreq_to_server(client_id, server_id, server_qpn);
    forge_teardown(
        stranger_ip,
        (server_addr, SocketAddr::new(client_ip, port)),
        (client_id, server_id),
        &dreq,
    );
    // Every line counted now was written before the forgeries were sent. The next pings
    // travel after them through each engine's one socket, and librdmacm's rping takes its CM
    // events between pings: 300 more on each side show the forgeries ended nothing.
    let s0 = lines_in(&sfile, sping, 0, Duration::ZERO).len();
    let c0 = lines_in(&cfile, cping, 0, Duration::ZERO).len();
    let s1 = lines_in(&sfile, sping, s0 + 300, Duration::from_secs(30)).len();
    let c1 = lines_in(&cfile, cping, c0 + 300, Duration::from_secs(30)).len();
    assert!(s1 >= s0 + 300, "server {s0} -> {s1}");
    assert!(c1 >= c0 + 300, "client {c0} -> {c1}");
    assert!(server.try_wait().unwrap().is_none(), "the server stopped");
    assert!(client.try_wait().unwrap().is_none(), "the client stopped");

    // The same DREQ from the client's address: librdmacm's rping reports the disconnection
    // and exits.
    send_mad(client_ip, server_addr, &dreq);
    let t = Instant::now();
    let event = serr.wait_for(Duration::from_secs(5), |l| l.contains("DISCONNECT EVENT"));
    assert_eq!(
        event.as_deref(),
        Some("server DISCONNECT EVENT..."),
        "{:?}",
        serr.seen
    );
    common::finish(server, "shimmed rping server", Duration::from_secs(10));
    let stopped_in = t.elapsed();
    assert!(stopped_in < Duration::from_secs(5), "{stopped_in:?}");
    // Its one disconnection was the peer's.
    let disconnects = serr
        .rest(Duration::from_secs(2))
        .iter()
        .filter(|l| l.contains("DISCONNECT"))
        .count();
    assert_eq!(disconnects, 1, "{:?}", serr.seen);
    // The client's pings now go unanswered; it fails with the transport's retries, or is
    // ended here.
    let _ = client.kill();
    let _ = client.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn librdmacm_rping_client_on_the_shim_ends_on_its_peers_dreq() {
    // Debian's rping as the client under the shim, softroce's rping serving. The server's own
    // DREQ (from its address, with both comm IDs and the client's QPN) mid-run: rping takes the
    // DISCONNECTED event, leaves its loop, calls rdma_disconnect and joins its CQ thread,
    // which sleeps in ibv_get_cq_event until the flush of the QP's move to ERR completes a
    // receive with an error. Every link of that chain must hold for the client to end.
    let net = 49;
    let port = free_pair_port(net);
    let (client_ip, server_ip) = (ip(net, 1), ip(net, 2));
    let client_addr = SocketAddr::new(client_ip, port);
    let cm_port = "7449";
    let dir = std::env::temp_dir().join(format!("softroce-cmdreq-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (sfile, cfile, pcap) = (
        dir.join("server.out"),
        dir.join("client.out"),
        dir.join("server.pcap"),
    );
    // Killed when the test ends, passed or not (a failed assertion must not leave a server
    // on the address for the next run).
    let _server = Reap(
        Command::new(common::bin())
            .args(["rping", "-s", "-v", "-d", "-S", "64", "-p", cm_port])
            .args(["-a", &server_ip.to_string()])
            .args(["--roce-port", &port.to_string()])
            .arg("--pcap")
            .arg(&pcap)
            .stdout(std::fs::File::create(&sfile).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let up_by = Instant::now() + Duration::from_secs(30);
    while !udp_bound(SocketAddr::new(server_ip, port)) {
        assert!(
            Instant::now() < up_by,
            "the softroce rping server did not bind"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut client = shimmed_rping(client_addr, "-c", server_ip, cm_port)
        .stdout(std::fs::File::create(&cfile).unwrap())
        .stderr(std::fs::File::create(dir.join("client.err")).unwrap())
        .spawn()
        .unwrap();
    let line = lines_in(&sfile, "cm_id ", 1, Duration::from_secs(30))
        .pop()
        .expect("no comm IDs from the server");
    let (server_id, client_id, _) = parse_ids(&line);
    let ten = Duration::from_secs(20);
    assert!(lines_in(&cfile, "ping data: rdma-ping-", 10, ten).len() >= 10);
    let qpn_by = Instant::now() + Duration::from_secs(20);
    let client_qpn = loop {
        if let Some(q) = req_qpn(&pcap, client_id) {
            break q;
        }
        assert!(Instant::now() < qpn_by, "no REQ in the server's capture");
        std::thread::sleep(Duration::from_millis(20));
    };
    // The server's DREQ, from the server's address.
    use softroce::wire::cm::{CmDreq, CmMessage, DREQ_PRIVATE_DATA_LEN};
    let dreq = CmMessage::Dreq(CmDreq {
        local_comm_id: server_id,
        remote_comm_id: client_id,
        remote_qpn: client_qpn,
        private_data: [0; DREQ_PRIVATE_DATA_LEN],
    });
    send_mad(server_ip, client_addr, &dreq);
    let t = Instant::now();
    let o = loop {
        if let Some(st) = client.try_wait().unwrap() {
            break st;
        }
        if t.elapsed() > Duration::from_secs(10) {
            let _ = client.kill();
            let _ = client.wait();
            panic!(
                "the rping client did not end on its peer's DREQ:\n{}\n{}",
                std::fs::read_to_string(&cfile).unwrap_or_default(),
                std::fs::read_to_string(dir.join("client.err")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let err = std::fs::read_to_string(dir.join("client.err")).unwrap_or_default();
    assert!(err.contains("DISCONNECT EVENT"), "{o:?}\n{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

// On-demand paging (issue 36, spec-notes/beyond-rxe.md rules 1, 2 and 4): a peer that aims at
// the part of an on-demand region that is not mapped, or at the implicit region's unmapped
// addresses, gets a remote access error NAK, the victim's process lives on, and the mapped
// part serves an honest READ.

/// A request aimed at an on-demand `target` over memory that is not there: the NAK.
fn odp_nak(l: &Lab, pd: &ProtectionDomain, i: u32, op: Opcode, ext: ExtHeaders, what: &str) {
    let q = connect(pd, &l.victim, 0x300 + i, hostile_gid(l));
    let n = if op == Opcode::RC_RDMA_WRITE_ONLY {
        64
    } else {
        0
    };
    l.hostile.send(&request(
        q.qp.qp_num(),
        HOSTILE_PSN,
        op,
        ext,
        &[0x5Au8; 64][..n],
    ));
    let r = l
        .hostile
        .recv(Duration::from_secs(2))
        .unwrap_or_else(|| panic!("{what}: a NAK"));
    assert_eq!(r.psn, HOSTILE_PSN, "{what}");
    let nak = AckSyndrome::Nak(NakCode::RemoteAccessError);
    assert_eq!(r.aeth, Some(nak), "{what}");
}

#[test]
fn on_demand_regions_nak_what_is_not_mapped_and_serve_what_is() {
    let l = lab(48);
    let pd = l.victim.alloc_pd().unwrap();
    let page = 4096;
    // SAFETY: a fresh anonymous mapping of two pages, ours until the munmap below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            2 * page,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    // SAFETY: the mapping outlives both regions (dropped before the munmap).
    let odp = unsafe {
        pd.register_foreign_mr(p.cast(), 2 * page, p as u64, FULL | AccessFlags::ON_DEMAND)
    }
    .expect("an on-demand region over memory not yet accessible");
    // SAFETY: the implicit region: every address, none of it ours to free.
    let all = unsafe {
        pd.register_foreign_mr(
            std::ptr::null_mut(),
            usize::MAX,
            0,
            FULL | AccessFlags::ON_DEMAND,
        )
    }
    .expect("the implicit region");
    let base = p as u64;
    let write = Opcode::RC_RDMA_WRITE_ONLY;
    let read = Opcode::RC_RDMA_READ_REQUEST;
    odp_nak(
        &l,
        &pd,
        0,
        write,
        reth(base, odp.rkey(), 64),
        "WRITE to PROT_NONE",
    );
    odp_nak(
        &l,
        &pd,
        1,
        read,
        reth(base + 8, odp.rkey(), 64),
        "READ of PROT_NONE",
    );
    odp_nak(
        &l,
        &pd,
        2,
        read,
        reth(0x1000, all.rkey(), 64),
        "implicit READ at 0x1000",
    );
    // The first page becomes the application's: an honest READ of it now succeeds.
    // SAFETY: changes the protection of our own mapping only.
    assert_eq!(
        unsafe { libc::mprotect(p, page, libc::PROT_READ | libc::PROT_WRITE) },
        0
    );
    odp.fill(0, 64, 0x7E).unwrap();
    let q = connect(&pd, &l.victim, 0x310, hostile_gid(&l));
    l.hostile.send(&request(
        q.qp.qp_num(),
        HOSTILE_PSN,
        read,
        reth(base, odp.rkey(), 64),
        &[],
    ));
    let r = l
        .hostile
        .recv(Duration::from_secs(2))
        .expect("a READ response");
    assert_eq!(r.opcode, Opcode::RC_RDMA_READ_RESPONSE_ONLY);
    assert_eq!(r.payload, 64, "the 64 bytes now mapped");
    drop((odp, all));
    // SAFETY: our mapping, no region over it any more.
    assert_eq!(unsafe { libc::munmap(p, 2 * page) }, 0);
}
