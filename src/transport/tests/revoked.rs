//! Memory taken back under a request: the application deregisters a region (the shim's
//! `ibv_dereg_mr` revokes its memory first) while a request that already passed the rkey,
//! right and range checks uses it. Nothing that did not land may be acknowledged, and no
//! response may carry bytes that were never read (issue 27): the responder NAKs as rxe does
//! (remote access error for a WRITE or READ, remote operational error for a SEND's receive
//! buffer) and moves the QP to ERROR; UC drops the message. Each test completed the
//! request with success on the code before the fix.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::memory::SharedBytes;

/// A region over memory the test owns, registered in `mrs` and then revoked: its keys still
/// resolve (the deregistration has not reached the table yet), its bytes are gone.
struct RevokedRegion {
    /// The application memory; it outlives every access (none happens after the revoke).
    _backing: Vec<u8>,
    mr: Arc<Mr>,
}

fn revoked_region(mrs: &mut MrTable, iova: u64, access: AccessFlags) -> RevokedRegion {
    let mut backing = vec![0x5Au8; 8192];
    // SAFETY: `backing`'s heap buffer stays allocated (the Vec is moved into the returned
    // struct, which does not move its buffer) until after `revoke` below has returned, and
    // after the revoke no access dereferences the pointer.
    let storage = unsafe { SharedBytes::foreign(backing.as_mut_ptr(), backing.len()) };
    let mr = mrs.register(1, Arc::new(storage), iova, access).unwrap();
    mr.storage.revoke();
    RevokedRegion {
        _backing: backing,
        mr,
    }
}

const REVOKED_IOVA: u64 = 0x6000_0000_0000;

fn remote_access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ
}

/// One SGE over the first `len` bytes of the revoked region `r`.
fn revoked_sge(r: &RevokedRegion, len: u32) -> [Sge; 1] {
    [Sge {
        addr: REVOKED_IOVA,
        length: len,
        lkey: r.mr.lkey,
    }]
}

/// Posts a receive of `sg` with `wr_id` on B.
fn post_recv_b(p: &mut Pair, wr_id: u64, sg: &[Sge]) {
    p.b.qp
        .post_recv(&RecvWr { wr_id, sg_list: sg }, &p.b.mrs)
        .unwrap();
}

/// Posts a signaled `opcode` over `sg` with `wr_id` on A, runs the pair for 50 ms and returns
/// A's first send completion as (wr_id, status).
fn post_signaled(p: &mut Pair, wr_id: u64, sg: &[Sge], opcode: WrOpcode) -> (u64, WcStatus) {
    let wr = SendWr {
        wr_id,
        sg_list: sg,
        opcode,
        send_flags: SendFlags::SIGNALED,
    };
    p.a.qp.post_send(&wr, &p.a.mrs).unwrap();
    p.drive_for(Duration::from_millis(50));
    let wc = &p.a.send_wcs[0];
    (wc.wr_id, wc.status)
}

/// The NAKs B sent, as AETH syndromes.
fn naks_from_b(p: &Pair) -> Vec<crate::wire::AckSyndrome> {
    p.log
        .iter()
        .filter(|s| !s.to_b)
        .filter_map(|s| s.aeth)
        .map(|a| a.kind())
        .filter(|k| !matches!(k, crate::wire::AckSyndrome::Ack { .. }))
        .collect()
}

#[test]
fn a_write_into_revoked_memory_is_nakked_not_acknowledged() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let r = revoked_region(&mut p.b.mrs, REVOKED_IOVA, remote_access());
    let sg = [sge(&p.a, 0, 3000)];
    let write = WrOpcode::RdmaWrite {
        remote_addr: REVOKED_IOVA,
        rkey: r.mr.rkey,
    };
    assert_eq!(
        post_signaled(&mut p, 7, &sg, write),
        (7, WcStatus::RemAccessErr)
    );
    assert_eq!(
        naks_from_b(&p),
        vec![crate::wire::AckSyndrome::Nak(
            crate::wire::NakCode::RemoteAccessError
        )]
    );
    assert!(
        !p.log.iter().any(|s| !s.to_b
            && s.aeth
                .is_some_and(|a| matches!(a.kind(), crate::wire::AckSyndrome::Ack { .. }))),
        "no packet of the WRITE was acknowledged"
    );
    assert_eq!(p.b.qp.state(), QpState::Err);
    assert_eq!(p.b.qp.counters.get("mem_access_err"), Some(1));
}

#[test]
fn a_read_of_revoked_memory_is_nakked_and_sends_no_response_data() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let r = revoked_region(&mut p.b.mrs, REVOKED_IOVA, remote_access());
    let sg = [sge(&p.a, 0, 3000)];
    let read = WrOpcode::RdmaRead {
        remote_addr: REVOKED_IOVA,
        rkey: r.mr.rkey,
    };
    assert_eq!(
        post_signaled(&mut p, 8, &sg, read),
        (8, WcStatus::RemAccessErr)
    );
    assert!(
        !p.log.iter().any(|s| !s.to_b
            && s.opcode
                .info()
                .is_some_and(|i| i.kind == crate::wire::OpKind::ReadResponse)),
        "no READ response carried bytes that were never read"
    );
    // The NAK names the READ request's PSN, so that the requester fails the READ instead of
    // taking it for a lost response and retrying.
    let nak = p.log.iter().find(|s| !s.to_b).unwrap();
    let read = p.log.iter().find(|s| s.to_b).unwrap();
    assert_eq!(nak.psn, read.psn);
    assert_eq!(p.b.qp.state(), QpState::Err);
    assert_eq!(p.b.qp.counters.get("mem_access_err"), Some(1));
}

#[test]
fn a_send_into_a_revoked_receive_buffer_is_nakked_and_fails_the_receive() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let r = revoked_region(&mut p.b.mrs, REVOKED_IOVA, remote_access());
    post_recv_b(&mut p, 9, &revoked_sge(&r, 4096));
    let sg = [sge(&p.a, 0, 100)];
    assert_eq!(
        post_signaled(&mut p, 10, &sg, WrOpcode::Send),
        (10, WcStatus::RemOpErr)
    );
    let rwc = &p.b.recv_wcs[0];
    assert_eq!((rwc.wr_id, rwc.status), (9, WcStatus::LocQpOpErr));
    assert_eq!(p.b.qp.state(), QpState::Err);
}

#[test]
fn a_read_response_into_revoked_local_memory_fails_the_read() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let r = revoked_region(&mut p.a.mrs, REVOKED_IOVA, remote_access());
    let read = WrOpcode::RdmaRead {
        remote_addr: IOVA,
        rkey: p.b.mr.rkey,
    };
    assert_eq!(
        post_signaled(&mut p, 11, &revoked_sge(&r, 100), read),
        (11, WcStatus::LocProtErr)
    );
    assert_eq!(p.a.qp.state(), QpState::Err);
}

#[test]
fn a_send_from_revoked_local_memory_is_not_sent() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let r = revoked_region(&mut p.a.mrs, REVOKED_IOVA, remote_access());
    let rsg = [sge(&p.b, 0, 4096)];
    post_recv_b(&mut p, 13, &rsg);
    assert_eq!(
        post_signaled(&mut p, 12, &revoked_sge(&r, 100), WrOpcode::Send),
        (12, WcStatus::LocProtErr)
    );
    assert!(p.log.iter().all(|s| !s.to_b), "nothing was sent");
    assert!(p.b.recv_wcs.is_empty());
}

#[test]
fn uc_drops_a_write_into_revoked_memory_without_completing_it() {
    use super::node::*;
    let mut a = node(0x21, "192.0.2.1", QpType::Uc, None);
    let mut b = node(0x22, "192.0.2.2", QpType::Uc, None);
    connect_uc(&mut a, &b, Mtu::Mtu256, AccessFlags::REMOTE_WRITE);
    connect_uc(&mut b, &a, Mtu::Mtu256, AccessFlags::REMOTE_WRITE);
    let r = revoked_region(&mut b.mrs, REVOKED_IOVA, remote_access());
    b.post_recv(1, 0, 64);
    a.post(
        2,
        WrOpcode::RdmaWriteWithImm {
            remote_addr: REVOKED_IOVA,
            rkey: r.mr.rkey,
            imm: 5,
        },
        0,
        600,
    )
    .unwrap();
    let seen = transfer(&mut a, &mut b, &[]);
    assert_eq!(seen.len(), 3);
    assert!(b.recv_wcs.is_empty(), "the message was not completed");
    assert_eq!(b.qp.recv_queue_len(), 1, "its receive WQE is still posted");
    assert_eq!(count(&b, "mem_access_err"), 1);
    assert_eq!(count(&b, "dropped_msg_pkts"), 3);
}
