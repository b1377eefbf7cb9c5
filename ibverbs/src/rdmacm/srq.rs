//! The identifier's SRQ: `rdma_create_srq`, `rdma_create_srq_ex` and `rdma_destroy_srq`, as
//! librdmacm's (cma.c): an XRC SRQ without a domain or a CQ gets rdma_cm's XRC domain and a
//! receive CQ of its own; the extended types (XRC, tag matching) go to `ibv_create_srq_ex`.

use std::ptr::{self, null_mut};

use libc::{c_int, c_void, EINVAL};

use super::error::{errno, fail, lock};
use super::ffi::*;
use super::id::id_of;
use super::object::Id;
use crate::ffi::*;
use crate::objects::handle::Obj;

/// `rdma_create_srq`: an SRQ on `pd` (the identifier's when NULL), as librdmacm's: its
/// attributes as `rdma_create_srq_ex`'s, basic, or on an XRC identifier an XRC SRQ of
/// rdma_cm's domain completing on the identifier's receive CQ (made with its QP: EINVAL
/// without one). The SRQ's actual sizes are written back to `attr`. 0, or -1 and errno.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> c_int {
    let Some(obj) = id_of(id) else {
        return fail(EINVAL);
    };
    if attr.is_null() {
        return fail(EINVAL);
    }
    let c = obj.c();
    // SAFETY: the caller's writable attributes (checked non-null); raw reads of the live
    // identifier.
    let (a, qp_type, recv_cq) = unsafe {
        (
            &mut *attr,
            ptr::addr_of!((*c).qp_type).read(),
            ptr::addr_of!((*c).recv_cq).read(),
        )
    };
    let mut ex = ibv_srq_init_attr_ex {
        srq_context: a.srq_context,
        attr: a.attr,
        comp_mask: IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD,
        srq_type: IBV_SRQT_BASIC,
        pd,
        xrcd: null_mut(),
        cq: null_mut(),
        tm_cap: ibv_tm_cap {
            max_num_tags: 0,
            max_ops: 0,
        },
    };
    if qp_type == IBV_QPT_XRC_RECV {
        if recv_cq.is_null() {
            return fail(EINVAL);
        }
        ex.srq_type = IBV_SRQT_XRC;
        ex.cq = recv_cq;
        ex.comp_mask |= IBV_SRQ_INIT_ATTR_CQ;
    }
    // SAFETY: the live identifier and a local attribute struct.
    let r = unsafe { rdma_create_srq_ex(id, &mut ex) };
    a.attr = ex.attr;
    r
}

/// `rdma_destroy_srq`: the SRQ, and the receive CQ `rdma_create_srq_ex` made for it.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_srq(id: *mut rdma_cm_id) {
    let Some(obj) = id_of(id) else {
        return;
    };
    let c = obj.c();
    // SAFETY: raw access to the live identifier; the SRQ is the one rdma_create_srq made.
    unsafe {
        let srq = ptr::addr_of!((*c).srq).read();
        if !srq.is_null() {
            crate::ibv_destroy_srq(srq as *mut ibv_srq);
            ptr::addr_of_mut!((*c).srq).write(null_mut());
        }
    }
    destroy_srq_cq(&obj);
}

/// `rdma_create_srq_ex`: an SRQ of the attributes' type on the identifier's device. Without a
/// PD, the identifier's; an XRC SRQ without a domain gets rdma_cm's XRC domain, and without a
/// CQ a receive CQ the identifier keeps (freed by `rdma_destroy_srq`). 0, or -1 and errno
/// (EINVAL without `IBV_SRQ_INIT_ATTR_TYPE`, or with neither a device nor a PD to make it
/// on; what `ibv_create_srq_ex` gives otherwise).
#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_srq_init_attr_ex,
) -> c_int {
    let Some(obj) = id_of(id) else {
        return fail(EINVAL);
    };
    if attr.is_null() {
        return fail(EINVAL);
    }
    let c = obj.c();
    // SAFETY: the caller's writable attributes (checked non-null); raw reads of the live
    // identifier.
    let (a, verbs, id_pd) = unsafe {
        (
            &mut *attr,
            ptr::addr_of!((*c).verbs).read(),
            ptr::addr_of!((*c).pd).read(),
        )
    };
    if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE == 0 {
        return fail(EINVAL);
    }
    if a.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 || a.pd.is_null() {
        a.pd = id_pd;
        a.comp_mask |= IBV_SRQ_INIT_ATTR_PD;
    }
    // The identifier's device, or for one not bound yet the PD's.
    let Some(verbs) = (!verbs.is_null())
        .then_some(verbs)
        .or_else(|| crate::objects::cm_hooks::pd_context(a.pd))
    else {
        return fail(EINVAL);
    };
    if a.srq_type == IBV_SRQT_XRC {
        if let Err(e) = xrc_defaults(&obj, verbs, a) {
            return fail(e);
        }
    }
    // SAFETY: the caller's attributes, completed above; the op checks their handles.
    let srq = unsafe { crate::objects::cm_hooks::create_srq_ex(verbs, a) };
    if srq.is_null() {
        let e = errno();
        destroy_srq_cq(&obj);
        return fail(e);
    }
    // SAFETY: raw writes into the live identifier.
    unsafe {
        if id_pd.is_null() {
            ptr::addr_of_mut!((*c).pd).write(a.pd);
        }
        ptr::addr_of_mut!((*c).srq).write(srq as *mut c_void);
    }
    0
}

/// An XRC SRQ's domain and CQ where the attributes name none: rdma_cm's domain of the
/// context, and a receive CQ (with its channel) of `attr.max_wr` entries the identifier keeps.
fn xrc_defaults(
    id: &Obj<Id>,
    verbs: *mut ibv_context,
    a: &mut ibv_srq_init_attr_ex,
) -> Result<(), c_int> {
    if a.comp_mask & IBV_SRQ_INIT_ATTR_XRCD == 0 || a.xrcd.is_null() {
        a.xrcd = crate::objects::cm_hooks::default_xrcd(verbs)?;
    }
    if a.comp_mask & IBV_SRQ_INIT_ATTR_CQ == 0 || a.cq.is_null() {
        let (cq, ch) = super::qp::cq_with_channel(id, verbs, a.attr.max_wr)?;
        let c = id.c();
        // SAFETY: raw writes into the live identifier's C struct.
        unsafe {
            ptr::addr_of_mut!((*c).recv_cq_channel).write(ch);
            ptr::addr_of_mut!((*c).recv_cq).write(cq);
        }
        a.cq = cq;
        lock(&id.st).own_srq_cq = true;
    }
    a.comp_mask |= IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
    Ok(())
}

/// Frees the receive CQ and channel `rdma_create_srq_ex` made, if it made them.
fn destroy_srq_cq(id: &Obj<Id>) {
    if !std::mem::take(&mut lock(&id.st).own_srq_cq) {
        return;
    }
    let c = id.c();
    // SAFETY: the CQ and channel were made by xrc_defaults and are named only here and by the
    // application (which must not use them after rdma_destroy_srq, as with rdma-core).
    unsafe {
        crate::ibv_destroy_cq(ptr::addr_of!((*c).recv_cq).read());
        crate::ibv_destroy_comp_channel(ptr::addr_of!((*c).recv_cq_channel).read());
        ptr::addr_of_mut!((*c).recv_cq).write(null_mut());
        ptr::addr_of_mut!((*c).recv_cq_channel).write(null_mut());
    }
}
