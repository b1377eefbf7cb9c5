//! The 1.0 context's data-path ops: poll, notify and the posts, which convert the 1.0 work
//! requests and call the current ops.

use std::ptr::null_mut;

use libc::{c_int, c_uint, c_void};

use super::structs::*;
use crate::ffi::*;

pub(super) unsafe extern "C" fn poll_cq_wrapper(
    cq: *mut ibv_cq_1_0,
    n: c_int,
    wc: *mut ibv_wc,
) -> c_int {
    // SAFETY: the data path trusts its handles (as the current ops do): a 1.0 CQ of this
    // context, whose real context has the current ops.
    unsafe {
        let real = (*cq).real_cq;
        match (*(*real).context).ops.poll_cq {
            Some(f) => f(real, n, wc),
            None => -1,
        }
    }
}

pub(super) unsafe extern "C" fn req_notify_wrapper(cq: *mut ibv_cq_1_0, solicited: c_int) -> c_int {
    // SAFETY: as poll_cq_wrapper.
    unsafe {
        let real = (*cq).real_cq;
        match (*(*real).context).ops.req_notify_cq {
            Some(f) => f(real, solicited),
            None => libc::EOPNOTSUPP,
        }
    }
}

/// Current receive WRs for a 1.0 list, linked, in a vector that must outlive the post.
pub(super) unsafe fn recv_list(mut w: *mut ibv_recv_wr_1_0) -> Vec<ibv_recv_wr> {
    let mut v = Vec::new();
    while !w.is_null() {
        // SAFETY: the caller's NULL-terminated list.
        let o = unsafe { &*w };
        v.push(ibv_recv_wr {
            wr_id: o.wr_id,
            next: null_mut(),
            sg_list: o.sg_list,
            num_sge: o.num_sge,
        });
        w = o.next;
    }
    let base = v.as_mut_ptr();
    for i in 1..v.len() {
        // SAFETY: in bounds; the vector is not resized from here on.
        v[i - 1].next = unsafe { base.add(i) };
    }
    v
}

/// The 1.0 WR at the position the current `bad` WR has in `conv`.
pub(super) unsafe fn bad_1_0<W, O>(
    list: *mut O,
    conv: &[W],
    bad: *mut W,
    next: fn(*mut O) -> *mut O,
) -> *mut O {
    let mut o = list;
    for w in conv {
        if core::ptr::eq(w, bad) {
            return o;
        }
        o = next(o);
    }
    null_mut()
}

pub(super) unsafe extern "C" fn post_recv_wrapper(
    qp: *mut ibv_qp_1_0,
    wr: *mut ibv_recv_wr_1_0,
    bad: *mut *mut ibv_recv_wr_1_0,
) -> c_int {
    // SAFETY: the data path trusts its handles and lists (see poll_cq_wrapper).
    unsafe {
        let mut conv = recv_list(wr);
        let real = (*qp).real_qp;
        let mut real_bad: *mut ibv_recv_wr = null_mut();
        let head = conv
            .first_mut()
            .map_or(null_mut(), |w| w as *mut ibv_recv_wr);
        let Some(f) = (*(*real).context).ops.post_recv else {
            return libc::EOPNOTSUPP;
        };
        let r = f(real, head, &mut real_bad);
        if r != 0 && !bad.is_null() {
            *bad = bad_1_0(wr, &conv, real_bad, |w| (*w).next);
        }
        r
    }
}

pub(super) unsafe extern "C" fn post_srq_recv_wrapper(
    srq: *mut ibv_srq_1_0,
    wr: *mut ibv_recv_wr_1_0,
    bad: *mut *mut ibv_recv_wr_1_0,
) -> c_int {
    // SAFETY: as post_recv_wrapper.
    unsafe {
        let mut conv = recv_list(wr);
        let real = (*srq).real_srq;
        let mut real_bad: *mut ibv_recv_wr = null_mut();
        let head = conv
            .first_mut()
            .map_or(null_mut(), |w| w as *mut ibv_recv_wr);
        let Some(f) = (*(*real).context).ops.post_srq_recv else {
            return libc::EOPNOTSUPP;
        };
        let r = f(real as *mut c_void, head, &mut real_bad);
        if r != 0 && !bad.is_null() {
            *bad = bad_1_0(wr, &conv, real_bad, |w| (*w).next);
        }
        r
    }
}

pub(super) unsafe extern "C" fn post_send_wrapper(
    qp: *mut ibv_qp_1_0,
    wr: *mut ibv_send_wr_1_0,
    bad: *mut *mut ibv_send_wr_1_0,
) -> c_int {
    // SAFETY: the data path trusts its handles, lists and (UD) address handles, as the
    // current post_send does.
    unsafe {
        let is_ud = (*qp).qp_type == 4; // IBV_QPT_UD
        let mut conv: Vec<ibv_send_wr> = Vec::new();
        let mut w = wr;
        while !w.is_null() {
            let o = &*w;
            let mut atomic = o.wr;
            if is_ud {
                // wr.ud.ah: the 1.0 AH's current one.
                let ah = atomic.remote_addr as usize as *mut ibv_ah_1_0;
                atomic.remote_addr = if ah.is_null() {
                    0
                } else {
                    (*ah).real_ah as usize as u64
                };
            }
            conv.push(ibv_send_wr {
                wr_id: o.wr_id,
                next: null_mut(),
                sg_list: o.sg_list,
                num_sge: o.num_sge,
                opcode: o.opcode,
                send_flags: o.send_flags as c_uint,
                imm_data: o.imm_data,
                wr: atomic,
                qp_type: 0,
                bind_mw: [0; 6],
            });
            w = o.next;
        }
        let base = conv.as_mut_ptr();
        for i in 1..conv.len() {
            conv[i - 1].next = base.add(i);
        }
        let real = (*qp).real_qp;
        let mut real_bad: *mut ibv_send_wr = null_mut();
        let head = conv
            .first_mut()
            .map_or(null_mut(), |w| w as *mut ibv_send_wr);
        let Some(f) = (*(*real).context).ops.post_send else {
            return libc::EOPNOTSUPP;
        };
        let r = f(real, head, &mut real_bad);
        if r != 0 && !bad.is_null() {
            *bad = bad_1_0(wr, &conv, real_bad, |w| (*w).next);
        }
        r
    }
}
