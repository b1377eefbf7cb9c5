//! Extended SRQs: the `create_srq_ex` op behind the inline `ibv_create_srq_ex` (basic and XRC
//! SRQs) and the `get_srq_num` op behind `ibv_get_srq_num` (spec-notes/xrc.md).

use libc::{c_int, EINVAL, EOPNOTSUPP};

use super::common::{errno_of, fail, fail_null};
use super::cq::cq_of;
use super::pd::pd_of;
use super::srq::{ibv_create_srq, publish_srq, srq_attr, srq_of};
use super::wr::sges;
use super::xrcd::xrcd_of;
use crate::ffi::*;
use softroce::ib::{TmOp, TmOpKind};
use softroce::transport::tag_match;

/// The `create_srq_ex` slot's type.
pub(super) type CreateSrqExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_srq_init_attr_ex) -> *mut ibv_srq;
/// The `get_srq_num` slot's type.
pub(super) type GetSrqNumFn = unsafe extern "C" fn(*mut ibv_srq, *mut u32) -> c_int;

/// The comp_mask bits softroce takes.
const SUPPORTED: u32 = IBV_SRQ_INIT_ATTR_TYPE
    | IBV_SRQ_INIT_ATTR_PD
    | IBV_SRQ_INIT_ATTR_XRCD
    | IBV_SRQ_INIT_ATTR_CQ
    | IBV_SRQ_INIT_ATTR_TM;

/// The `create_srq_ex` op: NULL and errno on failure. A basic SRQ is `ibv_create_srq`'s; an
/// XRC SRQ needs a PD, an XRC domain and a CQ (EINVAL without, as the kernel's
/// `ib_uverbs_create_srq`); a TM SRQ (`IBV_SRQT_TM`, beyond rxe: spec-notes/beyond-rxe.md
/// rule 13) a PD, a CQ and `tm_cap` (EINVAL without, or beyond `tm_caps`).
pub(super) unsafe extern "C" fn op_create_srq_ex(
    _c: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    if attr.is_null() {
        return fail_null(EINVAL);
    }
    // SAFETY: non-null; the caller passes a readable ibv_srq_init_attr_ex.
    let a = unsafe { &*attr };
    if a.comp_mask & !SUPPORTED != 0 {
        return fail_null(EOPNOTSUPP);
    }
    let srq_type = if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 {
        a.srq_type
    } else {
        IBV_SRQT_BASIC
    };
    let need = |bit: u32| a.comp_mask & bit != 0;
    match srq_type {
        IBV_SRQT_BASIC if need(IBV_SRQ_INIT_ATTR_PD) => {
            // The extended struct starts with the basic one's members.
            // SAFETY: the caller's struct, read as its prefix `ibv_srq_init_attr`.
            unsafe { ibv_create_srq(a.pd, attr.cast::<ibv_srq_init_attr>()) }
        }
        IBV_SRQT_XRC
            if need(IBV_SRQ_INIT_ATTR_PD)
                && need(IBV_SRQ_INIT_ATTR_XRCD)
                && need(IBV_SRQ_INIT_ATTR_CQ) =>
        {
            create_xrc_srq(a)
        }
        IBV_SRQT_TM
            if need(IBV_SRQ_INIT_ATTR_PD)
                && need(IBV_SRQ_INIT_ATTR_CQ)
                && need(IBV_SRQ_INIT_ATTR_TM) =>
        {
            create_tm_srq(a)
        }
        IBV_SRQT_BASIC | IBV_SRQT_XRC | IBV_SRQT_TM => fail_null(EINVAL),
        _ => fail_null(EOPNOTSUPP),
    }
}

fn create_xrc_srq(a: &ibv_srq_init_attr_ex) -> *mut ibv_srq {
    let (Some(pd), Some(x), Some(cq)) = (pd_of(a.pd), xrcd_of(a.xrcd), cq_of(a.cq)) else {
        return fail_null(EINVAL);
    };
    if pd.context() != x.context() {
        return fail_null(EINVAL);
    }
    let srq = match x.xrcd.create_srq(&pd.pd, &cq.cq, &srq_attr(&a.attr)) {
        Ok(s) => s,
        Err(e) => return fail_null(errno_of(&e)),
    };
    publish_srq(srq, pd, a.pd, a.srq_context, (Some(x), Some(cq)))
}

fn create_tm_srq(a: &ibv_srq_init_attr_ex) -> *mut ibv_srq {
    let (Some(pd), Some(cq)) = (pd_of(a.pd), cq_of(a.cq)) else {
        return fail_null(EINVAL);
    };
    if a.tm_cap.max_ops > tag_match::MAX_OPS {
        return fail_null(EINVAL);
    }
    let srq = match pd
        .pd
        .create_tm_srq(&srq_attr(&a.attr), &cq.cq, a.tm_cap.max_num_tags)
    {
        Ok(s) => s,
        Err(e) => return fail_null(errno_of(&e)),
    };
    publish_srq(srq, pd, a.pd, a.srq_context, (None, Some(cq)))
}

/// The `post_srq_ops` slot's type.
pub(super) type PostSrqOpsFn =
    unsafe extern "C" fn(*mut ibv_srq, *mut ibv_ops_wr, *mut *mut ibv_ops_wr) -> c_int;

/// The `post_srq_ops` op: 0, or an errno value with `*bad_op` the first operation not run
/// (EINVAL for an SRQ that is not a TM SRQ, an unknown opcode or a bad SGE list).
/// `tm.handle` of each ADD is written back as the man page says.
pub(super) unsafe extern "C" fn op_post_srq_ops(
    p: *mut ibv_srq,
    op: *mut ibv_ops_wr,
    bad_op: *mut *mut ibv_ops_wr,
) -> c_int {
    let Some(x) = srq_of(p) else {
        return fail(EINVAL);
    };
    let mut cur = op;
    while !cur.is_null() {
        // SAFETY: the caller's list of operations is valid and unchanged during the call
        // (the verbs contract); `tm.handle` is written through the same pointer below.
        let w = unsafe { &*cur };
        let mut handles = Vec::with_capacity(1);
        let r = ops_one(w).and_then(|o| {
            x.srq
                .post_ops(std::slice::from_ref(&o), &mut handles)
                .map_err(|e| errno_of(&e.error))
        });
        match r {
            Ok(()) => {
                if let Some(Some(h)) = handles.first() {
                    // SAFETY: as above; the caller's operation is writable (tm.handle is
                    // ADD's output).
                    unsafe { std::ptr::addr_of_mut!((*cur).tm.handle).write(*h) };
                }
            }
            Err(e) => {
                if !bad_op.is_null() {
                    // SAFETY: the caller passes a writable pointer.
                    unsafe { *bad_op = cur };
                }
                return fail(e);
            }
        }
        cur = w.next;
    }
    0
}

/// One C operation as the verbs API's, or EINVAL.
fn ops_one(w: &ibv_ops_wr) -> Result<TmOp<'_>, c_int> {
    let kind = match w.opcode {
        IBV_WR_TAG_ADD => TmOpKind::Add {
            recv_wr_id: w.tm.add.recv_wr_id,
            // SAFETY: the verbs contract for the operation's SGE list.
            sg_list: unsafe { sges(w.tm.add.sg_list, w.tm.add.num_sge)? },
            tag: w.tm.add.tag,
            mask: w.tm.add.mask,
        },
        IBV_WR_TAG_DEL => TmOpKind::Del {
            handle: w.tm.handle,
        },
        IBV_WR_TAG_SYNC => TmOpKind::Sync,
        _ => return Err(EINVAL),
    };
    Ok(TmOp {
        wr_id: w.wr_id,
        kind,
        signaled: w.flags & IBV_OPS_SIGNALED != 0,
        sync: (w.flags & IBV_OPS_TM_SYNC != 0).then_some(w.tm.unexpected_cnt),
    })
}

/// The `get_srq_num` op: 0 with `*num` the XRC SRQ's number, or an errno value (EINVAL for a
/// bad handle or pointer; EOPNOTSUPP for an SRQ that is not an XRC SRQ, which has none).
pub(super) unsafe extern "C" fn op_get_srq_num(p: *mut ibv_srq, num: *mut u32) -> c_int {
    let Some(x) = srq_of(p) else {
        return fail(EINVAL);
    };
    if num.is_null() {
        return fail(EINVAL);
    }
    match x.srq.srq_num() {
        Some(n) => {
            // SAFETY: non-null; the caller passes a writable u32.
            unsafe { num.write(n) };
            0
        }
        None => fail(EOPNOTSUPP),
    }
}
