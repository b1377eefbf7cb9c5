//! ATOMIC WRITE and FLUSH (IBTA 1.5) through the native verbs API over real UDP sockets: two
//! device contexts on 127.0.0.1 and 127.0.0.2, each with its own engine thread
//! (spec-notes/memory-placement.md).

use std::time::Duration;

use softroce::ib::*;
use softroce::verbs::*;
use softroce::wire::feth;

mod common;
use common::{two_contexts, wait_one, End, EndSpec};

const RIGHTS: AccessFlags = AccessFlags(
    AccessFlags::LOCAL_WRITE.0
        | AccessFlags::REMOTE_WRITE.0
        | AccessFlags::REMOTE_READ.0
        | AccessFlags::FLUSH_GLOBAL.0,
);

fn end(ctx: Context) -> End {
    let e = End::open(
        ctx,
        &EndSpec {
            mr_len: 1 << 16,
            mr_access: RIGHTS,
            cq_len: 64,
            qp_type: QpType::Rc,
            cap: common::queues(16),
            sq_sig_all: true,
        },
    );
    e.qp.init(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::FLUSH_GLOBAL)
        .unwrap();
    e
}

fn connect(e: &End, peer: &End) {
    let c = RcConnect {
        path_mtu: Mtu::Mtu1024,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        ..RcConnect::new(peer.qp.qp_num(), 0x10, peer.ctx.gid(1).unwrap(), 0x10)
    };
    e.qp.ready_to_receive(&c).unwrap();
    e.qp.ready_to_send(&c).unwrap();
}

fn wait(cq: &CompletionQueue) -> WorkCompletion {
    wait_one(cq, Duration::from_secs(30))
}

#[test]
fn atomic_write_and_flush_complete_over_sockets() {
    let (ca, cb) = two_contexts();
    let (a, b) = (end(ca), end(cb));
    connect(&a, &b);
    connect(&b, &a);
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 7 % 251) as u8).collect();
    a.mr.write(0, &data).unwrap();
    let word = *b"ATOMIC!!";
    let sge = [a.mr.sge(0, 3000)];
    let wrs = [
        SendWr {
            wr_id: 1,
            sg_list: &sge,
            opcode: WrOpcode::RdmaWrite {
                remote_addr: b.mr.addr() + 0x1000,
                rkey: b.mr.rkey(),
            },
            send_flags: SendFlags::EMPTY,
        },
        SendWr {
            wr_id: 2,
            sg_list: &[],
            opcode: WrOpcode::AtomicWrite {
                remote_addr: b.mr.addr() + 0x1000 + 8,
                rkey: b.mr.rkey(),
                data: word,
            },
            send_flags: SendFlags::EMPTY,
        },
        SendWr {
            wr_id: 3,
            sg_list: &[],
            opcode: WrOpcode::Flush {
                remote_addr: b.mr.addr() + 0x1000,
                rkey: b.mr.rkey(),
                len: 3000,
                placement: feth::PLACEMENT_GLOBAL,
                selectivity: feth::SELECTIVITY_RANGE,
            },
            send_flags: SendFlags::EMPTY,
        },
    ];
    a.qp.post_send(&wrs).unwrap();
    let got: Vec<_> = (0..3)
        .map(|_| {
            let w = wait(&a.cq);
            (w.wr_id, w.status, w.opcode)
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (1, WcStatus::Success, WcOpcode::RdmaWrite),
            (2, WcStatus::Success, WcOpcode::AtomicWrite),
            (3, WcStatus::Success, WcOpcode::Flush)
        ]
    );
    // The FLUSH completed: the WRITE and the ATOMIC WRITE before it are in B's memory.
    let mut want = data.clone();
    want[8..16].copy_from_slice(&word);
    assert_eq!(b.mr.to_vec(0x1000, 3000).unwrap(), want);
}

#[test]
fn a_flush_without_the_right_fails_and_persistent_regions_are_refused() {
    let (ca, cb) = two_contexts();
    let (a, b) = (end(ca), end(cb));
    // Registration with FLUSH_PERSISTENT fails: softroce has no persistent memory (as rxe on
    // memory that is not pmem).
    let refused = b.pd.register_mr(
        4096,
        AccessFlags::LOCAL_WRITE | AccessFlags::FLUSH_PERSISTENT,
    );
    assert!(
        matches!(
            refused.as_ref().map_err(|e| e.to_string()),
            Err(m) if m.contains("FLUSH_PERSISTENT")
        ),
        "{:?}",
        refused.err()
    );
    connect(&a, &b);
    connect(&b, &a);
    // A persistent FLUSH: the QP has only FLUSH_GLOBAL, so it is an invalid request.
    a.qp.post_send(&[SendWr {
        wr_id: 7,
        sg_list: &[],
        opcode: WrOpcode::Flush {
            remote_addr: b.mr.addr(),
            rkey: b.mr.rkey(),
            len: 64,
            placement: feth::PLACEMENT_PERSISTENT,
            selectivity: feth::SELECTIVITY_RANGE,
        },
        send_flags: SendFlags::EMPTY,
    }])
    .unwrap();
    let w = wait(&a.cq);
    assert_eq!(
        (w.wr_id, w.status, w.opcode),
        (7, WcStatus::RemInvReqErr, WcOpcode::Flush)
    );
}
