//! XRC domains: the `open_xrcd` and `close_xrcd` ops behind the inline `ibv_open_xrcd` and
//! `ibv_close_xrcd` (spec-notes/xrc.md).

use std::sync::Arc;

use libc::{c_int, EAGAIN, EINVAL, ENODEV, EOPNOTSUPP};
use softroce::verbs::XrcDomain;

use super::common::{errno_of, fail, fail_null};
use super::ctx::{ctx_of, Ctx};
use super::handle::{self, Obj, Object};
use crate::ffi::*;

/// An XRC domain. Its XRC SRQs and target QPs hold it (so `ibv_close_xrcd` is EBUSY while
/// they live); it holds its context.
pub(super) struct Xrcd {
    pub(super) xrcd: XrcDomain,
    pub(super) ctx: Arc<Obj<Ctx>>,
}

impl Object for Xrcd {
    type C = ibv_xrcd;
    type Handle = ibv_xrcd;
}

/// The live XRC domain behind `p`, referenced (see [`handle::get`]).
pub(super) fn xrcd_of(p: *mut ibv_xrcd) -> Option<Arc<Obj<Xrcd>>> {
    handle::get::<Xrcd>(p)
}

/// The `open_xrcd` slot's type.
pub(super) type OpenXrcdFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd;
/// The `close_xrcd` slot's type.
pub(super) type CloseXrcdFn = unsafe extern "C" fn(*mut ibv_xrcd) -> c_int;

/// The `open_xrcd` op: NULL and errno on failure. As libibverbs' `ibv_cmd_open_xrcd` and the
/// kernel's `ib_uverbs_open_xrcd`: a comp_mask bit beyond FD and OFLAGS is EOPNOTSUPP, one of
/// the two missing EINVAL; without `O_CREAT` the call may only open an existing domain,
/// which softroce never has to give (a domain is not shared through a file: each open makes
/// a new one), so it is EAGAIN as the kernel's for a file no domain is bound to. The fd (-1
/// or any open file) is accepted and not used.
pub(super) unsafe extern "C" fn op_open_xrcd(
    c: *mut ibv_context,
    attr: *mut ibv_xrcd_init_attr,
) -> *mut ibv_xrcd {
    let Some(ctx) = ctx_of(c) else {
        return fail_null(EINVAL);
    };
    if attr.is_null() {
        return fail_null(EINVAL);
    }
    // SAFETY: non-null; the caller passes a readable ibv_xrcd_init_attr.
    let a = unsafe { &*attr };
    if a.comp_mask & !(IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS) != 0 {
        return fail_null(EOPNOTSUPP);
    }
    if a.comp_mask & IBV_XRCD_INIT_ATTR_FD == 0 || a.comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS == 0 {
        return fail_null(EINVAL);
    }
    if a.oflags & libc::O_CREAT == 0 {
        return fail_null(EAGAIN);
    }
    let g = match ctx.open() {
        Ok(g) => g,
        Err(e) => return fail_null(e),
    };
    let xrcd = match g.as_ref().map(|x| x.open_xrcd()) {
        Some(Ok(x)) => x,
        Some(Err(e)) => return fail_null(errno_of(&e)),
        None => return fail_null(ENODEV),
    };
    drop(g);
    let obj = Obj::new(ibv_xrcd { context: c }, Xrcd { xrcd, ctx });
    handle::publish(&obj)
}

/// The `close_xrcd` op: 0 or an errno value (EBUSY while XRC SRQs or QPs use it, or a call on
/// another thread does; EINVAL for a bad handle).
pub(super) unsafe extern "C" fn op_close_xrcd(p: *mut ibv_xrcd) -> c_int {
    match handle::remove::<Xrcd>(p) {
        Ok(x) => {
            drop(x);
            0
        }
        Err(e) => fail(e),
    }
}

impl Obj<Xrcd> {
    /// The `context` C gave for it.
    pub(super) fn context(&self) -> *mut ibv_context {
        self.ctx.ibv()
    }
}
