//! Connections: connect, accept, reject, disconnect, establish, notify, `rdma_get_request`,
//! `rdma_init_qp_attr`, ECE, and the dispatcher that turns softroce's CM events into C events.

use std::ptr::{self, null_mut};

use libc::{c_int, c_void, EINVAL};

use super::channel::{next_event, rdma_ack_cm_event};
use super::device::sent_before_return;
use super::error::{errno, errno_of, fail, lock};
use super::ffi::*;
use super::id::{complete, complete_keeping, id_of, Id, QpInit};
use super::param::{max_rd_atom, param_from_c};
use crate::ffi::*;
use crate::objects::cm_hooks;
use crate::objects::handle::Obj;

/// Acknowledges the connect request a synchronous identifier kept from `rdma_get_request`.
fn drop_request_event(id: &Obj<Id>) {
    let c = id.c();
    // SAFETY: raw access to the live identifier; the event is one rdma_get_request stored.
    unsafe {
        let ev = ptr::addr_of!((*c).event).read();
        if !ev.is_null() {
            ptr::addr_of_mut!((*c).event).write(null_mut());
            rdma_ack_cm_event(ev);
        }
    }
}

/// `rdma_connect`: sends the REQ; ESTABLISHED, REJECTED (status: the IB reason) or
/// UNREACHABLE follows. A UDP identifier sends a SIDR_REQ instead: ESTABLISHED with
/// `param.ud` (the peer's AH attributes, QPN and Q_Key) or UNREACHABLE (status: the SIDR
/// status, or -ETIMEDOUT) follows. 0, or -1 and errno (EINVAL before the route is resolved,
/// without a QP (RC), or with more than 56 (RC) / 180 (UD) bytes of private data; ENOSYS in
/// the IPoIB port space).
#[no_mangle]
pub unsafe extern "C" fn rdma_connect(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    let Some(obj) = id_of(id) else {
        return fail(EINVAL);
    };
    if obj.ps == RDMA_PS_IPOIB {
        return fail(libc::ENOSYS);
    }
    // SAFETY: the caller passes NULL or a valid rdma_conn_param.
    let p = match unsafe { param_from_c(param) } {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let Some(c) = lock(&obj.st).cm.clone() else {
        return fail(EINVAL);
    };
    let r = match external_qpn(&obj, param) {
        // CONNECT_RESPONSE follows; the application moves its QP and calls rdma_establish.
        Some(qpn) => c
            .connect_external(&p, qpn)
            .map(|()| RDMA_CM_EVENT_CONNECT_RESPONSE),
        None => c.connect(&p).map(|()| RDMA_CM_EVENT_ESTABLISHED),
    };
    match r {
        Ok(want) => complete_keeping(&obj, want),
        Err(e) => fail(errno_of(&e)),
    }
}

/// The QP number `param.qp_num` names when the identifier has no QP of its own (the
/// application created and moves its QP itself, with rdma_init_qp_attr): librdmacm then
/// sends that number in the REQ or REP (ucma_copy_conn_param_to_kern).
fn external_qpn(id: &Obj<Id>, param: *const rdma_conn_param) -> Option<u32> {
    // SAFETY: raw read of the live identifier.
    let own = unsafe { ptr::addr_of!((*id.c()).qp).read() };
    if !own.is_null() || param.is_null() || id.ps == RDMA_PS_UDP {
        return None;
    }
    // SAFETY: the caller passes NULL (checked) or a valid rdma_conn_param.
    Some(unsafe { (*param).qp_num } & 0x00ff_ffff)
}

/// `rdma_accept` of a connect request: moves the QP to RTR and RTS and sends the REP;
/// ESTABLISHED follows with the RTU. 0, or -1 and errno (EINVAL without a QP or request).
#[no_mangle]
pub unsafe extern "C" fn rdma_accept(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    let Some(obj) = id_of(id) else {
        return fail(EINVAL);
    };
    // SAFETY: the caller passes NULL or a valid rdma_conn_param.
    let mut p = match unsafe { param_from_c(param) } {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let Some(c) = lock(&obj.st).cm.clone() else {
        return fail(EINVAL);
    };
    if param.is_null() {
        // librdmacm's default answer: as many READs as the requester asked for and the
        // device allows.
        p.responder_resources = max_rd_atom();
        p.initiator_depth = max_rd_atom();
    }
    drop_request_event(&obj);
    let r = match external_qpn(&obj, param) {
        Some(qpn) => c.accept_external(&p, qpn),
        None => c.accept(&p),
    };
    if let Err(e) = r {
        return fail(errno_of(&e));
    }
    if obj.ps == RDMA_PS_UDP {
        // The SIDR_REP is the whole answer: no ESTABLISHED follows on this side (librdmacm's
        // rdma_accept returns before ucma_complete for a UD identifier).
        return 0;
    }
    // SAFETY: raw read of the live identifier.
    cm_hooks::sync_qp_state(unsafe { ptr::addr_of!((*obj.c()).qp).read() });
    complete(&obj, RDMA_CM_EVENT_ESTABLISHED)
}

/// `rdma_reject` of a connect request with private data (reason: consumer defined).
/// 0, or -1 and EINVAL.
#[no_mangle]
pub unsafe extern "C" fn rdma_reject(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    len: u8,
) -> c_int {
    let Some(obj) = id_of(id) else {
        return fail(EINVAL);
    };
    let data = if private_data.is_null() || len == 0 {
        Vec::new()
    } else {
        // SAFETY: the caller's private data holds `len` bytes.
        unsafe { std::slice::from_raw_parts(private_data as *const u8, len as usize) }.to_vec()
    };
    let Some(c) = lock(&obj.st).cm.clone() else {
        return fail(EINVAL);
    };
    drop_request_event(&obj);
    match c.reject(&data) {
        Ok(()) => {
            sent_before_return();
            0
        }
        Err(e) => fail(errno_of(&e)),
    }
}

/// `rdma_disconnect`: the QP goes to ERROR and a DREQ (or DREP) is sent; DISCONNECTED
/// follows. 0, or -1 and EINVAL when not connected.
#[no_mangle]
pub unsafe extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    let Some(obj) = id_of(id) else {
        return fail(EINVAL);
    };
    let Some(c) = lock(&obj.st).cm.clone() else {
        return fail(EINVAL);
    };
    let r = c.disconnect();
    // The QP went to the error state in either case (rdma-core's `ucma_shutdown` comes first).
    // SAFETY: raw read of the live identifier.
    cm_hooks::sync_qp_state(unsafe { ptr::addr_of!((*obj.c()).qp).read() });
    if let Err(e) = r {
        return fail(errno_of(&e));
    }
    lock(&obj.st).connected = false;
    sent_before_return();
    0
}

/// `rdma_establish`: for an identifier without a QP that got CONNECT_RESPONSE, once the
/// application moved its QP to RTS: sends the RTU (no event follows). 0, or -1 and EINVAL
/// in any other state.
#[no_mangle]
pub unsafe extern "C" fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
    let Some(obj) = id_of(id) else {
        return fail(EINVAL);
    };
    let Some(c) = lock(&obj.st).cm.clone() else {
        return fail(EINVAL);
    };
    match c.establish() {
        Ok(()) => {
            lock(&obj.st).connected = true;
            0
        }
        Err(e) => fail(errno_of(&e)),
    }
}

/// `rdma_notify`: an event on the QP that the CM should know of (the first receive before the
/// RTU). softroce's CM establishes on any packet already, so for a connection in progress or
/// up this is 0; EINVAL otherwise.
#[no_mangle]
pub unsafe extern "C" fn rdma_notify(id: *mut rdma_cm_id, _event: c_int) -> c_int {
    let Some(obj) = id_of(id) else {
        return fail(EINVAL);
    };
    let st = lock(&obj.st);
    if st.cm.is_some() && !st.listening {
        0
    } else {
        fail(EINVAL)
    }
}

/// `rdma_get_request`: the next connect request of a synchronous listener (with its QP made
/// from `rdma_create_ep`'s attributes). 0, or -1 and errno.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_request(
    listen: *mut rdma_cm_id,
    id: *mut *mut rdma_cm_id,
) -> c_int {
    let Some(obj) = id_of(listen) else {
        return fail(EINVAL);
    };
    if !obj.sync() || id.is_null() {
        return fail(EINVAL);
    }
    let ev = match next_event(&obj.chan()) {
        Ok(e) => e,
        Err(e) => return fail(e),
    };
    // SAFETY: `ev` is live until acknowledged.
    let (kind, status, child) = unsafe { ((*ev).event, (*ev).status, (*ev).id) };
    if status != 0 || kind != RDMA_CM_EVENT_CONNECT_REQUEST {
        // SAFETY: outstanding event.
        unsafe { rdma_ack_cm_event(ev) };
        return fail(if status < 0 { -status } else { EINVAL });
    }
    let init = lock(&obj.st).qp_init.as_ref().map(|q| QpInit::of(&q.0));
    if let Some(QpInit(mut a)) = init {
        // SAFETY: raw read of the listener; the child is live (the event holds it).
        let pd = unsafe { ptr::addr_of!((*obj.c()).pd).read() };
        // SAFETY: `child` is live; `a` is a local copy.
        if unsafe { super::qp::rdma_create_qp(child, pd, &mut a) } != 0 {
            let e = errno();
            // SAFETY: outstanding event; the child goes with it (rdma-core destroys it).
            unsafe {
                rdma_ack_cm_event(ev);
                super::id::rdma_destroy_id(child);
            }
            return fail(e);
        }
    }
    // SAFETY: `child` is live; the caller passes a writable slot (checked).
    unsafe {
        ptr::addr_of_mut!((*child).event).write(ev);
        id.write(child);
    }
    0
}

/// `rdma_init_qp_attr`: the attributes rdma_cm would give the QP for its next state. Before a
/// connection that is INIT (the only state softroce lets the application set: RTR and RTS
/// are set by the CM itself); EINVAL afterwards.
#[no_mangle]
pub unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_attr,
    mask: *mut c_int,
) -> c_int {
    let Some(obj) = id_of(id) else {
        return fail(EINVAL);
    };
    if attr.is_null() || mask.is_null() {
        return fail(EINVAL);
    }
    // SAFETY: the caller passes a readable ibv_qp_attr (checked non-null): its qp_state is
    // the state asked for, as librdmacm's rdma_init_qp_attr reads it.
    let want = unsafe { ptr::addr_of!((*attr).qp_state).read() };
    if want == IBV_QPS_RTR || want == IBV_QPS_RTS {
        let rc = lock(&obj.st).cm.as_ref().map(|c| c.rc_connect());
        let (a, m) = match rc {
            Some(Ok(rc)) if obj.ps != RDMA_PS_UDP && obj.ps != RDMA_PS_IPOIB => {
                rc_attr(&rc, want == IBV_QPS_RTR)
            }
            Some(Err(e)) => return fail(errno_of(&e)),
            _ => return fail(EINVAL),
        };
        // SAFETY: the caller passes writable structs (checked non-null).
        unsafe {
            attr.write(a);
            mask.write(m);
        }
        return 0;
    }
    if lock(&obj.st).connected {
        return fail(EINVAL);
    }
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_INIT,
        port_num: 1,
        pkey_index: 0,
        ..Default::default()
    };
    let m = if obj.ps == RDMA_PS_UDP || obj.ps == RDMA_PS_IPOIB {
        a.qkey = 0x0123_4567;
        1 | (1 << 4) | (1 << 5) | (1 << 6)
    } else {
        a.qp_access_flags = 0xf;
        1 | (1 << 3) | (1 << 4) | (1 << 5)
    };
    // SAFETY: the caller passes writable structs (checked non-null).
    unsafe {
        attr.write(a);
        mask.write(m);
    }
    0
}

/// The RTR (`rtr`) or RTS attributes and mask of an RC connection, as the kernel's
/// ib_cm_init_qp_attr gives them (cm.c `cm_init_qp_rtr_attr`, `cm_init_qp_rts_attr`).
fn rc_attr(c: &softroce::verbs::RcConnect, rtr: bool) -> (ibv_qp_attr, c_int) {
    if rtr {
        let a = ibv_qp_attr {
            qp_state: IBV_QPS_RTR,
            path_mtu: c.path_mtu as libc::c_uint,
            dest_qp_num: c.remote_qpn,
            rq_psn: c.remote_psn,
            max_dest_rd_atomic: c.max_dest_rd_atomic,
            min_rnr_timer: c.min_rnr_timer,
            ah_attr: ibv_ah_attr {
                grh: ibv_global_route {
                    dgid: c.remote_gid.0,
                    flow_label: 0,
                    sgid_index: c.sgid_index,
                    hop_limit: c.hop_limit,
                    traffic_class: c.traffic_class,
                },
                is_global: 1,
                port_num: 1,
                ..Default::default()
            },
            port_num: 1,
            ..Default::default()
        };
        let m = IBV_QP_STATE
            | IBV_QP_AV
            | IBV_QP_PATH_MTU
            | IBV_QP_DEST_QPN
            | IBV_QP_RQ_PSN
            | IBV_QP_MAX_DEST_RD_ATOMIC
            | IBV_QP_MIN_RNR_TIMER;
        (a, m)
    } else {
        let a = ibv_qp_attr {
            qp_state: IBV_QPS_RTS,
            timeout: c.timeout,
            retry_cnt: c.retry_cnt,
            rnr_retry: c.rnr_retry,
            sq_psn: c.local_psn,
            max_rd_atomic: c.max_rd_atomic,
            ..Default::default()
        };
        let m = IBV_QP_STATE
            | IBV_QP_TIMEOUT
            | IBV_QP_RETRY_CNT
            | IBV_QP_RNR_RETRY
            | IBV_QP_SQ_PSN
            | IBV_QP_MAX_QP_RD_ATOMIC;
        (a, m)
    }
}

/// `struct ibv_ece`.
#[repr(C)]
pub struct ibv_ece {
    /// The vendor's IEEE OUI.
    pub vendor_id: u32,
    /// Vendor options.
    pub options: u32,
    /// Reserved.
    pub comp_mask: u32,
}

/// `rdma_set_local_ece`: softroce, as rxe, has no enhanced connection establishment options;
/// accepted and not sent. 0, or -1 and EINVAL.
#[no_mangle]
pub unsafe extern "C" fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    if id_of(id).is_none() || ece.is_null() {
        return fail(EINVAL);
    }
    0
}

/// `rdma_get_remote_ece`: none (all zero), as from rxe. 0, or -1 and EINVAL.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    if id_of(id).is_none() || ece.is_null() {
        return fail(EINVAL);
    }
    // SAFETY: the caller passes a writable ibv_ece (checked non-null).
    unsafe {
        ece.write(ibv_ece {
            vendor_id: 0,
            options: 0,
            comp_mask: 0,
        })
    };
    0
}

/// `rdma_reject_ece`: a rejection for unsupported options; as `rdma_reject` without data.
#[no_mangle]
pub unsafe extern "C" fn rdma_reject_ece(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    len: u8,
) -> c_int {
    // SAFETY: forwarded with the caller's own promises.
    unsafe { rdma_reject(id, private_data, len) }
}
