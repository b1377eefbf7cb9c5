//! One test per recovery rule (spec-notes/rc-transport.md rules 6, 19-28): a chosen packet is
//! lost or duplicated, and the test checks both the outcome (data, completions) and the
//! mechanism that recovered it (a sequence NAK, a timeout, a replay), so that a recovery by
//! the wrong path fails the test too.

use std::time::Duration;

use super::*;
use crate::wire::{AckSyndrome, NakCode, Opcode};

const MTU: u32 = 1024;
/// Three packets at MTU 1024: FIRST, MIDDLE, LAST.
const LEN: u32 = 3000;

fn is(op: Opcode) -> impl Fn(&PacketRepr) -> bool {
    move |p| p.bth.opcode == op
}

fn count(s: &Side, name: &str) -> u64 {
    s.qp.counters.get(name).unwrap()
}

fn write_op(p: &Pair, offset: u64) -> WrOpcode {
    WrOpcode::RdmaWrite {
        remote_addr: IOVA + offset,
        rkey: p.b.mr.rkey,
    }
}

fn read_op(p: &Pair, offset: u64) -> WrOpcode {
    WrOpcode::RdmaRead {
        remote_addr: IOVA + offset,
        rkey: p.b.mr.rkey,
    }
}

fn statuses(s: &Side) -> Vec<(u64, WcStatus)> {
    s.send_wcs.iter().map(|w| (w.wr_id, w.status)).collect()
}

/// Requests A sent with `op`, in order.
fn sent(p: &Pair, to_b: bool, op: Opcode) -> Vec<Sent> {
    p.log
        .iter()
        .filter(|s| s.to_b == to_b && s.opcode == op)
        .cloned()
        .collect()
}

/// Sequence NAKs B sent, by PSN.
fn seq_naks(p: &Pair) -> Vec<Psn> {
    p.log
        .iter()
        .filter(|s| {
            !s.to_b
                && s.aeth
                    .is_some_and(|a| a.kind() == AckSyndrome::Nak(NakCode::PsnSequenceError))
        })
        .map(|s| s.psn)
        .collect()
}

/// How a lost packet must be detected.
#[derive(Debug, PartialEq)]
enum Detected {
    /// Later packets arrive: the responder NAKs the gap once.
    SequenceNak,
    /// Nothing follows it: only the retransmission timer finds the loss.
    Timeout,
}

fn expect_detection(p: &Pair, how: Detected, what: &str) {
    match how {
        Detected::SequenceNak => {
            assert_eq!(count(&p.b, "send_nak"), 1, "{what}: one NAK per gap");
            assert_eq!(count(&p.a, "rcvd_seq_err"), 1, "{what}");
            assert_eq!(count(&p.a, "timeouts"), 0, "{what}: no timeout needed");
        }
        Detected::Timeout => {
            assert_eq!(count(&p.b, "send_nak"), 0, "{what}");
            assert_eq!(count(&p.a, "timeouts"), 1, "{what}");
        }
    }
}

#[test]
fn lost_first_middle_or_last_packet_of_a_send() {
    for (op, how) in [
        (Opcode::RC_SEND_FIRST, Detected::SequenceNak),
        (Opcode::RC_SEND_MIDDLE, Detected::SequenceNak),
        (Opcode::RC_SEND_LAST, Detected::Timeout),
    ] {
        let mut p = Pair::new(Mtu::Mtu1024);
        let data = pattern(1, LEN as usize);
        p.a.mr.storage.write(0, &data).unwrap();
        post_recv(&mut p, 7, 0x1000, 4096);
        p.fault(true, Action::Drop, 1, is(op));
        post_send(&mut p, 1, WrOpcode::Send, 0, LEN);
        p.drive();
        assert!(p.faults_spent());
        assert_eq!(statuses(&p.a), vec![(1, WcStatus::Success)], "{op:?}");
        assert_eq!(p.b.recv_wcs.len(), 1, "{op:?}: delivered exactly once");
        assert_eq!(p.b.recv_wcs[0].byte_len, LEN);
        assert_eq!(p.b.mr.storage.to_vec(0x1000, LEN as usize).unwrap(), data);
        expect_detection(&p, how, &format!("{op:?}"));
    }
}

#[test]
fn lost_first_middle_or_last_packet_of_a_write() {
    for (op, how) in [
        (Opcode::RC_RDMA_WRITE_FIRST, Detected::SequenceNak),
        (Opcode::RC_RDMA_WRITE_MIDDLE, Detected::SequenceNak),
        (Opcode::RC_RDMA_WRITE_LAST, Detected::Timeout),
    ] {
        let mut p = Pair::new(Mtu::Mtu1024);
        let data = pattern(2, LEN as usize);
        p.a.mr.storage.write(0, &data).unwrap();
        p.fault(true, Action::Drop, 1, is(op));
        let w = write_op(&p, 0x2000);
        post_send(&mut p, 1, w, 0, LEN);
        p.drive();
        assert!(p.faults_spent());
        assert_eq!(statuses(&p.a), vec![(1, WcStatus::Success)], "{op:?}");
        assert_eq!(p.b.mr.storage.to_vec(0x2000, LEN as usize).unwrap(), data);
        expect_detection(&p, how, &format!("{op:?}"));
        // Go-Back-N resumed at the lost packet, in the middle of the message: the
        // retransmission starts with the opcode that was lost, at its PSN.
        let lost = p.log.iter().find(|s| s.dropped).unwrap().clone();
        let resent: Vec<_> = p
            .log
            .iter()
            .filter(|s| s.to_b && s.psn == lost.psn && !s.dropped)
            .collect();
        assert_eq!(resent.len(), 1, "{op:?}");
        assert_eq!(resent[0].opcode, op);
    }
}

#[test]
fn lost_first_middle_or_last_read_response_resumes_with_a_read_for_the_rest() {
    // (lost response, how it is found, bytes the retried READ asks for)
    for (op, how, received) in [
        (Opcode::RC_RDMA_READ_RESPONSE_FIRST, "gap", 0u32),
        (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, "gap", MTU),
        (Opcode::RC_RDMA_READ_RESPONSE_LAST, "timeout", 2 * MTU),
    ] {
        let mut p = Pair::new(Mtu::Mtu1024);
        let data = pattern(3, LEN as usize);
        p.b.mr.storage.write(0x3000, &data).unwrap();
        p.fault(false, Action::Drop, 1, is(op));
        let r = read_op(&p, 0x3000);
        post_send(&mut p, 1, r, 0x8000, LEN);
        p.drive();
        assert!(p.faults_spent());
        assert_eq!(statuses(&p.a), vec![(1, WcStatus::Success)], "{op:?}");
        assert_eq!(p.a.mr.storage.to_vec(0x8000, LEN as usize).unwrap(), data);
        let reqs = sent(&p, true, Opcode::RC_RDMA_READ_REQUEST);
        assert_eq!(reqs.len(), 2, "{op:?}: the original and one retry");
        let (first, retry) = (&reqs[0], &reqs[1]);
        let (r0, r1) = (first.reth.unwrap(), retry.reth.unwrap());
        assert_eq!(retry.psn, first.psn.add(received / MTU), "{op:?}: PSN");
        assert_eq!(r1.va, r0.va + received as u64, "{op:?}: VA");
        assert_eq!(r1.len, LEN - received, "{op:?}: length");
        assert_eq!(
            count(&p.a, "timeouts"),
            (how == "timeout") as u64,
            "{op:?}: found by {how}"
        );
        // The responder served the retry from its saved READ resource.
        assert_eq!(count(&p.b, "duplicate_request"), 1, "{op:?}");
    }
}

#[test]
fn lost_atomic_ack_is_replayed_without_executing_twice() {
    let mut p = Pair::new(Mtu::Mtu1024);
    p.b.mr.storage.store_u64(0x100, 40).unwrap();
    p.fault(false, Action::Drop, 1, is(Opcode::RC_ATOMIC_ACK));
    let rkey = p.b.mr.rkey;
    post_send(
        &mut p,
        1,
        WrOpcode::AtomicFetchAdd {
            remote_addr: IOVA + 0x100,
            rkey,
            add: 2,
        },
        0x200,
        8,
    );
    p.drive();
    assert!(p.faults_spent());
    assert_eq!(statuses(&p.a), vec![(1, WcStatus::Success)]);
    assert_eq!(p.b.mr.storage.load_u64(0x100).unwrap(), 42, "added once");
    assert_eq!(
        p.a.mr.storage.load_u64(0x200).unwrap(),
        40,
        "the replay returns the original value"
    );
    assert_eq!(count(&p.a, "timeouts"), 1);
    assert_eq!(sent(&p, true, Opcode::RC_FETCH_ADD).len(), 2);
    assert_eq!(count(&p.b, "duplicate_request"), 1);
}

#[test]
fn duplicated_atomic_request_executes_once() {
    let mut p = Pair::new(Mtu::Mtu1024);
    p.fault(true, Action::Duplicate, 1, is(Opcode::RC_COMPARE_SWAP));
    let rkey = p.b.mr.rkey;
    post_send(
        &mut p,
        1,
        WrOpcode::AtomicCmpSwap {
            remote_addr: IOVA + 0x100,
            rkey,
            compare: 0,
            swap: 5,
        },
        0x200,
        8,
    );
    p.drive();
    assert_eq!(statuses(&p.a), vec![(1, WcStatus::Success)]);
    // Executed twice, the second CAS would fail and still leave 5; the count of atomic ACKs
    // tells: the duplicate was answered from the saved result.
    assert_eq!(p.b.mr.storage.load_u64(0x100).unwrap(), 5);
    assert_eq!(p.a.mr.storage.load_u64(0x200).unwrap(), 0);
    assert_eq!(count(&p.b, "duplicate_request"), 1);
    assert_eq!(sent(&p, false, Opcode::RC_ATOMIC_ACK).len(), 2);
}

#[test]
fn lost_ack_is_recovered_by_timeout_and_duplicate_re_ack() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let data = pattern(4, LEN as usize);
    p.a.mr.storage.write(0, &data).unwrap();
    p.fault(false, Action::Drop, 1, is(Opcode::RC_ACK));
    let w = write_op(&p, 0x2000);
    post_send(&mut p, 1, w, 0, LEN);
    p.drive();
    assert!(p.faults_spent());
    assert_eq!(statuses(&p.a), vec![(1, WcStatus::Success)]);
    assert_eq!(count(&p.a, "timeouts"), 1);
    // The whole message went again; the responder treated it as duplicates and re-ACKed.
    assert_eq!(count(&p.a, "retransmit_pkts"), 3);
    assert_eq!(count(&p.b, "duplicate_request"), 3);
    assert_eq!(p.b.mr.storage.to_vec(0x2000, LEN as usize).unwrap(), data);
}

#[test]
fn a_later_ack_covers_lost_ones_for_every_wr() {
    let mut p = Pair::new(Mtu::Mtu1024);
    // Lose the ACKs of the first four WRITEs; the fifth's ACK completes all five.
    // Posted 2 us apart, so that the responder ACKs each on its own.
    p.fault(false, Action::Drop, 4, is(Opcode::RC_ACK));
    for i in 0..5u64 {
        let w = write_op(&p, 0x1000 * i);
        post_send(&mut p, i, w, 0, 100);
        let t = p.now + Duration::from_micros(2);
        p.run_until(t);
    }
    p.drive();
    assert!(p.faults_spent());
    assert_eq!(
        statuses(&p.a),
        (0..5).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
    assert_eq!(count(&p.a, "timeouts"), 0);
    assert_eq!(count(&p.a, "retransmit_pkts"), 0);
}

#[test]
fn duplicate_and_stale_acks_change_nothing() {
    let mut p = Pair::new(Mtu::Mtu1024);
    p.fault(false, Action::Duplicate, 100, is(Opcode::RC_ACK));
    for i in 0..10u64 {
        let w = write_op(&p, 0x1000 * i);
        post_send(&mut p, i, w, 0, 2000);
    }
    p.drive();
    assert_eq!(
        statuses(&p.a),
        (0..10).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>(),
        "each WR completes exactly once"
    );
    assert_eq!(count(&p.a, "retransmit_pkts"), 0);
    assert_eq!(count(&p.a, "rcvd_nak"), 0);
}

#[test]
fn sequence_nak_acknowledges_everything_before_it() {
    let mut p = Pair::new(Mtu::Mtu1024);
    // WRITE 1 (one packet) loses its ACK; WRITE 2 loses its FIRST packet, so its MIDDLE
    // draws a NAK whose PSN is WRITE 2's first: that NAK completes WRITE 1.
    p.fault(false, Action::Drop, 1, is(Opcode::RC_ACK));
    p.fault(true, Action::Drop, 1, is(Opcode::RC_RDMA_WRITE_FIRST));
    let w1 = write_op(&p, 0);
    post_send(&mut p, 1, w1, 0, 100);
    let w2 = write_op(&p, 0x1000);
    post_send(&mut p, 2, w2, 0, LEN);
    p.drive();
    assert!(p.faults_spent());
    assert_eq!(
        statuses(&p.a),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(seq_naks(&p).len(), 1);
    assert_eq!(count(&p.a, "timeouts"), 0);
    // WRITE 1 was never resent.
    let w1_psn = p.log[0].psn;
    assert_eq!(
        p.log.iter().filter(|s| s.to_b && s.psn == w1_psn).count(),
        1
    );
}

#[test]
fn read_response_implicitly_acknowledges_an_earlier_write() {
    let mut p = Pair::new(Mtu::Mtu1024);
    p.fault(false, Action::Drop, 1, is(Opcode::RC_ACK));
    let w = write_op(&p, 0);
    post_send(&mut p, 1, w, 0, 100);
    let r = read_op(&p, 0x4000);
    post_send(&mut p, 2, r, 0x8000, 100);
    p.drive();
    assert!(p.faults_spent());
    assert_eq!(
        statuses(&p.a),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(count(&p.a, "timeouts"), 0);
    assert_eq!(count(&p.a, "retransmit_pkts"), 0);
}

#[test]
fn ack_beyond_an_unanswered_read_retries_the_read_at_once() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let data = pattern(5, 100);
    p.b.mr.storage.write(0x4000, &data).unwrap();
    p.fault(
        false,
        Action::Drop,
        1,
        is(Opcode::RC_RDMA_READ_RESPONSE_ONLY),
    );
    let r = read_op(&p, 0x4000);
    post_send(&mut p, 1, r, 0x8000, 100);
    let w = write_op(&p, 0);
    post_send(&mut p, 2, w, 0, 100);
    p.drive();
    assert!(p.faults_spent());
    assert_eq!(
        statuses(&p.a),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)],
        "in posting order"
    );
    assert_eq!(p.a.mr.storage.to_vec(0x8000, 100).unwrap(), data);
    assert_eq!(
        count(&p.a, "timeouts"),
        0,
        "the WRITE's ACK revealed the loss"
    );
    assert_eq!(sent(&p, true, Opcode::RC_RDMA_READ_REQUEST).len(), 2);
}

#[test]
fn duplicate_read_request_after_a_partial_response_is_replayed_whole() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let data = pattern(6, LEN as usize);
    p.b.mr.storage.write(0x3000, &data).unwrap();
    // The network duplicates the READ request, and the copy arrives after the responder has
    // answered the original, whose LAST packet is lost: the requester has a partial
    // response. The responder replays the whole response from its saved resource; the
    // requester ignores the FIRST and MIDDLE it already has and completes with the LAST,
    // without waiting for its timer.
    p.fault(true, Action::Duplicate, 1, is(Opcode::RC_RDMA_READ_REQUEST));
    p.fault(
        false,
        Action::Drop,
        1,
        is(Opcode::RC_RDMA_READ_RESPONSE_LAST),
    );
    let r = read_op(&p, 0x3000);
    post_send(&mut p, 1, r, 0x8000, LEN);
    p.drive();
    assert_eq!(statuses(&p.a), vec![(1, WcStatus::Success)]);
    assert_eq!(p.a.mr.storage.to_vec(0x8000, LEN as usize).unwrap(), data);
    assert_eq!(count(&p.b, "duplicate_request"), 1);
    assert_eq!(count(&p.a, "timeouts"), 0);
    assert!(p.faults_spent());
    assert_eq!(
        sent(&p, false, Opcode::RC_RDMA_READ_RESPONSE_FIRST).len(),
        2
    );
    assert_eq!(
        sent(&p, true, Opcode::RC_RDMA_READ_REQUEST).len(),
        1,
        "no retry needed"
    );
}

#[test]
fn psn_wrap_during_recovery() {
    // The harness starts both PSNs at 0xFF_FFF0. A 20-packet WRITE at MTU 256 spans
    // 0xFF_FFF0..=0x00_0003; lose the packet at PSN 0 and the one at 0xFF_FFFF.
    for lost in [0u32, 0xFF_FFFF] {
        let mut p = Pair::new(Mtu::Mtu256);
        let data = pattern(7, 20 * 256);
        p.a.mr.storage.write(0, &data).unwrap();
        p.fault(true, Action::Drop, 1, move |pkt| pkt.bth.psn == lost);
        let w = write_op(&p, 0x1_0000);
        post_send(&mut p, 1, w, 0, 20 * 256);
        p.drive();
        assert!(p.faults_spent());
        assert_eq!(statuses(&p.a), vec![(1, WcStatus::Success)]);
        assert_eq!(
            p.b.mr.storage.to_vec(0x1_0000, 20 * 256).unwrap(),
            data,
            "lost PSN {lost:#x}"
        );
        assert_eq!(seq_naks(&p), vec![Psn::new(lost)], "NAK names the lost PSN");
        assert_eq!(count(&p.a, "timeouts"), 0);
        assert_eq!(
            p.a.qp.req.psn,
            Psn::new(4),
            "sq_psn continued past the wrap"
        );
    }
}

#[test]
fn rnr_nak_waits_the_encoded_time_then_retries() {
    let mut p = Pair::new(Mtu::Mtu1024);
    post_send(&mut p, 1, WrOpcode::Send, 0, 10);
    // min_rnr_timer 1 = 0.01 ms: the retry comes 10 us after the NAK.
    p.drive_for(Duration::from_micros(12));
    let rnr: Vec<_> = p
        .log
        .iter()
        .filter(|s| {
            !s.to_b
                && s.aeth
                    .is_some_and(|a| matches!(a.kind(), AckSyndrome::RnrNak { .. }))
        })
        .cloned()
        .collect();
    assert_eq!(rnr.len(), 1);
    let before = sent(&p, true, Opcode::RC_SEND_ONLY).len();
    assert_eq!(before, 1, "no resend before the RNR time");
    p.drive_for(Duration::from_micros(10));
    assert!(
        sent(&p, true, Opcode::RC_SEND_ONLY).len() >= 2,
        "resent after it"
    );
    post_recv(&mut p, 9, 0, 64);
    p.drive();
    assert_eq!(statuses(&p.a), vec![(1, WcStatus::Success)]);
    assert_eq!(p.b.recv_wcs.len(), 1);
    assert_eq!(count(&p.a, "timeouts"), 0);
}

#[test]
fn partition_healing_within_the_retry_budget_loses_nothing() {
    // timeout 10 = 4.19 ms, retry_cnt 3: the budget is 4 timeouts (16.8 ms). A 10 ms
    // partition costs two or three of them.
    let mut p = Pair::with(Mtu::Mtu1024, 10, 3, 7);
    let data = pattern(8, 8000);
    p.a.mr.storage.write(0, &data).unwrap();
    post_recv(&mut p, 70, 0x4000, 8000);
    p.partition_until = Duration::from_millis(10);
    let w = write_op(&p, 0x1_0000);
    post_send(&mut p, 1, w, 0, 8000);
    post_send(&mut p, 2, WrOpcode::Send, 0, 8000);
    p.drive();
    assert_eq!(
        statuses(&p.a),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(p.b.mr.storage.to_vec(0x1_0000, 8000).unwrap(), data);
    assert_eq!(p.b.mr.storage.to_vec(0x4000, 8000).unwrap(), data);
    let t = count(&p.a, "timeouts");
    assert!((2..=3).contains(&t), "{t} timeouts");
    assert_eq!(p.a.qp.state(), QpState::Rts);
}

#[test]
fn partition_longer_than_the_budget_fails_and_flushes_both_queues() {
    let mut p = Pair::with(Mtu::Mtu1024, 10, 3, 7);
    p.partition_until = Duration::from_secs(1);
    // A's own receive queue must be flushed too.
    let sg = [sge(&p.a, 0x8000, 64)];
    p.a.qp
        .post_recv(
            &RecvWr {
                wr_id: 50,
                sg_list: &sg,
            },
            &p.a.mrs,
        )
        .unwrap();
    for i in 0..3u64 {
        let w = write_op(&p, 0x1000 * i);
        post_send(&mut p, i, w, 0, 100);
    }
    p.drive();
    assert_eq!(
        statuses(&p.a),
        vec![
            (0, WcStatus::RetryExcErr),
            (1, WcStatus::WrFlushErr),
            (2, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(p.a.recv_wcs.len(), 1);
    assert_eq!(p.a.recv_wcs[0].status, WcStatus::WrFlushErr);
    assert_eq!(p.a.qp.state(), QpState::Err);
    assert_eq!(count(&p.a, "retry_exceeded_err"), 1);
    // Failed within the budget: 4 timeouts of 4.19 ms, not the partition's second.
    assert!(p.now < Duration::from_millis(20), "{:?}", p.now);
}
