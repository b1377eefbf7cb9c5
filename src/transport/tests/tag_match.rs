//! Tag matching through the transport (spec-notes/beyond-rxe.md rule 13): RC QPs joined by
//! the test harness's link, the receiver's QP on a TM SRQ. A matched EAGER message of several
//! packets, a rendezvous (the READ of the sender's data and the FIN back), and a peer whose
//! rendezvous names a key that reads nothing or carries no RVH.

use std::sync::Arc;

use super::super::tag_match::{Tmh, TmhOp, TMH_LEN};
use super::super::*;
use super::node::*;
use crate::ib::DeviceLimits;
use crate::ib::*;
use crate::memory::SharedBytes;

const TAG_AT: u64 = 0x1000;
const SRC_IOVA: u64 = 0x90_0000;

fn tm_srq() -> Arc<Srq> {
    let attr = SrqAttr {
        max_wr: 8,
        max_sge: 1,
        srq_limit: 0,
    };
    let s = Srq::new(
        1,
        attr,
        &DeviceLimits::default(),
        Arc::new(Counters::default()),
    );
    Arc::new(s.unwrap().with_tm(4).unwrap())
}

/// Adds `tag` (all 64 bits compared) over 1024 bytes at the receiver's `RECV_AT + TAG_AT`.
fn add(s: &Srq, n: &Node, tag: u64, recv_wr_id: u64) {
    let sge = [n.sge(RECV_AT + TAG_AT, 1024)];
    let op = TmOp {
        wr_id: 0,
        kind: TmOpKind::Add {
            recv_wr_id,
            sg_list: &sge,
            tag,
            mask: u64::MAX,
        },
        signaled: true,
        sync: None,
    };
    let (r, info) = s.tm_op(&op, &n.mrs).unwrap();
    assert!(r.is_ok() && !info.sync_req);
}

/// An RC pair, a -> b with b on `srq`; a grants remote READ (the rendezvous reads it).
fn pair(srq: &Arc<Srq>) -> (Node, Node) {
    let mut a = node(0x41, "192.0.2.1", QpType::Rc, None);
    let mut b = node(0x42, "192.0.2.2", QpType::Rc, Some(Arc::clone(srq)));
    let (qa, qb) = ((a.qp.qpn(), a.addr.ip()), (b.qp.qpn(), b.addr.ip()));
    for (n, (qpn, ip)) in [(&mut a, qb), (&mut b, qa)] {
        init(
            n,
            AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
            None,
        );
        let rtr = QpAttr {
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ..rtr_towards(qpn, ip, Mtu::Mtu256, 0xFF_FFFE)
        };
        n.qp.modify(&rtr, RC_RTR_MASK).unwrap();
        n.qp.modify(&rc_rts(), RC_RTS_MASK).unwrap();
    }
    (a, b)
}

/// Writes a TMH, and after it `rest`, at the start of a's region.
fn header(a: &Node, op: TmhOp, tag: u64, rest: &[u8]) -> u32 {
    let h = Tmh {
        op,
        app_ctx: 0x5151,
        tag,
    };
    a.mr.storage.write(0, &h.emit()).unwrap();
    a.mr.storage.write(TMH_LEN as u64, rest).unwrap();
    (TMH_LEN + rest.len()) as u32
}

/// Lets the two exchange packets until neither has any.
fn settle(a: &mut Node, b: &mut Node) {
    for _ in 0..8 {
        let sent = transfer(a, b, &[]).len() + transfer(b, a, &[]).len();
        if sent == 0 {
            return;
        }
    }
}

#[test]
fn eager_over_several_packets_lands_after_the_tmh() {
    let s = tm_srq();
    let (mut a, mut b) = pair(&s);
    add(&s, &b, 0xfeed, 77);
    header(&a, TmhOp::Eager, 0xfeed, &[]);
    a.post(1, WrOpcode::Send, 0, 700).unwrap();
    settle(&mut a, &mut b);
    let w = b.recv_wcs[0];
    assert_eq!(
        (w.wr_id, w.status, w.opcode),
        (77, WcStatus::Success, WcOpcode::TmRecv)
    );
    assert_eq!(w.byte_len, 700 - TMH_LEN as u32);
    let tm = w.tm.unwrap();
    assert!(tm.matched && tm.data_valid && !w.grh);
    assert_eq!((tm.tag, tm.app_ctx), (0xfeed, 0x5151));
    assert_eq!(
        b.recv_bytes(TAG_AT, 700 - TMH_LEN),
        a.sent_bytes(TMH_LEN as u64, 700 - TMH_LEN)
    );
    assert_eq!(a.send_wcs[0].status, WcStatus::Success);
}

/// a's second region, 4 KiB at SRC_IOVA with remote READ, filled with a pattern.
fn readable(a: &mut Node) -> Arc<Mr> {
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
    let mr = a
        .mrs
        .register(1, Arc::new(SharedBytes::new(4096)), SRC_IOVA, access)
        .unwrap();
    for i in 0..4096u64 {
        mr.storage.write(i, &[(i * 13 + 1) as u8]).unwrap();
    }
    mr
}

fn rvh(va: u64, rkey: u32, len: u32) -> Vec<u8> {
    [
        &va.to_be_bytes()[..],
        &rkey.to_be_bytes(),
        &len.to_be_bytes(),
    ]
    .concat()
}

#[test]
fn rendezvous_reads_the_data_then_sends_the_fin() {
    let s = tm_srq();
    let (mut a, mut b) = pair(&s);
    let mr = readable(&mut a);
    add(&s, &b, 9, 90);
    a.post_recv(5, 0, 64);
    let n = header(&a, TmhOp::Rndv, 9, &rvh(SRC_IOVA + 8, mr.rkey, 600));
    a.post(1, WrOpcode::Send, 0, n).unwrap();
    settle(&mut a, &mut b);
    let got: Vec<_> = b
        .recv_wcs
        .iter()
        .map(|w| (w.wr_id, w.opcode, w.status))
        .collect();
    assert_eq!(
        got,
        vec![
            (90, WcOpcode::TmRecv, WcStatus::Success),
            (90, WcOpcode::TmRecv, WcStatus::Success)
        ]
    );
    let (first, second) = (b.recv_wcs[0].tm.unwrap(), b.recv_wcs[1].tm.unwrap());
    assert!(first.matched && !first.data_valid && first.tag == 9);
    assert!(!second.matched && second.data_valid && second.tag == 0);
    assert_eq!(b.recv_wcs[1].byte_len, 600);
    assert_eq!(
        b.recv_bytes(TAG_AT, 600),
        mr.storage.to_vec(8, 600).unwrap()
    );
    assert!(b.send_wcs.is_empty(), "the READ and the FIN are internal");
    // The FIN: a TMH alone, the RNDV's tag and app_ctx, no GRH flag.
    let fin = &a.recv_wcs[0];
    assert_eq!((fin.wr_id, fin.byte_len, fin.grh), (5, 16, false));
    let h = Tmh::parse(&a.mr.storage.to_vec(RECV_AT, 16).unwrap()).unwrap();
    assert_eq!((h.op, h.tag, h.app_ctx), (TmhOp::Fin, 9, 0x5151));
}

#[test]
fn a_rendezvous_that_reads_nothing_fails_its_tag_and_sends_no_fin() {
    let s = tm_srq();
    let (mut a, mut b) = pair(&s);
    let mr = readable(&mut a);
    add(&s, &b, 9, 90);
    a.post_recv(5, 0, 64);
    // An rkey that names nothing at a.
    let n = header(&a, TmhOp::Rndv, 9, &rvh(SRC_IOVA, mr.rkey ^ 0x100, 600));
    a.post(1, WrOpcode::Send, 0, n).unwrap();
    settle(&mut a, &mut b);
    assert_eq!(b.recv_wcs.len(), 2);
    let w = b.recv_wcs[1];
    assert_eq!((w.wr_id, w.opcode), (90, WcOpcode::TmRecv));
    assert_eq!(w.status, WcStatus::RemAccessErr);
    assert!(!w.tm.unwrap().data_valid);
    assert!(
        a.recv_wcs.iter().all(|w| w.status != WcStatus::Success),
        "no FIN"
    );
}

#[test]
fn a_rendezvous_without_its_rvh_is_an_invalid_request() {
    let s = tm_srq();
    let (mut a, mut b) = pair(&s);
    add(&s, &b, 9, 90);
    let n = header(&a, TmhOp::Rndv, 9, &[]);
    a.post(1, WrOpcode::Send, 0, n).unwrap();
    settle(&mut a, &mut b);
    assert_eq!(a.send_wcs[0].status, WcStatus::RemInvReqErr);
    assert_eq!(b.recv_wcs[0].wr_id, 90);
    assert_eq!(b.recv_wcs[0].status, WcStatus::RemInvReqErr);
}
