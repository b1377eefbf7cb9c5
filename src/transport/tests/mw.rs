//! Memory windows (spec-notes/memory-windows.md), one test per rule, on the virtual-time pair:
//! B owns a region registered with MW_BIND (and no remote rights of its own) and binds
//! windows onto it with work requests on its QP; A reaches B's memory through the windows'
//! keys. A third QP on B's device (same table, same PD) checks which QPs a window serves.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::memory::SharedBytes;
use crate::transport::mw::key_is_mw;
use crate::wire::{AckSyndrome, ExtHeaders, NakCode, Opcode, RethRepr};

/// Where B's bindable region lives (away from the pair's own region).
const W_IOVA: u64 = 0x5500_0000_0000;
const W_LEN: usize = 64 * 1024;

/// Registers B's bindable region with `access`.
fn bindable(p: &mut Pair, access: AccessFlags) -> Arc<Mr> {
    p.b.mrs
        .register(1, Arc::new(SharedBytes::new(W_LEN)), W_IOVA, access)
        .unwrap()
}

fn rw() -> AccessFlags {
    AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ
}

fn bind_op(mw: &Mw, key: u8, mr: &Mr, addr: u64, length: u64, access: AccessFlags) -> WrOpcode {
    let rkey = mw.rkey();
    WrOpcode::BindMw {
        mw_rkey: rkey,
        new_rkey: (rkey & !0xff) | u32::from(key),
        bind: MwBindInfo {
            mr_lkey: mr.lkey,
            addr,
            length,
            access,
        },
    }
}

/// B posts a local (or data-less) WR on its QP.
fn post_b(p: &mut Pair, wr_id: u64, opcode: WrOpcode) {
    let wr = SendWr {
        wr_id,
        sg_list: &[],
        opcode,
        send_flags: SendFlags::SIGNALED,
    };
    p.b.qp.post_send(&wr, &p.b.mrs).unwrap();
}

/// B's send completions as (wr_id, opcode, status).
fn b_done(p: &Pair) -> Vec<(u64, WcOpcode, WcStatus)> {
    p.b.send_wcs
        .iter()
        .map(|w| (w.wr_id, w.opcode, w.status))
        .collect()
}

/// A type 2 window on B bound to B's QP over `length` bytes at `offset` of `mr`.
fn bound_type2(p: &mut Pair, mr: &Mr, offset: u64, length: u64, access: AccessFlags) -> Arc<Mw> {
    let mw = p.b.mrs.alloc_mw(1, MwType::Type2).unwrap();
    assert!(key_is_mw(mw.rkey()));
    assert_eq!(mw.binding().state, MwState::Free);
    let op = bind_op(&mw, 0x5A, mr, W_IOVA + offset, length, access);
    post_b(p, 900, op);
    p.drive();
    assert_eq!(
        b_done(p).last(),
        Some(&(900, WcOpcode::BindMw, WcStatus::Success))
    );
    assert_eq!(mw.rkey() & 0xff, 0x5A, "the consumer's key byte");
    mw
}

/// A's RDMA WRITE of `len` bytes (from its region at 0) to `va` with `rkey`; returns its
/// completion status.
fn write_via(p: &mut Pair, wr_id: u64, va: u64, rkey: u32, len: u32) -> WcStatus {
    let data = pattern(wr_id, len as usize);
    p.a.mr.storage.write(0, &data).unwrap();
    let op = WrOpcode::RdmaWrite {
        remote_addr: va,
        rkey,
    };
    post_send(p, wr_id, op, 0, len);
    p.drive();
    p.a.send_wcs
        .iter()
        .find(|w| w.wr_id == wr_id)
        .unwrap()
        .status
}

#[test]
fn a_type_2_window_serves_its_range_with_its_rights_and_nothing_else() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let mr = bindable(&mut p, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND);
    // The region has a key (rkey = lkey, spec-notes/beyond-rxe.md rule 5) but no remote rights.
    assert_eq!(mr.rkey, mr.lkey);
    let mw = bound_type2(&mut p, &mr, 4096, 8192, rw());
    assert_eq!(mr.bound_windows(), 1);
    // A 3000-byte WRITE (three packets) through the window lands at the window's bytes.
    let va = W_IOVA + 4096 + 100;
    assert_eq!(write_via(&mut p, 1, va, mw.rkey(), 3000), WcStatus::Success);
    assert_eq!(
        mr.storage.to_vec(4096 + 100, 3000).unwrap(),
        pattern(1, 3000)
    );
    // The region's key is no way in: it has no remote rights.
    // One byte before the window, inside the region: remote access error, nothing written.
    let before = mr.storage.to_vec(0, 4096).unwrap();
    assert_eq!(
        write_via(&mut p, 2, W_IOVA + 4095, mw.rkey(), 2),
        WcStatus::RemAccessErr
    );
    assert_eq!(mr.storage.to_vec(0, 4096).unwrap(), before);
    assert_eq!(
        p.b.qp.state(),
        QpState::Err,
        "NAK class C: responder to ERROR"
    );
}

#[test]
fn a_window_past_its_end_or_without_the_right_is_refused() {
    for (case, va_off, len, op_read) in [
        ("past the end", 4096 + 8192 - 10, 11u32, false),
        ("read without REMOTE_READ", 4096, 8, true),
    ] {
        let mut p = Pair::new(Mtu::Mtu1024);
        let mr = bindable(&mut p, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND);
        let mw = bound_type2(&mut p, &mr, 4096, 8192, AccessFlags::REMOTE_WRITE);
        let status = if op_read {
            let op = WrOpcode::RdmaRead {
                remote_addr: W_IOVA + va_off,
                rkey: mw.rkey(),
            };
            post_send(&mut p, 1, op, 0, len);
            p.drive();
            p.a.send_wcs[0].status
        } else {
            write_via(&mut p, 1, W_IOVA + va_off, mw.rkey(), len)
        };
        assert_eq!(status, WcStatus::RemAccessErr, "{case}");
    }
}

#[test]
fn bind_checks_follow_rxe_check_bind_mw() {
    // (case, region rights, window type, bind length, window rights, offset)
    let zero = AccessFlags::ZERO_BASED;
    let lw = AccessFlags::LOCAL_WRITE;
    let bind = AccessFlags::MW_BIND;
    let cases: [(&str, AccessFlags, MwType, u64, AccessFlags, u64); 6] = [
        (
            "region without MW_BIND (C10-73)",
            lw,
            MwType::Type2,
            64,
            rw(),
            0,
        ),
        (
            "remote write on a region without local write (C10-74)",
            bind,
            MwType::Type2,
            64,
            AccessFlags::REMOTE_WRITE,
            0,
        ),
        (
            "outside the region (C10-75)",
            lw | bind,
            MwType::Type2,
            64,
            rw(),
            W_LEN as u64 - 63,
        ),
        (
            "type 2 with length 0 (o10-37.2.40)",
            lw | bind,
            MwType::Type2,
            0,
            rw(),
            0,
        ),
        (
            "zero-based type 1 (o10-36.2.2)",
            lw | bind,
            MwType::Type1,
            64,
            rw() | zero,
            0,
        ),
        (
            // rxe's RXE_ACCESS_SUPPORTED_MW takes the region bits (LOCAL_WRITE, MW_BIND)
            // too, not IBV_ACCESS_HUGETLB.
            "an access bit windows cannot have",
            lw | bind,
            MwType::Type2,
            64,
            rw() | AccessFlags(1 << 7),
            0,
        ),
    ];
    for (case, mr_access, t, length, access, offset) in cases {
        let mut p = Pair::new(Mtu::Mtu1024);
        let mr = bindable(&mut p, mr_access);
        let mw = p.b.mrs.alloc_mw(1, t).unwrap();
        let key = mw.rkey();
        let op = bind_op(&mw, 7, &mr, W_IOVA + offset, length, access);
        post_b(&mut p, 1, op);
        post_b(&mut p, 2, WrOpcode::LocalInv { rkey: 1 << 31 });
        p.drive();
        assert_eq!(
            b_done(&p),
            vec![
                (1, WcOpcode::BindMw, WcStatus::MwBindErr),
                (2, WcOpcode::LocalInv, WcStatus::WrFlushErr)
            ],
            "{case}"
        );
        assert_eq!(p.b.qp.state(), QpState::Err, "{case}");
        assert_eq!(mw.rkey(), key, "{case}: key unchanged");
        assert_eq!(mr.bound_windows(), 0, "{case}");
    }
}

#[test]
fn a_bound_type_2_window_cannot_be_bound_again_until_invalidated() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let mr = bindable(&mut p, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND);
    let mw = bound_type2(&mut p, &mr, 0, 64, rw());
    let op = bind_op(&mw, 9, &mr, W_IOVA, 64, rw());
    post_b(&mut p, 2, op);
    p.drive();
    assert_eq!(
        b_done(&p)[1],
        (2, WcOpcode::BindMw, WcStatus::MwBindErr),
        "o10-37.2.30: type 2 binds only when FREE"
    );
}

#[test]
fn local_invalidate_frees_the_window_and_its_old_key_is_nakked() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let mr = bindable(&mut p, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND);
    let mw = bound_type2(&mut p, &mr, 0, 4096, rw());
    let key = mw.rkey();
    assert_eq!(write_via(&mut p, 1, W_IOVA, key, 16), WcStatus::Success);
    // While bound, the region cannot be deregistered (IBTA 10.6.7.2.6).
    assert_eq!(
        p.b.mrs.try_deregister(mr.lkey).err(),
        Some(DeregFault::WindowsBound)
    );
    post_b(&mut p, 2, WrOpcode::LocalInv { rkey: key });
    p.drive();
    assert_eq!(b_done(&p)[1], (2, WcOpcode::LocalInv, WcStatus::Success));
    assert_eq!(mw.binding().state, MwState::Free);
    assert_eq!(mr.bound_windows(), 0);
    let before = mr.storage.to_vec(0, 64).unwrap();
    assert_eq!(
        write_via(&mut p, 3, W_IOVA, key, 16),
        WcStatus::RemAccessErr
    );
    assert_eq!(mr.storage.to_vec(0, 64).unwrap(), before, "nothing landed");
    assert!(p.b.mrs.try_deregister(mr.lkey).is_ok());
}

#[test]
fn local_invalidate_refuses_type_1_windows_region_keys_and_unknown_keys() {
    for case in ["type 1", "region key", "stale window key"] {
        let mut p = Pair::new(Mtu::Mtu1024);
        let mr = bindable(&mut p, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND);
        let rkey = match case {
            "type 1" => {
                let mw = p.b.mrs.alloc_mw(1, MwType::Type1).unwrap();
                let op = bind_op(&mw, 3, &mr, W_IOVA, 64, rw());
                post_b(&mut p, 9, op);
                p.drive();
                assert_eq!(b_done(&p)[0].2, WcStatus::Success);
                mw.rkey()
            }
            "region key" => mr.lkey,
            _ => bound_type2(&mut p, &mr, 0, 64, rw()).rkey() ^ 1,
        };
        post_b(&mut p, 2, WrOpcode::LocalInv { rkey });
        p.drive();
        assert_eq!(
            b_done(&p).last(),
            Some(&(2, WcOpcode::LocalInv, WcStatus::LocQpOpErr)),
            "{case}"
        );
        assert_eq!(p.b.qp.state(), QpState::Err, "{case}");
    }
}

/// A second QP on B's device (B's table, PD 1), connected towards A's address.
fn third_qp(p: &Pair) -> Side {
    let mut c = side(0x13, "192.0.2.2");
    connect_qp(&mut c, &p.a, Mtu::Mtu1024, 14, 7, 7);
    c
}

/// A WRITE ONLY of 8 bytes crafted as A would send it, handed to QP `c` with B's table;
/// returns the AETH syndrome of its answer.
fn write_at(p: &Pair, c: &mut Side, va: u64, rkey: u32) -> AckSyndrome {
    let payload = [0xEEu8; 8];
    let pkt = PacketRepr {
        bth: crate::wire::BthRepr {
            opcode: Opcode::RC_RDMA_WRITE_ONLY,
            psn: c.qp.resp.psn.value(),
            dest_qp: c.qp.qpn(),
            ack_req: true,
            ..Default::default()
        },
        ext: ExtHeaders {
            reth: Some(RethRepr { va, rkey, len: 8 }),
            ..ExtHeaders::default()
        },
        payload: &payload,
    };
    c.qp.handle_packet(p.now, &pkt, &p.b.mrs);
    let mut buf = vec![0u8; MAX_PACKET];
    let t = c.qp.poll_transmit(p.now, &mut buf).expect("an answer");
    let ack = PacketRepr::parse(&buf[..t.len]).unwrap();
    ack.ext.aeth.unwrap().kind()
}

fn acked(s: AckSyndrome) -> bool {
    matches!(s, AckSyndrome::Ack { .. })
}

#[test]
fn a_type_2_window_serves_only_its_qp_and_a_type_1_window_every_qp_of_the_pd() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let mr = bindable(&mut p, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND);
    let t2 = bound_type2(&mut p, &mr, 0, 64, rw());
    let t1 = p.b.mrs.alloc_mw(1, MwType::Type1).unwrap();
    let op = bind_op(&t1, 0x11, &mr, W_IOVA + 1024, 64, rw());
    post_b(&mut p, 2, op);
    p.drive();
    assert_eq!(b_done(&p)[1], (2, WcOpcode::BindMw, WcStatus::Success));
    let mut c = third_qp(&p);
    assert!(acked(write_at(&p, &mut c, W_IOVA + 1024, t1.rkey())));
    assert_eq!(mr.storage.to_vec(1024, 8).unwrap(), vec![0xEE; 8]);
    assert_eq!(
        write_at(&p, &mut c, W_IOVA, t2.rkey()),
        AckSyndrome::Nak(NakCode::RemoteAccessError)
    );
    assert_eq!(
        mr.storage.to_vec(0, 8).unwrap(),
        vec![0; 8],
        "nothing landed"
    );
    // Another PD's QP is refused a type 1 window too.
    let mut d = third_qp(&p);
    d.qp.cfg.pd = 2;
    assert_eq!(
        write_at(&p, &mut d, W_IOVA + 1024, t1.rkey()),
        AckSyndrome::Nak(NakCode::RemoteAccessError)
    );
}

#[test]
fn a_type_1_window_is_unbound_by_a_zero_length_bind_or_by_dealloc() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let mr = bindable(&mut p, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND);
    let mw = p.b.mrs.alloc_mw(1, MwType::Type1).unwrap();
    let op = bind_op(&mw, 0x21, &mr, W_IOVA, 256, rw());
    post_b(&mut p, 1, op);
    p.drive();
    let key = mw.rkey();
    let mut c = third_qp(&p);
    assert!(acked(write_at(&p, &mut c, W_IOVA, key)));
    // Rebind with length 0: the window is VALID but serves nothing, under a new key.
    let op = bind_op(&mw, 0x22, &mr, 0, 0, AccessFlags::EMPTY);
    post_b(&mut p, 2, op);
    p.drive();
    assert_eq!(b_done(&p)[1], (2, WcOpcode::BindMw, WcStatus::Success));
    assert_eq!(mr.bound_windows(), 0);
    assert_eq!(
        write_at(&p, &mut c, W_IOVA, mw.rkey()),
        AckSyndrome::Nak(NakCode::RemoteAccessError)
    );
    // Bound again, then deallocated: refused.
    let mut p = Pair::new(Mtu::Mtu1024);
    let mr = bindable(&mut p, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND);
    let mw = p.b.mrs.alloc_mw(1, MwType::Type1).unwrap();
    let op = bind_op(&mw, 0x23, &mr, W_IOVA, 256, rw());
    post_b(&mut p, 1, op);
    p.drive();
    let key = mw.rkey();
    assert!(p.b.mrs.dealloc_mw(&mw));
    assert_eq!(mr.bound_windows(), 0, "dealloc lets go of the region");
    let mut c = third_qp(&p);
    assert_eq!(
        write_at(&p, &mut c, W_IOVA, key),
        AckSyndrome::Nak(NakCode::RemoteAccessError)
    );
    // The slot's next window has another key byte.
    let next = p.b.mrs.alloc_mw(1, MwType::Type1).unwrap();
    assert_eq!(next.rkey() >> 8, key >> 8);
    assert_ne!(next.rkey(), key);
}

#[test]
fn a_zero_based_window_is_addressed_from_0() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let mr = bindable(&mut p, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND);
    let mw = bound_type2(&mut p, &mr, 8192, 4096, rw() | AccessFlags::ZERO_BASED);
    assert_eq!(write_via(&mut p, 1, 100, mw.rkey(), 64), WcStatus::Success);
    assert_eq!(mr.storage.to_vec(8192 + 100, 64).unwrap(), pattern(1, 64));
    assert_eq!(
        write_via(&mut p, 2, 4096 - 8, mw.rkey(), 9),
        WcStatus::RemAccessErr
    );
}

#[test]
fn a_window_whose_region_was_dropped_serves_nothing() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let mr = bindable(&mut p, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND);
    let mw = bound_type2(&mut p, &mr, 0, 64, rw());
    p.b.mrs.deregister(mr.lkey).unwrap();
    assert_eq!(
        write_via(&mut p, 1, W_IOVA, mw.rkey(), 8),
        WcStatus::RemAccessErr
    );
}

#[test]
fn local_operations_execute_in_order_and_complete_in_order() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let mr = bindable(&mut p, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND);
    let mw = p.b.mrs.alloc_mw(1, MwType::Type2).unwrap();
    // B: a SEND to A (A has no receive yet: RNR), then the bind. The bind executes when the
    // requester reaches it, but completes after the SEND.
    let sg = [sge(&p.b, 0, 8)];
    let wr = SendWr {
        wr_id: 1,
        sg_list: &sg,
        opcode: WrOpcode::Send,
        send_flags: SendFlags::SIGNALED,
    };
    p.b.qp.post_send(&wr, &p.b.mrs).unwrap();
    let op = bind_op(&mw, 0x44, &mr, W_IOVA, 64, rw());
    post_b(&mut p, 2, op);
    p.run_until(p.now + Duration::from_micros(2));
    assert_eq!(
        mw.binding().state,
        MwState::Valid,
        "executed without waiting"
    );
    assert!(p.b.send_wcs.is_empty(), "but not completed before the SEND");
    let sg = [sge(&p.a, 0, 64)];
    p.a.qp
        .post_recv(
            &RecvWr {
                wr_id: 7,
                sg_list: &sg,
            },
            &p.a.mrs,
        )
        .unwrap();
    p.drive();
    assert_eq!(
        b_done(&p),
        vec![
            (1, WcOpcode::Send, WcStatus::Success),
            (2, WcOpcode::BindMw, WcStatus::Success)
        ]
    );
}

/// A posts a receive at B and a SEND with invalidate of `len` bytes naming `rkey`.
fn send_with_inv(p: &mut Pair, wr_id: u64, rkey: u32, len: u32) {
    post_recv(p, 50 + wr_id, 0, 8192);
    post_send(p, wr_id, WrOpcode::SendWithInv { rkey }, 0, len);
    p.drive();
}

#[test]
fn send_with_invalidate_invalidates_the_receivers_window_and_reports_it() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let mr = bindable(&mut p, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND);
    let mw = bound_type2(&mut p, &mr, 0, 4096, rw());
    let key = mw.rkey();
    // Three packets: the IETH rides on the last only.
    send_with_inv(&mut p, 1, key, 3000);
    let ops: Vec<Opcode> = p.log.iter().filter(|s| s.to_b).map(|s| s.opcode).collect();
    assert_eq!(
        ops,
        vec![
            Opcode::RC_SEND_FIRST,
            Opcode::RC_SEND_MIDDLE,
            Opcode::RC_SEND_LAST_WITH_INVALIDATE
        ]
    );
    assert_eq!(p.a.send_wcs[0].status, WcStatus::Success);
    assert_eq!(p.a.send_wcs[0].opcode, WcOpcode::Send);
    let wc = p.b.recv_wcs[0];
    assert_eq!(
        (wc.status, wc.opcode, wc.byte_len),
        (WcStatus::Success, WcOpcode::Recv, 3000)
    );
    assert_eq!(wc.invalidated_rkey, Some(key), "IBV_WC_WITH_INV");
    assert_eq!(mw.binding().state, MwState::Free);
    assert_eq!(mr.bound_windows(), 0);
    // The old key is refused; a fresh bind works again.
    assert_eq!(write_via(&mut p, 2, W_IOVA, key, 8), WcStatus::RemAccessErr);
}

#[test]
fn a_single_packet_send_with_invalidate_is_send_only_with_invalidate() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let mr = bindable(&mut p, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND);
    let mw = bound_type2(&mut p, &mr, 0, 4096, rw());
    send_with_inv(&mut p, 1, mw.rkey(), 16);
    let ops: Vec<Opcode> = p.log.iter().filter(|s| s.to_b).map(|s| s.opcode).collect();
    assert_eq!(ops, vec![Opcode::RC_SEND_ONLY_WITH_INVALIDATE]);
    assert_eq!(p.b.recv_wcs[0].invalidated_rkey, Some(mw.rkey()));
    assert_eq!(p.b.recv_wcs[0].byte_len, 16);
    assert_eq!(mw.binding().state, MwState::Free);
}

#[test]
fn send_with_invalidate_of_a_key_the_qp_may_not_invalidate_fails_both_ends() {
    for case in ["type 1", "region key", "stale key", "another QP's window"] {
        let mut p = Pair::new(Mtu::Mtu1024);
        let mr = bindable(&mut p, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND);
        let (rkey, victim) = match case {
            "type 1" => {
                let mw = p.b.mrs.alloc_mw(1, MwType::Type1).unwrap();
                let op = bind_op(&mw, 3, &mr, W_IOVA, 64, rw());
                post_b(&mut p, 9, op);
                p.drive();
                (mw.rkey(), Some(mw))
            }
            "region key" => (p.b.mr.rkey, None),
            "stale key" => (bound_type2(&mut p, &mr, 0, 64, rw()).rkey() ^ 0x80, None),
            _ => {
                // A window bound by a QP of B's PD other than the one the SEND reaches.
                let mw = p.b.mrs.alloc_mw(1, MwType::Type2).unwrap();
                let mut c = third_qp(&p);
                let op = bind_op(&mw, 0x31, &mr, W_IOVA, 64, rw());
                let wr = SendWr {
                    wr_id: 1,
                    sg_list: &[],
                    opcode: op,
                    send_flags: SendFlags::SIGNALED,
                };
                c.qp.post_send(&wr, &p.b.mrs).unwrap();
                let mut buf = vec![0u8; MAX_PACKET];
                assert!(c.qp.poll_transmit(p.now, &mut buf).is_none());
                assert_eq!(mw.binding().qpn, Some(0x13));
                (mw.rkey(), Some(mw))
            }
        };
        send_with_inv(&mut p, 1, rkey, 16);
        let wc = p.b.recv_wcs[0];
        assert_eq!(wc.status, WcStatus::RemInvReqErr, "{case}");
        assert_eq!(wc.invalidated_rkey, None, "{case}");
        assert_eq!(p.a.send_wcs[0].status, WcStatus::RemInvReqErr, "{case}");
        assert_eq!(p.b.qp.state(), QpState::Err, "{case}");
        if let Some(mw) = victim {
            assert_eq!(mw.binding().state, MwState::Valid, "{case}: untouched");
        }
    }
}

#[test]
fn a_duplicate_read_through_an_invalidated_window_is_nakked_not_replayed() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let mr = bindable(&mut p, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND);
    mr.storage.write(0, &pattern(5, 64)).unwrap();
    let mw = bound_type2(&mut p, &mr, 0, 4096, rw());
    let key = mw.rkey();
    let op = WrOpcode::RdmaRead {
        remote_addr: W_IOVA,
        rkey: key,
    };
    post_send(&mut p, 1, op, 0, 64);
    p.drive();
    assert_eq!(p.a.send_wcs[0].status, WcStatus::Success);
    let req = p
        .log
        .iter()
        .find(|s| s.to_b && s.opcode == Opcode::RC_RDMA_READ_REQUEST)
        .unwrap()
        .psn;
    // The same READ again (a duplicate, as after a lost response): B answers it from its
    // saved resource while the window serves the key, and not once it is invalidated.
    let replay = |p: &mut Pair| {
        let pkt = PacketRepr {
            bth: crate::wire::BthRepr {
                opcode: Opcode::RC_RDMA_READ_REQUEST,
                psn: req.value(),
                dest_qp: p.b.qp.qpn(),
                ack_req: true,
                ..Default::default()
            },
            ext: ExtHeaders {
                reth: Some(RethRepr {
                    va: W_IOVA,
                    rkey: key,
                    len: 64,
                }),
                ..ExtHeaders::default()
            },
            payload: &[],
        };
        p.b.qp.handle_packet(p.now, &pkt, &p.b.mrs);
        let mut buf = vec![0u8; MAX_PACKET];
        let t = p.b.qp.poll_transmit(p.now, &mut buf).expect("an answer");
        let r = PacketRepr::parse(&buf[..t.len]).unwrap();
        (r.bth.opcode, r.ext.aeth.map(|a| a.kind()))
    };
    assert_eq!(replay(&mut p).0, Opcode::RC_RDMA_READ_RESPONSE_ONLY);
    mr.storage.write(0, &pattern(6, 64)).unwrap();
    post_b(&mut p, 2, WrOpcode::LocalInv { rkey: key });
    p.drive();
    assert_eq!(b_done(&p)[1].2, WcStatus::Success);
    assert_eq!(
        replay(&mut p),
        (
            Opcode::RC_ACK,
            Some(AckSyndrome::Nak(NakCode::RemoteAccessError))
        )
    );
}

#[test]
fn a_type_2_window_of_a_destroyed_qp_serves_no_qp_with_its_number() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let mr = bindable(&mut p, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND);
    let mw = bound_type2(&mut p, &mr, 0, 64, rw());
    assert_eq!(
        write_via(&mut p, 1, W_IOVA, mw.rkey(), 8),
        WcStatus::Success
    );
    // B's QP 0x12 is destroyed; a new QP gets the number 0x12 again.
    p.b.mrs.forget_qp(0x12);
    assert_eq!(mw.binding().state, MwState::Valid, "still bound, to no QP");
    assert_eq!(
        write_via(&mut p, 2, W_IOVA, mw.rkey(), 8),
        WcStatus::RemAccessErr
    );
    assert_eq!(
        mw.invalidate(1, 0x12, mw.rkey()),
        Err(MwFault::WrongQp),
        "nor invalidated by the number's next QP"
    );
    assert_eq!(mr.bound_windows(), 1);
    assert!(p.b.mrs.dealloc_mw(&mw));
    assert_eq!(mr.bound_windows(), 0);
}
