//! The 1.0 device list, devices, contexts, async events and queries.

use std::ptr::{self, null_mut};

use libc::{c_char, c_int, c_uint, EINVAL};

use super::data_path::*;
use super::handles::*;
use super::structs::*;
use crate::ffi::*;
use crate::objects::handle::{self, Obj};

pub(super) unsafe extern "C" fn get_device_list_1_0(num: *mut c_int) -> *mut *mut ibv_device_1_0 {
    let mut n: c_int = 0;
    // SAFETY: our own exported function with a valid out pointer.
    let real = unsafe { crate::ibv_get_device_list(&mut n) };
    if real.is_null() {
        return null_mut();
    }
    let n = n.max(0) as usize;
    // [real list, device 0 .. device n-1, NULL]; the program gets a pointer to device 0.
    let mut slots: Vec<*mut ibv_device_1_0> = Vec::with_capacity(n + 2);
    slots.push(real as *mut ibv_device_1_0);
    for i in 0..n {
        // SAFETY: `real` holds n devices.
        let dev = unsafe { *real.add(i) };
        let obj = Obj::new(
            ibv_device_1_0 {
                obsolete_sysfs_dev: null_mut(),
                obsolete_sysfs_ibdev: null_mut(),
                real_device: dev,
                _ops: [null_mut(); 2],
            },
            Dev10 { real: Real(dev) },
        );
        slots.push(handle::publish(&obj));
    }
    slots.push(null_mut());
    let mut slots = slots.into_boxed_slice();
    // SAFETY: the slice has n + 2 entries; the box's heap memory does not move with it.
    let list = unsafe { slots.as_mut_ptr().add(1) };
    lists().insert(list as usize, List10 { slots, real });
    if !num.is_null() {
        // SAFETY: the caller's out pointer.
        unsafe { *num = n as c_int };
    }
    list
}

pub(super) unsafe extern "C" fn free_device_list_1_0(list: *mut *mut ibv_device_1_0) {
    // Taken out under the lock: a second free of the same list finds nothing.
    let Some(l) = lists().remove(&(list as usize)) else {
        return;
    };
    // The devices go with the list; a context opened on one keeps it.
    for &d in l.slots.iter().skip(1).take_while(|d| !d.is_null()) {
        drop(handle::remove_in_use::<Dev10>(d));
    }
    // SAFETY: the current list this 1.0 list was made from, freed once (with it).
    unsafe { crate::ibv_free_device_list(l.real) };
}

/// The real device of a live 1.0 device (one of a list not yet freed), or NULL, which the
/// current functions refuse.
pub(super) fn real_device(d: *mut ibv_device_1_0) -> *mut ibv_device {
    handle::get::<Dev10>(d).map_or(null_mut(), |d| d.real.0)
}

pub(super) unsafe extern "C" fn get_device_name_1_0(d: *mut ibv_device_1_0) -> *const c_char {
    // SAFETY: forwarded; the current function checks the device.
    unsafe { crate::ibv_get_device_name(real_device(d)) }
}

pub(super) unsafe extern "C" fn get_device_guid_1_0(d: *mut ibv_device_1_0) -> u64 {
    // SAFETY: as get_device_name_1_0.
    unsafe { crate::ibv_get_device_guid(real_device(d)) }
}

pub(super) unsafe extern "C" fn open_device_1_0(d: *mut ibv_device_1_0) -> *mut ibv_context_1_0 {
    let dev = handle_or!(Dev10, d, null);
    // SAFETY: forwarded; the current function checks the device.
    let real = unsafe { crate::ibv_open_device(dev.real.0) };
    if real.is_null() {
        return null_mut();
    }
    // SAFETY: a context just opened, not yet given to the program; read raw.
    let (cmd_fd, async_fd, num_comp_vectors) = unsafe {
        (
            ptr::addr_of!((*real).cmd_fd).read(),
            ptr::addr_of!((*real).async_fd).read(),
            ptr::addr_of!((*real).num_comp_vectors).read(),
        )
    };
    let obj = Obj::new(
        ibv_context_1_0 {
            device: d,
            ops: ibv_context_ops_1_0 {
                _control: [null_mut(); 7],
                poll_cq: Some(poll_cq_wrapper),
                req_notify_cq: Some(req_notify_wrapper),
                _cq: [null_mut(); 7],
                post_srq_recv: Some(post_srq_recv_wrapper),
                _qp: [null_mut(); 4],
                post_send: Some(post_send_wrapper),
                post_recv: Some(post_recv_wrapper),
                _ah_mcast: [null_mut(); 4],
            },
            cmd_fd,
            async_fd,
            num_comp_vectors,
            real_context: real,
        },
        Ctx10 {
            real: Real(real),
            _dev: dev,
        },
    );
    handle::publish(&obj)
}

/// `ibv_close_device@IBVERBS_1.0`: 0, or -1 and errno EINVAL. As the current function, closing
/// does not need the context's objects gone: they keep the 1.0 context allocated.
pub(super) unsafe extern "C" fn close_device_1_0(c: *mut ibv_context_1_0) -> c_int {
    // Unpublished first, under the registry lock: of two threads closing it, one goes on.
    let Some(ctx) = handle::remove_in_use::<Ctx10>(c) else {
        set_errno(EINVAL);
        return -1;
    };
    // SAFETY: forwarded.
    unsafe { crate::ibv_close_device(ctx.real.0) }
}

/// IBV_EVENT_* whose element is a CQ, a QP or an SRQ.
pub(super) fn event_element(t: c_uint) -> Option<u8> {
    match t {
        0 => Some(b'c'),          // CQ_ERR
        1..=7 | 16 => Some(b'q'), // QP_FATAL .. PATH_MIG_ERR, QP_LAST_WQE_REACHED
        14 | 15 => Some(b's'),    // SRQ_ERR, SRQ_LIMIT_REACHED
        _ => None,
    }
}

pub(super) unsafe extern "C" fn get_async_event_1_0(
    c: *mut ibv_context_1_0,
    ev: *mut ibv_async_event,
) -> c_int {
    let ctx = handle_or!(Ctx10, c, -1);
    // SAFETY: forwarded; on success `ev` holds a current object, whose user context the 1.0
    // wrappers set to the 1.0 object.
    unsafe {
        let r = crate::ibv_get_async_event(ctx.real.0, ev);
        if r != 0 {
            return r;
        }
        let e = &mut *ev;
        e.element = match event_element(e.event_type) {
            Some(b'c') => (*(e.element as *mut ibv_cq)).cq_context,
            Some(b'q') => (*(e.element as *mut ibv_qp)).qp_context,
            Some(_) => (*(e.element as *mut ibv_srq)).srq_context,
            None => e.element,
        };
        0
    }
}

pub(super) unsafe extern "C" fn ack_async_event_1_0(ev: *mut ibv_async_event) {
    if ev.is_null() {
        set_errno(EINVAL);
        return;
    }
    // SAFETY: an event from get_async_event_1_0, whose element is a 1.0 object (checked).
    unsafe {
        let mut real = ibv_async_event {
            element: (*ev).element,
            event_type: (*ev).event_type,
        };
        let el = real.element;
        real.element = match event_element(real.event_type) {
            Some(b'c') => handle_or!(Cq10, el.cast(), void).real.0.cast(),
            Some(b'q') => handle_or!(Qp10, el.cast(), void).real.0.cast(),
            Some(_) => handle_or!(Srq10, el.cast(), void).real.0.cast(),
            None => el,
        };
        crate::ibv_ack_async_event(&mut real);
    }
}

/// The real context of a live 1.0 context, or NULL (which the current functions refuse).
/// The current context stays open for the call even if another thread closes the 1.0 one:
/// the call then fails as the current function fails on a closed context.
pub(super) fn real_ctx(c: *mut ibv_context_1_0) -> *mut ibv_context {
    handle::get::<Ctx10>(c).map_or(null_mut(), |c| c.real.0)
}

pub(super) unsafe extern "C" fn query_device_1_0(
    c: *mut ibv_context_1_0,
    attr: *mut ibv_device_attr,
) -> c_int {
    // SAFETY: forwarded; the current function checks the context.
    unsafe { crate::ibv_query_device(real_ctx(c), attr) }
}

pub(super) unsafe extern "C" fn query_port_1_0(
    c: *mut ibv_context_1_0,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { crate::ibv_query_port(real_ctx(c), port, attr) }
}

pub(super) unsafe extern "C" fn query_gid_1_0(
    c: *mut ibv_context_1_0,
    port: u8,
    index: c_int,
    gid: *mut [u8; 16],
) -> c_int {
    // SAFETY: forwarded.
    unsafe { crate::ibv_query_gid(real_ctx(c), port, index, gid) }
}

pub(super) unsafe extern "C" fn query_pkey_1_0(
    c: *mut ibv_context_1_0,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { crate::ibv_query_pkey(real_ctx(c), port, index, pkey) }
}
