//! Tests of `qp_attr.rs` (moved out of it as they were).

use super::*;
use crate::ib::types::{AccessFlags, AhAttr, Gid};

#[test]
fn the_send_queue_is_sized_as_rxe_sizes_it() {
    let cap = |sge, inline| QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: sge,
        max_recv_sge: 1,
        max_inline_data: inline,
    };
    let got = |sge, inline| {
        let c = sized_as_rxe(&cap(sge, inline));
        (c.max_send_sge, c.max_inline_data)
    };
    // rdma_xclient's QP: 1 SGE, no inline data asked for.
    assert_eq!(got(1, 0), (1, 16));
    assert_eq!(got(1, 64), (4, 64));
    assert_eq!(got(2, 20), (2, 32));
    assert_eq!(got(4, 70), (4, 70));
    assert_eq!(got(32, 400), (32, 512));
    assert_eq!(got(0, 0), (0, 0));
    // The rest is left as asked.
    assert_eq!(sized_as_rxe(&cap(1, 0)).max_send_wr, 8);
}
use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};

const ERR: QpState = QpState::Err;
const ALL_STATES: [QpState; 7] = [Reset, Init, Rtr, Rts, Sqd, Sqe, ERR];
const ALL_TYPES: [QpType; 3] = [QpType::Rc, QpType::Uc, QpType::Ud];

// The masks of the kernel's table, written out again from verbs.c rather than taken from
// the constants above, so that a slip in either shows.
const RC_INIT: QpAttrMask = mask(&[M::STATE, M::PKEY_INDEX, M::PORT, M::ACCESS_FLAGS]);
const UD_INIT: QpAttrMask = mask(&[M::STATE, M::PKEY_INDEX, M::PORT, M::QKEY]);
const RC_RTR: QpAttrMask = mask(&[
    M::STATE,
    M::AV,
    M::PATH_MTU,
    M::DEST_QPN,
    M::RQ_PSN,
    M::MAX_DEST_RD_ATOMIC,
    M::MIN_RNR_TIMER,
]);
const UC_RTR: QpAttrMask = mask(&[M::STATE, M::AV, M::PATH_MTU, M::DEST_QPN, M::RQ_PSN]);
const RC_RTS: QpAttrMask = mask(&[
    M::STATE,
    M::SQ_PSN,
    M::TIMEOUT,
    M::RETRY_CNT,
    M::RNR_RETRY,
    M::MAX_QP_RD_ATOMIC,
]);
const UC_RTS: QpAttrMask = mask(&[M::STATE, M::SQ_PSN]);

/// Attributes with every field valid, moving to `to`.
fn attr(to: QpState) -> QpAttr {
    QpAttr {
        qp_state: to,
        cur_qp_state: Rts,
        port_num: 1,
        pkey_index: 0,
        qkey: 0x1111_1111,
        qp_access_flags: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        path_mtu: Mtu::Mtu1024,
        dest_qp_num: 0x11,
        rq_psn: 0x12_3456,
        sq_psn: 0x65_4321,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 12,
        max_rd_atomic: 1,
        max_dest_rd_atomic: 1,
        ah_attr: AhAttr {
            dgid: Gid::from_ip("192.0.2.2".parse().unwrap()),
            sgid_index: 0,
            hop_limit: 1,
            ..Default::default()
        },
        ..Default::default()
    }
}

fn chk(t: QpType, from: QpState, to: QpState, m: QpAttrMask) -> Result<QpState, VerbsError> {
    check_modify(t, from, &attr(to), m, &DeviceLimits::default())
}

fn without(m: QpAttrMask, bit: QpAttrMask) -> QpAttrMask {
    QpAttrMask(m.0 & !bit.0)
}

fn bits(m: QpAttrMask) -> impl Iterator<Item = QpAttrMask> {
    (0..21)
        .map(|b| QpAttrMask(1 << b))
        .filter(move |b| m.contains(*b))
}

fn invalid(r: Result<QpState, VerbsError>) -> &'static str {
    match r {
        Err(VerbsError::InvalidAttribute { attr, .. }) => attr,
        other => panic!("expected InvalidAttribute, got {other:?}"),
    }
}

fn exceeds(r: Result<QpState, VerbsError>) -> &'static str {
    match r {
        Err(VerbsError::ExceedsDeviceLimit { what, .. }) => what,
        other => panic!("expected ExceedsDeviceLimit, got {other:?}"),
    }
}

#[test]
fn the_table_has_each_kernel_pair_once_and_sane_masks() {
    assert_eq!(TABLE.len(), 22);
    for (i, a) in TABLE.iter().enumerate() {
        for b in &TABLE[i + 1..] {
            assert!(
                (a.from, a.to) != (b.from, b.to),
                "{:?} -> {:?} twice",
                a.from,
                a.to
            );
        }
        for p in a.params.iter().flatten() {
            assert_eq!(p.req.0 & p.opt.0, 0, "{:?} -> {:?}", a.from, a.to);
            assert!(!p.req.intersects(M::STATE | M::CUR_STATE | M::CAP));
            assert!(!p.opt.intersects(M::STATE | M::CAP));
            // CUR_STATE is optional only on transitions into RTS.
            if p.opt.contains(M::CUR_STATE) {
                assert_eq!(a.to, Rts);
            }
        }
    }
}

#[test]
fn rc_legal_transitions_succeed_with_exactly_their_required_attributes() {
    let t = QpType::Rc;
    let s = M::STATE;
    for (from, to, m) in [
        (Reset, Reset, s),
        (Reset, Init, RC_INIT),
        (Init, Init, s),
        (Init, Rtr, RC_RTR),
        (Rtr, Rts, RC_RTS),
        (Rts, Rts, s),
        (Rts, Sqd, s),
        (Sqd, Sqd, s),
        (Sqd, Rts, s),
    ] {
        assert_eq!(chk(t, from, to, m), Ok(to), "{from:?} -> {to:?}");
    }
}

#[test]
fn any_state_goes_to_reset_and_any_but_reset_to_error() {
    for t in ALL_TYPES {
        for from in ALL_STATES {
            assert_eq!(chk(t, from, Reset, M::STATE), Ok(Reset), "{t:?} {from:?}");
            let to_err = chk(t, from, ERR, M::STATE);
            if from == Reset {
                // verbs.c: qp_state_table[IB_QPS_RESET] has no IB_QPS_ERR entry.
                assert_eq!(
                    to_err,
                    Err(VerbsError::IllegalTransition {
                        from: Reset,
                        to: ERR
                    })
                );
            } else {
                assert_eq!(to_err, Ok(ERR), "{t:?} {from:?}");
            }
            // Nothing else is accepted on the way out.
            assert!(matches!(
                chk(t, from, Reset, M::STATE | M::QKEY),
                Err(VerbsError::UnexpectedAttributes { .. })
            ));
        }
    }
}

#[test]
fn illegal_transitions_are_refused() {
    let pairs = [
        (Reset, Rtr),
        (Reset, Rts),
        (Reset, Sqd),
        (Reset, Sqe),
        (Reset, ERR),
        (Init, Rts),
        (Init, Sqd),
        (Init, Sqe),
        (Rtr, Init),
        (Rtr, Rtr),
        (Rtr, Sqd),
        (Rts, Init),
        (Rts, Rtr),
        (Rts, Sqe),
        (Sqd, Init),
        (Sqd, Rtr),
        (Sqe, Sqe),
        (Sqe, Init),
        (ERR, Init),
        (ERR, Rtr),
        (ERR, Rts),
        (ERR, Sqd),
    ];
    for t in ALL_TYPES {
        for (from, to) in pairs {
            assert_eq!(
                chk(t, from, to, M::STATE | M::SQ_PSN),
                Err(VerbsError::IllegalTransition { from, to }),
                "{t:?} {from:?} -> {to:?}"
            );
        }
    }
    // SQE -> RTS is for UC and UD only.
    assert_eq!(
        chk(QpType::Rc, Sqe, Rts, M::STATE),
        Err(VerbsError::IllegalTransition { from: Sqe, to: Rts })
    );
    assert_eq!(chk(QpType::Uc, Sqe, Rts, M::STATE), Ok(Rts));
    assert_eq!(chk(QpType::Ud, Sqe, Rts, M::STATE | M::QKEY), Ok(Rts));
    assert!(matches!(
        chk(QpType::Uc, Sqe, Rts, M::STATE | M::QKEY),
        Err(VerbsError::UnexpectedAttributes { .. })
    ));
}

#[test]
fn each_missing_required_attribute_is_named() {
    for (t, from, to, m) in [
        (QpType::Rc, Reset, Init, RC_INIT),
        (QpType::Rc, Init, Rtr, RC_RTR),
        (QpType::Rc, Rtr, Rts, RC_RTS),
        (QpType::Uc, Reset, Init, RC_INIT),
        (QpType::Uc, Init, Rtr, UC_RTR),
        (QpType::Uc, Rtr, Rts, UC_RTS),
        (QpType::Ud, Reset, Init, UD_INIT),
        (QpType::Ud, Rtr, Rts, UC_RTS),
    ] {
        assert_eq!(chk(t, from, to, m), Ok(to));
        for b in bits(without(m, M::STATE)) {
            assert_eq!(
                chk(t, from, to, without(m, b)),
                Err(VerbsError::MissingAttributes {
                    from,
                    to,
                    missing: b
                }),
                "{t:?} {from:?} -> {to:?} without {b:?}"
            );
        }
        assert_eq!(
            chk(t, from, to, M::STATE),
            Err(VerbsError::MissingAttributes {
                from,
                to,
                missing: without(m, M::STATE)
            })
        );
    }
}

#[test]
fn each_attribute_a_transition_does_not_take_is_named() {
    // RESET -> INIT of RC takes its three required attributes and nothing else.
    // (CUR_STATE is left out: RESET cannot be named as the current state, see
    // cur_qp_state_must_be_a_legal_current_state_and_the_real_one.)
    for b in bits(STANDARD_BITS) {
        if RC_INIT.contains(b) || b == M::CUR_STATE {
            continue;
        }
        assert_eq!(
            chk(QpType::Rc, Reset, Init, RC_INIT | b),
            Err(VerbsError::UnexpectedAttributes {
                from: Reset,
                to: Init,
                extra: b
            }),
            "{b:?}"
        );
    }
    for (from, to, m, b) in [
        (Init, Rtr, RC_RTR, M::SQ_PSN),
        (Init, Rtr, RC_RTR, M::TIMEOUT),
        (Rtr, Rts, RC_RTS, M::DEST_QPN),
        (Rtr, Rts, RC_RTS, M::RQ_PSN),
        (Rtr, Rts, RC_RTS, M::PATH_MTU),
        (Rtr, Rts, RC_RTS, M::CAP),
        (Rts, Sqd, M::STATE, M::CUR_STATE),
        (Rts, ERR, M::STATE, M::CUR_STATE),
        (Rts, Rts, M::STATE, M::TIMEOUT),
    ] {
        assert_eq!(
            chk(QpType::Rc, from, to, m | b),
            Err(VerbsError::UnexpectedAttributes { from, to, extra: b }),
            "{from:?} -> {to:?} with {b:?}"
        );
    }
}

#[test]
fn optional_attributes_are_accepted() {
    let t = QpType::Rc;
    for (from, to, m) in [
        (
            Init,
            Init,
            M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
        ),
        (Init, Rtr, RC_RTR | M::ACCESS_FLAGS | M::PKEY_INDEX),
        (Rtr, Rts, RC_RTS | M::ACCESS_FLAGS | M::MIN_RNR_TIMER),
        (Rts, Rts, M::STATE | M::ACCESS_FLAGS | M::MIN_RNR_TIMER),
        (Rts, Sqd, M::STATE | M::EN_SQD_ASYNC_NOTIFY),
        (
            Sqd,
            Sqd,
            M::STATE
                | M::PORT
                | M::AV
                | M::TIMEOUT
                | M::RETRY_CNT
                | M::RNR_RETRY
                | M::MAX_QP_RD_ATOMIC
                | M::MAX_DEST_RD_ATOMIC
                | M::ACCESS_FLAGS
                | M::PKEY_INDEX
                | M::MIN_RNR_TIMER,
        ),
        (Sqd, Rts, M::STATE | M::ACCESS_FLAGS | M::MIN_RNR_TIMER),
    ] {
        assert_eq!(chk(t, from, to, m), Ok(to), "{from:?} -> {to:?}");
    }
}

#[test]
fn a_modify_without_state_stays_where_the_table_allows() {
    let t = QpType::Rc;
    assert_eq!(chk(t, Reset, Reset, M::EMPTY), Ok(Reset));
    assert_eq!(chk(t, Init, Init, M::ACCESS_FLAGS), Ok(Init));
    assert_eq!(chk(t, Rts, Rts, M::MIN_RNR_TIMER), Ok(Rts));
    assert_eq!(chk(t, Sqd, Sqd, M::TIMEOUT | M::RETRY_CNT), Ok(Sqd));
    assert_eq!(chk(t, ERR, ERR, M::EMPTY), Ok(ERR));
    // RTR has no RTR -> RTR entry: nothing can be changed there without moving on.
    assert_eq!(
        chk(t, Rtr, Rtr, M::MIN_RNR_TIMER),
        Err(VerbsError::IllegalTransition { from: Rtr, to: Rtr })
    );
    // Without STATE, qp_state is ignored.
    assert_eq!(
        check_modify(
            t,
            Rts,
            &attr(Reset),
            M::MIN_RNR_TIMER,
            &DeviceLimits::default()
        ),
        Ok(Rts)
    );
    assert!(matches!(
        chk(t, Rts, Rts, M::TIMEOUT),
        Err(VerbsError::UnexpectedAttributes { .. })
    ));
}

#[test]
fn uc_and_ud_differ_from_rc() {
    use QpType::{Uc, Ud};
    // UD: INIT takes a Q_Key instead of access flags.
    assert_eq!(chk(Ud, Reset, Init, UD_INIT), Ok(Init));
    assert_eq!(
        chk(Ud, Reset, Init, RC_INIT),
        Err(VerbsError::MissingAttributes {
            from: Reset,
            to: Init,
            missing: M::QKEY
        })
    );
    assert_eq!(
        chk(Ud, Reset, Init, UD_INIT | M::ACCESS_FLAGS),
        Err(VerbsError::UnexpectedAttributes {
            from: Reset,
            to: Init,
            extra: M::ACCESS_FLAGS
        })
    );
    assert_eq!(
        chk(QpType::Rc, Reset, Init, RC_INIT | M::QKEY),
        Err(VerbsError::UnexpectedAttributes {
            from: Reset,
            to: Init,
            extra: M::QKEY
        })
    );
    // UD: RTR needs nothing, and takes no path.
    assert_eq!(chk(Ud, Init, Rtr, M::STATE), Ok(Rtr));
    assert_eq!(chk(Ud, Init, Rtr, M::STATE | M::QKEY), Ok(Rtr));
    assert_eq!(
        chk(Ud, Init, Rtr, M::STATE | M::AV | M::PATH_MTU),
        Err(VerbsError::UnexpectedAttributes {
            from: Init,
            to: Rtr,
            extra: M::AV | M::PATH_MTU
        })
    );
    // UD: RTS needs the SQ PSN only, and takes no retry parameters.
    assert_eq!(chk(Ud, Rtr, Rts, UC_RTS | M::QKEY), Ok(Rts));
    assert!(matches!(
        chk(Ud, Rtr, Rts, UC_RTS | M::TIMEOUT),
        Err(VerbsError::UnexpectedAttributes { .. })
    ));
    // UC: the RC path without the READ/atomic and RNR parameters.
    assert_eq!(chk(Uc, Reset, Init, RC_INIT), Ok(Init));
    assert_eq!(chk(Uc, Init, Rtr, UC_RTR), Ok(Rtr));
    assert_eq!(
        chk(Uc, Init, Rtr, RC_RTR),
        Err(VerbsError::UnexpectedAttributes {
            from: Init,
            to: Rtr,
            extra: M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER
        })
    );
    assert_eq!(chk(Uc, Rtr, Rts, UC_RTS | M::ACCESS_FLAGS), Ok(Rts));
    assert_eq!(
        chk(Uc, Rtr, Rts, RC_RTS),
        Err(VerbsError::UnexpectedAttributes {
            from: Rtr,
            to: Rts,
            extra: M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC
        })
    );
    assert!(matches!(
        chk(Uc, Rts, Rts, M::MIN_RNR_TIMER),
        Err(VerbsError::UnexpectedAttributes { .. })
    ));
    assert_eq!(chk(Uc, Sqd, Sqd, M::AV | M::PKEY_INDEX), Ok(Sqd));
    assert!(matches!(
        chk(Uc, Sqd, Sqd, M::TIMEOUT),
        Err(VerbsError::UnexpectedAttributes { .. })
    ));
    assert_eq!(chk(Ud, Sqd, Sqd, M::QKEY | M::PKEY_INDEX), Ok(Sqd));
}

#[test]
fn cur_qp_state_must_be_a_legal_current_state_and_the_real_one() {
    let l = DeviceLimits::default();
    let mut a = attr(Rts);
    let m = M::STATE | M::CUR_STATE;
    for s in [Rts, Sqd] {
        a.cur_qp_state = s;
        assert_eq!(check_modify(QpType::Rc, s, &a, m, &l), Ok(Rts));
    }
    a.cur_qp_state = Rtr;
    assert_eq!(check_modify(QpType::Rc, Rtr, &a, RC_RTS | m, &l), Ok(Rts));
    a.cur_qp_state = Sqe;
    assert_eq!(check_modify(QpType::Uc, Sqe, &a, m, &l), Ok(Rts));
    // The QP is elsewhere.
    assert_eq!(
        check_modify(QpType::Uc, Rts, &a, m, &l),
        Err(VerbsError::StateMismatch {
            assumed: Sqe,
            actual: Rts
        })
    );
    // ib_modify_qp_is_ok(): CUR_STATE only names RTR, RTS, SQD or SQE.
    for s in [Reset, Init, ERR] {
        a.cur_qp_state = s;
        assert_eq!(
            invalid(check_modify(QpType::Rc, s, &a, m, &l)),
            "cur_qp_state"
        );
    }
}

#[test]
fn attribute_values_are_range_checked() {
    let l = DeviceLimits::default();
    let rc = QpType::Rc;
    let run = |from: QpState, m: QpAttrMask, f: &dyn Fn(&mut QpAttr)| {
        let to = match from {
            Reset => Init,
            Init => Rtr,
            Rtr => Rts,
            s => s,
        };
        let mut a = attr(to);
        f(&mut a);
        check_modify(rc, from, &a, m, &l)
    };
    assert_eq!(
        invalid(run(Reset, RC_INIT, &|a| a.port_num = 2)),
        "port_num"
    );
    assert_eq!(
        invalid(run(Reset, RC_INIT, &|a| a.port_num = 0)),
        "port_num"
    );
    assert_eq!(
        invalid(run(Reset, RC_INIT, &|a| a.pkey_index = 1)),
        "pkey_index"
    );
    assert_eq!(
        invalid(run(Init, RC_RTR, &|a| a.ah_attr.dgid = Gid::default())),
        "ah_attr.dgid"
    );
    assert_eq!(
        invalid(run(Init, RC_RTR, &|a| a.ah_attr.sgid_index = 2)),
        "ah_attr.sgid_index"
    );
    assert!(run(Init, RC_RTR, &|a| a.ah_attr.sgid_index = 1).is_ok());
    assert_eq!(
        exceeds(run(Init, RC_RTR, &|a| a.max_dest_rd_atomic = 129)),
        "max_dest_rd_atomic"
    );
    assert!(run(Init, RC_RTR, &|a| a.max_dest_rd_atomic = 128).is_ok());
    assert_eq!(
        invalid(run(Init, RC_RTR, &|a| a.min_rnr_timer = 32)),
        "min_rnr_timer"
    );
    assert!(run(Init, RC_RTR, &|a| a.min_rnr_timer = 31).is_ok());
    assert_eq!(
        invalid(run(Init, RC_RTR, &|a| a.rq_psn = 1 << 24)),
        "rq_psn"
    );
    assert!(run(Init, RC_RTR, &|a| a.rq_psn = 0xFF_FFFF).is_ok());
    assert_eq!(
        invalid(run(Init, RC_RTR, &|a| a.dest_qp_num = 1 << 24)),
        "dest_qp_num"
    );
    assert_eq!(invalid(run(Rtr, RC_RTS, &|a| a.timeout = 32)), "timeout");
    assert!(run(Rtr, RC_RTS, &|a| a.timeout = 31).is_ok());
    assert_eq!(invalid(run(Rtr, RC_RTS, &|a| a.retry_cnt = 8)), "retry_cnt");
    assert_eq!(invalid(run(Rtr, RC_RTS, &|a| a.rnr_retry = 8)), "rnr_retry");
    assert_eq!(invalid(run(Rtr, RC_RTS, &|a| a.sq_psn = 1 << 24)), "sq_psn");
    assert_eq!(
        exceeds(run(Rtr, RC_RTS, &|a| a.max_rd_atomic = 129)),
        "max_rd_atomic"
    );
    assert!(run(Rtr, RC_RTS, &|a| a.max_rd_atomic = 128).is_ok());
    // Values of attributes not in the mask are not looked at.
    assert!(run(Rtr, RC_RTS, &|a| a.rq_psn = u32::MAX).is_ok());
    // The device's MTU.
    let small = DeviceLimits {
        max_mtu: Mtu::Mtu1024,
        ..DeviceLimits::default()
    };
    let mut a = attr(Rtr);
    a.path_mtu = Mtu::Mtu2048;
    assert_eq!(
        check_modify(rc, Init, &a, RC_RTR, &small),
        Err(VerbsError::ExceedsDeviceLimit {
            what: "path_mtu",
            requested: 2048,
            limit: 1024
        })
    );
    a.path_mtu = Mtu::Mtu4096;
    assert_eq!(check_modify(rc, Init, &a, RC_RTR, &l), Ok(Rtr));
    // Alternate paths: accepted by the table, refused on RoCE.
    assert_eq!(
        invalid(run(Rtr, RC_RTS | M::ALT_PATH, &|_| {})),
        "alt_ah_attr"
    );
    assert_eq!(
        invalid(run(Rtr, RC_RTS | M::PATH_MIG_STATE, &|_| {})),
        "path_mig_state"
    );
    assert_eq!(
        invalid(run(Init, RC_RTR | M::ALT_PATH, &|_| {})),
        "alt_ah_attr"
    );
    // Bits the kernel does not know.
    assert_eq!(
        invalid(run(Reset, RC_INIT | QpAttrMask(1 << 21), &|_| {})),
        "attr_mask"
    );
    // CAP is in no opt_param: capacities never change after creation.
    assert_eq!(
        run(Rts, M::CAP, &|_| {}),
        Err(VerbsError::UnexpectedAttributes {
            from: Rts,
            to: Rts,
            extra: M::CAP
        })
    );
}

/// Runs a sequence of modifies from RESET as a QP would, checking then applying each.
fn walk(t: QpType, steps: &[(QpAttr, QpAttrMask)]) -> QpAttr {
    let l = DeviceLimits::default();
    let mut stored = QpAttr::default();
    for (a, m) in steps {
        let to = check_modify(t, stored.qp_state, a, *m, &l)
            .unwrap_or_else(|e| panic!("{:?} -> {:?}: {e}", stored.qp_state, a.qp_state));
        apply_modify(&mut stored, a, *m);
        assert_eq!(stored.qp_state, to);
    }
    stored
}

#[test]
fn the_ibv_rc_pingpong_sequence_is_accepted() {
    // libibverbs/examples/rc_pingpong.c: pp_init_ctx() and pp_connect_ctx().
    let init = QpAttr {
        qp_state: Init,
        pkey_index: 0,
        port_num: 1,
        qp_access_flags: AccessFlags::EMPTY,
        ..Default::default()
    };
    let rtr = QpAttr {
        qp_state: Rtr,
        path_mtu: Mtu::Mtu1024,
        dest_qp_num: 0x1234,
        rq_psn: 0xAB_CDEF,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ah_attr: AhAttr {
            dgid: Gid::from_ip("192.0.2.2".parse().unwrap()),
            sgid_index: 1,
            hop_limit: 1,
            ..Default::default()
        },
        ..Default::default()
    };
    let rts = QpAttr {
        qp_state: Rts,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        sq_psn: 0x12_3456,
        max_rd_atomic: 1,
        ..Default::default()
    };
    let q = walk(
        QpType::Rc,
        &[
            (init, M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS),
            (
                rtr,
                M::STATE
                    | M::AV
                    | M::PATH_MTU
                    | M::DEST_QPN
                    | M::RQ_PSN
                    | M::MAX_DEST_RD_ATOMIC
                    | M::MIN_RNR_TIMER,
            ),
            (
                rts,
                M::STATE
                    | M::TIMEOUT
                    | M::RETRY_CNT
                    | M::RNR_RETRY
                    | M::SQ_PSN
                    | M::MAX_QP_RD_ATOMIC,
            ),
        ],
    );
    assert_eq!(q.qp_state, Rts);
    assert_eq!(q.dest_qp_num, 0x1234);
    assert_eq!((q.rq_psn, q.sq_psn), (0xAB_CDEF, 0x12_3456));
    assert_eq!(q.ah_attr, rtr.ah_attr);
    assert_eq!((q.timeout, q.retry_cnt, q.rnr_retry), (14, 7, 7));
}

#[test]
fn the_perftest_sequences_are_accepted() {
    // perftest perftest_resources.c: ctx_modify_qp_to_init(), ctx_modify_qp_to_rtr(),
    // ctx_modify_qp_to_rts(). ib_read_bw asks for the device's whole READ depth.
    let dgid = Gid::from_ip("198.51.100.7".parse().unwrap());
    let init = QpAttr {
        qp_state: Init,
        port_num: 1,
        qp_access_flags: AccessFlags::REMOTE_READ,
        qkey: 0x1111_1111,
        ..Default::default()
    };
    let rtr = QpAttr {
        qp_state: Rtr,
        path_mtu: Mtu::Mtu4096,
        dest_qp_num: 0x11,
        rq_psn: 0x7F_FFFF,
        max_dest_rd_atomic: 128,
        min_rnr_timer: 12,
        ah_attr: AhAttr {
            dgid,
            sgid_index: 1,
            hop_limit: 0xFF,
            ..Default::default()
        },
        ..Default::default()
    };
    let rts = QpAttr {
        qp_state: Rts,
        sq_psn: 0x00_0001,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 128,
        ..Default::default()
    };
    let base = M::STATE | M::PKEY_INDEX | M::PORT;
    let q = walk(
        QpType::Rc,
        &[
            (init, base | M::ACCESS_FLAGS),
            (
                rtr,
                M::STATE
                    | M::AV
                    | M::PATH_MTU
                    | M::DEST_QPN
                    | M::RQ_PSN
                    | M::MIN_RNR_TIMER
                    | M::MAX_DEST_RD_ATOMIC,
            ),
            (
                rts,
                M::STATE
                    | M::SQ_PSN
                    | M::TIMEOUT
                    | M::RETRY_CNT
                    | M::RNR_RETRY
                    | M::MAX_QP_RD_ATOMIC,
            ),
        ],
    );
    assert_eq!((q.max_rd_atomic, q.max_dest_rd_atomic), (128, 128));
    // The same for UC (ib_send_bw -c UC) and UD (ib_send_bw -c UD).
    walk(
        QpType::Uc,
        &[
            (init, base | M::ACCESS_FLAGS),
            (
                rtr,
                M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN,
            ),
            (rts, M::STATE | M::SQ_PSN),
        ],
    );
    let q = walk(
        QpType::Ud,
        &[
            (init, base | M::QKEY),
            (rtr, M::STATE),
            (rts, M::STATE | M::SQ_PSN),
        ],
    );
    assert_eq!(q.qkey, 0x1111_1111);
}

#[test]
fn a_qp_goes_round_the_whole_diagram() {
    let a = |s| attr(s);
    let q = walk(
        QpType::Rc,
        &[
            (a(Reset), M::STATE),
            (a(Init), RC_INIT),
            (a(Init), M::STATE | M::ACCESS_FLAGS),
            (a(Rtr), RC_RTR),
            (a(Rts), RC_RTS),
            (a(Rts), M::STATE | M::MIN_RNR_TIMER),
            (a(Sqd), M::STATE | M::EN_SQD_ASYNC_NOTIFY),
            (a(Sqd), M::STATE | M::TIMEOUT),
            (a(Rts), M::STATE),
            (a(ERR), M::STATE),
            (a(ERR), M::STATE),
            (a(Reset), M::STATE),
            (a(Init), RC_INIT),
            (a(Reset), M::STATE),
        ],
    );
    assert_eq!(q.qp_state, Reset);
}

#[test]
fn apply_copies_only_what_the_mask_selects() {
    let mut s = QpAttr::default();
    let mut a = attr(Rts);
    a.max_rd_atomic = 3;
    a.max_dest_rd_atomic = 100;
    apply_modify(&mut s, &a, M::TIMEOUT | M::SQ_PSN | M::MAX_QP_RD_ATOMIC);
    assert_eq!(s.timeout, 14);
    assert_eq!(s.sq_psn, 0x65_4321);
    // rxe rounds READ/atomic depths up to a power of two.
    assert_eq!(s.max_rd_atomic, 4);
    assert_eq!(s.retry_cnt, 0);
    assert_eq!(s.rq_psn, 0);
    assert_eq!(s.qp_state, Reset);
    apply_modify(&mut s, &a, M::STATE | M::MAX_DEST_RD_ATOMIC);
    assert_eq!(s.max_dest_rd_atomic, 128);
    assert_eq!((s.qp_state, s.cur_qp_state), (Rts, Rts));
    a.max_rd_atomic = 0;
    apply_modify(&mut s, &a, M::MAX_QP_RD_ATOMIC);
    assert_eq!(s.max_rd_atomic, 0);
    // CAP is never applied (the table refuses it before).
    apply_modify(&mut s, &a, M::CAP);
    assert_eq!(s.cap, QpCap::default());
    // Going to RESET keeps the attributes, as in rxe.
    let before = s;
    apply_modify(&mut s, &attr(Reset), M::STATE);
    assert_eq!(s.qp_state, Reset);
    assert_eq!(
        QpAttr {
            qp_state: before.qp_state,
            cur_qp_state: before.cur_qp_state,
            ..s
        },
        before
    );
}

#[test]
fn leaving_sqd_waits_for_the_drain() {
    assert!(check_sqd_exit(Sqd, Rts, false).is_ok());
    assert!(matches!(
        check_sqd_exit(Sqd, Rts, true),
        Err(VerbsError::InvalidState { state: Sqd, .. })
    ));
    assert!(check_sqd_exit(Sqd, Sqd, true).is_err());
    assert!(check_sqd_exit(Sqd, Reset, true).is_err());
    assert!(check_sqd_exit(Sqd, ERR, true).is_ok());
    assert!(check_sqd_exit(Rts, Rts, true).is_ok());
}

#[test]
fn capacities_are_checked_against_the_device() {
    let l = DeviceLimits::default();
    assert!(check_cap(&QpCap::default(), &l).is_ok());
    let at_limit = QpCap {
        max_send_wr: 0x4000,
        max_recv_wr: 0x4000,
        max_send_sge: 32,
        max_recv_sge: 32,
        max_inline_data: 400,
    };
    assert!(check_cap(&at_limit, &l).is_ok());
    let empty = QpCap {
        max_send_wr: 0,
        max_recv_wr: 0,
        max_send_sge: 0,
        max_recv_sge: 0,
        max_inline_data: 0,
    };
    assert!(check_cap(&empty, &l).is_ok());
    type Bump = fn(&mut QpCap);
    let cases: [(&str, Bump); 5] = [
        ("max_send_wr", |c| c.max_send_wr += 1),
        ("max_recv_wr", |c| c.max_recv_wr += 1),
        ("max_send_sge", |c| c.max_send_sge += 1),
        ("max_recv_sge", |c| c.max_recv_sge += 1),
        ("max_inline_data", |c| c.max_inline_data += 1),
    ];
    for (name, f) in cases {
        let mut c = at_limit;
        f(&mut c);
        match check_cap(&c, &l) {
            Err(VerbsError::ExceedsDeviceLimit {
                what,
                requested,
                limit,
            }) => {
                assert_eq!(what, name);
                assert_eq!(requested, limit + 1);
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}
