//! Memory windows through the verbs API over real UDP sockets (spec-notes/memory-windows.md):
//! two device contexts on 127.0.0.1 and 127.0.0.2; B binds windows onto a region registered
//! with MW_BIND (and no remote rights of its own), A reaches B's memory through them.

use std::time::Duration;

use softroce::ib::*;
use softroce::verbs::*;

mod common;
use common::{pattern, two_contexts, wait_one};

const FULL: AccessFlags = AccessFlags(
    AccessFlags::LOCAL_WRITE.0
        | AccessFlags::REMOTE_WRITE.0
        | AccessFlags::REMOTE_READ.0
        | AccessFlags::REMOTE_ATOMIC.0,
);
const RW: AccessFlags = AccessFlags(AccessFlags::REMOTE_WRITE.0 | AccessFlags::REMOTE_READ.0);
const WIN_LEN: usize = 64 * 1024;

struct Side {
    ctx: Context,
    pd: ProtectionDomain,
    /// A's source buffer, B's receive buffer.
    mr: MemoryRegion,
    cq: CompletionQueue,
    qp: QueuePair,
}

fn qp_on(pd: &ProtectionDomain, cq: &CompletionQueue) -> QueuePair {
    let qp = pd
        .create_qp(&QpInitAttr {
            send_cq: cq,
            recv_cq: cq,
            cap: QpCap {
                max_send_wr: 32,
                max_recv_wr: 32,
                ..QpCap::default()
            },
            qp_type: QpType::Rc,
            sq_sig_all: false,
        })
        .unwrap();
    qp.init(RW | AccessFlags::REMOTE_ATOMIC).unwrap();
    qp
}

fn side(ctx: Context) -> Side {
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.register_mr(WIN_LEN, FULL).unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let qp = qp_on(&pd, &cq);
    Side {
        ctx,
        pd,
        mr,
        cq,
        qp,
    }
}

fn connect(a: &QueuePair, actx: &Context, b: &QueuePair, bctx: &Context) {
    for (me, peer, peer_ctx) in [(a, b, bctx), (b, a, actx)] {
        let c = RcConnect {
            path_mtu: Mtu::Mtu1024,
            max_rd_atomic: 4,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 1,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            ..RcConnect::new(peer.qp_num(), 0x10, peer_ctx.gid(1).unwrap(), 0x10)
        };
        me.ready_to_receive(&c).unwrap();
        me.ready_to_send(&c).unwrap();
    }
}

/// A and B connected, and B's bindable region.
fn pair() -> (Side, Side, MemoryRegion) {
    let (ca, cb) = two_contexts();
    let a = side(ca);
    let b = side(cb);
    connect(&a.qp, &a.ctx, &b.qp, &b.ctx);
    let win =
        b.pd.register_mr(WIN_LEN, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND)
            .unwrap();
    // A key (rkey = lkey, spec-notes/beyond-rxe.md rule 5), but no remote rights of its own.
    assert_eq!(win.rkey(), win.lkey());
    (a, b, win)
}

fn wait(cq: &CompletionQueue) -> WorkCompletion {
    wait_one(cq, Duration::from_secs(30))
}

/// A's signaled RDMA WRITE of `len` bytes of pattern `seed` on `qp` to `va` with `rkey`;
/// returns its completion status.
fn write(a: &Side, qp: &QueuePair, seed: u64, va: u64, rkey: u32, len: u32) -> WcStatus {
    a.mr.write(0, &pattern(seed, len as usize)).unwrap();
    let sge = [a.mr.sge(0, len)];
    qp.post_send(&[SendWr {
        wr_id: seed,
        sg_list: &sge,
        opcode: WrOpcode::RdmaWrite {
            remote_addr: va,
            rkey,
        },
        send_flags: SendFlags::SIGNALED,
    }])
    .unwrap();
    let wc = wait(&a.cq);
    assert_eq!(wc.wr_id, seed);
    wc.status
}

/// B posts one local WR and returns its completion.
fn post_local(b: &Side, wr_id: u64, opcode: WrOpcode) -> WorkCompletion {
    b.qp.post_send(&[SendWr {
        wr_id,
        sg_list: &[],
        opcode,
        send_flags: SendFlags::SIGNALED,
    }])
    .unwrap();
    wait(&b.cq)
}

/// A type 2 window bound on B's QP over `len` bytes at `off` of `win`.
fn type2(b: &Side, win: &MemoryRegion, off: u64, len: u64) -> MemoryWindow {
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    assert!(!mw.is_bound());
    let op = mw.bind_wr(0x3C, Some(win), win.addr() + off, len, RW);
    let wc = post_local(b, 77, op);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (77, WcStatus::Success, WcOpcode::BindMw)
    );
    assert!(mw.is_bound());
    assert_eq!(mw.rkey() & 0xff, 0x3C);
    mw
}

#[test]
fn ibv_bind_mw_opens_a_type_1_window_and_the_range_outside_it_is_refused() {
    let (a, b, win) = pair();
    let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
    let old = mw.rkey();
    let rkey =
        b.qp.bind_mw(
            &mw,
            &MwBind {
                wr_id: 5,
                send_flags: SendFlags::SIGNALED,
                mr: Some(&win),
                addr: win.addr() + 4096,
                length: 8192,
                access: RW,
            },
        )
        .unwrap();
    assert_eq!(rkey, inc_rkey(old));
    let wc = wait(&b.cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (5, WcStatus::Success, WcOpcode::BindMw)
    );
    assert_eq!(mw.rkey(), rkey);
    // 5000 bytes (five packets) through the window.
    let va = win.addr() + 4096 + 10;
    assert_eq!(write(&a, &a.qp, 1, va, rkey, 5000), WcStatus::Success);
    assert_eq!(win.to_vec(4096 + 10, 5000).unwrap(), pattern(1, 5000));
    // The key the window had before the bind is stale, and the bytes just past the window
    // are out of reach (each NAK moves the QPs to ERROR: a fresh pair for the second).
    assert_eq!(write(&a, &a.qp, 7, va, old, 8), WcStatus::RemAccessErr);
    let (a, b, win) = pair();
    let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
    let bind = MwBind {
        wr_id: 5,
        send_flags: SendFlags::SIGNALED,
        mr: Some(&win),
        addr: win.addr() + 4096,
        length: 8192,
        access: RW,
    };
    let rkey = b.qp.bind_mw(&mw, &bind).unwrap();
    assert_eq!(wait(&b.cq).status, WcStatus::Success);
    assert_eq!(
        write(&a, &a.qp, 2, win.addr() + 4096 + 8192 - 4, rkey, 8),
        WcStatus::RemAccessErr
    );
    assert_eq!(win.to_vec(4096 + 8192 - 4, 8).unwrap(), vec![0; 8]);
    // ibv_bind_mw refuses a type 2 window.
    let t2 = b.pd.alloc_mw(MwType::Type2).unwrap();
    let bind = MwBind {
        wr_id: 6,
        send_flags: SendFlags::SIGNALED,
        mr: Some(&win),
        addr: win.addr(),
        length: 64,
        access: RW,
    };
    assert!(matches!(
        b.qp.bind_mw(&t2, &bind),
        Err(VerbsError::InvalidAttribute { .. })
    ));
}

#[test]
fn local_invalidate_then_the_stale_rkey_is_nakked_and_dereg_waits_for_it() {
    let (a, b, win) = pair();
    let mw = type2(&b, &win, 0, 4096);
    let key = mw.rkey();
    assert_eq!(write(&a, &a.qp, 1, win.addr(), key, 100), WcStatus::Success);
    assert_eq!(win.bound_windows(), 1);
    // ibv_dereg_mr is refused while the window is bound; the region comes back intact.
    let (win, err) = win.deregister().unwrap_err();
    assert!(
        matches!(err, VerbsError::InvalidAttribute { .. }),
        "{err:?}"
    );
    assert_eq!(win.to_vec(0, 100).unwrap(), pattern(1, 100));
    let wc = post_local(&b, 8, WrOpcode::LocalInv { rkey: key });
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (8, WcStatus::Success, WcOpcode::LocalInv)
    );
    assert!(!mw.is_bound());
    assert_eq!(
        write(&a, &a.qp, 2, win.addr(), key, 100),
        WcStatus::RemAccessErr
    );
    assert_eq!(win.to_vec(0, 100).unwrap(), pattern(1, 100), "untouched");
    assert!(win.deregister().is_ok());
}

#[test]
fn send_with_invalidate_invalidates_the_receivers_window_and_reports_it() {
    let (a, b, win) = pair();
    let mw = type2(&b, &win, 0, 4096);
    let key = mw.rkey();
    let rsge = [b.mr.sge(0, 4096)];
    b.qp.post_recv(&[RecvWr {
        wr_id: 9,
        sg_list: &rsge,
    }])
    .unwrap();
    a.mr.write(0, &pattern(3, 3000)).unwrap();
    let sge = [a.mr.sge(0, 3000)];
    a.qp.post_send(&[SendWr {
        wr_id: 3,
        sg_list: &sge,
        opcode: WrOpcode::SendWithInv { rkey: key },
        send_flags: SendFlags::SIGNALED,
    }])
    .unwrap();
    let sent = wait(&a.cq);
    assert_eq!(
        (sent.status, sent.opcode),
        (WcStatus::Success, WcOpcode::Send)
    );
    let got = wait(&b.cq);
    assert_eq!(
        (got.wr_id, got.status, got.opcode, got.byte_len),
        (9, WcStatus::Success, WcOpcode::Recv, 3000)
    );
    assert_eq!(got.invalidated_rkey, Some(key), "IBV_WC_WITH_INV");
    assert_eq!(b.mr.to_vec(0, 3000).unwrap(), pattern(3, 3000));
    assert!(!mw.is_bound());
    assert_eq!(win.bound_windows(), 0);
    assert_eq!(
        write(&a, &a.qp, 4, win.addr(), key, 8),
        WcStatus::RemAccessErr
    );
}

#[test]
fn a_type_2_window_is_refused_to_another_qp_of_its_pd() {
    let (a, b, win) = pair();
    let mw = type2(&b, &win, 0, 4096);
    // A second connection between the same two devices and PDs.
    let a2 = qp_on(&a.pd, &a.cq);
    let b2 = qp_on(&b.pd, &b.cq);
    connect(&a2, &a.ctx, &b2, &b.ctx);
    assert_eq!(
        write(&a, &a2, 1, win.addr(), mw.rkey(), 64),
        WcStatus::RemAccessErr
    );
    assert_eq!(win.to_vec(0, 64).unwrap(), vec![0; 64], "nothing landed");
    // Through the QP it is bound to, it works.
    assert_eq!(
        write(&a, &a.qp, 2, win.addr(), mw.rkey(), 64),
        WcStatus::Success
    );
    assert_eq!(win.to_vec(0, 64).unwrap(), pattern(2, 64));
}
