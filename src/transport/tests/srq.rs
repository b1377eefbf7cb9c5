//! Shared receive queue rules (spec-notes/uc-ud-srq.md): limits, the limit event, sharing
//! between QPs of every type, destroy refused while attached.

use std::sync::Arc;

use super::node::*;
use crate::ib::*;
use crate::transport::{Counters, Srq};

const QKEY: u32 = 0x1111_1111;

fn srq(max_wr: u32) -> Arc<Srq> {
    let attr = SrqAttr {
        max_wr,
        max_sge: 2,
        srq_limit: 0,
    };
    Arc::new(
        Srq::new(
            1,
            attr,
            &DeviceLimits::default(),
            Arc::new(Counters::default()),
        )
        .unwrap(),
    )
}

fn post(s: &Srq, n: &Node, wr_id: u64, at: u64, len: u32) -> Result<()> {
    let sge = [n.sge(RECV_AT + at, len)];
    s.post_recv(
        &RecvWr {
            wr_id,
            sg_list: &sge,
        },
        &n.mrs,
    )
}

fn dest(to: &Node) -> UdDest {
    UdDest {
        ah: AhAttr {
            dgid: Gid::from_ip(to.addr.ip()),
            ..Default::default()
        },
        remote_qpn: to.qp.qpn(),
        remote_qkey: QKEY,
    }
}

#[test]
fn creation_checks_device_limits_and_refuses_a_limit() {
    let l = DeviceLimits::default();
    let c = || Arc::new(Counters::default());
    let big = SrqAttr {
        max_wr: l.max_qp_wr + 1,
        ..SrqAttr::default()
    };
    assert!(matches!(
        Srq::new(1, big, &l, c()),
        Err(VerbsError::ExceedsDeviceLimit { .. })
    ));
    let sges = SrqAttr {
        max_sge: l.max_sge + 1,
        ..SrqAttr::default()
    };
    assert!(matches!(
        Srq::new(1, sges, &l, c()),
        Err(VerbsError::ExceedsDeviceLimit { .. })
    ));
    let lim = SrqAttr {
        srq_limit: 1,
        ..SrqAttr::default()
    };
    assert!(matches!(
        Srq::new(1, lim, &l, c()),
        Err(VerbsError::InvalidAttribute { .. })
    ));
}

#[test]
fn overrun_and_modify_rules() {
    let s = srq(4);
    let n = node(0x41, "192.0.2.1", QpType::Ud, None);
    let three_sges = [n.sge(RECV_AT, 1), n.sge(RECV_AT, 1), n.sge(RECV_AT, 1)];
    let r = s.post_recv(
        &RecvWr {
            wr_id: 1,
            sg_list: &three_sges,
        },
        &n.mrs,
    );
    assert!(matches!(r, Err(VerbsError::TooManySge { .. })));
    for i in 0..4 {
        post(&s, &n, i, i * 256, 256).unwrap();
    }
    assert_eq!(
        post(&s, &n, 9, 0, 256),
        Err(VerbsError::QueueFull {
            queue: QueueKind::Recv,
            depth: 4
        })
    );
    let lim = |l| SrqAttr {
        srq_limit: l,
        ..SrqAttr::default()
    };
    assert!(
        s.modify(&lim(4), SrqAttrMask::LIMIT).is_err(),
        "limit must be below max_wr"
    );
    s.modify(&lim(3), SrqAttrMask::LIMIT).unwrap();
    let wr = |w| SrqAttr {
        max_wr: w,
        ..SrqAttr::default()
    };
    assert!(
        s.modify(&wr(3), SrqAttrMask::MAX_WR).is_err(),
        "fewer than queued"
    );
    assert!(
        s.modify(
            &wr(DeviceLimits::default().max_qp_wr + 1),
            SrqAttrMask::MAX_WR
        )
        .is_err(),
        "above the device's max_srq_wr"
    );
    s.modify(&wr(8), SrqAttrMask::MAX_WR).unwrap();
    assert_eq!(
        s.query(),
        SrqAttr {
            max_wr: 8,
            max_sge: 2,
            srq_limit: 3
        }
    );
    post(&s, &n, 5, 0, 256).unwrap();
    assert_eq!(s.len(), 5);
}

#[test]
fn two_ud_qps_draw_on_one_srq_and_the_limit_event_fires_once() {
    let s = srq(16);
    let mut a = node(0x41, "192.0.2.1", QpType::Ud, None);
    ready_ud(&mut a, QKEY);
    let mut b1 = node(0x42, "192.0.2.2", QpType::Ud, Some(Arc::clone(&s)));
    let mut b2 = node(0x43, "192.0.2.2", QpType::Ud, Some(Arc::clone(&s)));
    ready_ud(&mut b1, QKEY);
    ready_ud(&mut b2, QKEY);
    s.attach();
    s.attach();
    // A QP on an SRQ takes no receive WRs of its own.
    let sge = [b1.sge(RECV_AT, 64)];
    let r = b1.qp.post_recv(
        &RecvWr {
            wr_id: 1,
            sg_list: &sge,
        },
        &b1.mrs,
    );
    assert!(matches!(r, Err(VerbsError::InvalidWr(_))));
    for i in 0..4 {
        post(&s, &b1, 100 + i, i * 256, 256).unwrap();
    }
    s.modify(
        &SrqAttr {
            srq_limit: 3,
            ..SrqAttr::default()
        },
        SrqAttrMask::LIMIT,
    )
    .unwrap();
    a.post_ud(1, WrOpcode::Send, 8, &dest(&b1)).unwrap();
    transfer(&mut a, &mut b1, &[]);
    assert!(!s.take_limit_event(), "3 left: not below the limit");
    a.post_ud(2, WrOpcode::Send, 8, &dest(&b2)).unwrap();
    transfer(&mut a, &mut b2, &[]);
    assert!(s.take_limit_event(), "2 left: below the limit");
    assert!(!s.take_limit_event(), "once");
    assert_eq!(s.query().srq_limit, 0, "disarmed");
    a.post_ud(3, WrOpcode::Send, 8, &dest(&b1)).unwrap();
    transfer(&mut a, &mut b1, &[]);
    assert!(!s.take_limit_event(), "stays disarmed");
    assert_eq!(
        b1.recv_wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        vec![100, 102]
    );
    assert_eq!(
        b2.recv_wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        vec![101]
    );
    // Destroy is refused while QPs use it.
    assert!(matches!(s.check_destroy(), Err(VerbsError::Busy(_))));
    s.detach();
    assert!(s.check_destroy().is_err());
    s.detach();
    s.check_destroy().unwrap();
}

#[test]
fn rc_and_uc_qps_take_receive_wqes_from_the_srq() {
    let s = srq(16);
    // RC.
    let mut a = node(0x41, "192.0.2.1", QpType::Rc, None);
    let mut b = node(0x42, "192.0.2.2", QpType::Rc, Some(Arc::clone(&s)));
    connect_rc(&mut a, &b, Mtu::Mtu256);
    connect_rc(&mut b, &a, Mtu::Mtu256);
    post(&s, &b, 7, 0, 1024).unwrap();
    a.post(1, WrOpcode::Send, 0, 600).unwrap();
    let requests = transfer(&mut a, &mut b, &[]);
    let acks = transfer(&mut b, &mut a, &[]);
    // Requests and ACKs leave with the QP's address vector's traffic class (0) and, to an
    // IPv4 peer, the route's TTL (0: the kernel's), not the AV's hop limit 1.
    assert!(requests.iter().chain(&acks).all(|s| s.ip == (0, 0)));
    assert!(!acks.is_empty());
    assert_eq!(b.recv_wcs.len(), 1);
    assert_eq!((b.recv_wcs[0].wr_id, b.recv_wcs[0].byte_len), (7, 600));
    assert_eq!(a.send_wcs.len(), 1, "ACKed");
    assert!(s.is_empty());
    // UC: a lost LAST with an SRQ: the WQE in progress cannot go back; it completes in error
    // and the next message takes the next WQE.
    let mut c = node(0x43, "192.0.2.3", QpType::Uc, None);
    let mut d = node(0x44, "192.0.2.4", QpType::Uc, Some(Arc::clone(&s)));
    connect_uc(&mut c, &d, Mtu::Mtu256, AccessFlags::REMOTE_WRITE);
    connect_uc(&mut d, &c, Mtu::Mtu256, AccessFlags::REMOTE_WRITE);
    post(&s, &d, 8, 0, 1024).unwrap();
    post(&s, &d, 9, 1024, 1024).unwrap();
    c.post(1, WrOpcode::Send, 0, 600).unwrap();
    c.post(2, WrOpcode::Send, 1000, 600).unwrap();
    transfer(&mut c, &mut d, &[2]);
    let got: Vec<(u64, WcStatus)> = d.recv_wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        got,
        vec![(8, WcStatus::RemInvReqErr), (9, WcStatus::Success)]
    );
    assert_eq!(d.recv_bytes(1024, 600), c.sent_bytes(1000, 600));
}
