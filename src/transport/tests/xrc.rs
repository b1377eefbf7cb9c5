//! XRC rules (spec-notes/xrc.md) in virtual time: an initiator's requests carry the target
//! SRQ's number in an XRCETH, a target delivers them to that SRQ of its domain and completes
//! on the SRQ's CQ, the XRC rows of the modify table, and a number of no SRQ of the target's
//! domain NAKed "invalid request" and counted.

use std::sync::Arc;

use super::node::*;
use crate::ib::*;
use crate::transport::{Counters, Srq, XrcDomain, XrcRole};
use crate::wire::Opcode;

const SRQN: u32 = 0x42;

fn xrc_srq(xrcd: u32, srqn: u32) -> Arc<Srq> {
    let attr = SrqAttr {
        max_wr: 8,
        max_sge: 2,
        srq_limit: 0,
    };
    let s = Srq::new(
        1,
        attr,
        &DeviceLimits::default(),
        Arc::new(Counters::default()),
    )
    .unwrap();
    Arc::new(s.with_xrc(xrcd, srqn))
}

/// An initiator at 10.0.0.1 connected to a target at 10.0.0.2 whose domain has the SRQ
/// `SRQN`, each with the modify masks pyverbs gives XRC QPs (the initiator's RTR without the
/// responder's attributes, the target's RTS with TIMEOUT and SQ_PSN only).
fn pair() -> (Node, Node, Arc<Srq>) {
    let domain = Arc::new(XrcDomain::new(1));
    let srq = xrc_srq(1, SRQN);
    domain.add_srq(&srq).unwrap();
    let mut ini = node_xrc(0x11, "10.0.0.1", XrcRole::Send);
    let mut tgt = node_xrc(0x22, "10.0.0.2", XrcRole::Recv(domain));
    init(&mut ini, AccessFlags::EMPTY, None);
    init(&mut tgt, AccessFlags::REMOTE_WRITE, None);
    let rtr = rtr_towards(tgt.qp.qpn(), tgt.addr.ip(), Mtu::Mtu1024, 0xFF_FFFE);
    ini.qp.modify(&rtr, UC_RTR_MASK).unwrap();
    let rtr = QpAttr {
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ..rtr_towards(ini.qp.qpn(), ini.addr.ip(), Mtu::Mtu1024, 0xFF_FFFE)
    };
    tgt.qp.modify(&rtr, RC_RTR_MASK).unwrap();
    let rts = rc_rts();
    ini.qp.modify(&rts, RC_RTS_MASK).unwrap();
    let tgt_rts = QpAttrMask::STATE | QpAttrMask::TIMEOUT | QpAttrMask::SQ_PSN;
    tgt.qp.modify(&rts, tgt_rts).unwrap();
    (ini, tgt, srq)
}

fn post_xrc(n: &mut Node, wr_id: u64, opcode: WrOpcode, len: u32, srqn: u32) -> Result<()> {
    let sge = [n.sge(0, len)];
    n.qp.post_send_xrc(
        &SendWr {
            wr_id,
            sg_list: &sge,
            opcode,
            send_flags: SendFlags::SIGNALED,
        },
        srqn,
        &n.mrs,
    )
}

#[test]
fn a_send_goes_to_the_named_srq_and_completes_on_its_cq() {
    let (mut ini, mut tgt, srq) = pair();
    let sge = [tgt.sge(RECV_AT, 3000)];
    srq.post_recv(
        &RecvWr {
            wr_id: 7,
            sg_list: &sge,
        },
        &tgt.mrs,
    )
    .unwrap();
    post_xrc(&mut ini, 1, WrOpcode::Send, 2500, SRQN).unwrap();
    let out = transfer(&mut ini, &mut tgt, &[]);
    let ops: Vec<u8> = out.iter().map(|s| s.opcode.0).collect();
    // XRC SEND FIRST, MIDDLE, LAST at a 1024-byte MTU.
    assert_eq!(ops, [0xA0, 0xA1, 0xA2]);
    assert_eq!(tgt.srq_wcs.len(), 1, "the SRQ's CQ has the receive");
    assert!(
        tgt.recv_wcs.is_empty(),
        "a target QP has no receive CQ of its own"
    );
    let (n, wc) = &tgt.srq_wcs[0];
    assert_eq!((*n, wc.wr_id, wc.status), (SRQN, 7, WcStatus::Success));
    assert_eq!(wc.byte_len, 2500);
    assert_eq!(wc.qp_num, tgt.qp.qpn());
    assert_eq!(tgt.recv_bytes(0, 2500), ini.sent_bytes(0, 2500));
    let back = transfer(&mut tgt, &mut ini, &[]);
    assert_eq!(back.last().unwrap().opcode, Opcode::XRC_ACK);
    assert_eq!(ini.send_wcs.len(), 1);
    assert_eq!(ini.send_wcs[0].status, WcStatus::Success);
}

#[test]
fn a_write_is_checked_against_the_srqs_protection_domain() {
    let (mut ini, mut tgt, _srq) = pair();
    let write = WrOpcode::RdmaWrite {
        remote_addr: IOVA + RECV_AT,
        rkey: tgt.mr.rkey,
    };
    post_xrc(&mut ini, 1, write, 100, SRQN).unwrap();
    let out = transfer(&mut ini, &mut tgt, &[]);
    assert_eq!(out[0].opcode, Opcode::XRC_RDMA_WRITE_ONLY);
    assert_eq!(tgt.recv_bytes(0, 100), ini.sent_bytes(0, 100));
    transfer(&mut tgt, &mut ini, &[]);
    assert_eq!(ini.send_wcs[0].status, WcStatus::Success);
}

#[test]
fn a_number_of_no_srq_of_the_domain_is_an_invalid_request() {
    // 0x43: no SRQ at all; 0x50: an SRQ of another domain.
    for bad in [0x43, 0x50] {
        let (mut ini, mut tgt, _srq) = pair();
        let other = XrcDomain::new(2);
        other.add_srq(&xrc_srq(2, 0x50)).unwrap();
        post_xrc(&mut ini, 1, WrOpcode::Send, 10, bad).unwrap();
        transfer(&mut ini, &mut tgt, &[]);
        assert_eq!(count(&tgt, "xrc_srq_errors"), 1);
        assert!(tgt.srq_wcs.is_empty());
        transfer(&mut tgt, &mut ini, &[]);
        assert_eq!(ini.send_wcs.len(), 1);
        assert_eq!(ini.send_wcs[0].status, WcStatus::RemInvReqErr);
    }
}

#[test]
fn each_side_takes_only_its_role_and_the_wrs_that_fit_it() {
    let (mut ini, mut tgt, _srq) = pair();
    // An initiator names the SRQ; a target has no send queue; neither has a receive queue.
    assert!(ini.post(1, WrOpcode::Send, 0, 4).is_err());
    assert!(post_xrc(&mut tgt, 1, WrOpcode::Send, 4, SRQN).is_err());
    let sge = [ini.sge(RECV_AT, 4)];
    let recv = RecvWr {
        wr_id: 1,
        sg_list: &sge,
    };
    assert!(ini.qp.post_recv(&recv, &ini.mrs).is_err());
    // XRC has no FLUSH nor ATOMIC WRITE opcode.
    let aw = WrOpcode::AtomicWrite {
        remote_addr: IOVA,
        rkey: tgt.mr.rkey,
        data: [1; 8],
    };
    assert!(post_xrc(&mut ini, 2, aw, 8, SRQN).is_err());
    // A request at the initiator (its peer is the target) is another role's: dropped.
    post_xrc(&mut ini, 3, WrOpcode::Send, 4, SRQN).unwrap();
    let mut copy = node_xrc(0x22, "10.0.0.2", XrcRole::Send);
    connect_rc(&mut copy, &ini, Mtu::Mtu1024);
    transfer(&mut ini, &mut copy, &[]);
    assert_eq!(count(&copy, "wrong_transport_pkts"), 1);
}
