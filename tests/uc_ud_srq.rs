//! UC, UD and shared receive queues end to end over real UDP sockets: device contexts on
//! 127.0.0.1, 127.0.0.2 and 127.0.0.3 (the same UDP port), each with its own engine thread.
//! The transport rules themselves are tested deterministically in src/transport/tests; here
//! the verbs API, the engine's demultiplexing and the bytes on real sockets.

use std::time::{Duration, Instant};

use softroce::ib::*;
use softroce::verbs::*;

const QKEY: u32 = 0x1111_1111;
const MR_LEN: usize = 1 << 16;

mod common;
use common::{contexts, wait_one, End, EndSpec};

fn cap() -> QpCap {
    common::queues(64)
}

fn end(ctx: Context, qp_type: QpType) -> End {
    End::open(
        ctx,
        &EndSpec {
            mr_len: MR_LEN,
            mr_access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
            cq_len: 256,
            qp_type,
            cap: cap(),
            sq_sig_all: false,
        },
    )
}

fn wait(cq: &CompletionQueue) -> WorkCompletion {
    wait_one(cq, Duration::from_secs(30))
}

/// Waits until `cond` holds (bounded).
fn eventually(what: &str, cond: impl Fn() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn recv(e: &End, wr_id: u64, off: u64, len: u32) {
    e.qp.post_recv(&[RecvWr {
        wr_id,
        sg_list: &[e.mr.sge(off, len)],
    }])
    .unwrap();
}

fn send(e: &End, wr_id: u64, opcode: WrOpcode, off: u64, len: u32) {
    e.qp.post_send(&[SendWr {
        wr_id,
        sg_list: &[e.mr.sge(off, len)],
        opcode,
        send_flags: SendFlags::SIGNALED,
    }])
    .unwrap();
}

fn ud_send(
    e: &End,
    ah: &AddressHandle,
    qpn: u32,
    qkey: u32,
    wr_id: u64,
    opcode: WrOpcode,
    len: u32,
) -> std::result::Result<(), PostError> {
    e.qp.post_send_ud(&[UdSendWr {
        wr: SendWr {
            wr_id,
            sg_list: &[e.mr.sge(0, len)],
            opcode,
            send_flags: SendFlags::SIGNALED,
        },
        ah,
        remote_qpn: qpn,
        remote_qkey: qkey,
    }])
}

fn uc_pair() -> (End, End) {
    let mut c = contexts(2);
    let b = end(c.pop().unwrap(), QpType::Uc);
    let a = end(c.pop().unwrap(), QpType::Uc);
    for (x, y) in [(&a, &b), (&b, &a)] {
        x.qp.init(AccessFlags::REMOTE_WRITE).unwrap();
        let conn = RcConnect {
            path_mtu: Mtu::Mtu1024,
            ..RcConnect::new(y.qp.qp_num(), 0xFF_FFF0, y.ctx.gid(1).unwrap(), 0xFF_FFF0)
        };
        x.qp.ready_to_receive_uc(&conn).unwrap();
        x.qp.ready_to_send_uc(&conn).unwrap();
    }
    (a, b)
}

#[test]
fn uc_send_and_write_with_immediate_over_sockets() {
    let (a, b) = uc_pair();
    let data = pattern(3, 5000);
    a.mr.write(0, &data).unwrap();
    recv(&b, 1, 0, 8192);
    recv(&b, 2, 8192, 16);
    send(&a, 10, WrOpcode::Send, 0, 5000);
    let wc = wait(&a.cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (10, WcStatus::Success, WcOpcode::Send)
    );
    let wc = wait(&b.cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (1, WcStatus::Success, 5000)
    );
    assert_eq!(wc.src_qp, a.qp.qp_num());
    let mut got = vec![0u8; 5000];
    b.mr.read(0, &mut got).unwrap();
    assert_eq!(got, data);
    let remote_addr = b.mr.addr() + 0x4000;
    send(
        &a,
        11,
        WrOpcode::RdmaWriteWithImm {
            remote_addr,
            rkey: b.mr.rkey(),
            imm: 0x0102_0304,
        },
        0,
        3000,
    );
    assert_eq!(wait(&a.cq).wr_id, 11);
    let wc = wait(&b.cq);
    assert_eq!(wc.opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!(
        (wc.wr_id, wc.byte_len, wc.imm_data),
        (2, 3000, Some(0x0102_0304))
    );
    let mut got = vec![0u8; 3000];
    b.mr.read(0x4000, &mut got).unwrap();
    assert_eq!(got, data[..3000]);
    // No acknowledgement ever crossed: the sender's QP received nothing.
    assert_eq!(a.ctx.counter("rcvd_pkts"), Some(0));
    // READ is not a UC operation.
    let r = a.qp.post_send(&[SendWr {
        wr_id: 12,
        sg_list: &[a.mr.sge(0, 8)],
        opcode: WrOpcode::RdmaRead {
            remote_addr,
            rkey: b.mr.rkey(),
        },
        send_flags: SendFlags::SIGNALED,
    }]);
    assert!(matches!(
        r,
        Err(PostError {
            bad_wr: 0,
            error: VerbsError::InvalidWr(_)
        })
    ));
}

#[test]
fn ud_datagrams_from_two_senders_with_grh_qkey_and_mtu_rules() {
    let mut c = contexts(3);
    let s2 = end(c.pop().unwrap(), QpType::Ud);
    let r = end(c.pop().unwrap(), QpType::Ud);
    let s1 = end(c.pop().unwrap(), QpType::Ud);
    for e in [&s1, &s2, &r] {
        e.qp.ready_ud(QKEY, 0x1234).unwrap();
    }
    let ah_attr = AhAttr {
        dgid: r.ctx.gid(0).unwrap(),
        hop_limit: 64,
        ..Default::default()
    };
    let ah1 = s1.pd.create_ah(&ah_attr).unwrap();
    // The second sender marks its datagrams (DSCP 10): the class reaches the IP header.
    let ah2 = s2
        .pd
        .create_ah(&AhAttr {
            traffic_class: 0x28,
            ..ah_attr
        })
        .unwrap();
    // The AH is checked: an IPv6 GID on an IPv4 device is refused.
    let v6 = AhAttr {
        dgid: Gid::from_ip("2001:db8::1".parse().unwrap()),
        ..Default::default()
    };
    assert!(matches!(
        s1.pd.create_ah(&v6),
        Err(VerbsError::InvalidAttribute { .. })
    ));
    s1.mr.write(0, &pattern(1, 1024)).unwrap();
    s2.mr.write(0, &pattern(2, 1024)).unwrap();
    for i in 0..3 {
        recv(&r, i, i * 2048, 2048);
    }
    let rq = r.qp.qp_num();
    ud_send(&s1, &ah1, rq, QKEY, 1, WrOpcode::Send, 1000).unwrap();
    assert_eq!(wait(&s1.cq).status, WcStatus::Success);
    let wc = wait(&r.cq);
    assert_eq!(
        (wc.wr_id, wc.byte_len, wc.src_qp),
        (0, 1040, s1.qp.qp_num())
    );
    assert!(wc.grh);
    let mut grh = [0u8; 40];
    r.mr.read(0, &mut grh).unwrap();
    assert_eq!(&grh[..20], &[0u8; 20]);
    assert_eq!(grh[20], 0x45);
    assert_eq!(
        (grh[20 + 1], grh[20 + 8]),
        (0, 64),
        "TOS and TTL as they arrived"
    );
    assert_eq!(&grh[32..36], &[127, 0, 0, 1], "source address");
    assert_eq!(&grh[36..40], &[127, 0, 0, 2], "destination address");
    let mut got = vec![0u8; 1000];
    r.mr.read(40, &mut got).unwrap();
    assert_eq!(got, pattern(1, 1000));
    // A second sender, with immediate data and the "use the QP's Q_Key" bit.
    ud_send(
        &s2,
        &ah2,
        rq,
        0x8000_0000,
        2,
        WrOpcode::SendWithImm { imm: 9 },
        10,
    )
    .unwrap();
    let wc = wait(&r.cq);
    assert_eq!(
        (wc.wr_id, wc.byte_len, wc.src_qp, wc.imm_data),
        (1, 50, s2.qp.qp_num(), Some(9))
    );
    let mut src = [0u8; 4];
    r.mr.read(2048 + 32, &mut src).unwrap();
    assert_eq!(src, [127, 0, 0, 3]);
    let mut tos_ttl = [0u8; 8];
    r.mr.read(2048 + 21, &mut tos_ttl).unwrap();
    assert_eq!(
        (tos_ttl[0], tos_ttl[7]),
        (0x28, 64),
        "the AH's class, the route's TTL"
    );
    // A wrong Q_Key is dropped and counted at the receiver.
    ud_send(&s1, &ah1, rq, 0x2222, 3, WrOpcode::Send, 10).unwrap();
    eventually("qkey_viol_cntr", || {
        r.ctx.counter("qkey_viol_cntr") == Some(1)
    });
    // Over one MTU: refused at post, nothing queued.
    let mtu = s1.ctx.limits().max_mtu.bytes();
    let e = ud_send(&s1, &ah1, rq, QKEY, 4, WrOpcode::Send, mtu + 1).unwrap_err();
    assert_eq!(
        e.error,
        VerbsError::UdMessageTooLong {
            len: mtu as u64 + 1,
            mtu
        }
    );
    // The receive WQE the bad Q_Key packet did not take is still there.
    ud_send(&s1, &ah1, rq, QKEY, 5, WrOpcode::Send, 20).unwrap();
    assert_eq!(wait(&r.cq).wr_id, 2);
    // A UD QP needs its destination per WR.
    let plain = s1.qp.post_send(&[SendWr {
        wr_id: 6,
        sg_list: &[],
        opcode: WrOpcode::Send,
        send_flags: SendFlags::SIGNALED,
    }]);
    assert!(matches!(
        plain,
        Err(PostError {
            error: VerbsError::InvalidWr(_),
            ..
        })
    ));
}

#[test]
fn ud_packets_for_a_qp_in_init_are_dropped_as_bad_state() {
    let mut c = contexts(2);
    let r = end(c.pop().unwrap(), QpType::Ud);
    let s = end(c.pop().unwrap(), QpType::Ud);
    s.qp.ready_ud(QKEY, 1).unwrap();
    r.qp.modify(
        &QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qkey: QKEY,
            ..Default::default()
        },
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY,
    )
    .unwrap();
    recv(&r, 1, 0, 256);
    let ah =
        s.pd.create_ah(&AhAttr {
            dgid: r.ctx.gid(0).unwrap(),
            ..Default::default()
        })
        .unwrap();
    ud_send(&s, &ah, r.qp.qp_num(), QKEY, 1, WrOpcode::Send, 8).unwrap();
    eventually("bad_state_pkts", || {
        r.ctx.counter("bad_state_pkts") == Some(1)
    });
    assert!(r.cq.poll_one().unwrap().is_none());
}

#[test]
fn one_srq_feeds_an_rc_and_a_ud_qp_with_limit_event_and_guarded_destroy() {
    let mut c = contexts(2);
    let rctx = c.pop().unwrap();
    let sctx = c.pop().unwrap();
    // Receiver: an SRQ shared by an RC and a UD QP.
    let rpd = rctx.alloc_pd().unwrap();
    let rmr = rpd.register_mr(MR_LEN, AccessFlags::LOCAL_WRITE).unwrap();
    let rcq = rctx.create_cq(64).unwrap();
    let srq = rpd
        .create_srq(&SrqAttr {
            max_wr: 8,
            max_sge: 1,
            srq_limit: 0,
        })
        .unwrap();
    let init = |t| QpInitAttr {
        send_cq: &rcq,
        recv_cq: &rcq,
        cap: cap(),
        qp_type: t,
        sq_sig_all: false,
    };
    let r_rc = rpd.create_qp_with_srq(&init(QpType::Rc), &srq).unwrap();
    let r_ud = rpd.create_qp_with_srq(&init(QpType::Ud), &srq).unwrap();
    // A QP on an SRQ posts no receive WRs of its own.
    let own = r_ud.post_recv(&[RecvWr {
        wr_id: 0,
        sg_list: &[rmr.sge(0, 64)],
    }]);
    assert!(matches!(
        own,
        Err(PostError {
            error: VerbsError::InvalidWr(_),
            ..
        })
    ));
    for i in 0..4u64 {
        srq.post_recv(&[RecvWr {
            wr_id: 100 + i,
            sg_list: &[rmr.sge(i * 4096, 4096)],
        }])
        .unwrap();
    }
    srq.modify(
        &SrqAttr {
            srq_limit: 3,
            ..SrqAttr::default()
        },
        SrqAttrMask::LIMIT,
    )
    .unwrap();
    // Sender: one RC and one UD QP.
    let s_rc = end(sctx, QpType::Rc);
    let s_ud = qp_on(&s_rc, QpType::Ud);
    s_rc.qp.init(AccessFlags::EMPTY).unwrap();
    r_rc.init(AccessFlags::EMPTY).unwrap();
    let to_r = RcConnect::new(r_rc.qp_num(), 5, rctx.gid(1).unwrap(), 7);
    let to_s = RcConnect::new(s_rc.qp.qp_num(), 7, s_rc.ctx.gid(1).unwrap(), 5);
    s_rc.qp.ready_to_receive(&to_r).unwrap();
    s_rc.qp.ready_to_send(&to_r).unwrap();
    r_rc.ready_to_receive(&to_s).unwrap();
    r_rc.ready_to_send(&to_s).unwrap();
    s_ud.ready_ud(QKEY, 1).unwrap();
    r_ud.ready_ud(QKEY, 1).unwrap();
    send(&s_rc, 1, WrOpcode::Send, 0, 3000);
    assert_eq!(wait(&s_rc.cq).status, WcStatus::Success);
    let wc = wait(&rcq);
    assert_eq!(
        (wc.wr_id, wc.qp_num, wc.byte_len),
        (100, r_rc.qp_num(), 3000)
    );
    assert!(!srq.take_limit_event(), "3 left: not below the limit");
    let ah = s_rc
        .pd
        .create_ah(&AhAttr {
            dgid: rctx.gid(0).unwrap(),
            ..Default::default()
        })
        .unwrap();
    s_ud.post_send_ud(&[UdSendWr {
        wr: SendWr {
            wr_id: 2,
            sg_list: &[s_rc.mr.sge(0, 100)],
            opcode: WrOpcode::Send,
            send_flags: SendFlags::SIGNALED,
        },
        ah: &ah,
        remote_qpn: r_ud.qp_num(),
        remote_qkey: QKEY,
    }])
    .unwrap();
    let wc = wait(&rcq);
    assert_eq!(
        (wc.wr_id, wc.qp_num, wc.byte_len),
        (101, r_ud.qp_num(), 140)
    );
    assert!(srq.take_limit_event(), "2 left: below the limit");
    assert!(!srq.take_limit_event(), "raised once");
    assert_eq!(srq.query().srq_limit, 0);
    assert_eq!(rctx.counter("srq_limit_events"), Some(1));
    // Destroy refused while the QPs exist.
    let (srq, e) = srq.destroy().unwrap_err();
    assert!(matches!(e, VerbsError::Busy(_)));
    drop(r_rc);
    let (srq, _) = srq.destroy().unwrap_err();
    drop(r_ud);
    srq.destroy().unwrap();
}

/// UD datagrams posted and then destroyed at once still leave, as on rxe (whose post_send
/// sends before it returns): a program that posts its last message and exits must not take
/// it with it. Both engine modes; the sender's QP, CQ, PD and context go right after the post.
#[test]
fn ud_sends_posted_just_before_destroy_are_delivered() {
    for (busy_poll, multicast) in [(false, false), (true, false), (false, true), (true, true)] {
        let mut c = common::contexts_with(2, busy_poll);
        let r = end(c.pop().unwrap(), QpType::Ud);
        let s = end(c.pop().unwrap(), QpType::Ud);
        for e in [&s, &r] {
            e.qp.ready_ud(QKEY, 0x1234).unwrap();
        }
        const N: u64 = 16;
        for i in 0..N {
            recv(&r, i, i * 2048, 2048);
        }
        // To the receiver, or to a group it is attached to.
        let group = Gid::from_ip("230.91.0.2".parse().unwrap());
        if multicast {
            r.qp.attach_mcast(group, 0).unwrap();
        }
        let ah = if multicast {
            s.pd.create_ah(&AhAttr {
                dgid: group,
                hop_limit: 64,
                ..Default::default()
            })
            .unwrap()
        } else {
            s.ah_to(&r)
        };
        let rq = if multicast { 0xFF_FFFF } else { r.qp.qp_num() };
        for i in 0..N {
            ud_send(&s, &ah, rq, QKEY, i, WrOpcode::Send, 100).unwrap();
        }
        drop(s);
        for _ in 0..N {
            assert_eq!(
                wait(&r.cq).status,
                WcStatus::Success,
                "busy_poll {busy_poll} multicast {multicast}"
            );
        }
    }
}

/// Another QP of `qp_type` on `e`'s PD and CQ, in RESET.
fn qp_on(e: &End, qp_type: QpType) -> QueuePair {
    e.pd.create_qp(&QpInitAttr {
        send_cq: &e.cq,
        recv_cq: &e.cq,
        cap: cap(),
        qp_type,
        sq_sig_all: false,
    })
    .unwrap()
}

/// A second UD QP on `e`'s PD and CQ, ready with the test's Q_Key.
fn another_ud_qp(e: &End) -> QueuePair {
    let qp = qp_on(e, QpType::Ud);
    qp.ready_ud(QKEY, 1).unwrap();
    qp
}

/// Posts one receive of 2048 bytes at `off` of `e`'s region on `qp`.
fn recv_on(e: &End, qp: &QueuePair, wr_id: u64, off: u64) {
    qp.post_recv(&[RecvWr {
        wr_id,
        sg_list: &[e.mr.sge(off, 2048)],
    }])
    .unwrap();
}

/// The completions `e`'s CQ has within `limit`, at most `n`.
fn completions(e: &End, n: usize, limit: Duration) -> Vec<WorkCompletion> {
    let end = Instant::now() + limit;
    let mut got = Vec::new();
    while got.len() < n && Instant::now() < end {
        let mut wc = [WorkCompletion::default(); 8];
        let k = e.cq.wait(&mut wc, Duration::from_millis(50)).unwrap_or(0);
        got.extend_from_slice(&wc[..k]);
    }
    got
}

#[test]
fn ud_multicast_reaches_every_attached_qp_and_stops_at_detach() {
    let group: std::net::IpAddr = "230.91.0.1".parse().unwrap();
    let mgid = Gid::from_ip(group);
    let mut c = contexts(2);
    let b = end(c.pop().unwrap(), QpType::Ud);
    let a = end(c.pop().unwrap(), QpType::Ud);
    a.qp.ready_ud(QKEY, 1).unwrap();
    b.qp.ready_ud(QKEY, 1).unwrap();
    // The sender's own device has a QP in the group too (it hears its device's multicast, as
    // rxe's looped-back packets are); the other device has two.
    let a1 = another_ud_qp(&a);
    let b2 = another_ud_qp(&b);
    for (e, qp) in [(&a, &a1), (&b, &b.qp), (&b, &b2)] {
        qp.attach_mcast(mgid, 0).unwrap();
        // Attaching again changes nothing.
        qp.attach_mcast(mgid, 0).unwrap();
        recv_on(
            e,
            qp,
            u64::from(qp.qp_num()),
            u64::from(qp.qp_num() % 8) * 2048,
        );
        recv_on(
            e,
            qp,
            u64::from(qp.qp_num()) + 100,
            16384 + u64::from(qp.qp_num() % 8) * 2048,
        );
    }
    assert!(a1.is_attached_to_mcast() && !a.qp.is_attached_to_mcast());
    let ah =
        a.pd.create_ah(&AhAttr {
            dgid: mgid,
            hop_limit: 8,
            ..Default::default()
        })
        .unwrap();
    a.mr.write(0, &pattern(7, 300)).unwrap();
    ud_send(&a, &ah, 0xFF_FFFF, QKEY, 1, WrOpcode::Send, 300).unwrap();
    // The sender's completion and a1's receive on a's CQ; b.qp's and b2's on b's.
    let got_a = completions(&a, 2, Duration::from_secs(10));
    let got_b = completions(&b, 2, Duration::from_secs(10));
    let mut recv_qps: Vec<u32> = got_a
        .iter()
        .chain(&got_b)
        .filter(|w| w.opcode == WcOpcode::Recv)
        .map(|w| w.qp_num)
        .collect();
    recv_qps.sort_unstable();
    let mut want = vec![a1.qp_num(), b.qp.qp_num(), b2.qp_num()];
    want.sort_unstable();
    assert_eq!(
        recv_qps,
        want,
        "a: {got_a:?} b: {got_b:?} {:?} {:?}",
        a.ctx.counters(),
        b.ctx.counters()
    );
    for w in got_a
        .iter()
        .chain(&got_b)
        .filter(|w| w.opcode == WcOpcode::Recv)
    {
        assert_eq!(
            (w.status, w.byte_len, w.src_qp),
            (WcStatus::Success, 340, a.qp.qp_num())
        );
        assert!(w.grh);
    }
    // The GRH area: from the sender's address to the group's, with the AH's hop limit.
    let off = u64::from(b2.qp_num() % 8) * 2048;
    let mut grh = [0u8; 40];
    b.mr.read(off, &mut grh).unwrap();
    assert_eq!(&grh[32..36], &[127, 0, 0, 1], "source address");
    assert_eq!(&grh[36..40], &[230, 91, 0, 1], "the group's address");
    assert_eq!(grh[28], 8, "TTL");
    let mut data = vec![0u8; 300];
    b.mr.read(off + 40, &mut data).unwrap();
    assert_eq!(data, pattern(7, 300));
    // Detached, b.qp hears no more; b2 and a1 still do.
    b.qp.detach_mcast(mgid, 0).unwrap();
    assert!(matches!(
        b.qp.detach_mcast(mgid, 0),
        Err(VerbsError::NotFound(_))
    ));
    ud_send(&a, &ah, 0xFF_FFFF, QKEY, 2, WrOpcode::Send, 300).unwrap();
    let got_b = completions(&b, 2, Duration::from_secs(2));
    assert_eq!(
        got_b.iter().map(|w| w.qp_num).collect::<Vec<_>>(),
        vec![b2.qp_num()],
        "{got_b:?}"
    );
    let got_a = completions(&a, 2, Duration::from_secs(10));
    assert!(got_a
        .iter()
        .any(|w| w.qp_num == a1.qp_num() && w.opcode == WcOpcode::Recv));
    // The last QP of b detached: b's device left the group, and a packet to it finds nobody.
    b2.detach_mcast(mgid, 0).unwrap();
    // ib_attach_mcast's checks.
    assert!(matches!(
        b2.attach_mcast(Gid::from_ip("127.0.0.9".parse().unwrap()), 0),
        Err(VerbsError::InvalidAttribute { attr: "gid", .. })
    ));
    let rc = qp_on(&b, QpType::Rc);
    assert!(matches!(
        rc.attach_mcast(mgid, 0),
        Err(VerbsError::InvalidAttribute { attr: "qp", .. })
    ));
    // Dropping an attached QP detaches it.
    drop(a1);
    assert!(matches!(
        a.qp.detach_mcast(mgid, 0),
        Err(VerbsError::NotFound(_))
    ));
}

/// Attach and detach from many threads at once (as stacks call the verbs): every call
/// succeeds once, the group table ends empty, and the group still works afterwards.
#[test]
fn multicast_attach_and_detach_from_many_threads() {
    let groups: Vec<Gid> = ["230.91.0.3", "230.91.0.4"]
        .iter()
        .map(|g| Gid::from_ip(g.parse().unwrap()))
        .collect();
    let mut c = contexts(1);
    let e = end(c.pop().unwrap(), QpType::Ud);
    let qps: Vec<QueuePair> = (0..8).map(|_| another_ud_qp(&e)).collect();
    std::thread::scope(|s| {
        for (i, qp) in qps.iter().enumerate() {
            let groups = &groups;
            s.spawn(move || {
                for round in 0..200 {
                    let g = groups[(i + round) % 2];
                    qp.attach_mcast(g, 0).unwrap();
                    assert!(qp.is_attached_to_mcast());
                    qp.detach_mcast(g, 0).unwrap();
                }
            });
        }
    });
    for qp in &qps {
        assert!(!qp.is_attached_to_mcast());
        for g in &groups {
            assert!(matches!(
                qp.detach_mcast(*g, 0),
                Err(VerbsError::NotFound(_))
            ));
        }
    }
    // The group works after the churn: a datagram to it reaches an attached QP.
    let r = &qps[0];
    r.attach_mcast(groups[0], 0).unwrap();
    recv_on(&e, r, 77, 0);
    let ah =
        e.pd.create_ah(&AhAttr {
            dgid: groups[0],
            hop_limit: 1,
            ..Default::default()
        })
        .unwrap();
    e.qp.ready_ud(QKEY, 1).unwrap();
    ud_send(&e, &ah, 0xFF_FFFF, QKEY, 1, WrOpcode::Send, 64).unwrap();
    let got = completions(&e, 2, Duration::from_secs(10));
    assert!(
        got.iter()
            .any(|w| w.wr_id == 77 && w.qp_num == r.qp_num() && w.status == WcStatus::Success),
        "{got:?}"
    );
    r.detach_mcast(groups[0], 0).unwrap();
}
