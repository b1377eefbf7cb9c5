//! The 1.0 PDs, MRs, CQs, SRQs, QPs and AHs, and multicast attachment.

use std::ptr::{self, null_mut};

use libc::{c_int, c_uint, c_void, EBUSY, EINVAL};

use super::handles::*;
use super::structs::*;
use crate::ffi::*;
use crate::objects::handle::{self, CMutexGuard, Obj};

pub(super) unsafe extern "C" fn alloc_pd_1_0(c: *mut ibv_context_1_0) -> *mut ibv_pd_1_0 {
    let ctx = handle_or!(Ctx10, c, null);
    // SAFETY: forwarded.
    let real = unsafe { crate::ibv_alloc_pd(ctx.real.0) };
    if real.is_null() {
        return null_mut();
    }
    let obj = Obj::new(
        ibv_pd_1_0 {
            context: c,
            // SAFETY: a PD just allocated, not yet given to the program.
            handle: unsafe { ptr::addr_of!((*real).handle).read() },
            real_pd: real,
        },
        Pd10 {
            real: Real(real),
            ctx,
        },
    );
    handle::publish(&obj)
}

pub(super) unsafe extern "C" fn dealloc_pd_1_0(p: *mut ibv_pd_1_0) -> c_int {
    // SAFETY (of the closure's call): forwarded.
    destroy_1_0::<Pd10>(
        p,
        |_, _| Ok(()),
        |pd| unsafe { crate::ibv_dealloc_pd(pd.real.0) },
    )
}

pub(super) unsafe extern "C" fn reg_mr_1_0(
    p: *mut ibv_pd_1_0,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> *mut ibv_mr_1_0 {
    let pd = handle_or!(Pd10, p, null);
    // SAFETY: forwarded.
    let real = unsafe { crate::ibv_reg_mr(pd.real.0, addr, len, access) };
    if real.is_null() {
        return null_mut();
    }
    // SAFETY: an MR just registered, not yet given to the program; read raw.
    let (handle, lkey, rkey) = unsafe {
        (
            ptr::addr_of!((*real).handle).read(),
            ptr::addr_of!((*real).lkey).read(),
            ptr::addr_of!((*real).rkey).read(),
        )
    };
    let obj = Obj::new(
        ibv_mr_1_0 {
            context: Obj::handle(&pd.ctx),
            pd: p,
            handle,
            lkey,
            rkey,
            real_mr: real,
        },
        Mr10 {
            real: Real(real),
            _pd: pd,
        },
    );
    handle::publish(&obj)
}

pub(super) unsafe extern "C" fn dereg_mr_1_0(m: *mut ibv_mr_1_0) -> c_int {
    // SAFETY (of the closure's call): forwarded.
    destroy_1_0::<Mr10>(
        m,
        |_, _| Ok(()),
        |mr| unsafe { crate::ibv_dereg_mr(mr.real.0) },
    )
}

pub(super) unsafe extern "C" fn create_cq_1_0(
    c: *mut ibv_context_1_0,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq_1_0 {
    let ctx = handle_or!(Ctx10, c, null);
    // SAFETY: forwarded.
    let real = unsafe { crate::ibv_create_cq(ctx.real.0, cqe, cq_context, channel, comp_vector) };
    if real.is_null() {
        return null_mut();
    }
    let obj = Obj::new(
        ibv_cq_1_0 {
            context: c,
            cq_context,
            // SAFETY: a CQ just created, not yet given to the program; read raw.
            handle: unsafe { ptr::addr_of!((*real).handle).read() },
            cqe,
            mutex: zeroed(),
            cond: zeroed(),
            comp_events_completed: 0,
            async_events_completed: 0,
            real_cq: real,
        },
        Cq10 {
            real: Real(real),
            _ctx: ctx,
        },
    );
    let cq = handle::publish(&obj);
    // The current CQ's user context is the 1.0 CQ, so that its events name the 1.0 CQ.
    // SAFETY: the CQ just created, whose handle the program does not have yet (so it cannot
    // have been armed, and no event reads the field meanwhile); written raw.
    unsafe { ptr::addr_of_mut!((*real).cq_context).write(cq.cast()) };
    cq
}

pub(super) unsafe extern "C" fn resize_cq_1_0(p: *mut ibv_cq_1_0, cqe: c_int) -> c_int {
    let cq = handle_or!(Cq10, p, EINVAL);
    // SAFETY: forwarded.
    unsafe { crate::ibv_resize_cq(cq.real.0, cqe) }
}

/// `ibv_destroy_cq@IBVERBS_1.0`: as the current function (which waits for the events it
/// returned to be acknowledged: `ack_cq_events_1_0` reaches this CQ meanwhile).
pub(super) unsafe extern "C" fn destroy_cq_1_0(p: *mut ibv_cq_1_0) -> c_int {
    // SAFETY (of the closure's call): forwarded.
    destroy_1_0::<Cq10>(
        p,
        |_, _| Ok(()),
        |cq| unsafe { crate::ibv_destroy_cq(cq.real.0) },
    )
}

pub(super) unsafe extern "C" fn get_cq_event_1_0(
    ch: *mut ibv_comp_channel,
    cq_out: *mut *mut ibv_cq_1_0,
    ctx_out: *mut *mut c_void,
) -> c_int {
    if cq_out.is_null() || ctx_out.is_null() {
        set_errno(EINVAL);
        return -1;
    }
    let mut real: *mut ibv_cq = null_mut();
    let mut user: *mut c_void = null_mut();
    // SAFETY: forwarded with our own out pointers.
    let r = unsafe { crate::ibv_get_cq_event(ch, &mut real, &mut user) };
    if r != 0 {
        return r;
    }
    // The current CQ's user context: the 1.0 CQ (create_cq_1_0). Its destroy cannot have
    // finished: the current CQ's waits for this event's acknowledgement; it may have begun,
    // so the CQ is looked up live or retiring.
    let cq = user.cast::<ibv_cq_1_0>();
    let reg = handle::lock();
    let Some(c) = reg.find::<Cq10>(cq) else {
        set_errno(EINVAL);
        return -1;
    };
    // SAFETY: the 1.0 CQ is allocated while `reg` is held; `cq_context` (the program's) is
    // read raw. The caller's out pointers were checked non-NULL.
    unsafe {
        *ctx_out = ptr::addr_of!((*c.c()).cq_context).read();
        *cq_out = cq;
    }
    0
}

/// `ibv_ack_cq_events@IBVERBS_1.0`: acknowledges the events on the current CQ (which a
/// destroy of it may be waiting for), and counts them in the 1.0 CQ's own
/// `comp_events_completed`, under its mutex. Both are found under one registry lock, live or
/// retiring (see `handle::Locked`): the 1.0 CQ's destroy waits for this very call.
pub(super) unsafe extern "C" fn ack_cq_events_1_0(p: *mut ibv_cq_1_0, n: c_uint) {
    let reg = handle::lock();
    let Some(cq) = reg.find::<Cq10>(p) else {
        drop(reg);
        set_errno(EINVAL);
        return;
    };
    if !crate::objects::ack_cq_events_in(&reg, cq.real.0, n) {
        drop(reg);
        set_errno(EINVAL);
        return;
    }
    let c = cq.c();
    // SAFETY: the 1.0 CQ is allocated while `reg` is held; its mutex (zeroed: the static
    // initializer) guards the count, which the layer writes only here.
    unsafe {
        let _g = CMutexGuard::lock(ptr::addr_of_mut!((*c).mutex));
        let done = ptr::addr_of_mut!((*c).comp_events_completed);
        done.write(done.read().wrapping_add(n));
    }
}

pub(super) unsafe extern "C" fn create_srq_1_0(
    p: *mut ibv_pd_1_0,
    init: *mut ibv_srq_init_attr,
) -> *mut ibv_srq_1_0 {
    let pd = handle_or!(Pd10, p, null);
    // SAFETY: forwarded.
    let real = unsafe { crate::ibv_create_srq(pd.real.0, init) };
    if real.is_null() {
        return null_mut();
    }
    let obj = Obj::new(
        ibv_srq_1_0 {
            context: Obj::handle(&pd.ctx),
            // SAFETY: the current function read `init` successfully.
            srq_context: unsafe { (*init).srq_context },
            pd: p,
            // SAFETY: an SRQ just created, not yet given to the program; read raw.
            handle: unsafe { ptr::addr_of!((*real).handle).read() },
            mutex: zeroed(),
            cond: zeroed(),
            events_completed: 0,
            real_srq: real,
        },
        Srq10 {
            real: Real(real),
            _pd: pd,
        },
    );
    let srq = handle::publish(&obj);
    // SAFETY: the SRQ just created, not yet given to the program; its events then name the
    // 1.0 SRQ.
    unsafe { ptr::addr_of_mut!((*real).srq_context).write(srq.cast()) };
    srq
}

pub(super) unsafe extern "C" fn modify_srq_1_0(
    p: *mut ibv_srq_1_0,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    let srq = handle_or!(Srq10, p, EINVAL);
    // SAFETY: forwarded.
    unsafe { crate::ibv_modify_srq(srq.real.0, attr, mask) }
}

pub(super) unsafe extern "C" fn query_srq_1_0(
    p: *mut ibv_srq_1_0,
    attr: *mut ibv_srq_attr,
) -> c_int {
    let srq = handle_or!(Srq10, p, EINVAL);
    // SAFETY: forwarded.
    unsafe { crate::ibv_query_srq(srq.real.0, attr) }
}

pub(super) unsafe extern "C" fn destroy_srq_1_0(p: *mut ibv_srq_1_0) -> c_int {
    // SAFETY (of the closure's call): forwarded.
    destroy_1_0::<Srq10>(
        p,
        |_, _| Ok(()),
        |srq| unsafe { crate::ibv_destroy_srq(srq.real.0) },
    )
}

pub(super) unsafe extern "C" fn create_qp_1_0(
    p: *mut ibv_pd_1_0,
    init: *mut ibv_qp_init_attr_1_0,
) -> *mut ibv_qp_1_0 {
    let pd = handle_or!(Pd10, p, null);
    if init.is_null() {
        set_errno(EINVAL);
        return null_mut();
    }
    // SAFETY: the caller's init attributes (non-NULL).
    let ia = unsafe { &mut *init };
    let scq = handle_or!(Cq10, ia.send_cq, null);
    let rcq = handle_or!(Cq10, ia.recv_cq, null);
    let srq = if ia.srq.is_null() {
        None
    } else {
        Some(handle_or!(Srq10, ia.srq, null))
    };
    let mut real_init = ibv_qp_init_attr {
        qp_context: ia.qp_context,
        send_cq: scq.real.0,
        recv_cq: rcq.real.0,
        srq: srq.as_ref().map_or(null_mut(), |s| s.real.0.cast()),
        cap: ia.cap,
        qp_type: ia.qp_type,
        sq_sig_all: ia.sq_sig_all,
    };
    // SAFETY: forwarded with our own attributes.
    let real = unsafe { crate::ibv_create_qp(pd.real.0, &mut real_init) };
    if real.is_null() {
        return null_mut();
    }
    ia.cap = real_init.cap;
    // SAFETY: a QP just created, not yet given to the program; read raw.
    let (handle, qp_num, state) = unsafe {
        (
            ptr::addr_of!((*real).handle).read(),
            ptr::addr_of!((*real).qp_num).read(),
            ptr::addr_of!((*real).state).read(),
        )
    };
    let obj = Obj::new(
        ibv_qp_1_0 {
            context: Obj::handle(&pd.ctx),
            qp_context: ia.qp_context,
            pd: p,
            send_cq: ia.send_cq,
            recv_cq: ia.recv_cq,
            srq: ia.srq,
            handle,
            qp_num,
            state,
            qp_type: ia.qp_type,
            mutex: zeroed(),
            cond: zeroed(),
            events_completed: 0,
            real_qp: real,
        },
        Qp10 {
            real: Real(real),
            _pd: pd,
            _send_cq: scq,
            _recv_cq: rcq,
            _srq: srq,
        },
    );
    let qp = handle::publish(&obj);
    // Its events and query_qp then name the 1.0 QP.
    // SAFETY: the QP just created, not yet given to the program; written raw.
    unsafe { ptr::addr_of_mut!((*real).qp_context).write(qp.cast()) };
    qp
}

pub(super) unsafe extern "C" fn query_qp_1_0(
    p: *mut ibv_qp_1_0,
    attr: *mut ibv_qp_attr,
    mask: c_int,
    init: *mut ibv_qp_init_attr_1_0,
) -> c_int {
    let qp = handle_or!(Qp10, p, EINVAL);
    if init.is_null() {
        return fail(EINVAL);
    }
    let mut real_init: ibv_qp_init_attr = zeroed();
    // SAFETY: forwarded with our own init attributes.
    let r = unsafe { crate::ibv_query_qp(qp.real.0, attr, mask, &mut real_init) };
    if r != 0 {
        return r;
    }
    let c = qp.c();
    // SAFETY: the referenced 1.0 QP's C struct, read raw (the program owns `qp_context`); the
    // caller's init attributes (non-NULL).
    unsafe {
        let ia = &mut *init;
        ia.qp_context = ptr::addr_of!((*c).qp_context).read();
        ia.send_cq = ptr::addr_of!((*c).send_cq).read();
        ia.recv_cq = ptr::addr_of!((*c).recv_cq).read();
        ia.srq = ptr::addr_of!((*c).srq).read();
        ia.cap = real_init.cap;
        ia.qp_type = real_init.qp_type;
        ia.sq_sig_all = real_init.sq_sig_all;
    }
    0
}

pub(super) unsafe extern "C" fn modify_qp_1_0(
    p: *mut ibv_qp_1_0,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    let qp = handle_or!(Qp10, p, EINVAL);
    // SAFETY: forwarded.
    let r = unsafe { crate::ibv_modify_qp(qp.real.0, attr, mask) };
    if r == 0 && mask & 1 != 0 {
        // IBV_QP_STATE
        let c = qp.c();
        // SAFETY: the current function read `attr` successfully; the referenced 1.0 QP's
        // `state`, written raw under its mutex (zeroed: the static initializer), as the
        // current `ibv_modify_qp` writes the current QP's.
        unsafe {
            let _g = CMutexGuard::lock(ptr::addr_of_mut!((*c).mutex));
            ptr::addr_of_mut!((*c).state).write((*attr).qp_state);
        }
    }
    r
}

/// `ibv_destroy_qp@IBVERBS_1.0`: as the current function: EBUSY while the QP is attached to a
/// multicast group, checked with the retirement of the 1.0 QP, under the registry lock, so
/// that no attach through either ABI comes in between (a 1.0 attach holds the 1.0 QP).
pub(super) unsafe extern "C" fn destroy_qp_1_0(p: *mut ibv_qp_1_0) -> c_int {
    destroy_1_0::<Qp10>(
        p,
        |reg, qp| {
            if crate::objects::attached_to_mcast_in(reg, qp.real.0) {
                Err(EBUSY)
            } else {
                Ok(())
            }
        },
        // SAFETY (of the call): forwarded.
        |qp| unsafe { crate::ibv_destroy_qp(qp.real.0) },
    )
}

pub(super) unsafe extern "C" fn create_ah_1_0(
    p: *mut ibv_pd_1_0,
    attr: *mut ibv_ah_attr,
) -> *mut ibv_ah_1_0 {
    let pd = handle_or!(Pd10, p, null);
    // SAFETY: forwarded.
    let real = unsafe { crate::ibv_create_ah(pd.real.0, attr) };
    if real.is_null() {
        return null_mut();
    }
    let obj = Obj::new(
        ibv_ah_1_0 {
            context: Obj::handle(&pd.ctx),
            pd: p,
            // SAFETY: an AH just created, not yet given to the program; read raw.
            handle: unsafe { ptr::addr_of!((*real).handle).read() },
            real_ah: real,
        },
        Ah10 {
            real: Real(real),
            _pd: pd,
        },
    );
    handle::publish(&obj)
}

pub(super) unsafe extern "C" fn destroy_ah_1_0(p: *mut ibv_ah_1_0) -> c_int {
    // SAFETY (of the closure's call): forwarded.
    destroy_1_0::<Ah10>(
        p,
        |_, _| Ok(()),
        |ah| unsafe { crate::ibv_destroy_ah(ah.real.0) },
    )
}

/// `ibv_attach_mcast@IBVERBS_1.0`: the 1.0 QP is held for the whole attach, so its destroy
/// is EBUSY meanwhile and sees the attachment after.
pub(super) unsafe extern "C" fn attach_mcast_1_0(
    p: *mut ibv_qp_1_0,
    gid: *const c_void,
    lid: u16,
) -> c_int {
    let qp = handle_or!(Qp10, p, EINVAL);
    crate::objects::ibv_attach_mcast(qp.real.0.cast(), gid, lid)
}

pub(super) unsafe extern "C" fn detach_mcast_1_0(
    p: *mut ibv_qp_1_0,
    gid: *const c_void,
    lid: u16,
) -> c_int {
    let qp = handle_or!(Qp10, p, EINVAL);
    crate::objects::ibv_detach_mcast(qp.real.0.cast(), gid, lid)
}
