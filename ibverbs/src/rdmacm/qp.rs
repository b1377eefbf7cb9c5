//! An identifier's QP: `rdma_create_qp` (with the CQs it makes when given none, and the QP's
//! first states) and `rdma_destroy_qp`.

use std::ptr::{self, null_mut};
use std::sync::Arc;

use libc::{c_int, c_void, EINVAL};

use super::device::default_pd;
use super::error::{errno, errno_of, fail, lock};
use super::ffi::*;
use super::object::{id_of, Id};
use crate::ffi::*;
use crate::objects::cm_hooks;
use crate::objects::handle::Obj;

/// Creates the CQs (and their completion channels) an `rdma_create_qp` without CQs asks for.
fn create_cqs(id: &Obj<Id>, v: *mut ibv_context, attr: &mut ibv_qp_init_attr) -> Result<(), c_int> {
    let c = id.c();
    for (send, n) in [(true, attr.cap.max_send_wr), (false, attr.cap.max_recv_wr)] {
        let (cq, ch) = cq_with_channel(id, v, n)?;
        // SAFETY: raw writes into the live identifier's C struct.
        unsafe {
            if send {
                ptr::addr_of_mut!((*c).send_cq_channel).write(ch);
                ptr::addr_of_mut!((*c).send_cq).write(cq);
                attr.send_cq = cq;
            } else {
                ptr::addr_of_mut!((*c).recv_cq_channel).write(ch);
                ptr::addr_of_mut!((*c).recv_cq).write(cq);
                attr.recv_cq = cq;
            }
        }
    }
    lock(&id.st).own_cqs = true;
    Ok(())
}

/// A CQ of `n` entries (at least 1) on context `v` with a completion channel of its own, its
/// context the identifier (as librdmacm's `ucma_create_cqs`).
pub(super) fn cq_with_channel(
    id: &Obj<Id>,
    v: *mut ibv_context,
    n: u32,
) -> Result<(*mut ibv_cq, *mut ibv_comp_channel), c_int> {
    // SAFETY: the shim's own constructors, which check the context.
    unsafe {
        let ch = crate::ibv_create_comp_channel(v);
        if ch.is_null() {
            return Err(errno());
        }
        let cq = crate::ibv_create_cq(v, n.max(1) as c_int, id.c() as *mut c_void, ch, 0);
        if cq.is_null() {
            let e = errno();
            crate::ibv_destroy_comp_channel(ch);
            return Err(e);
        }
        Ok((cq, ch))
    }
}

/// Destroys the CQs `create_cqs` made.
fn destroy_cqs(id: &Obj<Id>) {
    if !std::mem::take(&mut lock(&id.st).own_cqs) {
        return;
    }
    let c = id.c();
    // SAFETY: the CQs and channels were made by create_cqs and are named only here and by the
    // application (which must not use them after rdma_destroy_qp, as with rdma-core).
    unsafe {
        for (cq, ch) in [
            (
                ptr::addr_of_mut!((*c).send_cq),
                ptr::addr_of_mut!((*c).send_cq_channel),
            ),
            (
                ptr::addr_of_mut!((*c).recv_cq),
                ptr::addr_of_mut!((*c).recv_cq_channel),
            ),
        ] {
            crate::ibv_destroy_cq(cq.read());
            crate::ibv_destroy_comp_channel(ch.read());
            cq.write(null_mut());
            ch.write(null_mut());
        }
    }
}

/// `rdma_create_qp`: creates the QP on the identifier's device (and its CQs when `attr`
/// names none), moves it to INIT (UD: to RTS with rdma_cm's QKEY) and hands it to the CM.
/// 0, or -1 and errno (EINVAL for a PD of another context or an identifier not bound to the
/// device).
#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    let Some(obj) = id_of(id) else {
        return fail(EINVAL);
    };
    if attr.is_null() {
        return fail(EINVAL);
    }
    let c = obj.c();
    // SAFETY: raw reads of the live identifier's C struct.
    let (v, id_pd, has_qp) = unsafe {
        (
            ptr::addr_of!((*c).verbs).read(),
            ptr::addr_of!((*c).pd).read(),
            !ptr::addr_of!((*c).qp).read().is_null(),
        )
    };
    if v.is_null() || has_qp {
        return fail(EINVAL);
    }
    let pd = if !pd.is_null() {
        pd
    } else if !id_pd.is_null() {
        id_pd
    } else {
        let dev = cm_hooks::context_device(v).unwrap_or(0);
        match default_pd(dev, v) {
            Ok(p) => p,
            Err(e) => return fail(e),
        }
    };
    if cm_hooks::pd_context(pd) != Some(v) {
        return fail(EINVAL);
    }
    // SAFETY: the caller passes a writable ibv_qp_init_attr (checked non-null).
    let a = unsafe { &mut *attr };
    // librdmacm gives the QP the identifier's type (rdma_client leaves qp_type 0).
    // SAFETY: raw read of the live identifier.
    a.qp_type = unsafe { ptr::addr_of!((*c).qp_type).read() };
    if a.send_cq.is_null() && a.recv_cq.is_null() {
        if let Err(e) = create_cqs(&obj, v, a) {
            return fail(e);
        }
    } else if a.send_cq.is_null() || a.recv_cq.is_null() {
        return fail(EINVAL);
    }
    let qp = if a.qp_type == IBV_QPT_XRC_RECV {
        // An XRC target QP is of rdma_cm's XRC domain, with no PD or CQ of its own (its
        // SRQ completes on the identifier's receive CQ; librdmacm's rdma_create_qp_ex).
        crate::objects::cm_hooks::xrc_recv_qp(v, a.qp_context)
    } else {
        // SAFETY: the shim's own ibv_create_qp with the caller's (valid) attributes.
        unsafe { crate::ibv_create_qp(pd, a) }
    };
    if qp.is_null() {
        let e = errno();
        destroy_cqs(&obj);
        return fail(e);
    }
    let r = init_qp(&obj, qp, a.qp_type);
    if let Err(e) = r {
        // SAFETY: the QP was created just above and handed to nobody.
        unsafe { crate::ibv_destroy_qp(qp) };
        destroy_cqs(&obj);
        return fail(e);
    }
    // SAFETY: raw writes into the live identifier (rdma_verbs.h's helpers use its `pd`).
    unsafe {
        ptr::addr_of_mut!((*c).qp).write(qp);
        ptr::addr_of_mut!((*c).pd).write(pd);
    }
    0
}

fn modify(qp: *mut ibv_qp, attr: &mut ibv_qp_attr, mask: c_int) -> Result<(), c_int> {
    // SAFETY: the shim's own ibv_modify_qp on a QP it made, with a local attribute struct.
    match unsafe { crate::ibv_modify_qp(qp, attr, mask) } {
        0 => Ok(()),
        e => Err(e),
    }
}

/// The QP's first states: INIT with rdma_cm's access (RC), or up to RTS with its QKEY (UD).
fn init_qp(id: &Arc<Obj<Id>>, qp: *mut ibv_qp, qp_type: libc::c_uint) -> Result<(), c_int> {
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_INIT,
        pkey_index: 0,
        port_num: 1,
        ..Default::default()
    };
    if qp_type == IBV_QPT_UD {
        a.qkey = RDMA_UDP_QKEY;
        modify(
            qp,
            &mut a,
            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY,
        )?;
        a.qp_state = IBV_QPS_RTR;
        modify(qp, &mut a, IBV_QP_STATE)?;
        a.qp_state = IBV_QPS_RTS;
        a.sq_psn = 0;
        modify(qp, &mut a, IBV_QP_STATE | IBV_QP_SQ_PSN)?;
        // The CM answers a SIDR_REQ with this QP's number.
        if id.ps == RDMA_PS_UDP {
            let (inner, _) = cm_hooks::qp_inner(qp).ok_or(EINVAL)?;
            let c = Obj::cm_id(id)?;
            return c.set_qp(inner).map_err(|e| errno_of(&e));
        }
        return Ok(());
    }
    // LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC: what the kernel's rdma_cm
    // allows a connected QP (its responder resources are set at RTR).
    a.qp_access_flags = 0xf;
    modify(
        qp,
        &mut a,
        IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
    )?;
    let (inner, _) = cm_hooks::qp_inner(qp).ok_or(EINVAL)?;
    let c = Obj::cm_id(id)?;
    c.set_qp(inner).map_err(|e| errno_of(&e))
}

/// `rdma_destroy_qp`: destroys the identifier's QP (and the CQs `rdma_create_qp` made).
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    let Some(obj) = id_of(id) else {
        return;
    };
    let c = obj.c();
    // SAFETY: raw access to the live identifier; the QP is the one rdma_create_qp made.
    unsafe {
        let qp = ptr::addr_of!((*c).qp).read();
        if !qp.is_null() {
            crate::ibv_destroy_qp(qp);
            ptr::addr_of_mut!((*c).qp).write(null_mut());
        }
    }
    destroy_cqs(&obj);
}
