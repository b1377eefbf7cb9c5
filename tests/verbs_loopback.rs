//! The verbs API end to end over real UDP sockets: two device contexts in one process, on
//! 127.0.0.1 and 127.0.0.2 (the same UDP port, as two RoCE devices would use 4791), each with
//! its own engine thread. Every operation and size class at every MTU, byte for byte, and the
//! error paths of the API.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use softroce::driver::DeviceConfig;
use softroce::ib::*;
use softroce::verbs::*;

const FULL: AccessFlags = AccessFlags(
    AccessFlags::LOCAL_WRITE.0
        | AccessFlags::REMOTE_WRITE.0
        | AccessFlags::REMOTE_READ.0
        | AccessFlags::REMOTE_ATOMIC.0,
);

mod common;
use common::{pattern, two_contexts, two_contexts_with, wait_one, End, EndSpec};

fn end(ctx: Context, mr_len: usize, cap: QpCap) -> End {
    End::open(
        ctx,
        &EndSpec {
            mr_len,
            mr_access: FULL,
            cq_len: 1024,
            qp_type: QpType::Rc,
            cap,
            sq_sig_all: false,
        },
    )
}

fn init(qp: &QueuePair) {
    qp.init(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC)
        .unwrap();
}

fn rtr_rts(e: &End, peer: &End, mtu: Mtu, timeout: u8, retry: u8, rnr: u8) {
    // PSNs just below the 24-bit wrap, so that every test crosses it.
    let c = RcConnect {
        path_mtu: mtu,
        max_rd_atomic: 16,
        max_dest_rd_atomic: 16,
        min_rnr_timer: 1,
        timeout,
        retry_cnt: retry,
        rnr_retry: rnr,
        ..RcConnect::new(
            peer.qp.qp_num(),
            0xFF_FF00,
            peer.ctx.gid(1).unwrap(),
            0xFF_FF00,
        )
    };
    e.qp.ready_to_receive(&c).unwrap();
    e.qp.ready_to_send(&c).unwrap();
}

fn connected(mtu: Mtu, mr_len: usize) -> (End, End) {
    connected_with(mtu, mr_len, 14, 7, 7)
}

fn connected_with(mtu: Mtu, mr_len: usize, timeout: u8, retry: u8, rnr: u8) -> (End, End) {
    connected_on(two_contexts(), mtu, mr_len, timeout, retry, rnr)
}

fn connected_on(
    (ca, cb): (Context, Context),
    mtu: Mtu,
    mr_len: usize,
    timeout: u8,
    retry: u8,
    rnr: u8,
) -> (End, End) {
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    };
    let a = end(ca, mr_len, cap);
    let b = end(cb, mr_len, cap);
    init(&a.qp);
    init(&b.qp);
    rtr_rts(&a, &b, mtu, timeout, retry, rnr);
    rtr_rts(&b, &a, mtu, timeout, retry, rnr);
    (a, b)
}

fn wait(cq: &CompletionQueue) -> WorkCompletion {
    wait_one(cq, Duration::from_secs(60))
}

fn post(e: &End, wr_id: u64, opcode: WrOpcode, off: u64, len: u32) {
    let sge = [e.mr.sge(off, len)];
    e.qp.post_send(&[SendWr {
        wr_id,
        sg_list: if len == 0 { &[] } else { &sge },
        opcode,
        send_flags: SendFlags::SIGNALED,
    }])
    .unwrap();
}

fn sizes(mtu: u32) -> [u32; 6] {
    [0, 1, mtu - 1, mtu, mtu + 1, 5 * mtu + 7]
}

const MTUS: [Mtu; 5] = [
    Mtu::Mtu256,
    Mtu::Mtu512,
    Mtu::Mtu1024,
    Mtu::Mtu2048,
    Mtu::Mtu4096,
];

#[test]
fn every_operation_and_size_class_at_every_mtu() {
    for mtu in MTUS {
        let (a, b) = connected(mtu, 1 << 16);
        for (i, len) in sizes(mtu.bytes()).into_iter().enumerate() {
            let i = i as u64;
            let data = pattern(i, len as usize);
            // SEND with immediate.
            a.mr.write(0, &data).unwrap();
            let rsge = [b.mr.sge(0x8000, 0x8000)];
            b.qp.post_recv(&[RecvWr {
                wr_id: 100 + i,
                sg_list: &rsge,
            }])
            .unwrap();
            post(
                &a,
                i,
                WrOpcode::SendWithImm {
                    imm: 0x1234_0000 + i as u32,
                },
                0,
                len,
            );
            let s = wait(&a.cq);
            assert_eq!(
                (s.wr_id, s.status, s.opcode),
                (i, WcStatus::Success, WcOpcode::Send)
            );
            let r = wait(&b.cq);
            assert_eq!(
                (r.wr_id, r.status, r.opcode),
                (100 + i, WcStatus::Success, WcOpcode::Recv)
            );
            assert_eq!(r.byte_len, len, "{mtu:?}");
            assert_eq!(r.imm_data, Some(0x1234_0000 + i as u32));
            assert_eq!(r.src_qp, a.qp.qp_num());
            assert_eq!(b.mr.to_vec(0x8000, len as usize).unwrap(), data);
            // WRITE.
            let data = pattern(i + 10, len as usize);
            a.mr.write(0, &data).unwrap();
            post(
                &a,
                i,
                WrOpcode::RdmaWrite {
                    remote_addr: b.mr.addr() + 0x4000,
                    rkey: b.mr.rkey(),
                },
                0,
                len,
            );
            assert_eq!(wait(&a.cq).status, WcStatus::Success);
            assert_eq!(
                b.mr.to_vec(0x4000, len as usize).unwrap(),
                data,
                "{mtu:?} write {len}"
            );
            // READ.
            let data = pattern(i + 20, len as usize);
            b.mr.write(0x2000, &data).unwrap();
            post(
                &a,
                i,
                WrOpcode::RdmaRead {
                    remote_addr: b.mr.addr() + 0x2000,
                    rkey: b.mr.rkey(),
                },
                0xA000,
                len,
            );
            let r = wait(&a.cq);
            assert_eq!(
                (r.status, r.opcode, r.byte_len),
                (WcStatus::Success, WcOpcode::RdmaRead, len)
            );
            assert_eq!(
                a.mr.to_vec(0xA000, len as usize).unwrap(),
                data,
                "{mtu:?} read {len}"
            );
        }
        // Atomics: 8 bytes, the original value lands locally.
        b.mr.store_u64(0x100, 40).unwrap();
        post(
            &a,
            1,
            WrOpcode::AtomicFetchAdd {
                remote_addr: b.mr.addr() + 0x100,
                rkey: b.mr.rkey(),
                add: 2,
            },
            0x200,
            8,
        );
        assert_eq!(wait(&a.cq).opcode, WcOpcode::FetchAdd);
        post(
            &a,
            2,
            WrOpcode::AtomicCmpSwap {
                remote_addr: b.mr.addr() + 0x100,
                rkey: b.mr.rkey(),
                compare: 42,
                swap: 7,
            },
            0x208,
            8,
        );
        assert_eq!(wait(&a.cq).opcode, WcOpcode::CompSwap);
        assert_eq!(a.mr.load_u64(0x200).unwrap(), 40);
        assert_eq!(a.mr.load_u64(0x208).unwrap(), 42);
        assert_eq!(b.mr.load_u64(0x100).unwrap(), 7);
    }
}

#[test]
fn one_gibibyte_write_and_read() {
    const GIB: usize = 1 << 30;
    let (a, b) = connected(Mtu::Mtu4096, GIB);
    // A pattern on every 4 KiB page and at the ends checks placement without a 1 GiB compare
    // being the test's cost; the full comparison runs in chunks below anyway.
    let chunk = pattern(7, 1 << 20);
    for off in (0..GIB).step_by(1 << 20) {
        a.mr.write(off as u64, &chunk).unwrap();
        a.mr.write(off as u64, &(off as u64).to_le_bytes()).unwrap();
    }
    post(
        &a,
        1,
        WrOpcode::RdmaWrite {
            remote_addr: b.mr.addr(),
            rkey: b.mr.rkey(),
        },
        0,
        GIB as u32,
    );
    let w = wait(&a.cq);
    assert_eq!(w.status, WcStatus::Success);
    let mut got = vec![0u8; 1 << 20];
    for off in (0..GIB).step_by(1 << 20) {
        b.mr.read(off as u64, &mut got).unwrap();
        assert_eq!(&got[..8], &(off as u64).to_le_bytes());
        assert_eq!(&got[8..], &chunk[8..], "write chunk at {off}");
    }
    // READ it back into a's region after clearing it.
    a.mr.fill(0, GIB as u64, 0).unwrap();
    post(
        &a,
        2,
        WrOpcode::RdmaRead {
            remote_addr: b.mr.addr(),
            rkey: b.mr.rkey(),
        },
        0,
        GIB as u32,
    );
    let r = wait(&a.cq);
    assert_eq!((r.status, r.byte_len), (WcStatus::Success, GIB as u32));
    // Loss-free loopback: the 262,144 response packets flow without a single timeout.
    assert_eq!(a.ctx.counter("timeouts"), Some(0));
    for off in (0..GIB).step_by(1 << 20) {
        a.mr.read(off as u64, &mut got).unwrap();
        assert_eq!(&got[..8], &(off as u64).to_le_bytes());
        assert_eq!(&got[8..], &chunk[8..], "read chunk at {off}");
    }
}

#[test]
fn scatter_gather_lists_and_inline() {
    let (a, b) = connected(Mtu::Mtu256, 1 << 16);
    a.mr.write(0, b"hello, ").unwrap();
    a.mr.write(1000, b"world").unwrap();
    let sges = [a.mr.sge(0, 7), a.mr.sge(1000, 5)];
    let rsges = [b.mr.sge(100, 3), b.mr.sge(5000, 100)];
    b.qp.post_recv(&[RecvWr {
        wr_id: 1,
        sg_list: &rsges,
    }])
    .unwrap();
    a.qp.post_send(&[SendWr {
        wr_id: 1,
        sg_list: &sges,
        opcode: WrOpcode::Send,
        send_flags: SendFlags::SIGNALED,
    }])
    .unwrap();
    wait(&a.cq);
    assert_eq!(wait(&b.cq).byte_len, 12);
    assert_eq!(b.mr.to_vec(100, 3).unwrap(), b"hel");
    assert_eq!(b.mr.to_vec(5000, 9).unwrap(), b"lo, world");
    // Inline: the data is taken at post time, so changing it afterwards changes nothing.
    a.mr.write(0, b"inline!").unwrap();
    let s = [a.mr.sge(0, 7)];
    a.qp.post_send(&[SendWr {
        wr_id: 2,
        sg_list: &s,
        opcode: WrOpcode::RdmaWrite {
            remote_addr: b.mr.addr() + 300,
            rkey: b.mr.rkey(),
        },
        send_flags: SendFlags::SIGNALED | SendFlags::INLINE,
    }])
    .unwrap();
    a.mr.write(0, b"XXXXXXX").unwrap();
    wait(&a.cq);
    assert_eq!(b.mr.to_vec(300, 7).unwrap(), b"inline!");
}

#[test]
fn a_qp_takes_cqs_of_its_own_device_only() {
    // Each context has its own engine; a QP's completions are pushed by its device's engine,
    // so a CQ of the other device is refused, as the kernel refuses another context's.
    let (ca, cb) = two_contexts();
    let pd = ca.alloc_pd().unwrap();
    let own = ca.create_cq(4).unwrap();
    let other = cb.create_cq(4).unwrap();
    for (send_cq, recv_cq) in [(&own, &other), (&other, &own), (&other, &other)] {
        let r = pd.create_qp(&QpInitAttr {
            send_cq,
            recv_cq,
            cap: QpCap::default(),
            qp_type: QpType::Rc,
            sq_sig_all: false,
        });
        assert!(
            matches!(r, Err(VerbsError::ForeignObject("completion queue"))),
            "{r:?}"
        );
    }
    let qp = pd.create_qp(&QpInitAttr {
        send_cq: &own,
        recv_cq: &own,
        cap: QpCap::default(),
        qp_type: QpType::Rc,
        sq_sig_all: false,
    });
    assert!(qp.is_ok(), "{qp:?}");
}

#[test]
fn post_errors_are_typed_and_nothing_is_queued() {
    let (ca, _cb) = two_contexts();
    let cap = QpCap {
        max_send_wr: 2,
        max_recv_wr: 2,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 16,
    };
    let a = end(ca, 4096, cap);
    let sge = [a.mr.sge(0, 16)];
    let wr = SendWr {
        wr_id: 1,
        sg_list: &sge,
        opcode: WrOpcode::Send,
        send_flags: SendFlags::SIGNALED,
    };
    // RESET: no posting at all.
    let e = a.qp.post_send(std::slice::from_ref(&wr)).unwrap_err();
    assert_eq!(e.bad_wr, 0);
    assert!(matches!(
        e.error,
        VerbsError::InvalidState {
            state: QpState::Reset,
            ..
        }
    ));
    assert!(matches!(
        a.qp.post_recv(&[RecvWr {
            wr_id: 1,
            sg_list: &sge
        }])
        .unwrap_err()
        .error,
        VerbsError::InvalidState { .. }
    ));
    // INIT: receives yes (up to the depth), sends no.
    init(&a.qp);
    let rwr = RecvWr {
        wr_id: 1,
        sg_list: &sge,
    };
    let e =
        a.qp.post_recv(&[rwr.clone(), rwr.clone(), rwr.clone()])
            .unwrap_err();
    assert_eq!(e.bad_wr, 2);
    assert!(matches!(
        e.error,
        VerbsError::QueueFull {
            queue: QueueKind::Recv,
            depth: 2
        }
    ));
    assert!(matches!(
        a.qp.post_send(std::slice::from_ref(&wr)).unwrap_err().error,
        VerbsError::InvalidState { .. }
    ));
    // Illegal transitions and missing attributes.
    assert!(matches!(
        a.qp.modify(
            &QpAttr {
                qp_state: QpState::Rts,
                ..Default::default()
            },
            QpAttrMask::STATE
        ),
        Err(VerbsError::IllegalTransition {
            from: QpState::Init,
            to: QpState::Rts
        })
    ));
    assert!(matches!(
        a.qp.modify(
            &QpAttr {
                qp_state: QpState::Rtr,
                ..Default::default()
            },
            QpAttrMask::STATE
        ),
        Err(VerbsError::MissingAttributes { .. })
    ));
}

#[test]
fn sge_faults_and_limits_on_a_connected_qp() {
    let (a, b) = connected(Mtu::Mtu1024, 4096);
    let post_err = |sg: &[Sge], op: WrOpcode, flags: SendFlags| {
        a.qp.post_send(&[SendWr {
            wr_id: 9,
            sg_list: sg,
            opcode: op,
            send_flags: flags,
        }])
        .unwrap_err()
        .error
    };
    let bad_key = [Sge {
        addr: a.mr.addr(),
        length: 4,
        lkey: a.mr.lkey() ^ 0x100,
    }];
    assert_eq!(
        post_err(&bad_key, WrOpcode::Send, SendFlags::EMPTY),
        VerbsError::BadSge {
            index: 0,
            fault: SgeFault::UnknownLkey
        }
    );
    let outside = [a.mr.sge(4000, 200)];
    assert_eq!(
        post_err(&outside, WrOpcode::Send, SendFlags::EMPTY),
        VerbsError::BadSge {
            index: 0,
            fault: SgeFault::OutOfRange
        }
    );
    // The QP asked for 2 SGEs and 64 bytes of inline data: a send WQE of 64 bytes, which
    // holds 4 SGEs (rxe's sizing, ib::sized_as_rxe).
    let five: Vec<Sge> = (0..5).map(|i| a.mr.sge(i, 1)).collect();
    assert_eq!(
        post_err(&five, WrOpcode::Send, SendFlags::EMPTY),
        VerbsError::TooManySge { given: 5, max: 4 }
    );
    let big = [a.mr.sge(0, 100)];
    assert_eq!(
        post_err(&big, WrOpcode::Send, SendFlags::INLINE),
        VerbsError::InlineTooLarge {
            given: 100,
            max: 64
        }
    );
    let eight = [a.mr.sge(0, 8)];
    let misaligned = WrOpcode::AtomicFetchAdd {
        remote_addr: b.mr.addr() + 4,
        rkey: b.mr.rkey(),
        add: 1,
    };
    assert!(matches!(
        post_err(&eight, misaligned, SendFlags::EMPTY),
        VerbsError::InvalidWr(_)
    ));
    let four = [a.mr.sge(0, 4)];
    let fa = WrOpcode::AtomicFetchAdd {
        remote_addr: b.mr.addr(),
        rkey: b.mr.rkey(),
        add: 1,
    };
    assert_eq!(
        post_err(&four, fa, SendFlags::EMPTY),
        VerbsError::BadSge {
            index: 0,
            fault: SgeFault::AtomicLength
        }
    );
    // A READ target needs LOCAL_WRITE on the local region.
    let ro = a.pd.register_mr(64, AccessFlags::REMOTE_READ).unwrap();
    let rsge = [ro.sge(0, 8)];
    let rd = WrOpcode::RdmaRead {
        remote_addr: b.mr.addr(),
        rkey: b.mr.rkey(),
    };
    assert_eq!(
        post_err(&rsge, rd, SendFlags::EMPTY),
        VerbsError::BadSge {
            index: 0,
            fault: SgeFault::AccessDenied
        }
    );
    // Remote write without local write is refused at registration (ibv_reg_mr: EINVAL).
    assert!(matches!(
        a.pd.register_mr(64, AccessFlags::REMOTE_WRITE),
        Err(VerbsError::InvalidAttribute { .. })
    ));
    // A region the allocator cannot give is refused (ibv_reg_mr: ENOMEM), not an abort.
    assert_eq!(
        a.pd.register_mr(usize::MAX / 2, AccessFlags::LOCAL_WRITE)
            .unwrap_err(),
        VerbsError::OutOfMemory {
            bytes: (usize::MAX / 2) as u64
        }
    );
    // An empty CQ times out.
    let mut wc = [WorkCompletion::default(); 1];
    assert_eq!(
        a.cq.wait(&mut wc, Duration::from_millis(20)),
        Err(VerbsError::Timeout)
    );
}

/// Busy-poll mode: the application threads drive the engines as they post and poll; SEND,
/// WRITE and READ of several packets arrive intact, and a wait with nothing to come still
/// times out.
#[test]
fn busy_poll_send_write_and_read() {
    let (a, b) = connected_on(two_contexts_with(true), Mtu::Mtu1024, 1 << 16, 14, 7, 7);
    let len = 5 * 1024 + 7;
    let data = pattern(5, len as usize);
    a.mr.write(0, &data).unwrap();
    let rsge = [b.mr.sge(0x8000, 0x8000)];
    b.qp.post_recv(&[RecvWr {
        wr_id: 9,
        sg_list: &rsge,
    }])
    .unwrap();
    post(&a, 1, WrOpcode::Send, 0, len);
    assert_eq!(wait(&a.cq).status, WcStatus::Success);
    let r = wait(&b.cq);
    assert_eq!((r.wr_id, r.status, r.byte_len), (9, WcStatus::Success, len));
    assert_eq!(b.mr.to_vec(0x8000, len as usize).unwrap(), data);
    let wr = WrOpcode::RdmaWrite {
        remote_addr: b.mr.addr() + 0x100,
        rkey: b.mr.rkey(),
    };
    post(&a, 2, wr, 0, len);
    assert_eq!(wait(&a.cq).status, WcStatus::Success);
    assert_eq!(b.mr.to_vec(0x100, len as usize).unwrap(), data);
    let rd = WrOpcode::RdmaRead {
        remote_addr: b.mr.addr() + 0x100,
        rkey: b.mr.rkey(),
    };
    post(&a, 3, rd, 0x4000, len);
    let r = wait(&a.cq);
    assert_eq!((r.wr_id, r.status, r.byte_len), (3, WcStatus::Success, len));
    assert_eq!(a.mr.to_vec(0x4000, len as usize).unwrap(), data);
    let mut wc = [WorkCompletion::default(); 1];
    assert_eq!(
        a.cq.wait(&mut wc, Duration::from_millis(20)),
        Err(VerbsError::Timeout)
    );
}

/// Waits (at most 5 s) until both ends' engine threads have nothing to do and wait in poll.
fn wait_engines_idle(a: &End, b: &End) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !(a.ctx.engine_waiting() && b.ctx.engine_waiting()) {
        assert!(
            Instant::now() < deadline,
            "the engines did not go idle within 5 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Issue 11: a post whose WR k > 0 is refused used to return before ringing the engine, so
/// WRs 0..k-1 sat queued until an unrelated event. Here nothing else happens: the engines are
/// idle (waiting in poll) when the post comes, and the first WR must still complete.
#[test]
fn a_partly_failed_post_sends_the_wrs_before_the_bad_one() {
    let (a, b) = connected(Mtu::Mtu1024, 4096);
    wait_engines_idle(&a, &b);
    let good = [a.mr.sge(0, 64)];
    // 5 SGEs: the QP holds 4 (2 asked, and 64 bytes of inline data: rxe's sizing).
    let too_many: Vec<Sge> = (0..5).map(|i| a.mr.sge(i * 8, 8)).collect();
    let write = |wr_id, sg_list| SendWr {
        wr_id,
        sg_list,
        opcode: WrOpcode::RdmaWrite {
            remote_addr: b.mr.addr(),
            rkey: b.mr.rkey(),
        },
        send_flags: SendFlags::SIGNALED,
    };
    a.mr.write(0, &pattern(3, 64)).unwrap();
    let e =
        a.qp.post_send(&[write(1, &good), write(2, &too_many)])
            .unwrap_err();
    assert_eq!(e.bad_wr, 1);
    assert!(matches!(e.error, VerbsError::TooManySge { .. }), "{e}");
    let mut wc = [WorkCompletion::default(); 2];
    let n =
        a.cq.wait(&mut wc, Duration::from_secs(5))
            .expect("WR 0 completes");
    assert_eq!((n, wc[0].wr_id, wc[0].status), (1, 1, WcStatus::Success));
    assert_eq!(b.mr.to_vec(0, 64).unwrap(), pattern(3, 64));

    // The same for receives: in ERROR a posted receive completes at once (flushed), and the
    // engine delivers it even though the next WR of the post was refused.
    a.qp.modify(
        &QpAttr {
            qp_state: QpState::Err,
            ..Default::default()
        },
        QpAttrMask::STATE,
    )
    .unwrap();
    while a.cq.wait(&mut wc, Duration::from_millis(200)).is_ok() {}
    wait_engines_idle(&a, &b);
    let rsge = [a.mr.sge(0, 8)];
    let rsge_bad = [a.mr.sge(0, 8), a.mr.sge(8, 8), a.mr.sge(16, 8)];
    let e =
        a.qp.post_recv(&[
            RecvWr {
                wr_id: 7,
                sg_list: &rsge,
            },
            RecvWr {
                wr_id: 8,
                sg_list: &rsge_bad,
            },
        ])
        .unwrap_err();
    assert_eq!(e.bad_wr, 1);
    let n =
        a.cq.wait(&mut wc, Duration::from_secs(5))
            .expect("receive 0 completes");
    assert_eq!((n, wc[0].wr_id, wc[0].status), (1, 7, WcStatus::WrFlushErr));
}

#[test]
fn send_queue_full_is_an_error_not_a_drop() {
    let (a, _b) = connected(Mtu::Mtu1024, 4096);
    // The peer posts no receive: SENDs stall on RNR and stay outstanding.
    let sge = [a.mr.sge(0, 8)];
    let wr = SendWr {
        wr_id: 1,
        sg_list: &sge,
        opcode: WrOpcode::Send,
        send_flags: SendFlags::SIGNALED,
    };
    let wrs: Vec<SendWr> = (0..65).map(|_| wr.clone()).collect();
    let e = a.qp.post_send(&wrs).unwrap_err();
    assert_eq!(e.bad_wr, 64);
    assert_eq!(
        e.error,
        VerbsError::QueueFull {
            queue: QueueKind::Send,
            depth: 64
        }
    );
    assert_eq!(a.qp.send_queue_len(), 64);
}

#[test]
fn remote_access_error_and_flush() {
    let (a, b) = connected(Mtu::Mtu1024, 4096);
    let rsge = [b.mr.sge(0, 64)];
    b.qp.post_recv(&[RecvWr {
        wr_id: 77,
        sg_list: &rsge,
    }])
    .unwrap();
    b.mr.fill(0, 4096, 0xAB).unwrap();
    post(
        &a,
        1,
        WrOpcode::RdmaWrite {
            remote_addr: b.mr.addr() + 4000,
            rkey: b.mr.rkey(),
        },
        0,
        200,
    );
    post(&a, 2, WrOpcode::Send, 0, 8);
    let first = wait(&a.cq);
    assert_eq!((first.wr_id, first.status), (1, WcStatus::RemAccessErr));
    let second = wait(&a.cq);
    assert_eq!((second.wr_id, second.status), (2, WcStatus::WrFlushErr));
    assert_eq!(a.qp.query().qp_state, QpState::Err);
    let r = wait(&b.cq);
    assert_eq!((r.wr_id, r.status), (77, WcStatus::WrFlushErr));
    assert_eq!(
        b.mr.to_vec(0, 4096).unwrap(),
        vec![0xAB; 4096],
        "memory untouched"
    );
    assert!(b.ctx.counter("send_nak").unwrap() >= 1);
    // Posting to a QP in ERROR completes at once with "flushed".
    post(&a, 3, WrOpcode::Send, 0, 8);
    assert_eq!(wait(&a.cq).status, WcStatus::WrFlushErr);
}

#[test]
fn rnr_retry_exceeded() {
    let (a, _b) = connected_with(Mtu::Mtu1024, 4096, 14, 7, 1);
    post(&a, 1, WrOpcode::Send, 0, 8);
    let wc = wait(&a.cq);
    assert_eq!(wc.status, WcStatus::RnrRetryExcErr);
    assert!(a.ctx.counter("rcvd_rnr_err").unwrap() >= 2);
}

#[test]
fn peer_gone_ends_in_retry_exceeded_within_the_budget() {
    // timeout 12: 16.8 ms; retry_cnt 2: three timeouts, about 50 ms in all.
    let (a, b) = connected_with(Mtu::Mtu1024, 4096, 12, 2, 7);
    drop(b);
    let t = std::time::Instant::now();
    post(
        &a,
        1,
        WrOpcode::RdmaWrite {
            remote_addr: 0x1000,
            rkey: 0x100,
        },
        0,
        100,
    );
    post(&a, 2, WrOpcode::Send, 0, 8);
    assert_eq!(wait(&a.cq).status, WcStatus::RetryExcErr);
    assert_eq!(wait(&a.cq).status, WcStatus::WrFlushErr);
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(45) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert_eq!(a.ctx.counter("retry_exceeded_err"), Some(1));
}

#[test]
fn reregistration_changes_the_key_and_old_keys_fail() {
    let (a, mut b) = connected(Mtu::Mtu1024, 4096);
    let old = b.mr.rkey();
    b.mr.reregister(FULL).unwrap();
    assert_ne!(b.mr.rkey(), old);
    assert_eq!(b.mr.rkey() >> 8, old >> 8);
    assert_ne!(b.mr.rkey() & 0xFF, old & 0xFF);
    post(
        &a,
        1,
        WrOpcode::RdmaWrite {
            remote_addr: b.mr.addr(),
            rkey: old,
        },
        0,
        8,
    );
    assert_eq!(wait(&a.cq).status, WcStatus::RemAccessErr);
}

#[test]
fn modify_keeps_the_keys_and_changes_rights_and_pd() {
    // spec-notes/beyond-rxe.md rule 5: ibv_rereg_mr as the shim does it.
    let (a, mut b) = connected(Mtu::Mtu1024, 4096);
    let (key, va) = (b.mr.rkey(), b.mr.addr());
    let write = |wr_id| {
        post(
            &a,
            wr_id,
            WrOpcode::RdmaWrite {
                remote_addr: va,
                rkey: key,
            },
            0,
            8,
        );
        wait(&a.cq).status
    };
    b.mr.modify(None, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
        .unwrap();
    assert_eq!((b.mr.lkey(), b.mr.rkey()), (key, key), "the keys stay");
    assert_eq!(write(1), WcStatus::Success);
    // Into another PD of the device: the peer's QP, of the first PD, is refused.
    let other = b.ctx.alloc_pd().unwrap();
    b.mr.modify(Some(&other), FULL).unwrap();
    assert_eq!(b.mr.rkey(), key);
    assert_eq!(write(2), WcStatus::RemAccessErr);
    // Rights registration refuses, and a PD of another device, leave it as it was.
    assert!(b.mr.modify(None, AccessFlags::REMOTE_WRITE).is_err());
    assert!(b.mr.modify(Some(&a.pd), FULL).is_err());
    assert_eq!((b.mr.rkey(), b.mr.access()), (key, FULL));
}

#[test]
fn a_receive_posted_before_the_region_moved_pd_fails_and_reset_takes_the_completions() {
    // spec-notes/beyond-rxe.md rule 5: the receive's key is checked where the data lands.
    let (a, mut b) = connected(Mtu::Mtu1024, 4096);
    let rsge = [b.mr.sge(0, 64)];
    let recv = |wr_id| RecvWr {
        wr_id,
        sg_list: &rsge,
    };
    b.qp.post_recv(&[recv(1)]).unwrap();
    let other = b.ctx.alloc_pd().unwrap();
    b.mr.modify(Some(&other), FULL).unwrap();
    // Posted after the move: accepted (keys, bounds and rights are checked at post, the PD
    // where the data lands).
    b.qp.post_recv(&[recv(2)]).unwrap();
    post(&a, 7, WrOpcode::Send, 0, 8);
    let wc = wait(&a.cq);
    assert_eq!((wc.wr_id, wc.status), (7, WcStatus::RemOpErr));
    let wc = wait(&b.cq);
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::LocQpOpErr));
    // The second receive's flush is waiting on B's CQ; RESET takes it away (libmlx5's
    // mlx5_cq_clean), and A's QP, reset too, leaves nothing either.
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.cq.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(b.cq.len(), 1, "the flushed receive");
    let reset = QpAttr {
        qp_state: QpState::Reset,
        ..Default::default()
    };
    b.qp.modify(&reset, QpAttrMask::STATE).unwrap();
    assert!(b.cq.poll_one().unwrap().is_none());
    a.qp.modify(&reset, QpAttrMask::STATE).unwrap();
    assert!(a.cq.poll_one().unwrap().is_none());
}

#[test]
fn counters_are_named_as_rxe_names_them() {
    let (a, b) = connected(Mtu::Mtu1024, 4096);
    let rsge = [b.mr.sge(0, 64)];
    b.qp.post_recv(&[RecvWr {
        wr_id: 1,
        sg_list: &rsge,
    }])
    .unwrap();
    post(&a, 1, WrOpcode::Send, 0, 8);
    wait(&a.cq);
    wait(&b.cq);
    let names: Vec<&str> = a.ctx.counters().iter().map(|(n, _)| *n).collect();
    for n in [
        "sent_pkts",
        "rcvd_pkts",
        "duplicate_request",
        "out_of_seq_request",
        "rcvd_seq_err",
        "rcvd_rnr_err",
        "send_rnr_err",
        "retry_exceeded_err",
        "retry_rnr_exceeded_err",
        "ack_deferred",
        "completer_retry_err",
        "send_err",
        "rdma_sends",
        "rdma_recvs",
    ] {
        assert!(names.contains(&n), "{n}");
    }
    assert_eq!(a.ctx.counter("rdma_sends"), Some(1));
    assert_eq!(b.ctx.counter("rdma_recvs"), Some(1));
    assert!(a.ctx.counter("sent_pkts").unwrap() >= 1);
}

#[test]
fn ipv6_send_write_read_and_atomic() {
    // ::1 is the only IPv6 loopback address, so the two devices differ by UDP port and name
    // each other's.
    let (a_port, b_port) = loop {
        let p1 = UdpSocket::bind("[::1]:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let p2 = UdpSocket::bind("[::1]:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if p1 != p2 {
            break (p1, p2);
        }
    };
    let open = |port: u16, peer: u16| {
        let mut cfg = DeviceConfig::new(SocketAddr::new("::1".parse().unwrap(), port));
        cfg.remote_port = Some(peer);
        Context::open(&cfg).expect("IPv6 loopback device")
    };
    let cap = common::queues(16);
    let a = end(open(a_port, b_port), 1 << 16, cap);
    let b = end(open(b_port, a_port), 1 << 16, cap);
    assert_eq!(
        a.ctx.gid(0).unwrap().to_ip(),
        "::1".parse::<IpAddr>().unwrap()
    );
    init(&a.qp);
    init(&b.qp);
    rtr_rts(&a, &b, Mtu::Mtu1024, 14, 7, 7);
    rtr_rts(&b, &a, Mtu::Mtu1024, 14, 7, 7);
    let data = pattern(3, 5000);
    a.mr.write(0, &data).unwrap();
    let rsge = [b.mr.sge(0x8000, 0x8000)];
    b.qp.post_recv(&[RecvWr {
        wr_id: 1,
        sg_list: &rsge,
    }])
    .unwrap();
    post(&a, 1, WrOpcode::Send, 0, 5000);
    assert_eq!(wait(&a.cq).status, WcStatus::Success);
    assert_eq!(wait(&b.cq).byte_len, 5000);
    assert_eq!(b.mr.to_vec(0x8000, 5000).unwrap(), data);
    post(
        &a,
        2,
        WrOpcode::RdmaWrite {
            remote_addr: b.mr.addr() + 0x100,
            rkey: b.mr.rkey(),
        },
        0,
        3000,
    );
    assert_eq!(wait(&a.cq).status, WcStatus::Success);
    assert_eq!(b.mr.to_vec(0x100, 3000).unwrap(), data[..3000]);
    post(
        &a,
        3,
        WrOpcode::RdmaRead {
            remote_addr: b.mr.addr() + 0x8000,
            rkey: b.mr.rkey(),
        },
        0x4000,
        5000,
    );
    assert_eq!(wait(&a.cq).status, WcStatus::Success);
    assert_eq!(a.mr.to_vec(0x4000, 5000).unwrap(), data);
    post(
        &a,
        4,
        WrOpcode::AtomicFetchAdd {
            remote_addr: b.mr.addr() + 0x40,
            rkey: b.mr.rkey(),
            add: 9,
        },
        0x10,
        8,
    );
    assert_eq!(wait(&a.cq).status, WcStatus::Success);
    assert_eq!(b.mr.load_u64(0x40).unwrap(), 9);
    assert_eq!(a.ctx.counter("icrc_err"), Some(0));
    assert_eq!(b.ctx.counter("icrc_err"), Some(0));
}

#[test]
fn poll_each_hands_out_at_most_max_completions_oldest_first() {
    let (a, b) = connected(Mtu::Mtu1024, 1 << 16);
    for i in 0..5u64 {
        post(
            &a,
            i,
            WrOpcode::RdmaWrite {
                remote_addr: b.mr.addr() + 64 * i,
                rkey: b.mr.rkey(),
            },
            0,
            64,
        );
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while a.cq.len() < 5 {
        assert!(Instant::now() < deadline, "5 WRITEs did not complete");
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut got = Vec::new();
    let n = a.cq.poll_each(3, |i, wc| got.push((i, wc.wr_id))).unwrap();
    assert_eq!((n, got), (3, vec![(0, 0), (1, 1), (2, 2)]));
    let mut rest = Vec::new();
    let n =
        a.cq.poll_each(10, |i, wc| rest.push((i, wc.wr_id, wc.status)))
            .unwrap();
    assert_eq!(
        (n, rest),
        (
            2,
            vec![(0, 3, WcStatus::Success), (1, 4, WcStatus::Success)]
        )
    );
    assert_eq!(a.cq.poll_each(10, |_, _| panic!("an empty CQ")), Ok(0));
}

/// `pages` fresh anonymous read-write pages (the application memory the shim registers).
fn mmap_pages(pages: usize) -> *mut u8 {
    // SAFETY: a fresh anonymous mapping, no address asked for.
    let m = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            pages * 4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(m, libc::MAP_FAILED);
    m.cast()
}

/// Gives `a` and `b` fresh RC QPs connected to each other (after a failure moved the old
/// ones to ERROR).
fn reconnect(a: &mut End, b: &mut End) {
    for e in [&mut *a, &mut *b] {
        e.qp =
            e.pd.create_qp(&QpInitAttr {
                send_cq: &e.cq,
                recv_cq: &e.cq,
                cap: QpCap::default(),
                qp_type: QpType::Rc,
                sq_sig_all: false,
            })
            .unwrap();
        init(&e.qp);
    }
    rtr_rts(a, b, Mtu::Mtu1024, 14, 7, 7);
    rtr_rts(b, a, Mtu::Mtu1024, 14, 7, 7);
}

#[test]
fn application_memory_gone_while_registered_is_a_remote_access_error_and_counted() {
    // The libibverbs shim's regions are the application's memory (register_foreign_mr).
    // Made inaccessible or read-only while registered, it is refused to a peer's WRITE, READ
    // or atomic with a remote access error NAK, counted in mem_access_err, instead of a
    // SIGSEGV from the engine (spec-notes/memory-placement.md rule 15). PROT_NONE stands in for
    // munmap here: a hole could be taken by another test's mapping meanwhile, and written;
    // ibverbs/tests/c/unmapped.c unmaps, in a process of its own.
    let (mut a, mut b) = connected(Mtu::Mtu1024, 8192);
    let m = mmap_pages(4);
    // SAFETY: the test's own mapping, unmapped only after `region` is dropped.
    let region = unsafe { b.pd.register_foreign_mr(m, 4 * 4096, m as u64, FULL) }.unwrap();
    // SAFETY: pages of the test's own mapping.
    unsafe {
        assert_eq!(libc::mprotect(m.cast(), 2 * 4096, libc::PROT_NONE), 0);
        assert_eq!(
            libc::mprotect(m.add(2 * 4096).cast(), 4096, libc::PROT_READ),
            0
        );
    }
    let at = |page: u64| m as u64 + page * 4096;
    let rkey = region.rkey();
    let cases = [
        (
            WrOpcode::RdmaWrite {
                remote_addr: at(0),
                rkey,
            },
            4096,
        ),
        (
            WrOpcode::RdmaRead {
                remote_addr: at(1),
                rkey,
            },
            4096,
        ),
        (
            WrOpcode::RdmaWrite {
                remote_addr: at(2),
                rkey,
            },
            64,
        ),
        (
            WrOpcode::AtomicFetchAdd {
                remote_addr: at(2),
                rkey,
                add: 1,
            },
            8,
        ),
        (
            WrOpcode::AtomicCmpSwap {
                remote_addr: at(0),
                rkey,
                compare: 0,
                swap: 1,
            },
            8,
        ),
    ];
    for (i, (op, len)) in cases.into_iter().enumerate() {
        if i > 0 {
            reconnect(&mut a, &mut b);
        }
        let before = b.ctx.counter("mem_access_err").unwrap();
        post(&a, i as u64, op, 0, len);
        let wc = wait(&a.cq);
        assert_eq!(
            (wc.wr_id, wc.status),
            (i as u64, WcStatus::RemAccessErr),
            "{op:?}"
        );
        assert_eq!(
            b.ctx.counter("mem_access_err").unwrap(),
            before + 1,
            "{op:?}"
        );
        assert_eq!(b.qp.query().qp_state, QpState::Err);
    }
    // The read-only page still reads, and kept its bytes.
    reconnect(&mut a, &mut b);
    a.mr.fill(0, 64, 0xEE).unwrap();
    post(
        &a,
        9,
        WrOpcode::RdmaRead {
            remote_addr: at(2),
            rkey,
        },
        0,
        64,
    );
    assert_eq!(wait(&a.cq).status, WcStatus::Success);
    assert_eq!(a.mr.to_vec(0, 64).unwrap(), vec![0; 64]);
    drop(region);
    // SAFETY: the test's mapping, no longer registered.
    unsafe { libc::munmap(m.cast(), 4 * 4096) };
}

#[test]
fn registering_application_memory_checks_it_as_rxe_pins_it() {
    let ctx = two_contexts().0;
    let pd = ctx.alloc_pd().unwrap();
    let m = mmap_pages(2);
    // SAFETY: the second page of the test's mapping.
    unsafe { assert_eq!(libc::mprotect(m.add(4096).cast(), 4096, libc::PROT_READ), 0) };
    let reg = |p: *mut u8, len: usize, access: AccessFlags| {
        // SAFETY: the test's own mapping, unmapped only after every region is dropped; a
        // registration that fails keeps nothing.
        unsafe { pd.register_foreign_mr(p, len, p as u64, access) }.map(|_| ())
    };
    let addr = m as u64;
    assert_eq!(reg(m, 8192, AccessFlags::REMOTE_READ), Ok(()));
    assert_eq!(
        reg(m, 8192, AccessFlags::LOCAL_WRITE),
        Err(VerbsError::NotWritable { addr, len: 8192 })
    );
    assert_eq!(
        reg(m, 8192, AccessFlags::MW_BIND),
        Err(VerbsError::NotWritable { addr, len: 8192 })
    );
    assert_eq!(reg(m, 4096, AccessFlags::LOCAL_WRITE), Ok(()));
    assert_eq!(
        reg(0xDEAD_0000 as *mut u8, 4096, AccessFlags::LOCAL_WRITE),
        Err(VerbsError::NotMapped {
            addr: 0xDEAD_0000,
            len: 4096
        })
    );
    // SAFETY: the whole mapping, now PROT_NONE, then gone.
    unsafe { assert_eq!(libc::mprotect(m.cast(), 8192, libc::PROT_NONE), 0) };
    assert_eq!(
        reg(m, 4096, AccessFlags::empty()),
        Err(VerbsError::NotReadable { addr, len: 4096 })
    );
    // SAFETY: as above.
    unsafe { assert_eq!(libc::munmap(m.cast(), 8192), 0) };
}
