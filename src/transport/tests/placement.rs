//! ATOMIC WRITE and FLUSH (IBTA 1.5 memory placement extensions) between two RC QPs:
//! what lands, what goes on the wire (spec-notes/memory-placement.md), how a lost response or
//! a lost request is recovered, and the refusals the responder answers with a NAK.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use super::*;
use crate::wire::{feth, AckSyndrome, FethRepr, Opcode};

/// A second region on B, at its own IOVA, with the FLUSH rights under test.
const FLUSH_IOVA: u64 = 0x7E00_0000_0000;
const FLUSH_LEN: usize = 1 << 16;

fn is(op: Opcode) -> impl Fn(&PacketRepr) -> bool {
    move |p| p.bth.opcode == op
}

fn count(s: &Side, name: &str) -> u64 {
    s.qp.counters.get(name).unwrap()
}

fn sent(p: &Pair, to_b: bool, op: Opcode) -> Vec<Sent> {
    p.log
        .iter()
        .filter(|s| s.to_b == to_b && s.opcode == op)
        .cloned()
        .collect()
}

fn wcs(s: &Side) -> Vec<(u64, WcStatus, WcOpcode)> {
    s.send_wcs
        .iter()
        .map(|w| (w.wr_id, w.status, w.opcode))
        .collect()
}

/// Posts `opcode` without SGEs on A (`from_a`) or B.
fn post(p: &mut Pair, from_a: bool, wr_id: u64, opcode: WrOpcode) {
    let s = if from_a { &mut p.a } else { &mut p.b };
    let wr = SendWr {
        wr_id,
        sg_list: &[],
        opcode,
        send_flags: SendFlags::SIGNALED,
    };
    s.qp.post_send(&wr, &s.mrs).unwrap();
}

fn atomic_write(rkey: u32, offset: u64, data: [u8; 8]) -> WrOpcode {
    WrOpcode::AtomicWrite {
        remote_addr: IOVA + offset,
        rkey,
        data,
    }
}

/// Registers on B a region with `access` and gives B's QP the QP rights `qp_access`; returns
/// the region's rkey.
fn flush_target(p: &mut Pair, access: AccessFlags, qp_access: AccessFlags) -> u32 {
    let mr =
        p.b.mrs
            .register(
                1,
                Arc::new(SharedBytes::new(FLUSH_LEN)),
                FLUSH_IOVA,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | access,
            )
            .unwrap();
    let attr = QpAttr {
        qp_access_flags: AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC
            | qp_access,
        ..Default::default()
    };
    p.b.qp.modify(&attr, QpAttrMask::ACCESS_FLAGS).unwrap();
    mr.rkey
}

fn flush(rkey: u32, offset: u64, len: u32, placement: u8, selectivity: u8) -> WrOpcode {
    WrOpcode::Flush {
        remote_addr: FLUSH_IOVA + offset,
        rkey,
        len,
        placement,
        selectivity,
    }
}

#[test]
fn atomic_write_lands_in_both_directions_and_is_answered_by_an_empty_read_response() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let (ka, kb) = (p.a.mr.rkey, p.b.mr.rkey);
    let to_b = *b"\x01\x02\x03\x04\x05\x06\x07\x08";
    let to_a = 0xDEAD_BEEF_0BAD_F00Du64.to_ne_bytes();
    post(&mut p, true, 1, atomic_write(kb, 0x40, to_b));
    post(&mut p, false, 2, atomic_write(ka, 0x80, to_a));
    p.drive();
    assert_eq!(p.b.mr.storage.to_vec(0x40, 8).unwrap(), to_b.to_vec());
    assert_eq!(p.a.mr.storage.to_vec(0x80, 8).unwrap(), to_a.to_vec());
    // Nothing else was touched.
    assert_eq!(p.b.mr.storage.to_vec(0x38, 8).unwrap(), vec![0; 8]);
    assert_eq!(p.b.mr.storage.to_vec(0x48, 8).unwrap(), vec![0; 8]);
    assert_eq!(
        wcs(&p.a),
        vec![(1, WcStatus::Success, WcOpcode::AtomicWrite)]
    );
    assert_eq!(
        wcs(&p.b),
        vec![(2, WcStatus::Success, WcOpcode::AtomicWrite)]
    );
    // On the wire (rxe): the request is RC ATOMIC WRITE with a RETH of length 8, the answer an
    // RDMA READ RESPONSE ONLY carrying an ACK AETH, at the request's PSN.
    for to_b in [true, false] {
        let req = sent(&p, to_b, Opcode::RC_ATOMIC_WRITE);
        assert_eq!(req.len(), 1);
        let reth = req[0].reth.expect("a RETH");
        assert_eq!(reth.len, 8);
        assert!(req[0].ack_req);
        let resp = sent(&p, !to_b, Opcode::RC_RDMA_READ_RESPONSE_ONLY);
        assert_eq!(resp.len(), 1);
        assert_eq!(resp[0].psn, req[0].psn);
        assert!(matches!(
            resp[0].aeth.map(|a| a.kind()),
            Some(AckSyndrome::Ack { .. })
        ));
        assert!(sent(&p, !to_b, Opcode::RC_ACK).is_empty());
    }
}

#[test]
fn atomic_write_is_ordered_after_earlier_writes_and_before_later_reads() {
    let mut p = Pair::new(Mtu::Mtu256);
    let kb = p.b.mr.rkey;
    let data = pattern(9, 1000);
    p.a.mr.storage.write(0, &data).unwrap();
    // WRITE 1000 bytes over 0x1000.., then ATOMIC WRITE over the middle of it, then READ it
    // all back: the READ sees the WRITE's bytes with the atomic word on top.
    post_send(
        &mut p,
        1,
        WrOpcode::RdmaWrite {
            remote_addr: IOVA + 0x1000,
            rkey: kb,
        },
        0,
        1000,
    );
    let word = 0x1122_3344_5566_7788u64.to_ne_bytes();
    post(&mut p, true, 2, atomic_write(kb, 0x1000 + 504, word));
    post_send(
        &mut p,
        3,
        WrOpcode::RdmaRead {
            remote_addr: IOVA + 0x1000,
            rkey: kb,
        },
        0x8000,
        1000,
    );
    p.drive();
    let mut want = data.clone();
    want[504..512].copy_from_slice(&word);
    assert_eq!(p.a.mr.storage.to_vec(0x8000, 1000).unwrap(), want);
    assert_eq!(
        wcs(&p.a),
        vec![
            (1, WcStatus::Success, WcOpcode::RdmaWrite),
            (2, WcStatus::Success, WcOpcode::AtomicWrite),
            (3, WcStatus::Success, WcOpcode::RdmaRead)
        ]
    );
}

#[test]
fn lost_atomic_write_response_is_replayed_not_executed_again() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let kb = p.b.mr.rkey;
    p.fault(
        false,
        Action::Drop,
        1,
        is(Opcode::RC_RDMA_READ_RESPONSE_ONLY),
    );
    post(&mut p, true, 1, atomic_write(kb, 0x100, 7u64.to_ne_bytes()));
    // Long enough for the request to execute, well short of the 67 ms retransmission timer.
    p.run_until(Duration::from_millis(1));
    assert_eq!(p.b.mr.storage.load_u64(0x100).unwrap(), 7);
    // B's application changes the word meanwhile: a re-execution of the retried request
    // would put 7 back.
    p.b.mr.storage.store_u64(0x100, 99).unwrap();
    p.drive();
    assert!(p.faults_spent());
    assert_eq!(
        wcs(&p.a),
        vec![(1, WcStatus::Success, WcOpcode::AtomicWrite)]
    );
    assert_eq!(p.b.mr.storage.load_u64(0x100).unwrap(), 99, "executed once");
    assert_eq!(count(&p.a, "timeouts"), 1);
    assert_eq!(sent(&p, true, Opcode::RC_ATOMIC_WRITE).len(), 2);
    assert_eq!(count(&p.b, "duplicate_request"), 1);
    assert_eq!(sent(&p, false, Opcode::RC_RDMA_READ_RESPONSE_ONLY).len(), 2);
}

#[test]
fn lost_atomic_write_request_is_retransmitted_and_executes_once() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let kb = p.b.mr.rkey;
    p.fault(true, Action::Drop, 1, is(Opcode::RC_ATOMIC_WRITE));
    post(&mut p, true, 1, atomic_write(kb, 0x100, 5u64.to_ne_bytes()));
    p.drive();
    assert!(p.faults_spent());
    assert_eq!(
        wcs(&p.a),
        vec![(1, WcStatus::Success, WcOpcode::AtomicWrite)]
    );
    assert_eq!(p.b.mr.storage.load_u64(0x100).unwrap(), 5);
    assert_eq!(count(&p.a, "timeouts"), 1);
    assert_eq!(count(&p.b, "duplicate_request"), 0);
}

#[test]
fn a_later_ack_completes_an_atomic_write_whose_response_was_lost() {
    // rxe_comp.c check_psn: ATOMIC WRITE is not in WR_ATOMIC_OR_READ_MASK, so an ACK beyond
    // it completes it as it would a WRITE: no retry.
    let mut p = Pair::new(Mtu::Mtu1024);
    let kb = p.b.mr.rkey;
    p.fault(
        false,
        Action::Drop,
        1,
        is(Opcode::RC_RDMA_READ_RESPONSE_ONLY),
    );
    post(&mut p, true, 1, atomic_write(kb, 0x100, 3u64.to_ne_bytes()));
    post_send(
        &mut p,
        2,
        WrOpcode::RdmaWrite {
            remote_addr: IOVA + 0x200,
            rkey: kb,
        },
        0,
        16,
    );
    p.drive();
    assert!(p.faults_spent());
    assert_eq!(
        wcs(&p.a),
        vec![
            (1, WcStatus::Success, WcOpcode::AtomicWrite),
            (2, WcStatus::Success, WcOpcode::RdmaWrite)
        ]
    );
    assert_eq!(count(&p.a, "timeouts"), 0);
    assert_eq!(count(&p.b, "duplicate_request"), 0);
}

#[test]
fn atomic_write_refusals_are_naks_with_rxe_codes() {
    // (what goes wrong, the WR, the status A's completion gets)
    type Case = (&'static str, fn(&Pair) -> WrOpcode, WcStatus);
    let cases: [Case; 3] = [
        (
            "misaligned address",
            |p| atomic_write(p.b.mr.rkey, 0x104, [1; 8]),
            WcStatus::RemInvReqErr,
        ),
        (
            "past the region's end",
            |p| atomic_write(p.b.mr.rkey, MR_LEN as u64 - 4, [1; 8]),
            WcStatus::RemAccessErr,
        ),
        (
            "unknown rkey",
            |p| atomic_write(p.b.mr.rkey ^ 0x100, 0x100, [1; 8]),
            WcStatus::RemAccessErr,
        ),
    ];
    for (what, op, status) in cases {
        let mut p = Pair::new(Mtu::Mtu1024);
        let op = op(&p);
        post(&mut p, true, 1, op);
        p.drive();
        assert_eq!(
            wcs(&p.a),
            vec![(1, status, WcOpcode::AtomicWrite)],
            "{what}"
        );
        assert_eq!(p.a.qp.state(), QpState::Err, "{what}");
        assert_eq!(p.b.qp.state(), QpState::Err, "{what}");
        assert_eq!(count(&p.b, "send_nak"), 1, "{what}");
        assert_eq!(
            p.b.mr.storage.to_vec(0x100, 8).unwrap(),
            vec![0; 8],
            "{what}"
        );
    }
}

#[test]
fn atomic_write_needs_remote_write_on_the_qp_and_the_region() {
    // The QP without REMOTE_WRITE: invalid request (check_op_valid).
    let mut p = Pair::new(Mtu::Mtu1024);
    let attr = QpAttr {
        qp_access_flags: AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
        ..Default::default()
    };
    p.b.qp.modify(&attr, QpAttrMask::ACCESS_FLAGS).unwrap();
    let kb = p.b.mr.rkey;
    post(&mut p, true, 1, atomic_write(kb, 0x100, [2; 8]));
    p.drive();
    assert_eq!(
        wcs(&p.a),
        vec![(1, WcStatus::RemInvReqErr, WcOpcode::AtomicWrite)]
    );
    // The region without REMOTE_WRITE (REMOTE_ATOMIC is not enough): remote access error.
    let mut p = Pair::new(Mtu::Mtu1024);
    let mr =
        p.b.mrs
            .register(
                1,
                Arc::new(SharedBytes::new(4096)),
                FLUSH_IOVA,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC | AccessFlags::REMOTE_READ,
            )
            .unwrap();
    post(
        &mut p,
        true,
        1,
        WrOpcode::AtomicWrite {
            remote_addr: FLUSH_IOVA,
            rkey: mr.rkey,
            data: [2; 8],
        },
    );
    p.drive();
    assert_eq!(
        wcs(&p.a),
        vec![(1, WcStatus::RemAccessErr, WcOpcode::AtomicWrite)]
    );
    assert_eq!(mr.storage.to_vec(0, 8).unwrap(), vec![0; 8]);
}

#[test]
fn flush_after_writes_carries_its_feth_and_completes() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let kf = flush_target(&mut p, AccessFlags::FLUSH_GLOBAL, AccessFlags::FLUSH_GLOBAL);
    let seen: Rc<RefCell<Vec<(FethRepr, u32)>>> = Rc::default();
    let log = Rc::clone(&seen);
    p.fault(true, Action::Drop, 1, move |pkt| {
        if let (Some(f), Some(r)) = (pkt.ext.feth, pkt.ext.reth) {
            log.borrow_mut().push((f, r.len));
        }
        false
    });
    let data = pattern(3, 3000);
    p.a.mr.storage.write(0, &data).unwrap();
    post_send(
        &mut p,
        1,
        WrOpcode::RdmaWrite {
            remote_addr: FLUSH_IOVA + 0x100,
            rkey: kf,
        },
        0,
        3000,
    );
    post(
        &mut p,
        true,
        2,
        flush(
            kf,
            0x100,
            3000,
            feth::PLACEMENT_GLOBAL,
            feth::SELECTIVITY_RANGE,
        ),
    );
    post(
        &mut p,
        true,
        3,
        flush(kf, 0, 0, feth::PLACEMENT_GLOBAL, feth::SELECTIVITY_MR),
    );
    p.drive();
    assert_eq!(
        wcs(&p.a),
        vec![
            (1, WcStatus::Success, WcOpcode::RdmaWrite),
            (2, WcStatus::Success, WcOpcode::Flush),
            (3, WcStatus::Success, WcOpcode::Flush)
        ]
    );
    let flushes = sent(&p, true, Opcode::RC_FLUSH);
    assert_eq!(flushes.len(), 2);
    // One PSN each, whatever the length: the second follows the first directly.
    assert_eq!(flushes[1].psn, flushes[0].psn.next());
    assert_eq!(
        *seen.borrow(),
        vec![
            (
                FethRepr {
                    selectivity: feth::SELECTIVITY_RANGE,
                    placement: feth::PLACEMENT_GLOBAL
                },
                3000
            ),
            (
                FethRepr {
                    selectivity: feth::SELECTIVITY_MR,
                    placement: feth::PLACEMENT_GLOBAL
                },
                0
            )
        ]
    );
    let resp = sent(&p, false, Opcode::RC_RDMA_READ_RESPONSE_ONLY);
    assert_eq!(
        resp.iter().map(|s| s.psn).collect::<Vec<_>>(),
        vec![flushes[0].psn, flushes[1].psn]
    );
}

#[test]
fn flush_refusals_follow_rxe_check_chain() {
    // (what, region rights, QP rights, placement, selectivity, range offset, status)
    type Case = (
        &'static str,
        AccessFlags,
        AccessFlags,
        u8,
        u8,
        u64,
        WcStatus,
    );
    let g = AccessFlags::FLUSH_GLOBAL;
    let none = AccessFlags::EMPTY;
    let cases: [Case; 5] = [
        (
            "QP lacks FLUSH_GLOBAL",
            g,
            none,
            feth::PLACEMENT_GLOBAL,
            feth::SELECTIVITY_RANGE,
            0,
            WcStatus::RemInvReqErr,
        ),
        (
            "QP lacks FLUSH_PERSISTENT",
            g,
            g,
            feth::PLACEMENT_PERSISTENT,
            feth::SELECTIVITY_RANGE,
            0,
            WcStatus::RemInvReqErr,
        ),
        (
            "region lacks FLUSH_GLOBAL",
            none,
            g,
            feth::PLACEMENT_GLOBAL,
            feth::SELECTIVITY_RANGE,
            0,
            WcStatus::RemAccessErr,
        ),
        (
            "region lacks FLUSH_GLOBAL, whole-region flush",
            none,
            g,
            feth::PLACEMENT_GLOBAL,
            feth::SELECTIVITY_MR,
            0,
            WcStatus::RemAccessErr,
        ),
        (
            "range past the region's end",
            g,
            g,
            feth::PLACEMENT_GLOBAL,
            feth::SELECTIVITY_RANGE,
            FLUSH_LEN as u64 - 100,
            WcStatus::RemAccessErr,
        ),
    ];
    for (what, mr_rights, qp_rights, placement, sel, off, status) in cases {
        let mut p = Pair::new(Mtu::Mtu1024);
        let kf = flush_target(&mut p, mr_rights, qp_rights);
        post(&mut p, true, 1, flush(kf, off, 4096, placement, sel));
        p.drive();
        assert_eq!(wcs(&p.a), vec![(1, status, WcOpcode::Flush)], "{what}");
        assert_eq!(p.b.qp.state(), QpState::Err, "{what}");
        assert_eq!(count(&p.b, "send_nak"), 1, "{what}");
    }
}

#[test]
fn duplicated_flush_is_answered_again() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let kf = flush_target(&mut p, AccessFlags::FLUSH_GLOBAL, AccessFlags::FLUSH_GLOBAL);
    p.fault(true, Action::Duplicate, 1, is(Opcode::RC_FLUSH));
    post(
        &mut p,
        true,
        1,
        flush(kf, 0, 64, feth::PLACEMENT_GLOBAL, feth::SELECTIVITY_RANGE),
    );
    p.drive();
    assert_eq!(wcs(&p.a), vec![(1, WcStatus::Success, WcOpcode::Flush)]);
    assert_eq!(count(&p.b, "duplicate_request"), 1);
    assert_eq!(sent(&p, false, Opcode::RC_RDMA_READ_RESPONSE_ONLY).len(), 2);
    assert_eq!(count(&p.a, "stale_resp_pkts"), 1);
    assert_eq!(p.a.qp.state(), QpState::Rts);
}

#[test]
fn a_read_response_with_payload_for_an_atomic_write_is_a_bad_response() {
    // A responder that answers the ATOMIC WRITE with data is not answering it (rxe
    // check_ack: COMPST_ERROR).
    let mut p = Pair::new(Mtu::Mtu1024);
    let kb = p.b.mr.rkey;
    post(&mut p, true, 1, atomic_write(kb, 0x100, [4; 8]));
    // A drives itself: send the request, then deliver a forged response.
    let mut buf = vec![0u8; MAX_PACKET];
    let ep = Endpoint::new(p.a.addr, 4791, Arc::clone(&p.a.qp.counters));
    let t = ep.poll_transmit(p.now, &mut p.a.qp, &mut buf).unwrap();
    let req = PacketRepr::parse(&buf[..t.len]).unwrap();
    assert_eq!(req.bth.opcode, Opcode::RC_ATOMIC_WRITE);
    let forged = PacketRepr {
        bth: crate::wire::BthRepr {
            opcode: Opcode::RC_RDMA_READ_RESPONSE_ONLY,
            dest_qp: p.a.qp.qpn(),
            psn: req.bth.psn,
            ..Default::default()
        },
        ext: crate::wire::ExtHeaders {
            aeth: Some(crate::wire::AethRepr::ack(1)),
            ..Default::default()
        },
        payload: &[9; 8],
    };
    let info = forged.bth.opcode.info().unwrap();
    p.a.qp.completer_handle(p.now, &forged, info);
    p.collect();
    assert_eq!(
        wcs(&p.a),
        vec![(1, WcStatus::BadRespErr, WcOpcode::AtomicWrite)]
    );
    assert_eq!(p.a.qp.state(), QpState::Err);
}

/// Posts `opcode` on A with `flags` (SIGNALED added) and no SGEs.
fn post_flags(p: &mut Pair, wr_id: u64, opcode: WrOpcode, flags: SendFlags) {
    let wr = SendWr {
        wr_id,
        sg_list: &[],
        opcode,
        send_flags: flags | SendFlags::SIGNALED,
    };
    p.a.qp.post_send(&wr, &p.a.mrs).unwrap();
}

/// Index in the log of the first packet `op` sent towards B (`to_b`) or A.
fn first_index(p: &Pair, to_b: bool, op: Opcode) -> usize {
    p.log
        .iter()
        .position(|s| s.to_b == to_b && s.opcode == op)
        .unwrap_or_else(|| panic!("{op:?} sent"))
}

#[test]
fn a_fence_waits_for_an_atomic_write_but_not_for_a_flush() {
    // rxe: ATOMIC WRITE takes an rd_atomic credit (rxe_requester gates RXE_ATOMIC_WRITE_MASK
    // with check_init_depth) and a FENCE waits until every credit is back; FLUSH takes none.
    let mut p = Pair::new(Mtu::Mtu1024);
    let kb = p.b.mr.rkey;
    post_flags(&mut p, 1, atomic_write(kb, 0x100, [1; 8]), SendFlags::EMPTY);
    post_flags(&mut p, 2, WrOpcode::Send, SendFlags::FENCE);
    post_recv(&mut p, 9, 0, 64);
    p.drive();
    assert_eq!(p.a.send_wcs.len(), 2);
    assert!(
        first_index(&p, false, Opcode::RC_RDMA_READ_RESPONSE_ONLY)
            < first_index(&p, true, Opcode::RC_SEND_ONLY),
        "the fenced SEND left after the ATOMIC WRITE's response"
    );

    let mut p = Pair::new(Mtu::Mtu1024);
    let kf = flush_target(&mut p, AccessFlags::FLUSH_GLOBAL, AccessFlags::FLUSH_GLOBAL);
    post_flags(
        &mut p,
        1,
        flush(kf, 0, 64, feth::PLACEMENT_GLOBAL, feth::SELECTIVITY_RANGE),
        SendFlags::EMPTY,
    );
    post_flags(&mut p, 2, WrOpcode::Send, SendFlags::FENCE);
    post_recv(&mut p, 9, 0, 64);
    p.drive();
    assert_eq!(p.a.send_wcs.len(), 2);
    assert!(
        first_index(&p, true, Opcode::RC_SEND_ONLY)
            < first_index(&p, false, Opcode::RC_RDMA_READ_RESPONSE_ONLY),
        "the fenced SEND did not wait for the FLUSH"
    );
}

#[test]
fn atomic_writes_in_flight_are_bounded_by_max_rd_atomic() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let kb = p.b.mr.rkey;
    for i in 0..8u64 {
        post(
            &mut p,
            true,
            i,
            atomic_write(kb, 8 * i, (i + 1).to_ne_bytes()),
        );
    }
    // Before any response is back, A sends only max_rd_atomic (4) of them.
    let mut buf = vec![0u8; MAX_PACKET];
    let ep = Endpoint::new(p.a.addr, 4791, Arc::clone(&p.a.qp.counters));
    let mut sent_now = 0;
    while ep.poll_transmit(p.now, &mut p.a.qp, &mut buf).is_some() {
        sent_now += 1;
        assert!(sent_now <= 8, "bounded");
    }
    assert_eq!(sent_now, 4);
    // Those four are lost; the retry and the rest then go through.
    p.drive();
    assert_eq!(p.a.send_wcs.len(), 8);
    assert!(p.a.send_wcs.iter().all(|w| w.status == WcStatus::Success));
    for i in 0..8u64 {
        assert_eq!(p.b.mr.storage.load_u64(8 * i).unwrap(), i + 1);
    }
}

/// Hands B's responder a crafted request at the PSN it expects and returns its answer: the
/// opcode and the AETH's verdict.
fn answer(
    p: &mut Pair,
    opcode: Opcode,
    reth: crate::wire::RethRepr,
    feth: Option<FethRepr>,
    payload: &[u8],
) -> (Opcode, AckSyndrome) {
    let pkt = PacketRepr {
        bth: crate::wire::BthRepr {
            opcode,
            dest_qp: p.b.qp.qpn(),
            psn: p.b.qp.resp.psn.value(),
            ack_req: true,
            ..Default::default()
        },
        ext: crate::wire::ExtHeaders {
            reth: Some(reth),
            feth,
            ..Default::default()
        },
        payload,
    };
    let info = opcode.info().unwrap();
    p.b.qp.responder_handle(&pkt, info, &p.b.mrs, None);
    let mut buf = vec![0u8; MAX_PACKET];
    let ep = Endpoint::new(p.b.addr, 4791, Arc::clone(&p.b.qp.counters));
    let t = ep
        .poll_transmit(p.now, &mut p.b.qp, &mut buf)
        .expect("an answer");
    let r = PacketRepr::parse(&buf[..t.len]).unwrap();
    (r.bth.opcode, r.ext.aeth.expect("an AETH").kind())
}

#[test]
fn crafted_requests_get_the_answers_rxe_gives() {
    use crate::wire::{NakCode, RethRepr};
    let invalid = (Opcode::RC_ACK, AckSyndrome::Nak(NakCode::InvalidRequest));
    let is_ok = |a: (Opcode, AckSyndrome)| {
        a.0 == Opcode::RC_RDMA_READ_RESPONSE_ONLY && matches!(a.1, AckSyndrome::Ack { .. })
    };
    let reth = |p: &Pair, off: u64, len: u32| RethRepr {
        va: IOVA + off,
        rkey: p.b.mr.rkey,
        len,
    };
    // ATOMIC WRITE whose payload is shorter than its RETH (rxe RESPST_ERR_LENGTH), or whose
    // RETH and payload agree on another length than 8: invalid request, nothing written.
    for (len, payload) in [
        (8u32, &[7u8; 4][..]),
        (16, &[7u8; 16][..]),
        (4, &[7u8; 4][..]),
    ] {
        let mut p = Pair::new(Mtu::Mtu1024);
        let r = reth(&p, 0x100, len);
        assert_eq!(
            answer(&mut p, Opcode::RC_ATOMIC_WRITE, r, None, payload),
            invalid,
            "RETH {len}, payload {}",
            payload.len()
        );
        assert_eq!(p.b.mr.storage.to_vec(0x100, 16).unwrap(), vec![0; 16]);
        assert_eq!(p.b.qp.state(), QpState::Err);
    }
    // A well-formed one is answered by an empty READ RESPONSE ONLY.
    let mut p = Pair::new(Mtu::Mtu1024);
    let r = reth(&p, 0x100, 8);
    assert!(is_ok(answer(
        &mut p,
        Opcode::RC_ATOMIC_WRITE,
        r,
        None,
        &[7; 8]
    )));
    assert_eq!(p.b.mr.storage.to_vec(0x100, 8).unwrap(), vec![7; 8]);

    // Responder resources: an ATOMIC WRITE needs max_dest_rd_atomic > 0, a FLUSH does not
    // (rxe check_resource).
    // (max_dest_rd_atomic is an RTR attribute: set on the connected QP as RTR would have.)
    let mut p = Pair::new(Mtu::Mtu1024);
    p.b.qp.attr.max_dest_rd_atomic = 0;
    let r = reth(&p, 0x100, 8);
    assert_eq!(
        answer(&mut p, Opcode::RC_ATOMIC_WRITE, r, None, &[7; 8]),
        invalid
    );
    let mut p = Pair::new(Mtu::Mtu1024);
    let kf = flush_target(&mut p, AccessFlags::FLUSH_GLOBAL, AccessFlags::FLUSH_GLOBAL);
    p.b.qp.attr.max_dest_rd_atomic = 0;
    let global = Some(FethRepr {
        selectivity: feth::SELECTIVITY_RANGE,
        placement: feth::PLACEMENT_GLOBAL,
    });
    let r = RethRepr {
        va: FLUSH_IOVA,
        rkey: kf,
        len: 64,
    };
    assert!(is_ok(answer(&mut p, Opcode::RC_FLUSH, r, global, &[])));
    // A FLUSH announcing more than 2^31 bytes: invalid request (check_length, every RETH).
    let r = RethRepr {
        va: FLUSH_IOVA,
        rkey: kf,
        len: (1 << 31) + 1,
    };
    assert_eq!(answer(&mut p, Opcode::RC_FLUSH, r, global, &[]), invalid);
}

#[test]
fn requests_are_bit_exact_with_rxe_layout() {
    // rxe_opcode.c: RC ATOMIC WRITE is BTH, RETH, 8 bytes of payload; RC FLUSH is BTH, FETH,
    // RETH and nothing else. A's first PSN is 0xFF_FFF0 and B's QPN 0x12 (the test pair).
    let mut p = Pair::new(Mtu::Mtu1024);
    let kb = p.b.mr.rkey;
    let kf = flush_target(&mut p, AccessFlags::FLUSH_GLOBAL, AccessFlags::FLUSH_GLOBAL);
    post(
        &mut p,
        true,
        1,
        atomic_write(kb, 0x40, *b"\x11\x22\x33\x44\x55\x66\x77\x88"),
    );
    post(
        &mut p,
        true,
        2,
        flush(
            kf,
            0x80,
            0x1234,
            feth::PLACEMENT_GLOBAL,
            feth::SELECTIVITY_MR,
        ),
    );
    let mut buf = vec![0u8; MAX_PACKET];
    let ep = Endpoint::new(p.a.addr, 4791, Arc::clone(&p.a.qp.counters));
    let k = |key: u32| key.to_be_bytes();

    let t = ep.poll_transmit(p.now, &mut p.a.qp, &mut buf).unwrap();
    let mut want = vec![
        0x1D, 0x00, 0xFF, 0xFF, // opcode, SE/M/pad/TVer, P_Key
        0x00, 0x00, 0x00, 0x12, // reserved, DestQP
        0x80, 0xFF, 0xFF, 0xF0, // AckReq, PSN
        0x00, 0x00, 0x7F, 0x00, 0x00, 0x00, 0x00, 0x40, // RETH VA
    ];
    want.extend_from_slice(&k(kb));
    want.extend_from_slice(&[0, 0, 0, 8]); // RETH DMA length
    want.extend_from_slice(b"\x11\x22\x33\x44\x55\x66\x77\x88");
    assert_eq!(t.len, want.len() + 4, "headers, payload and the ICRC");
    assert_eq!(&buf[..want.len()], &want[..]);

    let t = ep.poll_transmit(p.now, &mut p.a.qp, &mut buf).unwrap();
    let mut want = vec![
        0x1C, 0x00, 0xFF, 0xFF, // opcode, SE/M/pad/TVer, P_Key
        0x00, 0x00, 0x00, 0x12, // reserved, DestQP
        0x80, 0xFF, 0xFF, 0xF1, // AckReq, PSN (one PSN after the ATOMIC WRITE)
        0x00, 0x00, 0x00, 0x11, // FETH: selectivity 1 (region), placement 1 (global)
        0x00, 0x00, 0x7E, 0x00, 0x00, 0x00, 0x00, 0x80, // RETH VA
    ];
    want.extend_from_slice(&k(kf));
    want.extend_from_slice(&[0, 0, 0x12, 0x34]); // RETH DMA length
    assert_eq!(t.len, want.len() + 4, "no payload (oA19-2)");
    assert_eq!(&buf[..want.len()], &want[..]);
}
