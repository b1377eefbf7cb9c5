//! A hostile peer at the level of the transport core: packets crafted by the test (not by a
//! QP) are handed to a connected QP, and the test checks the reply on the wire, the QP's
//! state, the memory and the counters. Each test here failed on the code before the fix it
//! names (issue 11).

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::memory::SharedBytes;
use crate::wire::{
    AckSyndrome, AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, ExtHeaders, NakCode,
    Opcode, RethRepr,
};

fn count(s: &Side, name: &str) -> u64 {
    s.qp.counters.get(name).unwrap()
}

/// Hands a crafted packet to B (`to_b`) or A, as its engine would after the ICRC check.
fn inject(p: &mut Pair, to_b: bool, pkt: &PacketRepr) {
    let s = if to_b { &mut p.b } else { &mut p.a };
    s.qp.handle_packet(p.now, pkt, &s.mrs);
}

/// Everything B has to send now, as (opcode, PSN, AETH), without delivering it to A.
fn replies(s: &mut Side, now: Duration) -> Vec<(Opcode, Psn, Option<AethRepr>)> {
    let mut buf = vec![0u8; MAX_PACKET];
    let mut out = Vec::new();
    while let Some(t) = s.qp.poll_transmit(now, &mut buf) {
        let pkt = PacketRepr::parse(&buf[..t.len]).unwrap();
        out.push((pkt.bth.opcode, Psn::new(pkt.bth.psn), pkt.ext.aeth));
        assert!(out.len() < 1000, "bounded replies");
    }
    out
}

fn bth(opcode: Opcode, psn: Psn, dest_qp: u32) -> BthRepr {
    BthRepr {
        opcode,
        psn: psn.value(),
        dest_qp,
        ack_req: true,
        ..BthRepr::default()
    }
}

/// A request to B at its expected PSN.
fn request<'a>(p: &Pair, opcode: Opcode, ext: ExtHeaders, payload: &'a [u8]) -> PacketRepr<'a> {
    PacketRepr {
        bth: bth(opcode, p.b.qp.resp.psn, p.b.qp.qpn()),
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

fn snapshot(s: &Side) -> Vec<u8> {
    let mut v = vec![0u8; MR_LEN];
    s.mr.storage.read(0, &mut v).unwrap();
    v
}

/// A transfer A -> B still completes: the QP pair was not disturbed.
fn still_works(p: &mut Pair) {
    let before = p.a.send_wcs.len();
    let sg = [sge(&p.a, 0, 100)];
    let wr = SendWr {
        wr_id: 0xABCD,
        sg_list: &sg,
        opcode: WrOpcode::RdmaWrite {
            remote_addr: IOVA + 0x8000,
            rkey: p.b.mr.rkey,
        },
        send_flags: SendFlags::SIGNALED,
    };
    p.a.qp.post_send(&wr, &p.a.mrs).unwrap();
    p.drive_for(Duration::from_millis(10));
    assert_eq!(p.a.send_wcs.len(), before + 1);
    let wc = p.a.send_wcs.last().unwrap();
    assert_eq!((wc.wr_id, wc.status), (0xABCD, WcStatus::Success));
}

#[test]
fn uc_and_ud_opcodes_at_an_rc_qp_are_dropped_and_counted() {
    let mut p = Pair::new(Mtu::Mtu1024);
    post_recv(&mut p, 1, 0, 4096);
    let before = snapshot(&p.b);
    let data = [0x5Au8; 64];
    let epsn = p.b.qp.resp.psn;
    let uc_write = request(
        &p,
        Opcode::UC_RDMA_WRITE_ONLY,
        reth(IOVA, p.b.mr.rkey, 64),
        &data,
    );
    inject(&mut p, true, &uc_write);
    let uc_send = request(&p, Opcode::UC_SEND_ONLY, ExtHeaders::default(), &data);
    inject(&mut p, true, &uc_send);
    let ud_send = request(
        &p,
        Opcode::UD_SEND_ONLY,
        ExtHeaders {
            deth: Some(DethRepr {
                qkey: 0x1111_1111,
                src_qp: 0x77,
            }),
            ..ExtHeaders::default()
        },
        &data,
    );
    inject(&mut p, true, &ud_send);
    let now = p.now;
    assert_eq!(replies(&mut p.b, now), vec![], "no reaction on the wire");
    assert_eq!(count(&p.b, "wrong_transport_pkts"), 3);
    assert_eq!(snapshot(&p.b), before, "memory untouched");
    assert_eq!(p.b.qp.recv_queue_len(), 1, "no receive WR consumed");
    assert_eq!(p.b.qp.resp.psn, epsn, "no PSN consumed");
    assert_eq!(p.b.qp.state(), QpState::Rts);
    still_works(&mut p);
}

#[test]
fn packets_at_a_qp_in_reset_or_init_are_dropped_and_counted() {
    let mut s = side(0x21, "192.0.2.3");
    let pkt = PacketRepr {
        bth: bth(Opcode::RC_SEND_ONLY, Psn::new(0), 0x21),
        ext: ExtHeaders::default(),
        payload: &[1, 2, 3, 4],
    };
    s.qp.handle_packet(Duration::ZERO, &pkt, &s.mrs);
    assert_eq!(count(&s, "bad_state_pkts"), 1, "RESET");
    s.qp.modify(
        &QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qp_access_flags: AccessFlags::REMOTE_WRITE,
            ..Default::default()
        },
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
    )
    .unwrap();
    let sg = [sge(&s, 0, 64)];
    s.qp.post_recv(
        &RecvWr {
            wr_id: 1,
            sg_list: &sg,
        },
        &s.mrs,
    )
    .unwrap();
    s.qp.handle_packet(Duration::ZERO, &pkt, &s.mrs);
    let ack = PacketRepr {
        bth: bth(Opcode::RC_ACK, Psn::new(0), 0x21),
        ext: ExtHeaders {
            aeth: Some(AethRepr::ack(0)),
            ..ExtHeaders::default()
        },
        payload: &[],
    };
    s.qp.handle_packet(Duration::ZERO, &ack, &s.mrs);
    assert_eq!(
        count(&s, "bad_state_pkts"),
        3,
        "INIT: a request and a response"
    );
    assert_eq!(s.qp.recv_queue_len(), 1);
    assert!(s.qp.poll_completion().is_none());
}

#[test]
fn a_wrong_p_key_is_dropped_and_counted_and_a_limited_member_key_matches() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let before = snapshot(&p.b);
    let data = [0xC3u8; 32];
    let mut w = request(
        &p,
        Opcode::RC_RDMA_WRITE_ONLY,
        reth(IOVA, p.b.mr.rkey, 32),
        &data,
    );
    for pkey in [0x1234, 0x0000, 0x8000] {
        w.bth.pkey = pkey;
        inject(&mut p, true, &w);
    }
    let now = p.now;
    assert_eq!(replies(&mut p.b, now), vec![]);
    assert_eq!(count(&p.b, "bad_pkey_cntr"), 3);
    assert_eq!(snapshot(&p.b), before);
    // 0x7FFF: a limited member, matching the port's full-member 0xFFFF (pkey_match).
    w.bth.pkey = 0x7FFF;
    inject(&mut p, true, &w);
    let r = replies(&mut p.b, now);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].0, Opcode::RC_ACK);
    assert!(matches!(r[0].2.unwrap().kind(), AckSyndrome::Ack { .. }));
    let mut got = [0u8; 32];
    p.b.mr.storage.read(0, &mut got).unwrap();
    assert_eq!(got, data);
}

/// Runs a few WRITEs to completion, so that A's window has moved on.
fn settle_some_traffic(p: &mut Pair) {
    for i in 0..4 {
        post_send(
            p,
            i,
            WrOpcode::RdmaWrite {
                remote_addr: IOVA,
                rkey: p.b.mr.rkey,
            },
            0,
            3000,
        );
    }
    p.drive();
    assert_eq!(p.a.send_wcs.len(), 4);
}

fn response<'a>(p: &Pair, opcode: Opcode, psn: Psn, ext: ExtHeaders) -> PacketRepr<'a> {
    PacketRepr {
        bth: BthRepr {
            ack_req: false,
            ..bth(opcode, psn, p.a.qp.qpn())
        },
        ext,
        payload: &[],
    }
}

fn aeth(a: AethRepr) -> ExtHeaders {
    ExtHeaders {
        aeth: Some(a),
        ..ExtHeaders::default()
    }
}

#[test]
fn a_stale_rnr_nak_neither_rewinds_nor_stalls_the_requester() {
    let mut p = Pair::new(Mtu::Mtu1024);
    settle_some_traffic(&mut p);
    // Two WRITEs in flight, not yet acknowledged.
    let rkey = p.b.mr.rkey;
    for wr_id in [10, 11] {
        post_send(
            &mut p,
            wr_id,
            WrOpcode::RdmaWrite {
                remote_addr: IOVA,
                rkey,
            },
            0,
            3000,
        );
    }
    let mut buf = vec![0u8; MAX_PACKET];
    let mut held = Vec::new();
    while let Some(t) = p.a.qp.poll_transmit(p.now, &mut buf) {
        held.push(buf[..t.len].to_vec());
    }
    assert_eq!(held.len(), 6);
    let (psn, comp) = (p.a.qp.req.psn, p.a.qp.req.comp_psn);
    let timer = p.a.qp.poll_timeout();
    let logged = p.log.len();
    // RNR NAKs 1000 PSNs behind the window, with timer code 0 (655 ms), repeated.
    for _ in 0..5 {
        let stale = response(
            &p,
            Opcode::RC_ACK,
            comp.sub(1000),
            aeth(AethRepr::rnr_nak(0, 0)),
        );
        inject(&mut p, false, &stale);
    }
    assert_eq!(p.a.qp.req.psn, psn, "no rewind");
    assert_eq!(p.a.qp.req.comp_psn, comp);
    assert_eq!(p.a.qp.req.rnr_until, None, "no RNR wait");
    assert_eq!(p.a.qp.poll_timeout(), timer);
    assert_eq!(count(&p.a, "stale_resp_pkts"), 5);
    assert_eq!(count(&p.a, "rcvd_rnr_err"), 0);
    // The held requests arrive; the WRITEs complete within a few latencies, well before any
    // RNR wait or retransmission timeout could end.
    for bytes in held {
        let pkt = PacketRepr::parse(&bytes).unwrap();
        p.b.qp.handle_packet(p.now, &pkt, &p.b.mrs);
    }
    p.drive_for(Duration::from_micros(100));
    assert_eq!(p.a.send_wcs.len(), 6);
    assert!(p.a.send_wcs.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(count(&p.a, "timeouts"), 0);
    assert_eq!(count(&p.a, "completer_retry_err"), 0);
    assert!(
        p.log[logged..].iter().all(|s| !s.to_b),
        "no request sent again: {:?}",
        &p.log[logged..]
    );
}

#[test]
fn forged_responses_outside_the_window_change_nothing() {
    let mut p = Pair::new(Mtu::Mtu1024);
    settle_some_traffic(&mut p);
    // One READ and one atomic outstanding, their requests held back.
    let rkey = p.b.mr.rkey;
    post_send(
        &mut p,
        20,
        WrOpcode::RdmaRead {
            remote_addr: IOVA,
            rkey,
        },
        0x1000,
        2000,
    );
    let mut buf = vec![0u8; MAX_PACKET];
    while p.a.qp.poll_transmit(p.now, &mut buf).is_some() {}
    let (psn, comp) = (p.a.qp.req.psn, p.a.qp.req.comp_psn);
    let a_before = snapshot(&p.a);
    let forged = [
        (Opcode::RC_ACK, comp.sub(1), aeth(AethRepr::ack(0))),
        (
            Opcode::RC_ACK,
            comp.sub(3),
            aeth(AethRepr::nak(NakCode::PsnSequenceError, 0)),
        ),
        (
            Opcode::RC_ACK,
            comp.sub(3),
            aeth(AethRepr::nak(NakCode::RemoteAccessError, 0)),
        ),
        (Opcode::RC_ACK, psn, aeth(AethRepr::ack(0))),
        (
            Opcode::RC_ACK,
            psn.add(100),
            aeth(AethRepr::nak(NakCode::InvalidRequest, 0)),
        ),
        (Opcode::RC_ACK, psn.add(7), aeth(AethRepr::rnr_nak(0, 0))),
        (
            Opcode::RC_RDMA_READ_RESPONSE_ONLY,
            comp.sub(2),
            aeth(AethRepr::ack(0)),
        ),
        (
            Opcode::RC_RDMA_READ_RESPONSE_ONLY,
            psn.add(1),
            aeth(AethRepr::ack(0)),
        ),
        (
            Opcode::RC_ATOMIC_ACK,
            psn.add(3),
            ExtHeaders {
                aeth: Some(AethRepr::ack(0)),
                atomic_ack: Some(AtomicAckEthRepr { orig: 0xDEAD }),
                ..ExtHeaders::default()
            },
        ),
    ];
    for (op, at, ext) in forged.iter().cloned() {
        let pkt = response(&p, op, at, ext);
        inject(&mut p, false, &pkt);
    }
    assert_eq!(count(&p.a, "stale_resp_pkts"), forged.len() as u64);
    assert_eq!((p.a.qp.req.psn, p.a.qp.req.comp_psn), (psn, comp));
    assert_eq!(p.a.qp.state(), QpState::Rts);
    assert_eq!(p.a.send_wcs.len(), 4, "nothing completed");
    assert_eq!(snapshot(&p.a), a_before, "no READ data written");
    assert_eq!(p.a.qp.req.rnr_until, None);
}

/// A fresh pair, B's state after `pkt` and what B answered.
fn answer(
    prepare: impl Fn(&mut Pair),
    make: impl for<'a> Fn(&Pair, &'a [u8]) -> PacketRepr<'a>,
    payload: &[u8],
) -> (Pair, Vec<(Opcode, Psn, Option<AethRepr>)>) {
    let mut p = Pair::new(Mtu::Mtu1024);
    prepare(&mut p);
    let pkt = make(&p, payload);
    inject(&mut p, true, &pkt);
    let now = p.now;
    let r = replies(&mut p.b, now);
    (p, r)
}

fn only_syndrome(r: &[(Opcode, Psn, Option<AethRepr>)]) -> AckSyndrome {
    assert_eq!(r.len(), 1, "one reply: {r:?}");
    r[0].2.expect("an AETH").kind()
}

/// A FETCH ADD at a va that is not 8-byte aligned, with B's rkey or a wrong one.
fn misaligned_atomic<'a>(p: &Pair, rkey_ok: bool) -> PacketRepr<'a> {
    let rkey = if rkey_ok {
        p.b.mr.rkey
    } else {
        p.b.mr.rkey ^ 0x100
    };
    request(
        p,
        Opcode::RC_FETCH_ADD,
        ExtHeaders {
            atomic: Some(AtomicEthRepr {
                va: IOVA + 4,
                rkey,
                swap_add: 1,
                compare: 0,
            }),
            ..ExtHeaders::default()
        },
        &[],
    )
}

#[test]
fn responder_checks_run_in_rxe_order() {
    // Resources before length: an over-long SEND ONLY with no receive WQE draws an RNR NAK.
    let big = vec![0u8; 2048];
    let (_, r) = answer(
        |_| {},
        |p, d| request(p, Opcode::RC_SEND_ONLY, ExtHeaders::default(), d),
        &big,
    );
    assert!(
        matches!(only_syndrome(&r), AckSyndrome::RnrNak { .. }),
        "{r:?}"
    );
    // ... and with a receive WQE, the length check: invalid request.
    let (p, r) = answer(
        |p| post_recv(p, 1, 0, 4096),
        |p, d| request(p, Opcode::RC_SEND_ONLY, ExtHeaders::default(), d),
        &big,
    );
    assert_eq!(only_syndrome(&r), AckSyndrome::Nak(NakCode::InvalidRequest));
    assert_eq!(p.b.qp.state(), QpState::Err);

    // Length before key: a READ announcing more than 2^31 bytes is an invalid request, even
    // though its range is no region's either.
    let (_, r) = answer(
        |_| {},
        |p, _| {
            request(
                p,
                Opcode::RC_RDMA_READ_REQUEST,
                reth(IOVA, p.b.mr.rkey, 0x8000_0001),
                &[],
            )
        },
        &[],
    );
    assert_eq!(only_syndrome(&r), AckSyndrome::Nak(NakCode::InvalidRequest));

    // Operation valid before resources: a WRITE with immediate at a QP without remote write
    // rights and no receive WQE is an invalid request, not an RNR NAK.
    let (p, r) = answer(
        |p| p.b.qp.attr.qp_access_flags = AccessFlags::REMOTE_READ,
        |p, d| {
            let mut e = reth(IOVA, p.b.mr.rkey, 8);
            e.imm = Some(crate::wire::ImmDtRepr { imm: 1 });
            request(p, Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, e, d)
        },
        &[0u8; 8],
    );
    assert_eq!(only_syndrome(&r), AckSyndrome::Nak(NakCode::InvalidRequest));
    assert_eq!(p.b.qp.state(), QpState::Err);

    // Key before alignment: a misaligned atomic with a bad rkey is a remote access error...
    let (_, r) = answer(|_| {}, |p, _| misaligned_atomic(p, false), &[]);
    assert_eq!(
        only_syndrome(&r),
        AckSyndrome::Nak(NakCode::RemoteAccessError)
    );
    // ... and with a good one, an invalid request (rxe: RESPST_ERR_MISALIGNED_ATOMIC).
    let (p, r) = answer(|_| {}, |p, _| misaligned_atomic(p, true), &[]);
    assert_eq!(only_syndrome(&r), AckSyndrome::Nak(NakCode::InvalidRequest));
    assert_eq!(snapshot(&p.b), vec![0u8; MR_LEN]);
}

#[test]
fn a_duplicate_send_or_write_is_re_acked_without_ack_req() {
    let mut p = Pair::new(Mtu::Mtu1024);
    post_recv(&mut p, 1, 0, 4096);
    let first = p.b.qp.resp.psn;
    post_send(&mut p, 1, WrOpcode::Send, 0, 100);
    p.drive();
    assert_eq!(p.b.recv_wcs.len(), 1);
    let data = [0u8; 100];
    for op in [Opcode::RC_SEND_ONLY, Opcode::RC_RDMA_WRITE_ONLY] {
        let ext = if op == Opcode::RC_RDMA_WRITE_ONLY {
            reth(IOVA, p.b.mr.rkey, 100)
        } else {
            ExtHeaders::default()
        };
        let mut dup = request(&p, op, ext, &data);
        dup.bth.psn = first.value();
        dup.bth.ack_req = false;
        inject(&mut p, true, &dup);
        let now = p.now;
        let r = replies(&mut p.b, now);
        assert_eq!(r.len(), 1, "{op:?}: one re-ACK");
        assert_eq!(r[0].1, first, "for the last PSN received");
        assert!(matches!(r[0].2.unwrap().kind(), AckSyndrome::Ack { .. }));
    }
    assert_eq!(p.b.recv_wcs.len(), 1, "not executed again");
    assert_eq!(count(&p.b, "duplicate_request"), 2);
}

/// What B must answer, and leave, for a WRITE, READ or atomic naming memory it was not
/// granted: NAK remote access error, QP in ERROR, memory byte for byte unchanged.
#[test]
fn memory_protection_violations_are_nakked_and_touch_nothing() {
    #[derive(Clone, Copy, Debug)]
    enum Op {
        Write,
        Read,
        Atomic,
    }
    // (what, op, prepare B and return (va, rkey, len), expected NAK)
    type Prep = fn(&mut Pair) -> (u64, u32, u32);
    let cases: Vec<(&str, Op, Prep, NakCode)> = vec![
        (
            "unknown rkey",
            Op::Write,
            |p| (IOVA, p.b.mr.rkey ^ 0x4400, 64),
            NakCode::RemoteAccessError,
        ),
        (
            "rkey of another PD",
            Op::Write,
            |p| {
                let mr =
                    p.b.mrs
                        .register(
                            2,
                            Arc::new(SharedBytes::new(4096)),
                            IOVA,
                            AccessFlags::REMOTE_WRITE
                                | AccessFlags::REMOTE_READ
                                | AccessFlags::REMOTE_ATOMIC,
                        )
                        .unwrap();
                (IOVA, mr.rkey, 64)
            },
            NakCode::RemoteAccessError,
        ),
        (
            "MR without the right",
            Op::Write,
            |p| {
                let mr =
                    p.b.mrs
                        .register(
                            1,
                            Arc::new(SharedBytes::new(4096)),
                            IOVA,
                            AccessFlags::REMOTE_READ,
                        )
                        .unwrap();
                (IOVA, mr.rkey, 64)
            },
            NakCode::RemoteAccessError,
        ),
        (
            "MR without the right",
            Op::Atomic,
            |p| {
                let mr =
                    p.b.mrs
                        .register(
                            1,
                            Arc::new(SharedBytes::new(4096)),
                            IOVA,
                            AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
                        )
                        .unwrap();
                (IOVA, mr.rkey, 8)
            },
            NakCode::RemoteAccessError,
        ),
        (
            "range past the end",
            Op::Write,
            |p| (IOVA + MR_LEN as u64 - 32, p.b.mr.rkey, 64),
            NakCode::RemoteAccessError,
        ),
        (
            "range before the start",
            Op::Write,
            |p| (IOVA - 8, p.b.mr.rkey, 64),
            NakCode::RemoteAccessError,
        ),
        (
            "va + len wraps around",
            Op::Write,
            |p| (u64::MAX - 15, p.b.mr.rkey, 64),
            NakCode::RemoteAccessError,
        ),
        (
            "va + len wraps around",
            Op::Read,
            |p| (u64::MAX - 15, p.b.mr.rkey, 64),
            NakCode::RemoteAccessError,
        ),
        (
            "READ larger than the MR",
            Op::Read,
            |p| (IOVA, p.b.mr.rkey, MR_LEN as u32 + 1),
            NakCode::RemoteAccessError,
        ),
        (
            "deregistered MR",
            Op::Write,
            |p| {
                let lkey = p.b.mr.lkey;
                p.b.mrs.deregister(lkey).unwrap();
                (IOVA, lkey, 64)
            },
            NakCode::RemoteAccessError,
        ),
        (
            "stale rkey after re-registration",
            Op::Write,
            |p| {
                let old = p.b.mr.lkey;
                p.b.mrs.deregister(old).unwrap();
                let new =
                    p.b.mrs
                        .register(
                            1,
                            Arc::clone(&p.b.mr.storage),
                            IOVA,
                            AccessFlags::REMOTE_WRITE,
                        )
                        .unwrap();
                assert_ne!(new.rkey, old);
                (IOVA, old, 64)
            },
            NakCode::RemoteAccessError,
        ),
        (
            "unaligned atomic",
            Op::Atomic,
            |p| (IOVA + 4, p.b.mr.rkey, 8),
            NakCode::InvalidRequest,
        ),
        (
            "atomic past the end",
            Op::Atomic,
            |p| (IOVA + MR_LEN as u64, p.b.mr.rkey, 8),
            NakCode::RemoteAccessError,
        ),
    ];
    let data = [0xEEu8; 64];
    for (what, op, prep, nak) in cases {
        let mut p = Pair::new(Mtu::Mtu1024);
        let (va, rkey, len) = prep(&mut p);
        let before = snapshot(&p.b);
        let pkt = match op {
            Op::Write => request(
                &p,
                Opcode::RC_RDMA_WRITE_ONLY,
                reth(va, rkey, len),
                &data[..len.min(64) as usize],
            ),
            Op::Read => request(&p, Opcode::RC_RDMA_READ_REQUEST, reth(va, rkey, len), &[]),
            Op::Atomic => request(
                &p,
                Opcode::RC_COMPARE_SWAP,
                ExtHeaders {
                    atomic: Some(AtomicEthRepr {
                        va,
                        rkey,
                        swap_add: u64::MAX,
                        compare: 0,
                    }),
                    ..ExtHeaders::default()
                },
                &[],
            ),
        };
        let psn = Psn::new(pkt.bth.psn);
        inject(&mut p, true, &pkt);
        let now = p.now;
        let r = replies(&mut p.b, now);
        assert_eq!(r.len(), 1, "{what} {op:?}: {r:?}");
        assert_eq!(r[0].0, Opcode::RC_ACK, "{what} {op:?}");
        assert_eq!(r[0].1, psn, "{what} {op:?}: NAK for the request's PSN");
        assert_eq!(
            r[0].2.unwrap().kind(),
            AckSyndrome::Nak(nak),
            "{what} {op:?}"
        );
        assert_eq!(
            p.b.qp.state(),
            QpState::Err,
            "{what} {op:?}: responder to ERROR"
        );
        assert_eq!(snapshot(&p.b), before, "{what} {op:?}: memory unchanged");
        // Further requests get nothing: the QP is in ERROR.
        inject(&mut p, true, &pkt);
        assert_eq!(replies(&mut p.b, now), vec![], "{what} {op:?}");
    }
}

#[test]
fn a_flood_of_duplicates_and_out_of_sequence_requests_holds_three_replies_at_most() {
    let mut p = Pair::new(Mtu::Mtu1024);
    post_recv(&mut p, 1, 0, 4096);
    let first = p.b.qp.resp.psn;
    post_send(&mut p, 1, WrOpcode::Send, 0, 100);
    p.drive();
    let data = [0u8; 100];
    // 1000 duplicates of the SEND and 1000 WRITEs ahead of the expected PSN, with no chance
    // for B to send anything in between.
    for i in 0..1000u32 {
        let mut dup = request(&p, Opcode::RC_SEND_ONLY, ExtHeaders::default(), &data);
        dup.bth.psn = first.value();
        inject(&mut p, true, &dup);
        let mut ahead = request(
            &p,
            Opcode::RC_RDMA_WRITE_ONLY,
            reth(IOVA, p.b.mr.rkey, 100),
            &data,
        );
        ahead.bth.psn = p.b.qp.resp.psn.add(5 + i).value();
        inject(&mut p, true, &ahead);
        let (res, out) = p.b.qp.resp.queue_lens();
        assert!(
            res <= 4 && out <= 3,
            "queued {out} responses, {res} resources"
        );
    }
    let now = p.now;
    let r = replies(&mut p.b, now);
    // The re-ACK of the first duplicate, the sequence NAK, then the later re-ACKs coalesced
    // into one (an ACK is not merged across the NAK before it).
    assert_eq!(r.len(), 3, "{r:?}");
    assert_eq!(
        r[1].2.unwrap().kind(),
        AckSyndrome::Nak(NakCode::PsnSequenceError)
    );
    assert_eq!(count(&p.b, "duplicate_request"), 1000);
    assert_eq!(count(&p.b, "out_of_seq_request"), 1000);
    assert_eq!(p.b.recv_wcs.len(), 1, "executed once");
}
