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

/// splitmix64, for the randomized tests.
fn next(rng: &mut u64) -> u64 {
    *rng = rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *rng;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Hostile input: random UC packets (any opcode of the 12, PSNs around the expected one,
/// payloads of every length class, RETHs good and bad, headers missing) at a UC QP with and
/// without an SRQ. Nothing panics, nothing is ever sent back, the queues stay within their
/// capacities, and a well-formed message afterwards still completes.
#[test]
fn random_uc_packets_never_panic_reply_or_overflow() {
    use crate::wire::{BthRepr, ExtHeaders, ImmDtRepr, PacketRepr, RethRepr};
    use std::sync::Arc;
    use std::time::Duration;
    let ops: Vec<Opcode> = (0x20..=0x2B).map(Opcode).collect();
    let payload = vec![0x5Au8; 300];
    for seed in 0..40u64 {
        let srq = (seed % 2 == 1).then(|| {
            Arc::new(
                crate::transport::Srq::new(
                    1,
                    SrqAttr {
                        max_wr: 8,
                        max_sge: 1,
                        srq_limit: 0,
                    },
                    &DeviceLimits::default(),
                    Arc::new(crate::transport::Counters::default()),
                )
                .unwrap(),
            )
        });
        let mut a = node(0x21, "192.0.2.1", QpType::Uc, None);
        let mut b = node(0x22, "192.0.2.2", QpType::Uc, srq.clone());
        connect_uc(&mut a, &b, Mtu::Mtu256, AccessFlags::REMOTE_WRITE);
        connect_uc(&mut b, &a, Mtu::Mtu256, AccessFlags::REMOTE_WRITE);
        let mut rng = seed.wrapping_mul(0x1234_5678_9ABC_DEF1) | 1;
        let rkey = b.mr.rkey;
        for i in 0..600u64 {
            if i % 7 == 0 {
                let sge = [b.sge(RECV_AT + (i % 8) * 512, 512)];
                let wr = RecvWr {
                    wr_id: i,
                    sg_list: &sge,
                };
                let _ = match &srq {
                    Some(s) => s.post_recv(&wr, &b.mrs),
                    None => b.qp.post_recv(&wr, &b.mrs),
                };
            }
            let r = next(&mut rng);
            let opcode = ops[(r % 12) as usize];
            let expected = b.qp.query().rq_psn;
            let psn = expected.wrapping_add((r >> 8) as u32 % 5).wrapping_sub(2) & 0xFF_FFFF;
            let len = [0usize, 1, 100, 255, 256, 257, 300][((r >> 16) % 7) as usize];
            let mut ext = ExtHeaders::default();
            if (r >> 24) % 4 != 0 {
                ext.reth = Some(RethRepr {
                    va: IOVA + RECV_AT + ((r >> 28) % 0x9000),
                    rkey: if (r >> 40) % 5 == 0 {
                        rkey ^ 0x300
                    } else {
                        rkey
                    },
                    len: ((r >> 44) % 1200) as u32,
                });
            }
            if (r >> 56) % 2 == 0 {
                ext.imm = Some(ImmDtRepr { imm: r as u32 });
            }
            let pkt = PacketRepr {
                bth: BthRepr {
                    opcode,
                    psn,
                    dest_qp: 0x22,
                    ..BthRepr::default()
                },
                ext,
                payload: &payload[..len],
            };
            b.qp.handle_packet(Duration::ZERO, &pkt, &b.mrs);
            // The queues after each packet (completions are collected after every one): the
            // receive queue within its capacity (64); at most two new completions, for the
            // message the packet abandoned (with an SRQ) and its own; no response queued and
            // no responder resource kept, since UC answers nothing.
            let d = b.qp.queue_depths();
            assert!(d.recv <= 64, "seed {seed}: {d:?}");
            assert!(d.completions <= 2, "seed {seed}: {d:?}");
            assert_eq!(
                (d.resp_queued, d.resp_resources),
                (0, 0),
                "seed {seed}: {d:?}"
            );
            assert!(srq.as_ref().map_or(0, |s| s.len()) <= 8);
            b.collect();
        }
        assert!(transfer(&mut b, &mut a, &[]).is_empty(), "UC never replies");
        // Still usable: a clean message completes (post a fresh WQE first).
        let before = b.recv_wcs.len();
        match &srq {
            Some(s) => {
                let sge = [b.sge(RECV_AT, 4096)];
                let _ = s.post_recv(
                    &RecvWr {
                        wr_id: 999,
                        sg_list: &sge,
                    },
                    &b.mrs,
                );
            }
            None => b.post_recv(999, 0, 4096),
        }
        a.post(1, WrOpcode::Send, 0, 20).unwrap();
        transfer(&mut a, &mut b, &[]);
        assert!(
            b.recv_wcs[before..]
                .iter()
                .any(|w| w.status == WcStatus::Success && w.byte_len == 20),
            "seed {seed}: a clean SEND after the noise completes"
        );
    }
}
