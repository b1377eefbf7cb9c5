//! Shared receive queues.

use std::sync::Arc;

use libc::{c_int, c_void, EINVAL};
use softroce::ib::{SrqAttr, SrqAttrMask};
use softroce::verbs::SharedReceiveQueue;

use super::common::{cond_init, errno_of, fail, fail_null, mutex_init};
use super::cq::Cq;
use super::handle::{self, Obj, Object};
use super::pd::{pd_of, Pd};
use super::wr::{null_handle, recv_wr, walk};
use super::xrcd::Xrcd;
use crate::ffi::*;

/// A shared receive queue. Its QPs hold it (so `ibv_destroy_srq` is EBUSY while they live); it
/// holds its PD.
pub(super) struct Srq {
    pub(super) srq: SharedReceiveQueue,
    pub(super) _pd: Arc<Obj<Pd>>,
    /// An XRC SRQ's domain and CQ, or a TM SRQ's CQ, which it holds (EBUSY for their close
    /// and destroy).
    pub(super) _holds: Holds,
}

/// What an XRC SRQ (its domain and its CQ) or a TM SRQ (its CQ) holds.
pub(super) type Holds = (Option<Arc<Obj<Xrcd>>>, Option<Arc<Obj<Cq>>>);

impl Object for Srq {
    type C = ibv_srq;
    type Handle = ibv_srq;
}

/// The live SRQ behind `p`, referenced (see [`handle::get`]).
pub(super) fn srq_of(p: *mut ibv_srq) -> Option<Arc<Obj<Srq>>> {
    handle::get::<Srq>(p)
}

/// `ibv_create_srq`: NULL and errno on failure (EINVAL for sizes beyond the device's).
#[no_mangle]
pub unsafe extern "C" fn ibv_create_srq(
    pd: *mut ibv_pd,
    init: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    let Some(pdr) = pd_of(pd) else {
        return fail_null(EINVAL);
    };
    if init.is_null() {
        return fail_null(EINVAL);
    }
    // SAFETY: non-null, and the caller passes a readable ibv_srq_init_attr (read only).
    let ia = unsafe { &*init };
    let srq = match pdr.pd.create_srq(&srq_attr(&ia.attr)) {
        Ok(x) => x,
        Err(e) => return fail_null(errno_of(&e)),
    };
    publish_srq(srq, pdr, pd, ia.srq_context, (None, None))
}

/// The verbs API's SRQ attributes from the C struct's.
pub(super) fn srq_attr(a: &ibv_srq_attr) -> SrqAttr {
    SrqAttr {
        max_wr: a.max_wr,
        max_sge: a.max_sge,
        srq_limit: a.srq_limit,
    }
}

/// Publishes `srq` (made on `pdr`, whose C handle is `pd`) as a C `ibv_srq` with the caller's
/// `srq_context`, holding an XRC SRQ's domain and CQ or a TM SRQ's CQ (`holds`).
pub(super) fn publish_srq(
    srq: SharedReceiveQueue,
    pdr: Arc<Obj<Pd>>,
    pd: *mut ibv_pd,
    srq_context: *mut c_void,
    holds: Holds,
) -> *mut ibv_srq {
    let obj = Obj::new(
        ibv_srq {
            context: pdr.context(),
            srq_context,
            pd,
            handle: 0,
            mutex: mutex_init(),
            cond: cond_init(),
            events_completed: 0,
        },
        Srq {
            srq,
            _pd: pdr,
            _holds: holds,
        },
    );
    handle::publish(&obj)
}

/// `ibv_modify_srq`: `IBV_SRQ_MAX_WR` (1) and/or `IBV_SRQ_LIMIT` (2); 0 or an errno value.
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_srq(
    p: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    let Some(x) = srq_of(p) else {
        return fail(EINVAL);
    };
    if attr.is_null() || mask & !(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT) != 0 {
        return fail(EINVAL);
    }
    // SAFETY: the caller passes a readable ibv_srq_attr.
    let a = unsafe { *attr };
    let mut m = SrqAttrMask(0);
    if mask & IBV_SRQ_MAX_WR != 0 {
        m = SrqAttrMask(m.0 | SrqAttrMask::MAX_WR.0);
    }
    if mask & IBV_SRQ_LIMIT != 0 {
        m = SrqAttrMask(m.0 | SrqAttrMask::LIMIT.0);
    }
    match x.srq.modify(&srq_attr(&a), m) {
        Ok(()) => 0,
        Err(e) => fail(errno_of(&e)),
    }
}

/// `ibv_query_srq`: 0 or an errno value.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_srq(p: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    let Some(x) = srq_of(p) else {
        return fail(EINVAL);
    };
    if attr.is_null() {
        return fail(EINVAL);
    }
    let a = x.srq.query();
    // SAFETY: the caller passes a writable ibv_srq_attr.
    unsafe {
        attr.write(ibv_srq_attr {
            max_wr: a.max_wr,
            max_sge: a.max_sge,
            srq_limit: a.srq_limit,
        })
    };
    0
}

/// `ibv_destroy_srq`: 0 or an errno value (EBUSY while QPs use it, or a call on another
/// thread does).
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_srq(p: *mut ibv_srq) -> c_int {
    match handle::remove::<Srq>(p) {
        Ok(x) => {
            drop(x);
            0
        }
        Err(e) => fail(e),
    }
}

/// The `post_srq_recv` op: 0, or an errno value with `*bad_wr` the first WR not posted.
pub(super) unsafe extern "C" fn op_post_srq_recv(
    p: *mut c_void,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    if p.is_null() {
        // SAFETY: the caller's list and pointer (the verbs contract).
        return unsafe { null_handle(wr, bad_wr) };
    }
    // SAFETY: the data path trusts its handle as rdma-core's providers do (handle module): `p`
    // is an SRQ the application has not destroyed, alive for this call.
    let x = unsafe { Obj::<Srq>::trusted(p as *mut ibv_srq) };
    // SAFETY: the caller's list is a valid linked list of WRs (the verbs contract).
    unsafe {
        walk(
            wr,
            bad_wr,
            |w| w.next,
            |w| {
                // SAFETY: the verbs contract for the WR's SGE list.
                let one = recv_wr(w)?;
                x.srq
                    .post_recv(std::slice::from_ref(&one))
                    .map_err(|e| errno_of(&e.error))
            },
        )
    }
}
