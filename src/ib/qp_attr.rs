//! What `ibv_modify_qp` checks before it changes a QP, and what it changes.
//!
//! The transitions are those of the QP state diagram (IBTA vol. 1 §10.3.1) and the attributes
//! each transition requires or allows are those of Modify QP (IBTA vol. 1 §11.2.5.2), both as the
//! Linux kernel encodes them: `qp_state_table` and `ib_modify_qp_is_ok()` in
//! drivers/infiniband/core/verbs.c, restricted to RC, UC and UD. The attribute values are then
//! checked as rxe checks them (drivers/infiniband/sw/rxe/rxe_qp.c `rxe_qp_chk_attr()`,
//! rxe_verbs.c `rxe_modify_qp()`, limits from rxe_param.h), plus the RoCE ban on alternate paths
//! of the core's `_ib_modify_qp()`.
//!
//! Where softroce is stricter than rxe, the check says so.

use super::error::VerbsError;
use super::types::{Mtu, QpAttr, QpAttrMask, QpCap, QpState, QpType};

/// The GID table length a port reports (`gid_tbl_len`): rxe's `RXE_PORT_GID_TBL_LEN`. Only
/// the first [`DeviceLimits::gid_table_len`] entries are populated; querying another is
/// ENODATA, as for rxe's unused entries (spec-notes/device-view.md).
pub const GID_TABLE_CAPACITY: u16 = 1024;

/// Device limits that attribute checks depend on; the defaults are rxe's (rxe_param.h).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Largest path MTU (`RXE_PORT_INFO_MTU_CAP` = 4096).
    pub max_mtu: Mtu,
    /// Most WRs per work queue (`RXE_MAX_QP_WR` = 0x4000).
    pub max_qp_wr: u32,
    /// Most SGEs per send or receive WR (`RXE_MAX_SGE` = 32).
    pub max_sge: u32,
    /// Most bytes of inline data per send WR (`RXE_MAX_INLINE_DATA` = 400).
    pub max_inline_data: u32,
    /// Most READ/atomic requests a QP accepts as responder, the bound of `max_dest_rd_atomic`
    /// (`RXE_MAX_QP_RD_ATOM` = 128).
    pub max_qp_rd_atom: u32,
    /// Most READ/atomic requests a QP may have outstanding as requester, the bound of
    /// `max_rd_atomic` (`RXE_MAX_QP_INIT_RD_ATOM` = 128).
    pub max_qp_init_rd_atom: u32,
    /// Most entries per CQ (`2^RXE_MAX_LOG_CQE - 1` = 0x7FFF).
    pub max_cqe: u32,
    /// P_Key table length: 1, index 0 holding the default P_Key 0xFFFF.
    pub pkey_table_len: u16,
    /// Populated GID table entries: softroce has 2, both its own address, so that the `-g 0`
    /// and `-g 1` habits of rxe users both work. The port reports a table of
    /// [`GID_TABLE_CAPACITY`] entries, the others empty.
    pub gid_table_len: u8,
    /// Most multicast groups with QPs attached at once. Each group is a socket of the device
    /// (a socket bound to one group address receives only that group), so the bound is the
    /// process's file descriptors, not rxe's `RXE_MAX_MCAST_GRP` = 8192.
    pub max_mcast_grp: u32,
    /// Most QPs attached to one group (`RXE_MAX_MCAST_QP_ATTACH` = 56).
    pub max_mcast_qp_attach: u32,
    /// Most attachments in all (`max_mcast_grp` times `max_mcast_qp_attach`).
    pub max_total_mcast_qp_attach: u32,
}

/// Most QPs attached to one multicast group (rxe's `RXE_MAX_MCAST_QP_ATTACH`).
pub const MAX_MCAST_QP_ATTACH: usize = 56;

/// Most multicast groups a device has QPs attached to at once (see
/// [`DeviceLimits::max_mcast_grp`]).
pub const MAX_MCAST_GROUPS: usize = 256;

impl Default for DeviceLimits {
    fn default() -> Self {
        DeviceLimits {
            max_mtu: Mtu::Mtu4096,
            max_qp_wr: 0x4000,
            max_sge: 32,
            max_inline_data: 400,
            max_qp_rd_atom: 128,
            max_qp_init_rd_atom: 128,
            max_cqe: 0x7FFF,
            pkey_table_len: 1,
            gid_table_len: 2,
            max_mcast_grp: MAX_MCAST_GROUPS as u32,
            max_mcast_qp_attach: MAX_MCAST_QP_ATTACH as u32,
            max_total_mcast_qp_attach: (MAX_MCAST_GROUPS * MAX_MCAST_QP_ATTACH) as u32,
        }
    }
}

type M = QpAttrMask;

/// The attributes one transition requires and allows for one transport
/// (`req_param[type]`, `opt_param[type]` of the kernel's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Params {
    req: QpAttrMask,
    opt: QpAttrMask,
}

/// One valid entry of the kernel's `qp_state_table[from][to]`, with its parameters for RC, UC
/// and UD in that order (`None`: the transition does not exist for that transport).
#[derive(Debug)]
struct Transition {
    from: QpState,
    to: QpState,
    params: [Option<Params>; 3],
}

const fn mask(bits: &[QpAttrMask]) -> QpAttrMask {
    let mut m = 0;
    let mut i = 0;
    while i < bits.len() {
        m |= bits[i].0;
        i += 1;
    }
    QpAttrMask(m)
}

const NONE: QpAttrMask = QpAttrMask::EMPTY;

/// Per-transport parameters.
const fn per(
    rc: (QpAttrMask, QpAttrMask),
    uc: (QpAttrMask, QpAttrMask),
    ud: (QpAttrMask, QpAttrMask),
) -> [Option<Params>; 3] {
    [
        Some(Params {
            req: rc.0,
            opt: rc.1,
        }),
        Some(Params {
            req: uc.0,
            opt: uc.1,
        }),
        Some(Params {
            req: ud.0,
            opt: ud.1,
        }),
    ]
}

/// The same (empty) parameters for every transport: the `{ .valid = 1 }` entries.
const BARE: [Option<Params>; 3] = per((NONE, NONE), (NONE, NONE), (NONE, NONE));

const fn row(from: QpState, to: QpState, params: [Option<Params>; 3]) -> Transition {
    Transition { from, to, params }
}

// Attribute groups that recur in the table.
const INIT_RC: QpAttrMask = mask(&[M::PKEY_INDEX, M::PORT, M::ACCESS_FLAGS]);
const INIT_UD: QpAttrMask = mask(&[M::PKEY_INDEX, M::PORT, M::QKEY]);
const RTR_UC_REQ: QpAttrMask = mask(&[M::AV, M::PATH_MTU, M::DEST_QPN, M::RQ_PSN]);
const RTR_RC_REQ: QpAttrMask = mask(&[RTR_UC_REQ, M::MAX_DEST_RD_ATOMIC, M::MIN_RNR_TIMER]);
const RTR_RC_OPT: QpAttrMask = mask(&[M::ALT_PATH, M::ACCESS_FLAGS, M::PKEY_INDEX]);
const RTR_UD_OPT: QpAttrMask = mask(&[M::PKEY_INDEX, M::QKEY]);
const RTS_RC_REQ: QpAttrMask = mask(&[
    M::TIMEOUT,
    M::RETRY_CNT,
    M::RNR_RETRY,
    M::SQ_PSN,
    M::MAX_QP_RD_ATOMIC,
]);
/// Optional on RTR->RTS, RTS->RTS and SQD->RTS for UC.
const TO_RTS_UC_OPT: QpAttrMask = mask(&[
    M::CUR_STATE,
    M::ALT_PATH,
    M::ACCESS_FLAGS,
    M::PATH_MIG_STATE,
]);
/// Optional on RTR->RTS, RTS->RTS and SQD->RTS for RC.
const TO_RTS_RC_OPT: QpAttrMask = mask(&[TO_RTS_UC_OPT, M::MIN_RNR_TIMER]);
/// Optional on RTR->RTS, RTS->RTS, SQD->RTS and SQE->RTS for UD.
const TO_RTS_UD_OPT: QpAttrMask = mask(&[M::CUR_STATE, M::QKEY]);
const SQD_SQD_RC_OPT: QpAttrMask = mask(&[
    M::PORT,
    M::AV,
    M::TIMEOUT,
    M::RETRY_CNT,
    M::RNR_RETRY,
    M::MAX_QP_RD_ATOMIC,
    M::MAX_DEST_RD_ATOMIC,
    M::ALT_PATH,
    M::ACCESS_FLAGS,
    M::PKEY_INDEX,
    M::MIN_RNR_TIMER,
    M::PATH_MIG_STATE,
]);
const SQD_SQD_UC_OPT: QpAttrMask = mask(&[
    M::AV,
    M::ALT_PATH,
    M::ACCESS_FLAGS,
    M::PKEY_INDEX,
    M::PATH_MIG_STATE,
]);

/// `qp_state_table` of drivers/infiniband/core/verbs.c for RC, UC and UD, in its order: every
/// valid (current, next) pair; a pair not listed is not a transition (IBTA §10.3.1).
///
/// Two entries deserve a note. RESET -> ERROR is not in the kernel's table, so it is not here
/// either: "any state -> ERROR" holds for every state but RESET. SQE -> RTS is valid in the
/// kernel's table for every type, with empty masks for RC; here it is absent for RC, since SQE
/// is a state of UC and UD QPs only (IBTA §10.3.1) and an RC QP cannot be in it.
const TABLE: &[Transition] = &[
    row(QpState::Reset, QpState::Reset, BARE),
    row(
        QpState::Reset,
        QpState::Init,
        per((INIT_RC, NONE), (INIT_RC, NONE), (INIT_UD, NONE)),
    ),
    row(QpState::Init, QpState::Reset, BARE),
    row(QpState::Init, QpState::Err, BARE),
    row(
        QpState::Init,
        QpState::Init,
        per((NONE, INIT_RC), (NONE, INIT_RC), (NONE, INIT_UD)),
    ),
    row(
        QpState::Init,
        QpState::Rtr,
        per(
            (RTR_RC_REQ, RTR_RC_OPT),
            (RTR_UC_REQ, RTR_RC_OPT),
            (NONE, RTR_UD_OPT),
        ),
    ),
    row(QpState::Rtr, QpState::Reset, BARE),
    row(QpState::Rtr, QpState::Err, BARE),
    row(
        QpState::Rtr,
        QpState::Rts,
        per(
            (RTS_RC_REQ, TO_RTS_RC_OPT),
            (M::SQ_PSN, TO_RTS_UC_OPT),
            (M::SQ_PSN, TO_RTS_UD_OPT),
        ),
    ),
    row(QpState::Rts, QpState::Reset, BARE),
    row(QpState::Rts, QpState::Err, BARE),
    row(
        QpState::Rts,
        QpState::Rts,
        per(
            (NONE, TO_RTS_RC_OPT),
            (NONE, TO_RTS_UC_OPT),
            (NONE, TO_RTS_UD_OPT),
        ),
    ),
    row(
        QpState::Rts,
        QpState::Sqd,
        per(
            (NONE, M::EN_SQD_ASYNC_NOTIFY),
            (NONE, M::EN_SQD_ASYNC_NOTIFY),
            (NONE, M::EN_SQD_ASYNC_NOTIFY),
        ),
    ),
    row(QpState::Sqd, QpState::Reset, BARE),
    row(QpState::Sqd, QpState::Err, BARE),
    row(
        QpState::Sqd,
        QpState::Rts,
        per(
            (NONE, TO_RTS_RC_OPT),
            (NONE, TO_RTS_UC_OPT),
            (NONE, TO_RTS_UD_OPT),
        ),
    ),
    row(
        QpState::Sqd,
        QpState::Sqd,
        per(
            (NONE, SQD_SQD_RC_OPT),
            (NONE, SQD_SQD_UC_OPT),
            (NONE, RTR_UD_OPT),
        ),
    ),
    row(QpState::Sqe, QpState::Reset, BARE),
    row(QpState::Sqe, QpState::Err, BARE),
    row(
        QpState::Sqe,
        QpState::Rts,
        [
            None,
            Some(Params {
                req: NONE,
                opt: mask(&[M::CUR_STATE, M::ACCESS_FLAGS]),
            }),
            Some(Params {
                req: NONE,
                opt: TO_RTS_UD_OPT,
            }),
        ],
    ),
    row(QpState::Err, QpState::Reset, BARE),
    row(QpState::Err, QpState::Err, BARE),
];

/// The attribute bits the kernel knows (`IB_QP_ATTR_STANDARD_BITS`, bits 0..=20); rxe refuses
/// any other with `EOPNOTSUPP` (`rxe_modify_qp()`).
const STANDARD_BITS: QpAttrMask = QpAttrMask((1 << 21) - 1);

/// PSNs and QP numbers are 24 bits (BTH, IBTA §9.2).
const MASK_24: u32 = 0xFF_FFFF;

fn type_index(t: QpType) -> usize {
    match t {
        QpType::Rc => 0,
        QpType::Uc => 1,
        QpType::Ud => 2,
    }
}

/// The parameters of `from -> to` for `qp_type`, if the kernel's table has the transition.
fn transition(qp_type: QpType, from: QpState, to: QpState) -> Option<Params> {
    TABLE
        .iter()
        .find(|t| t.from == from && t.to == to)
        .and_then(|t| t.params[type_index(qp_type)])
}

/// Checks a modify request against the QP's type and current state, and its values against the
/// device; returns the state the QP moves to. Nothing is changed: see [`apply_modify`].
///
/// The transition rules are `ib_modify_qp_is_ok()` (drivers/infiniband/core/verbs.c) over the
/// table of IBTA §10.3.1 / §11.2.5.2:
///
/// - without `STATE` in `mask` the request modifies attributes within the current state, which
///   the table allows only where it has a `current -> current` entry (RESET, INIT, RTS, SQD and
///   ERROR; not RTR or SQE);
/// - every required attribute of the transition must be in `mask`, and every bit of `mask` other
///   than `STATE` must be required or optional for it. `CUR_STATE` is optional only on the
///   transitions into RTS, so it is refused elsewhere (RTS -> ERROR included), as the kernel
///   refuses it;
/// - `cur_qp_state` (with `CUR_STATE`) must be RTR, RTS, SQD or SQE, as the kernel requires. The
///   kernel and rxe then take it for the current state without comparing it with the QP's; an
///   engine that knows its state does better to refuse a stale belief, so a mismatch is
///   [`VerbsError::StateMismatch`]. When the two agree the outcome is the kernel's.
///
/// The value checks are `rxe_qp_chk_attr()`'s, the core's RoCE ban on alternate paths, and the
/// field widths of the wire format, which rxe truncates silently and softroce refuses.
pub fn check_modify(
    qp_type: QpType,
    current: QpState,
    attr: &QpAttr,
    mask: QpAttrMask,
    limits: &DeviceLimits,
) -> Result<QpState, VerbsError> {
    if !STANDARD_BITS.contains(mask) {
        return Err(bad(
            "attr_mask",
            "unknown attribute bits (beyond IBV_QP_DEST_QPN)",
        ));
    }
    if mask.contains(M::CUR_STATE) {
        if !matches!(
            attr.cur_qp_state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            return Err(bad(
                "cur_qp_state",
                "may only be given as RTR, RTS, SQD or SQE",
            ));
        }
        if attr.cur_qp_state != current {
            return Err(VerbsError::StateMismatch {
                assumed: attr.cur_qp_state,
                actual: current,
            });
        }
    }
    let from = current;
    let to = if mask.contains(M::STATE) {
        attr.qp_state
    } else {
        from
    };
    let p = transition(qp_type, from, to).ok_or(VerbsError::IllegalTransition { from, to })?;
    let missing = QpAttrMask(p.req.0 & !mask.0);
    if !missing.is_empty() {
        return Err(VerbsError::MissingAttributes { from, to, missing });
    }
    let extra = QpAttrMask(mask.0 & !(p.req.0 | p.opt.0 | M::STATE.0));
    if !extra.is_empty() {
        return Err(VerbsError::UnexpectedAttributes { from, to, extra });
    }
    check_values(attr, mask, limits)?;
    Ok(to)
}

fn bad(attr: &'static str, reason: &'static str) -> VerbsError {
    VerbsError::InvalidAttribute { attr, reason }
}

fn over(what: &'static str, requested: u32, limit: u32) -> Result<(), VerbsError> {
    if requested > limit {
        Err(VerbsError::ExceedsDeviceLimit {
            what,
            requested: u64::from(requested),
            limit: u64::from(limit),
        })
    } else {
        Ok(())
    }
}

/// The value checks of a modify whose mask the table accepted. `CAP` needs none: no transition
/// accepts it (the table has it in no `opt_param`), so `rxe_qp_chk_attr()`'s check of it is
/// never reached and QP capacities cannot change after creation.
fn check_values(a: &QpAttr, mask: QpAttrMask, l: &DeviceLimits) -> Result<(), VerbsError> {
    // rxe_qp_chk_attr(), in its order.
    if mask.contains(M::PORT) && a.port_num != 1 {
        return Err(bad("port_num", "the device has one port, number 1"));
    }
    if mask.contains(M::AV) {
        // The core requires a GRH on RoCE (rdma_check_ah_attr()); softroce's AhAttr has no
        // is_global flag, so a zero GID stands for "no GRH".
        if a.ah_attr.dgid.is_zero() {
            return Err(bad(
                "ah_attr.dgid",
                "RoCE needs a GRH: the peer's GID (IP address)",
            ));
        }
        // rxe_chk_ah_attr(): the source GID must exist.
        if a.ah_attr.sgid_index >= l.gid_table_len {
            return Err(bad("ah_attr.sgid_index", "beyond the GID table"));
        }
    }
    // The core bans alternate paths on RoCE (_ib_modify_qp(): "Today the core code can only
    // handle alternate paths and APM for IB"); softroce refuses the migration state with them.
    if mask.contains(M::ALT_PATH) {
        return Err(bad(
            "alt_ah_attr",
            "alternate paths are not supported on RoCE",
        ));
    }
    if mask.contains(M::PATH_MIG_STATE) {
        return Err(bad(
            "path_mig_state",
            "alternate paths are not supported on RoCE",
        ));
    }
    if mask.contains(M::PATH_MTU) {
        over("path_mtu", a.path_mtu.bytes(), l.max_mtu.bytes())?;
    }
    if mask.contains(M::MAX_QP_RD_ATOMIC) {
        // rxe bounds it by max_qp_rd_atom; the requester's depth is what ibv_query_device
        // reports as max_qp_init_rd_atom. Both are 128 in rxe.
        over(
            "max_rd_atomic",
            u32::from(a.max_rd_atomic),
            l.max_qp_init_rd_atom,
        )?;
    }
    if mask.contains(M::TIMEOUT) && a.timeout > 31 {
        return Err(bad("timeout", "must be 0..=31 (4.096 us x 2^timeout)"));
    }
    // Beyond rxe: the P_Key index (checked by the core's security hook and by hardware
    // drivers), the responder's READ/atomic depth (rxe allocates whatever is asked), and the
    // widths of the fields on the wire, which rxe masks or keeps as given.
    if mask.contains(M::PKEY_INDEX) && a.pkey_index >= l.pkey_table_len {
        return Err(bad("pkey_index", "beyond the P_Key table (index 0 only)"));
    }
    if mask.contains(M::MAX_DEST_RD_ATOMIC) {
        over(
            "max_dest_rd_atomic",
            u32::from(a.max_dest_rd_atomic),
            l.max_qp_rd_atom,
        )?;
    }
    if mask.contains(M::RETRY_CNT) && a.retry_cnt > 7 {
        return Err(bad("retry_cnt", "must be 0..=7"));
    }
    if mask.contains(M::RNR_RETRY) && a.rnr_retry > 7 {
        return Err(bad("rnr_retry", "must be 0..=7 (7: retry forever)"));
    }
    if mask.contains(M::MIN_RNR_TIMER) && a.min_rnr_timer > 31 {
        return Err(bad("min_rnr_timer", "must be 0..=31 (an AETH timer code)"));
    }
    if mask.contains(M::RQ_PSN) && a.rq_psn > MASK_24 {
        return Err(bad("rq_psn", "PSNs are 24 bits"));
    }
    if mask.contains(M::SQ_PSN) && a.sq_psn > MASK_24 {
        return Err(bad("sq_psn", "PSNs are 24 bits"));
    }
    if mask.contains(M::DEST_QPN) && a.dest_qp_num > MASK_24 {
        return Err(bad("dest_qp_num", "QP numbers are 24 bits"));
    }
    Ok(())
}

/// Refuses to leave SQD, other than to ERROR, while the send queue is still draining, as rxe
/// does (`__qp_chk_state()` in rxe_qp.c; IBTA §10.3.1: SQD -> RTS only once drained). Call it
/// with the QP's `sq_draining` next to [`check_modify`], which cannot know it.
pub fn check_sqd_exit(current: QpState, to: QpState, sq_draining: bool) -> Result<(), VerbsError> {
    if current == QpState::Sqd && sq_draining && to != QpState::Err {
        return Err(VerbsError::InvalidState {
            state: QpState::Sqd,
            call: "modify_qp out of SQD before the send queue has drained",
        });
    }
    Ok(())
}

/// A READ/atomic depth as rxe stores it: rounded up to a power of two (`rxe_qp_from_attr()`),
/// 0 staying 0.
fn rd_atomic_depth(n: u8) -> u8 {
    if n == 0 {
        0
    } else {
        n.checked_next_power_of_two().unwrap_or(n)
    }
}

/// Copies the attributes selected by `mask` into the QP's stored attributes, after
/// [`check_modify`] accepted them, as `rxe_qp_from_attr()` does: the new state with `STATE`
/// (`cur_qp_state` follows it, so that a query reports the two alike), `max_rd_atomic` and
/// `max_dest_rd_atomic` rounded up to a power of two, PSNs to 24 bits.
///
/// Going to RESET clears no attribute: rxe's `rxe_qp_reset()` resets only transport state (send
/// sequence numbers, opcodes, MSN, READ/atomic resources, queues), which is the engine's to do,
/// and a query after RESET reports the attributes last set.
pub fn apply_modify(stored: &mut QpAttr, attr: &QpAttr, mask: QpAttrMask) {
    macro_rules! take {
        ($($bit:ident => $field:ident),* $(,)?) => {
            $(if mask.contains(M::$bit) {
                stored.$field = attr.$field;
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
        MIN_RNR_TIMER => min_rnr_timer,
        DEST_QPN => dest_qp_num,
    );
    if mask.contains(M::MAX_QP_RD_ATOMIC) {
        stored.max_rd_atomic = rd_atomic_depth(attr.max_rd_atomic);
    }
    if mask.contains(M::MAX_DEST_RD_ATOMIC) {
        stored.max_dest_rd_atomic = rd_atomic_depth(attr.max_dest_rd_atomic);
    }
    if mask.contains(M::RQ_PSN) {
        stored.rq_psn = attr.rq_psn & MASK_24;
    }
    if mask.contains(M::SQ_PSN) {
        stored.sq_psn = attr.sq_psn & MASK_24;
    }
    if mask.contains(M::STATE) {
        stored.qp_state = attr.qp_state;
    }
    stored.cur_qp_state = stored.qp_state;
}

/// Checks the capacities of a QP to be created against the device, as `rxe_qp_chk_cap()` does
/// (softroce has no SRQ, so the receive queue is always checked). Empty queues are allowed, as in
/// rxe: a QP may be send-only or receive-only.
pub fn check_cap(cap: &QpCap, l: &DeviceLimits) -> Result<(), VerbsError> {
    over("max_send_wr", cap.max_send_wr, l.max_qp_wr)?;
    over("max_send_sge", cap.max_send_sge, l.max_sge)?;
    over("max_recv_wr", cap.max_recv_wr, l.max_qp_wr)?;
    over("max_recv_sge", cap.max_recv_sge, l.max_sge)?;
    over("max_inline_data", cap.max_inline_data, l.max_inline_data)?;
    Ok(())
}

/// Bytes of one scatter/gather element in rxe's send WQE (`struct ib_sge`).
const IB_SGE_LEN: u32 = 16;

/// The send queue's capacities as rxe sizes them (rxe_qp.c `rxe_qp_init_req`): a send WQE
/// holds its SGEs or its inline data in the same space, so it is as large as the larger of
/// `max_send_sge` SGEs and `max_inline_data` bytes, and both capacities are what that space
/// holds. A QP made with one SGE and no inline data takes 16 bytes inline (rdma_xclient posts
/// a 16-byte `IBV_SEND_INLINE` send on such a QP), and one made with 64 bytes of inline data
/// takes 4 SGEs. The capacities are checked against the device (`check_cap`) as asked, before
/// this sizing, as rxe checks them.
pub fn sized_as_rxe(cap: &QpCap) -> QpCap {
    let wqe = (cap.max_send_sge * IB_SGE_LEN).max(cap.max_inline_data);
    QpCap {
        max_send_sge: wqe / IB_SGE_LEN,
        max_inline_data: wqe,
        ..*cap
    }
}

#[cfg(test)]
mod tests;
