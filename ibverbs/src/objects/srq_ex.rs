//! Extended SRQs: the `create_srq_ex` op behind the inline `ibv_create_srq_ex` (basic and XRC
//! SRQs) and the `get_srq_num` op behind `ibv_get_srq_num` (spec-notes/xrc.md).

use libc::{c_int, EINVAL, EOPNOTSUPP};

use super::common::{errno_of, fail, fail_null};
use super::cq::cq_of;
use super::pd::pd_of;
use super::srq::{ibv_create_srq, publish_srq, srq_attr, srq_of};
use super::xrcd::xrcd_of;
use crate::ffi::*;

/// The `create_srq_ex` slot's type.
pub(super) type CreateSrqExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_srq_init_attr_ex) -> *mut ibv_srq;
/// The `get_srq_num` slot's type.
pub(super) type GetSrqNumFn = unsafe extern "C" fn(*mut ibv_srq, *mut u32) -> c_int;

/// The comp_mask bits softroce takes (all but `IBV_SRQ_INIT_ATTR_TM`).
const SUPPORTED: u32 =
    IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;

/// The `create_srq_ex` op: NULL and errno on failure. A basic SRQ is `ibv_create_srq`'s; an
/// XRC SRQ needs a PD, an XRC domain and a CQ (EINVAL without, as the kernel's
/// `ib_uverbs_create_srq`); tag matching (`IBV_SRQT_TM`, `IBV_SRQ_INIT_ATTR_TM`) is
/// EOPNOTSUPP, as on rxe.
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
        IBV_SRQT_BASIC | IBV_SRQT_XRC => fail_null(EINVAL),
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
    publish_srq(srq, pd, a.pd, a.srq_context, Some((x, cq)))
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
