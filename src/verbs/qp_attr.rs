//! What `ibv_modify_qp` checks before it changes a QP, as the Linux kernel checks it
//! (drivers/infiniband/core/verbs.c: `qp_state_table` and `ib_modify_qp_is_ok()`, the
//! transitions of IBTA vol. 1 §10.3.1 with the attributes of §11.2.5.2) plus the value checks
//! of rxe (drivers/infiniband/sw/rxe/rxe_qp.c `rxe_qp_chk_attr()`, rxe_param.h limits).

use super::types::{Mtu, QpAttr, QpAttrMask, QpCap, QpState, QpType};
use super::VerbsError;

/// Device limits that attribute checks depend on (rxe_param.h values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Largest path MTU.
    pub max_mtu: Mtu,
    /// Most WRs per queue (RXE_MAX_QP_WR).
    pub max_qp_wr: u32,
    /// Most SGEs per WR (RXE_MAX_SGE).
    pub max_sge: u32,
    /// Most inline bytes per WR.
    pub max_inline_data: u32,
    /// Most outstanding READ/atomic as responder (RXE_MAX_QP_RD_ATOM).
    pub max_qp_rd_atom: u32,
    /// Most outstanding READ/atomic as requester (RXE_MAX_QP_INIT_RD_ATOM).
    pub max_qp_init_rd_atom: u32,
    /// Most entries per CQ (RXE_MAX_CQE).
    pub max_cqe: u32,
    /// P_Key table length (index 0: the default P_Key).
    pub pkey_table_len: u16,
    /// GID table length (softroce: 2, both the device address).
    pub gid_table_len: u8,
}

impl Default for DeviceLimits {
    fn default() -> Self {
        DeviceLimits {
            max_mtu: Mtu::Mtu4096,
            max_qp_wr: 0x4000,
            max_sge: 32,
            max_inline_data: 256,
            max_qp_rd_atom: 128,
            max_qp_init_rd_atom: 128,
            max_cqe: 0x7FFF,
            pkey_table_len: 1,
            gid_table_len: 2,
        }
    }
}

type M = QpAttrMask;

/// One row of the kernel's table: a legal transition with the attributes it requires and
/// allows, per transport (RC, UC, UD).
struct Transition {
    from: QpState,
    to: QpState,
    req: [QpAttrMask; 3],
    opt: [QpAttrMask; 3],
}

const fn m(bits: u32) -> QpAttrMask {
    QpAttrMask(bits)
}

const NONE: QpAttrMask = QpAttrMask(0);

const RC_RTR_REQ: u32 = M::AV.0
    | M::PATH_MTU.0
    | M::DEST_QPN.0
    | M::RQ_PSN.0
    | M::MAX_DEST_RD_ATOMIC.0
    | M::MIN_RNR_TIMER.0;
const UC_RTR_REQ: u32 = M::AV.0 | M::PATH_MTU.0 | M::DEST_QPN.0 | M::RQ_PSN.0;
const RC_RTS_REQ: u32 =
    M::SQ_PSN.0 | M::TIMEOUT.0 | M::RETRY_CNT.0 | M::RNR_RETRY.0 | M::MAX_QP_RD_ATOMIC.0;
const RC_TO_RTS_OPT: u32 =
    M::CUR_STATE.0 | M::ALT_PATH.0 | M::ACCESS_FLAGS.0 | M::MIN_RNR_TIMER.0 | M::PATH_MIG_STATE.0;
const UC_TO_RTS_OPT: u32 = M::CUR_STATE.0 | M::ALT_PATH.0 | M::ACCESS_FLAGS.0 | M::PATH_MIG_STATE.0;
const UD_TO_RTS_OPT: u32 = M::CUR_STATE.0 | M::QKEY.0;

/// The legal transitions (other than "any -> RESET" and "any -> ERR", which need nothing).
const TABLE: &[Transition] = &[
    Transition {
        from: QpState::Reset,
        to: QpState::Init,
        req: [
            m(M::PKEY_INDEX.0 | M::PORT.0 | M::ACCESS_FLAGS.0),
            m(M::PKEY_INDEX.0 | M::PORT.0 | M::ACCESS_FLAGS.0),
            m(M::PKEY_INDEX.0 | M::PORT.0 | M::QKEY.0),
        ],
        opt: [NONE, NONE, NONE],
    },
    Transition {
        from: QpState::Init,
        to: QpState::Init,
        req: [NONE, NONE, NONE],
        opt: [
            m(M::PKEY_INDEX.0 | M::PORT.0 | M::ACCESS_FLAGS.0),
            m(M::PKEY_INDEX.0 | M::PORT.0 | M::ACCESS_FLAGS.0),
            m(M::PKEY_INDEX.0 | M::PORT.0 | M::QKEY.0),
        ],
    },
    Transition {
        from: QpState::Init,
        to: QpState::Rtr,
        req: [m(RC_RTR_REQ), m(UC_RTR_REQ), NONE],
        opt: [
            m(M::ALT_PATH.0 | M::ACCESS_FLAGS.0 | M::PKEY_INDEX.0),
            m(M::ALT_PATH.0 | M::ACCESS_FLAGS.0 | M::PKEY_INDEX.0),
            m(M::PKEY_INDEX.0 | M::QKEY.0),
        ],
    },
    Transition {
        from: QpState::Rtr,
        to: QpState::Rts,
        req: [m(RC_RTS_REQ), m(M::SQ_PSN.0), m(M::SQ_PSN.0)],
        opt: [m(RC_TO_RTS_OPT), m(UC_TO_RTS_OPT), m(UD_TO_RTS_OPT)],
    },
    Transition {
        from: QpState::Rts,
        to: QpState::Rts,
        req: [NONE, NONE, NONE],
        opt: [
            m(M::CUR_STATE.0
                | M::ACCESS_FLAGS.0
                | M::ALT_PATH.0
                | M::PATH_MIG_STATE.0
                | M::MIN_RNR_TIMER.0),
            m(M::CUR_STATE.0 | M::ACCESS_FLAGS.0 | M::ALT_PATH.0 | M::PATH_MIG_STATE.0),
            m(M::CUR_STATE.0 | M::QKEY.0),
        ],
    },
    Transition {
        from: QpState::Rts,
        to: QpState::Sqd,
        req: [NONE, NONE, NONE],
        opt: [
            m(M::EN_SQD_ASYNC_NOTIFY.0),
            m(M::EN_SQD_ASYNC_NOTIFY.0),
            m(M::EN_SQD_ASYNC_NOTIFY.0),
        ],
    },
    Transition {
        from: QpState::Sqd,
        to: QpState::Rts,
        req: [NONE, NONE, NONE],
        opt: [m(RC_TO_RTS_OPT), m(UC_TO_RTS_OPT), m(UD_TO_RTS_OPT)],
    },
    Transition {
        from: QpState::Sqd,
        to: QpState::Sqd,
        req: [NONE, NONE, NONE],
        opt: [
            m(M::AV.0
                | M::TIMEOUT.0
                | M::RETRY_CNT.0
                | M::RNR_RETRY.0
                | M::MAX_QP_RD_ATOMIC.0
                | M::MAX_DEST_RD_ATOMIC.0
                | M::ALT_PATH.0
                | M::ACCESS_FLAGS.0
                | M::PKEY_INDEX.0
                | M::MIN_RNR_TIMER.0
                | M::PATH_MIG_STATE.0),
            m(M::AV.0 | M::ALT_PATH.0 | M::ACCESS_FLAGS.0 | M::PKEY_INDEX.0 | M::PATH_MIG_STATE.0),
            m(M::PKEY_INDEX.0 | M::QKEY.0),
        ],
    },
    Transition {
        from: QpState::Sqe,
        to: QpState::Rts,
        // SQE exists for UC and UD only; an RC row with `req` impossible to meet keeps it out.
        req: [m(u32::MAX), NONE, NONE],
        opt: [
            NONE,
            m(M::CUR_STATE.0 | M::ACCESS_FLAGS.0),
            m(M::CUR_STATE.0 | M::QKEY.0),
        ],
    },
];

fn type_index(t: QpType) -> usize {
    match t {
        QpType::Rc => 0,
        QpType::Uc => 1,
        QpType::Ud => 2,
    }
}

/// Checks a modify request against the QP's state and type (`ib_modify_qp_is_ok`) and the
/// attribute values against the device (`rxe_qp_chk_attr`). Returns the state the QP moves to.
pub fn check_modify(
    qp_type: QpType,
    current: QpState,
    attr: &QpAttr,
    mask: QpAttrMask,
    limits: &DeviceLimits,
) -> Result<QpState, VerbsError> {
    let known = QpAttrMask((1 << 21) - 1);
    if !known.contains(mask) {
        return Err(VerbsError::InvalidAttribute {
            attr: "attr_mask",
            reason: "unknown attribute bits",
        });
    }
    if mask.contains(M::CUR_STATE) {
        // The kernel accepts cur_qp_state only from RTR, RTS, SQD and SQE, and the caller's
        // belief must match the QP's state.
        if !matches!(
            attr.cur_qp_state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            return Err(VerbsError::InvalidAttribute {
                attr: "cur_qp_state",
                reason: "only RTR, RTS, SQD or SQE may be given",
            });
        }
        if attr.cur_qp_state != current {
            return Err(VerbsError::StateMismatch {
                assumed: attr.cur_qp_state,
                actual: current,
            });
        }
    }
    let to = if mask.contains(M::STATE) {
        attr.qp_state
    } else {
        current
    };
    let t = type_index(qp_type);
    let (req, opt) = if to == QpState::Reset || to == QpState::Err {
        // Any state may go to RESET or ERR with no other attribute.
        (NONE, NONE)
    } else {
        match TABLE.iter().find(|r| r.from == current && r.to == to) {
            Some(r) if r.req[t].0 != u32::MAX => (r.req[t], r.opt[t]),
            _ => return Err(VerbsError::IllegalTransition { from: current, to }),
        }
    };
    let missing = QpAttrMask(req.0 & !mask.0);
    if !missing.is_empty() {
        return Err(VerbsError::MissingAttributes {
            from: current,
            to,
            missing,
        });
    }
    let extra = QpAttrMask(mask.0 & !(req.0 | opt.0 | M::STATE.0));
    if !extra.is_empty() {
        return Err(VerbsError::UnexpectedAttributes {
            from: current,
            to,
            extra,
        });
    }
    check_values(qp_type, attr, mask, limits)?;
    Ok(to)
}

fn bad(attr: &'static str, reason: &'static str) -> VerbsError {
    VerbsError::InvalidAttribute { attr, reason }
}

fn check_values(
    qp_type: QpType,
    a: &QpAttr,
    mask: QpAttrMask,
    l: &DeviceLimits,
) -> Result<(), VerbsError> {
    if mask.intersects(M::ALT_PATH | M::PATH_MIG_STATE) {
        return Err(bad("alt_path", "alternate paths are not supported on RoCE"));
    }
    if mask.contains(M::CAP) {
        return Err(bad("cap", "QP capacities cannot be changed after creation"));
    }
    if mask.contains(M::PORT) && a.port_num != 1 {
        return Err(bad("port_num", "the device has one port, number 1"));
    }
    if mask.contains(M::PKEY_INDEX) && a.pkey_index >= l.pkey_table_len {
        return Err(bad("pkey_index", "beyond the P_Key table"));
    }
    if mask.contains(M::ACCESS_FLAGS) {
        if qp_type == QpType::Ud {
            return Err(bad(
                "qp_access_flags",
                "UD QPs have no remote access rights",
            ));
        }
        if a.qp_access_flags.0 & !0xF != 0 {
            return Err(bad("qp_access_flags", "unsupported access bits"));
        }
    }
    if mask.contains(M::AV) {
        if a.ah_attr.dgid.is_zero() {
            return Err(bad("ah_attr.dgid", "RoCE needs the peer's GID"));
        }
        if a.ah_attr.sgid_index >= l.gid_table_len {
            return Err(bad("ah_attr.sgid_index", "beyond the GID table"));
        }
    }
    if mask.contains(M::PATH_MTU) && a.path_mtu > l.max_mtu {
        return Err(bad("path_mtu", "larger than the device's MTU"));
    }
    if mask.contains(M::TIMEOUT) && a.timeout > 31 {
        return Err(bad("timeout", "must be 0..=31"));
    }
    if mask.contains(M::RETRY_CNT) && a.retry_cnt > 7 {
        return Err(bad("retry_cnt", "must be 0..=7"));
    }
    if mask.contains(M::RNR_RETRY) && a.rnr_retry > 7 {
        return Err(bad("rnr_retry", "must be 0..=7"));
    }
    if mask.contains(M::MIN_RNR_TIMER) && a.min_rnr_timer > 31 {
        return Err(bad("min_rnr_timer", "must be 0..=31"));
    }
    if mask.contains(M::MAX_QP_RD_ATOMIC) && a.max_rd_atomic as u32 > l.max_qp_init_rd_atom {
        return Err(VerbsError::ExceedsDeviceLimit {
            what: "max_rd_atomic",
            requested: a.max_rd_atomic as u64,
            limit: l.max_qp_init_rd_atom as u64,
        });
    }
    if mask.contains(M::MAX_DEST_RD_ATOMIC) && a.max_dest_rd_atomic as u32 > l.max_qp_rd_atom {
        return Err(VerbsError::ExceedsDeviceLimit {
            what: "max_dest_rd_atomic",
            requested: a.max_dest_rd_atomic as u64,
            limit: l.max_qp_rd_atom as u64,
        });
    }
    if mask.contains(M::RQ_PSN) && a.rq_psn > 0xFF_FFFF {
        return Err(bad("rq_psn", "PSNs are 24 bits"));
    }
    if mask.contains(M::SQ_PSN) && a.sq_psn > 0xFF_FFFF {
        return Err(bad("sq_psn", "PSNs are 24 bits"));
    }
    if mask.contains(M::DEST_QPN) && a.dest_qp_num > 0xFF_FFFF {
        return Err(bad("dest_qp_num", "QP numbers are 24 bits"));
    }
    Ok(())
}

/// Copies the attributes selected by `mask` into the QP's stored attributes (after
/// [`check_modify`] accepted them). The state itself is the caller's to set.
pub fn apply_modify(stored: &mut QpAttr, a: &QpAttr, mask: QpAttrMask) {
    macro_rules! take {
        ($($bit:ident => $field:ident),* $(,)?) => {
            $(if mask.contains(M::$bit) {
                stored.$field = a.$field;
            })*
        };
    }
    take!(
        EN_SQD_ASYNC_NOTIFY => en_sqd_async_notify,
        ACCESS_FLAGS => qp_access_flags,
        PKEY_INDEX => pkey_index,
        PORT => port_num,
        QKEY => qkey,
        AV => ah_attr,
        PATH_MTU => path_mtu,
        TIMEOUT => timeout,
        RETRY_CNT => retry_cnt,
        RNR_RETRY => rnr_retry,
        RQ_PSN => rq_psn,
        MAX_QP_RD_ATOMIC => max_rd_atomic,
        MIN_RNR_TIMER => min_rnr_timer,
        SQ_PSN => sq_psn,
        MAX_DEST_RD_ATOMIC => max_dest_rd_atomic,
        DEST_QPN => dest_qp_num,
    );
}

/// Checks creation capacities against the device (`rxe_qp_chk_cap`).
pub fn check_cap(cap: &QpCap, l: &DeviceLimits) -> Result<(), VerbsError> {
    let over = |what, requested: u32, limit: u32| {
        if requested > limit {
            Err(VerbsError::ExceedsDeviceLimit {
                what,
                requested: requested as u64,
                limit: limit as u64,
            })
        } else {
            Ok(())
        }
    };
    over("max_send_wr", cap.max_send_wr, l.max_qp_wr)?;
    over("max_recv_wr", cap.max_recv_wr, l.max_qp_wr)?;
    over("max_send_sge", cap.max_send_sge, l.max_sge)?;
    over("max_recv_sge", cap.max_recv_sge, l.max_sge)?;
    over("max_inline_data", cap.max_inline_data, l.max_inline_data)?;
    if cap.max_send_wr == 0 && cap.max_recv_wr == 0 {
        return Err(bad("cap", "a QP needs a send or a receive queue"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::{AhAttr, Gid};

    fn attr(to: QpState) -> QpAttr {
        QpAttr {
            qp_state: to,
            port_num: 1,
            path_mtu: Mtu::Mtu1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            ah_attr: AhAttr {
                dgid: Gid::from_ip("192.0.2.2".parse().unwrap()),
                sgid_index: 1,
                hop_limit: 1,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    const PP_INIT: QpAttrMask = m(M::STATE.0 | M::PKEY_INDEX.0 | M::PORT.0 | M::ACCESS_FLAGS.0);
    const PP_RTR: QpAttrMask = m(M::STATE.0 | RC_RTR_REQ);
    const PP_RTS: QpAttrMask = m(M::STATE.0 | RC_RTS_REQ);

    fn ok(t: QpType, from: QpState, to: QpState, mask: QpAttrMask) -> Result<QpState, VerbsError> {
        check_modify(t, from, &attr(to), mask, &DeviceLimits::default())
    }

    #[test]
    fn the_ibv_rc_pingpong_sequence_is_accepted() {
        use QpState::*;
        assert_eq!(ok(QpType::Rc, Reset, Init, PP_INIT), Ok(Init));
        assert_eq!(ok(QpType::Rc, Init, Rtr, PP_RTR), Ok(Rtr));
        assert_eq!(ok(QpType::Rc, Rtr, Rts, PP_RTS), Ok(Rts));
    }

    #[test]
    fn each_missing_required_attribute_is_named() {
        for bit in 0..21 {
            let b = QpAttrMask(1 << bit);
            if RC_RTR_REQ & b.0 == 0 {
                continue;
            }
            let r = ok(
                QpType::Rc,
                QpState::Init,
                QpState::Rtr,
                QpAttrMask(PP_RTR.0 & !b.0),
            );
            assert_eq!(
                r,
                Err(VerbsError::MissingAttributes {
                    from: QpState::Init,
                    to: QpState::Rtr,
                    missing: b
                })
            );
        }
    }

    #[test]
    fn attributes_not_allowed_are_named() {
        let r = ok(
            QpType::Rc,
            QpState::Reset,
            QpState::Init,
            m(PP_INIT.0 | M::SQ_PSN.0),
        );
        assert_eq!(
            r,
            Err(VerbsError::UnexpectedAttributes {
                from: QpState::Reset,
                to: QpState::Init,
                extra: M::SQ_PSN
            })
        );
    }

    #[test]
    fn illegal_transitions_are_refused() {
        use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};
        for (from, to) in [
            (Reset, Rtr),
            (Reset, Rts),
            (Init, Rts),
            (Rts, Rtr),
            (QpState::Err, Rts),
            (Rtr, Init),
            (Sqe, Rts),
        ] {
            assert_eq!(
                ok(QpType::Rc, from, to, M::STATE),
                Err(VerbsError::IllegalTransition { from, to }),
                "{from:?} -> {to:?}"
            );
        }
        for from in [Reset, Init, Rtr, Rts, Sqd, Sqe, QpState::Err] {
            assert_eq!(
                ok(QpType::Rc, from, QpState::Err, M::STATE),
                Ok(QpState::Err)
            );
            assert_eq!(ok(QpType::Rc, from, Reset, M::STATE), Ok(Reset));
        }
        assert_eq!(ok(QpType::Uc, Sqe, Rts, M::STATE), Ok(Rts));
    }

    #[test]
    fn ud_and_uc_differ_from_rc() {
        use QpState::*;
        let ud_init = m(M::STATE.0 | M::PKEY_INDEX.0 | M::PORT.0 | M::QKEY.0);
        assert_eq!(ok(QpType::Ud, Reset, Init, ud_init), Ok(Init));
        assert!(ok(QpType::Ud, Reset, Init, PP_INIT).is_err());
        assert_eq!(ok(QpType::Ud, Init, Rtr, M::STATE), Ok(Rtr));
        let uc_rtr = m(M::STATE.0 | UC_RTR_REQ);
        assert_eq!(ok(QpType::Uc, Init, Rtr, uc_rtr), Ok(Rtr));
        assert_eq!(
            ok(QpType::Uc, Rtr, Rts, m(M::STATE.0 | M::SQ_PSN.0)),
            Ok(Rts)
        );
    }

    #[test]
    fn values_are_range_checked() {
        let l = DeviceLimits::default();
        let mut a = attr(QpState::Rts);
        a.timeout = 32;
        assert!(matches!(
            check_modify(QpType::Rc, QpState::Rtr, &a, PP_RTS, &l),
            Err(VerbsError::InvalidAttribute {
                attr: "timeout",
                ..
            })
        ));
        let mut a = attr(QpState::Rts);
        a.retry_cnt = 8;
        assert!(check_modify(QpType::Rc, QpState::Rtr, &a, PP_RTS, &l).is_err());
        let mut a = attr(QpState::Rts);
        a.max_rd_atomic = 200;
        assert!(matches!(
            check_modify(QpType::Rc, QpState::Rtr, &a, PP_RTS, &l),
            Err(VerbsError::ExceedsDeviceLimit {
                what: "max_rd_atomic",
                ..
            })
        ));
        let mut a = attr(QpState::Rts);
        a.sq_psn = 1 << 24;
        assert!(check_modify(QpType::Rc, QpState::Rtr, &a, PP_RTS, &l).is_err());
        let mut a = attr(QpState::Rtr);
        a.ah_attr.dgid = Gid::default();
        assert!(check_modify(QpType::Rc, QpState::Init, &a, PP_RTR, &l).is_err());
        let mut a = attr(QpState::Init);
        a.port_num = 2;
        assert!(check_modify(QpType::Rc, QpState::Reset, &a, PP_INIT, &l).is_err());
    }

    #[test]
    fn cur_state_must_match() {
        let mut a = attr(QpState::Rts);
        a.cur_qp_state = QpState::Rtr;
        let r = check_modify(
            QpType::Rc,
            QpState::Rts,
            &a,
            m(M::STATE.0 | M::CUR_STATE.0),
            &DeviceLimits::default(),
        );
        assert_eq!(
            r,
            Err(VerbsError::StateMismatch {
                assumed: QpState::Rtr,
                actual: QpState::Rts
            })
        );
        a.cur_qp_state = QpState::Rts;
        assert_eq!(
            check_modify(
                QpType::Rc,
                QpState::Rts,
                &a,
                m(M::STATE.0 | M::CUR_STATE.0),
                &DeviceLimits::default()
            ),
            Ok(QpState::Rts)
        );
    }

    #[test]
    fn apply_copies_only_masked_fields() {
        let mut s = QpAttr::default();
        let a = attr(QpState::Rts);
        apply_modify(&mut s, &a, m(M::TIMEOUT.0 | M::SQ_PSN.0));
        assert_eq!(s.timeout, 14);
        assert_eq!(s.retry_cnt, 0);
    }

    #[test]
    fn capacities_are_checked() {
        let l = DeviceLimits::default();
        assert!(check_cap(&QpCap::default(), &l).is_ok());
        let c = QpCap {
            max_send_sge: 33,
            ..QpCap::default()
        };
        assert!(matches!(
            check_cap(&c, &l),
            Err(VerbsError::ExceedsDeviceLimit {
                what: "max_send_sge",
                ..
            })
        ));
    }
}
