//! UC rules (spec-notes/uc-ud-srq.md): SEND and WRITE without acknowledgements, completion
//! at send, and the responder's resynchronisation after a lost FIRST, MIDDLE or LAST packet.

use super::node::*;
use crate::ib::*;
use crate::wire::Opcode;

/// Three packets at MTU 256: FIRST, MIDDLE, LAST.
const LEN: u32 = 600;

fn pair() -> (Node, Node) {
    let mut a = node(0x21, "192.0.2.1", QpType::Uc, None);
    let mut b = node(0x22, "192.0.2.2", QpType::Uc, None);
    let access = AccessFlags::REMOTE_WRITE;
    connect_uc(&mut a, &b, Mtu::Mtu256, access);
    connect_uc(&mut b, &a, Mtu::Mtu256, access);
    (a, b)
}

fn ops(seen: &[Seen]) -> Vec<Opcode> {
    seen.iter().map(|s| s.opcode).collect()
}

#[test]
fn send_and_write_cross_without_acks_and_complete_at_send() {
    let (mut a, mut b) = pair();
    b.post_recv(1, 0, 4096);
    b.post_recv(2, 4096, 4096);
    b.post_recv(3, 0x6000, 16);
    a.post(10, WrOpcode::Send, 0, LEN).unwrap();
    a.post(11, WrOpcode::SendWithImm { imm: 0xABCD }, 1000, 100)
        .unwrap();
    let rkey = b.mr.rkey;
    let write_to = IOVA + RECV_AT + 0x2000;
    a.post(
        12,
        WrOpcode::RdmaWrite {
            remote_addr: write_to,
            rkey,
        },
        2000,
        LEN,
    )
    .unwrap();
    a.post(
        13,
        WrOpcode::RdmaWriteWithImm {
            remote_addr: write_to + 0x1000,
            rkey,
            imm: 7,
        },
        3000,
        10,
    )
    .unwrap();
    let seen = transfer(&mut a, &mut b, &[]);
    assert_eq!(
        ops(&seen),
        vec![
            Opcode::UC_SEND_FIRST,
            Opcode::UC_SEND_MIDDLE,
            Opcode::UC_SEND_LAST,
            Opcode::UC_SEND_ONLY_WITH_IMMEDIATE,
            Opcode::UC_RDMA_WRITE_FIRST,
            Opcode::UC_RDMA_WRITE_MIDDLE,
            Opcode::UC_RDMA_WRITE_LAST,
            Opcode::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        ]
    );
    assert!(seen.iter().all(|s| !s.ack_req), "UC asks for no ACK");
    // Every send completed without anything coming back.
    assert!(transfer(&mut b, &mut a, &[]).is_empty(), "no ACKs on UC");
    let ids: Vec<u64> = a.send_wcs.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, vec![10, 11, 12, 13]);
    assert!(a.send_wcs.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(a.qp.send_queue_len(), 0);
    // Receive side.
    let wcs = &b.recv_wcs;
    assert_eq!(wcs.len(), 3);
    assert_eq!(
        (wcs[0].wr_id, wcs[0].byte_len, wcs[0].imm_data),
        (1, LEN, None)
    );
    assert_eq!(
        (wcs[1].wr_id, wcs[1].byte_len, wcs[1].imm_data),
        (2, 100, Some(0xABCD))
    );
    assert_eq!(wcs[2].opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!(
        (wcs[2].wr_id, wcs[2].byte_len, wcs[2].imm_data),
        (3, 10, Some(7))
    );
    assert!(wcs
        .iter()
        .all(|w| w.src_qp == 0x21 && w.status == WcStatus::Success));
    assert_eq!(b.recv_bytes(0, LEN as usize), a.sent_bytes(0, LEN as usize));
    assert_eq!(b.recv_bytes(4096, 100), a.sent_bytes(1000, 100));
    assert_eq!(
        b.recv_bytes(0x2000, LEN as usize),
        a.sent_bytes(2000, LEN as usize)
    );
    assert_eq!(b.recv_bytes(0x3000, 10), a.sent_bytes(3000, 10));
    assert_eq!(count(&b, "dropped_msg_pkts"), 0);
}

/// Sends two 3-packet messages with packet `lost` (0..3) of the first dropped; the second
/// must arrive whole, in the receive WQE the first would have used, and the first must not
/// complete.
fn lose_one_of_first_message(lost: usize) -> (Node, Node) {
    let (mut a, mut b) = pair();
    b.post_recv(1, 0, 4096);
    b.post_recv(2, 4096, 4096);
    a.post(10, WrOpcode::Send, 0, LEN).unwrap();
    a.post(11, WrOpcode::Send, 1000, LEN).unwrap();
    let seen = transfer(&mut a, &mut b, &[lost]);
    assert_eq!(seen.len(), 6);
    assert!(seen[lost].dropped);
    // The sender cannot know: both sends completed successfully.
    assert_eq!(a.send_wcs.len(), 2);
    assert!(a.send_wcs.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(b.recv_wcs.len(), 1, "only the second message completes");
    let wc = b.recv_wcs[0];
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (1, WcStatus::Success, LEN)
    );
    assert_eq!(
        b.recv_bytes(0, LEN as usize),
        a.sent_bytes(1000, LEN as usize)
    );
    assert_eq!(b.qp.recv_queue_len(), 1, "WQE 2 is still posted");
    (a, b)
}

#[test]
fn lost_first_drops_its_message_and_the_next_first_resyncs() {
    let (_, b) = lose_one_of_first_message(0);
    // MIDDLE and LAST of the first message dropped.
    assert_eq!(count(&b, "dropped_msg_pkts"), 2);
}

#[test]
fn lost_middle_abandons_the_message_and_reuses_its_receive_wqe() {
    let (_, b) = lose_one_of_first_message(1);
    // The LAST after the gap is dropped; the next FIRST abandons the message in progress.
    assert_eq!(count(&b, "dropped_msg_pkts"), 1);
}

#[test]
fn lost_last_abandons_the_message_at_the_next_first() {
    let (_, b) = lose_one_of_first_message(2);
    assert_eq!(count(&b, "dropped_msg_pkts"), 0);
    assert_eq!(
        count(&b, "out_of_seq_request"),
        1,
        "the FIRST after the gap"
    );
}

#[test]
fn lost_last_before_an_only_message() {
    let (mut a, mut b) = pair();
    b.post_recv(1, 0, 4096);
    a.post(10, WrOpcode::Send, 0, LEN).unwrap();
    a.post(11, WrOpcode::SendWithImm { imm: 5 }, 1000, 40)
        .unwrap();
    transfer(&mut a, &mut b, &[2]);
    assert_eq!(b.recv_wcs.len(), 1);
    let wc = b.recv_wcs[0];
    assert_eq!((wc.wr_id, wc.byte_len, wc.imm_data), (1, 40, Some(5)));
}

#[test]
fn lost_write_middle_completes_no_write_with_immediate() {
    let (mut a, mut b) = pair();
    b.post_recv(1, 0, 64);
    let rkey = b.mr.rkey;
    let dst = IOVA + RECV_AT + 0x1000;
    let w = |imm| WrOpcode::RdmaWriteWithImm {
        remote_addr: dst,
        rkey,
        imm,
    };
    a.post(10, w(1), 0, LEN).unwrap();
    a.post(11, w(2), 2000, LEN).unwrap();
    transfer(&mut a, &mut b, &[1]);
    assert_eq!(b.recv_wcs.len(), 1);
    let wc = b.recv_wcs[0];
    assert_eq!((wc.wr_id, wc.imm_data, wc.byte_len), (1, Some(2), LEN));
    assert_eq!(
        b.recv_bytes(0x1000, LEN as usize),
        a.sent_bytes(2000, LEN as usize)
    );
}

#[test]
fn middle_or_last_outside_a_message_is_dropped() {
    let (mut a, mut b) = pair();
    b.post_recv(1, 0, 4096);
    a.post(10, WrOpcode::Send, 0, LEN).unwrap();
    // FIRST lost, then PSN resync cannot happen on MIDDLE/LAST.
    transfer(&mut a, &mut b, &[0]);
    assert!(b.recv_wcs.is_empty());
    assert_eq!(b.qp.recv_queue_len(), 1);
    assert_eq!(count(&b, "dropped_msg_pkts"), 2);
    // A later message goes through.
    a.post(11, WrOpcode::Send, 0, 10).unwrap();
    transfer(&mut a, &mut b, &[]);
    assert_eq!(b.recv_wcs.len(), 1);
}

#[test]
fn no_receive_wqe_drops_the_message_without_rnr() {
    let (mut a, mut b) = pair();
    a.post(10, WrOpcode::Send, 0, LEN).unwrap();
    transfer(&mut a, &mut b, &[]);
    assert!(b.recv_wcs.is_empty());
    assert_eq!(count(&b, "dropped_msg_pkts"), 3);
    assert_eq!(count(&b, "send_rnr_err"), 0);
    assert!(transfer(&mut b, &mut a, &[]).is_empty(), "no RNR NAK on UC");
    b.post_recv(1, 0, 4096);
    a.post(11, WrOpcode::Send, 0, LEN).unwrap();
    transfer(&mut a, &mut b, &[]);
    assert_eq!(b.recv_wcs.len(), 1);
}

#[test]
fn receive_buffer_too_small_drops_and_keeps_the_wqe() {
    let (mut a, mut b) = pair();
    b.post_recv(1, 0, 300);
    a.post(10, WrOpcode::Send, 0, LEN).unwrap();
    transfer(&mut a, &mut b, &[]);
    assert!(b.recv_wcs.is_empty());
    assert_eq!(b.qp.recv_queue_len(), 1, "the WQE is back at the front");
    a.post(11, WrOpcode::Send, 0, 300).unwrap();
    transfer(&mut a, &mut b, &[]);
    assert_eq!(b.recv_wcs.len(), 1);
    assert_eq!(b.recv_wcs[0].byte_len, 300);
}

#[test]
fn write_without_remote_write_or_with_a_bad_rkey_is_dropped() {
    let mut a = node(0x21, "192.0.2.1", QpType::Uc, None);
    let mut b = node(0x22, "192.0.2.2", QpType::Uc, None);
    connect_uc(&mut a, &b, Mtu::Mtu256, AccessFlags::REMOTE_WRITE);
    connect_uc(&mut b, &a, Mtu::Mtu256, AccessFlags::EMPTY);
    let rkey = b.mr.rkey;
    let w = WrOpcode::RdmaWrite {
        remote_addr: IOVA + RECV_AT,
        rkey,
    };
    a.post(10, w, 0, 100).unwrap();
    transfer(&mut a, &mut b, &[]);
    assert_eq!(count(&b, "dropped_msg_pkts"), 1);
    assert_ne!(b.recv_bytes(0, 100), a.sent_bytes(0, 100));
    let (mut a, mut b) = pair();
    let bad = WrOpcode::RdmaWrite {
        remote_addr: IOVA + RECV_AT,
        rkey: rkey ^ 0x100,
    };
    a.post(10, bad, 0, 100).unwrap();
    transfer(&mut a, &mut b, &[]);
    assert_eq!(count(&b, "dropped_msg_pkts"), 1);
    assert_eq!(b.qp.state(), QpState::Rts, "UC stays usable");
}

#[test]
fn read_and_atomics_are_refused_at_post() {
    let (mut a, _) = pair();
    let r = a.post(
        1,
        WrOpcode::RdmaRead {
            remote_addr: IOVA,
            rkey: 1,
        },
        0,
        8,
    );
    assert!(matches!(r, Err(VerbsError::InvalidWr(_))), "{r:?}");
    let r = a.post(
        1,
        WrOpcode::AtomicFetchAdd {
            remote_addr: IOVA,
            rkey: 1,
            add: 1,
        },
        0,
        8,
    );
    assert!(matches!(r, Err(VerbsError::InvalidWr(_))), "{r:?}");
    assert_eq!(a.qp.send_queue_len(), 0);
}

#[test]
fn rc_packets_at_a_uc_qp_are_dropped_as_wrong_transport() {
    let mut a = node(0x21, "192.0.2.1", QpType::Rc, None);
    let mut b = node(0x22, "192.0.2.2", QpType::Uc, None);
    connect_rc(&mut a, &b, Mtu::Mtu256);
    connect_uc(&mut b, &a, Mtu::Mtu256, AccessFlags::REMOTE_WRITE);
    b.post_recv(1, 0, 4096);
    a.post(10, WrOpcode::Send, 0, 10).unwrap();
    transfer(&mut a, &mut b, &[]);
    assert_eq!(count(&b, "wrong_transport_pkts"), 1);
    assert!(b.recv_wcs.is_empty());
}
