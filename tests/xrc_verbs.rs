//! XRC through the verbs API over real UDP sockets (spec-notes/xrc.md): an initiator on
//! 127.0.0.1 sends to two XRC SRQs of a target domain on 127.0.0.2 through one XRC_RECV QP,
//! each message completing on the CQ of the SRQ its WR named; a WRITE lands in a region of the
//! SRQs' PD; a domain with an SRQ cannot close; a number of no SRQ fails the WR and the
//! initiator QP.

use std::time::Duration;

use softroce::ib::*;
use softroce::verbs::*;

mod common;
use common::{contexts, queues, wait_one};

const LEN: usize = 1 << 14;

fn wait(cq: &CompletionQueue) -> WorkCompletion {
    wait_one(cq, Duration::from_secs(30))
}

#[test]
fn an_initiator_reaches_two_srqs_of_a_domain_through_one_target_qp() {
    let mut v = contexts(2);
    let tgt_ctx = v.pop().unwrap();
    let ini_ctx = v.pop().unwrap();
    // The target: a domain, two SRQs with a CQ each, one XRC_RECV QP.
    let tpd = tgt_ctx.alloc_pd().unwrap();
    let tmr = tpd
        .register_mr(LEN, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
        .unwrap();
    let xrcd = tgt_ctx.open_xrcd().unwrap();
    let (cq1, cq2) = (
        tgt_ctx.create_cq(16).unwrap(),
        tgt_ctx.create_cq(16).unwrap(),
    );
    let attr = SrqAttr {
        max_wr: 8,
        max_sge: 1,
        srq_limit: 0,
    };
    let s1 = xrcd.create_srq(&tpd, &cq1, &attr).unwrap();
    let s2 = xrcd.create_srq(&tpd, &cq2, &attr).unwrap();
    let (n1, n2) = (s1.srq_num().unwrap(), s2.srq_num().unwrap());
    assert_ne!(n1, n2);
    let tqp = xrcd.create_recv_qp().unwrap();
    // The initiator: an XRC_SEND QP.
    let ipd = ini_ctx.alloc_pd().unwrap();
    let imr = ipd.register_mr(LEN, AccessFlags::LOCAL_WRITE).unwrap();
    imr.write(0, &[0xAB; 256]).unwrap();
    let icq = ini_ctx.create_cq(16).unwrap();
    let iqp = ipd
        .create_xrc_send_qp(&QpInitAttr {
            send_cq: &icq,
            recv_cq: &icq,
            cap: QpCap {
                max_recv_wr: 0,
                max_recv_sge: 0,
                ..queues(8)
            },
            qp_type: QpType::Rc,
            sq_sig_all: false,
        })
        .unwrap();
    let gid = |c: &Context| c.gid(0).unwrap();
    let to_tgt = RcConnect::new(tqp.qp_num(), 7, gid(&tgt_ctx), 9);
    let to_ini = RcConnect::new(iqp.qp_num(), 9, gid(&ini_ctx), 7);
    iqp.init(AccessFlags::EMPTY).unwrap();
    iqp.ready_to_receive(&to_tgt).unwrap();
    iqp.ready_to_send(&to_tgt).unwrap();
    tqp.init(AccessFlags::REMOTE_WRITE).unwrap();
    tqp.ready_to_receive(&to_ini).unwrap();
    tqp.ready_to_send(&to_ini).unwrap();
    for (i, s) in [&s1, &s2].iter().enumerate() {
        s.post_recv(&[RecvWr {
            wr_id: 10 + i as u64,
            sg_list: &[tmr.sge(1024 * i as u64, 1024)],
        }])
        .unwrap();
    }
    // A SEND to each SRQ, then a WRITE, each named by the WR.
    let post = |wr_id: u64, opcode: WrOpcode, len: u32, srqn: u32| {
        let mut b = iqp.send_batch().unwrap();
        b.post_send_xrc(
            &SendWr {
                wr_id,
                sg_list: &[imr.sge(0, len)],
                opcode,
                send_flags: SendFlags::SIGNALED,
            },
            srqn,
        )
    };
    post(1, WrOpcode::Send, 100, n2).unwrap();
    post(2, WrOpcode::Send, 200, n1).unwrap();
    let write = WrOpcode::RdmaWrite {
        remote_addr: tmr.addr() + 8192,
        rkey: tmr.rkey(),
    };
    post(3, write, 256, n1).unwrap();
    for want in 1..=3 {
        let wc = wait(&icq);
        assert_eq!((wc.wr_id, wc.status), (want, WcStatus::Success));
    }
    let (w1, w2) = (wait(&cq1), wait(&cq2));
    assert_eq!((w1.wr_id, w1.byte_len, w1.qp_num), (10, 200, tqp.qp_num()));
    assert_eq!((w2.wr_id, w2.byte_len, w2.qp_num), (11, 100, tqp.qp_num()));
    let read = |off: u64, n: usize| {
        let mut b = vec![0u8; n];
        tmr.read(off, &mut b).unwrap();
        b
    };
    assert_eq!(read(1024, 100), vec![0xAB; 100]);
    assert_eq!(read(8192, 256), vec![0xAB; 256]);
    // The domain is in use.
    let xrcd = match xrcd.close() {
        Err((x, VerbsError::Busy(_))) => x,
        other => panic!("closed a domain in use: {other:?}"),
    };
    // A number of no SRQ: NAKed invalid request, the WR fails, the initiator goes to ERROR.
    post(4, WrOpcode::Send, 8, 0xFF_FFFF).unwrap();
    let wc = wait(&icq);
    assert_eq!((wc.wr_id, wc.status), (4, WcStatus::RemInvReqErr));
    assert_eq!(tgt_ctx.counter("xrc_srq_errors"), Some(1));
    drop((tqp, s1, s2));
    assert!(xrcd.close().is_ok());
}
