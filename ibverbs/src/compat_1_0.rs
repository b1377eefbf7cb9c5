//! The IBVERBS_1.0 compatibility layer: the non-default `name@IBVERBS_1.0` versions of 33
//! functions, for programs linked against libibverbs 1.0 (2006), whose objects had other
//! layouts. As rdma-core's `compat-1_0.c` does, each 1.0 object is a small struct of the old
//! layout that points at the current object (`real_*`), each 1.0 function unwraps its
//! arguments and calls the current one, and the data path of a 1.0 context (poll, notify,
//! post) goes through a 1.0 ops table whose entries convert the old work requests.
//!
//! Differences from rdma-core, all on its crash paths: every 1.0 handle passed to a control
//! function is checked against a registry of live 1.0 objects (EINVAL, or NULL with errno
//! EINVAL, instead of a crash), and `ibv_query_qp` tolerates a QP without an SRQ.
//!
//! The versions are given with `.symver`, which needs the versioned symbol defined in the same
//! object as the directive: a one-instruction trampoline per function, in assembly, jumps to
//! the Rust implementation (a tail jump keeps every argument register and the return value).

use std::collections::HashSet;
use std::ptr::null_mut;
use std::sync::{Mutex, MutexGuard, OnceLock};

use libc::{c_char, c_int, c_uint, c_void, pthread_cond_t, pthread_mutex_t, EINVAL};

use crate::ffi::*;

/// `struct ibv_device_1_0`.
#[repr(C)]
pub struct ibv_device_1_0 {
    pub obsolete_sysfs_dev: *mut c_void,
    pub obsolete_sysfs_ibdev: *mut c_void,
    pub real_device: *mut ibv_device,
    pub _ops: [*mut c_void; 2],
}

type PollCq10 = unsafe extern "C" fn(*mut ibv_cq_1_0, c_int, *mut ibv_wc) -> c_int;
type ReqNotify10 = unsafe extern "C" fn(*mut ibv_cq_1_0, c_int) -> c_int;
type PostSend10 =
    unsafe extern "C" fn(*mut ibv_qp_1_0, *mut ibv_send_wr_1_0, *mut *mut ibv_send_wr_1_0) -> c_int;
type PostRecv10 =
    unsafe extern "C" fn(*mut ibv_qp_1_0, *mut ibv_recv_wr_1_0, *mut *mut ibv_recv_wr_1_0) -> c_int;
type PostSrqRecv10 = unsafe extern "C" fn(
    *mut ibv_srq_1_0,
    *mut ibv_recv_wr_1_0,
    *mut *mut ibv_recv_wr_1_0,
) -> c_int;

/// `struct ibv_context_ops_1_0`: 27 pointers, of which the 1.0 inline verbs call the five
/// data-path ones; the others stay NULL, as in rdma-core.
#[repr(C)]
pub struct ibv_context_ops_1_0 {
    pub _control: [*mut c_void; 7],
    pub poll_cq: Option<PollCq10>,
    pub req_notify_cq: Option<ReqNotify10>,
    pub _cq: [*mut c_void; 7],
    pub post_srq_recv: Option<PostSrqRecv10>,
    pub _qp: [*mut c_void; 4],
    pub post_send: Option<PostSend10>,
    pub post_recv: Option<PostRecv10>,
    pub _ah_mcast: [*mut c_void; 4],
}

/// `struct ibv_context_1_0`.
#[repr(C)]
pub struct ibv_context_1_0 {
    pub device: *mut ibv_device_1_0,
    pub ops: ibv_context_ops_1_0,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub real_context: *mut ibv_context,
}

/// `struct ibv_pd_1_0`.
#[repr(C)]
pub struct ibv_pd_1_0 {
    pub context: *mut ibv_context_1_0,
    pub handle: u32,
    pub real_pd: *mut ibv_pd,
}

/// `struct ibv_mr_1_0`.
#[repr(C)]
pub struct ibv_mr_1_0 {
    pub context: *mut ibv_context_1_0,
    pub pd: *mut ibv_pd_1_0,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
    pub real_mr: *mut ibv_mr,
}

/// `struct ibv_srq_1_0`.
#[repr(C)]
pub struct ibv_srq_1_0 {
    pub context: *mut ibv_context_1_0,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd_1_0,
    pub handle: u32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
    pub real_srq: *mut ibv_srq,
}

/// `struct ibv_qp_init_attr_1_0`.
#[repr(C)]
pub struct ibv_qp_init_attr_1_0 {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq_1_0,
    pub recv_cq: *mut ibv_cq_1_0,
    pub srq: *mut ibv_srq_1_0,
    pub cap: ibv_qp_cap,
    pub qp_type: c_uint,
    pub sq_sig_all: c_int,
}

/// `struct ibv_send_wr_1_0`: `next` first, and no `qp_type`/`bind_mw` after the `wr` union
/// (here its largest member, atomic; `ud.ah` is its first word, a 1.0 AH).
#[repr(C)]
pub struct ibv_send_wr_1_0 {
    pub next: *mut ibv_send_wr_1_0,
    pub wr_id: u64,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: c_uint,
    pub send_flags: c_int,
    pub imm_data: u32,
    pub wr: send_wr_atomic,
}

/// `struct ibv_recv_wr_1_0`.
#[repr(C)]
pub struct ibv_recv_wr_1_0 {
    pub next: *mut ibv_recv_wr_1_0,
    pub wr_id: u64,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

/// `struct ibv_qp_1_0`.
#[repr(C)]
pub struct ibv_qp_1_0 {
    pub context: *mut ibv_context_1_0,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd_1_0,
    pub send_cq: *mut ibv_cq_1_0,
    pub recv_cq: *mut ibv_cq_1_0,
    pub srq: *mut ibv_srq_1_0,
    pub handle: u32,
    pub qp_num: u32,
    pub state: c_uint,
    pub qp_type: c_uint,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
    pub real_qp: *mut ibv_qp,
}

/// `struct ibv_cq_1_0`.
#[repr(C)]
pub struct ibv_cq_1_0 {
    pub context: *mut ibv_context_1_0,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
    pub real_cq: *mut ibv_cq,
}

/// `struct ibv_ah_1_0`.
#[repr(C)]
pub struct ibv_ah_1_0 {
    pub context: *mut ibv_context_1_0,
    pub pd: *mut ibv_pd_1_0,
    pub handle: u32,
    pub real_ah: *mut ibv_ah,
}

fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno, always valid to write.
    unsafe { *libc::__errno_location() = e };
}

/// Live 1.0 objects (their addresses): a handle not in here is refused.
fn registry() -> MutexGuard<'static, HashSet<usize>> {
    static LIVE: OnceLock<Mutex<HashSet<usize>>> = OnceLock::new();
    LIVE.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// `p` as a reference if it is a live 1.0 object of type `T`. Addresses are unique across
/// types (each is its own allocation), so the type is the caller's claim that the C program
/// passed the right kind of handle, as the C prototype says. Shared: the program may read
/// the object at any time, so the two fields the layer updates (a CQ's event count, a QP's
/// state) are written through the raw pointer, as libibverbs writes its own.
fn live<'a, T>(p: *mut T) -> Option<&'a T> {
    if p.is_null() || !registry().contains(&(p as usize)) {
        return None;
    }
    // SAFETY: registered pointers come from Box::into_raw in `track` and are removed before
    // they are freed.
    Some(unsafe { &*p })
}

fn track<T>(v: T) -> *mut T {
    let p = Box::into_raw(Box::new(v));
    registry().insert(p as usize);
    p
}

/// Unregisters and frees a 1.0 object.
fn release<T>(p: *mut T) {
    if registry().remove(&(p as usize)) {
        // SAFETY: it was registered, so it came from Box::into_raw and is freed once.
        drop(unsafe { Box::from_raw(p) });
    }
}

/// Zeroed plain C data: the 1.0 objects' pthread mutexes and conditions (which nothing in
/// softroce uses; all zeroes is PTHREAD_*_INITIALIZER on Linux) and init attributes.
fn zeroed<T>() -> T {
    // SAFETY: only instantiated with C structs of integers and raw pointers (pthread types
    // included), for which all-zero bytes is a valid value.
    unsafe { core::mem::zeroed() }
}

/// The live 1.0 object `p`, or a return with EINVAL in the function's C convention: `null`
/// (NULL and errno), `void` (nothing), or the value given.
macro_rules! handle_or {
    ($p:expr, null) => {
        match live($p) {
            Some(x) => x,
            None => {
                set_errno(EINVAL);
                return null_mut();
            }
        }
    };
    ($p:expr, void) => {
        match live($p) {
            Some(x) => x,
            None => return,
        }
    };
    ($p:expr, $ret:expr) => {
        match live($p) {
            Some(x) => x,
            None => return $ret,
        }
    };
}

unsafe extern "C" fn get_device_list_1_0(num: *mut c_int) -> *mut *mut ibv_device_1_0 {
    let mut n: c_int = 0;
    // SAFETY: our own exported function with a valid out pointer.
    let real = unsafe { crate::ibv_get_device_list(&mut n) };
    if real.is_null() {
        return null_mut();
    }
    let n = n.max(0) as usize;
    // [real list, device 0 .. device n-1, NULL]; the program gets a pointer to device 0.
    let mut list: Vec<*mut ibv_device_1_0> = Vec::with_capacity(n + 2);
    list.push(real as *mut ibv_device_1_0);
    for i in 0..n {
        list.push(track(ibv_device_1_0 {
            obsolete_sysfs_dev: null_mut(),
            obsolete_sysfs_ibdev: null_mut(),
            // SAFETY: `real` holds n devices.
            real_device: unsafe { *real.add(i) },
            _ops: [null_mut(); 2],
        }));
    }
    list.push(null_mut());
    let list = Box::into_raw(list.into_boxed_slice()) as *mut *mut ibv_device_1_0;
    registry().insert(list as usize);
    if !num.is_null() {
        // SAFETY: the caller's out pointer.
        unsafe { *num = n as c_int };
    }
    // SAFETY: the slice has n + 2 entries.
    unsafe { list.add(1) }
}

unsafe extern "C" fn free_device_list_1_0(list: *mut *mut ibv_device_1_0) {
    if list.is_null() {
        return;
    }
    // SAFETY: a list from get_device_list_1_0 starts one entry after its allocation.
    let base = unsafe { list.sub(1) };
    if !registry().remove(&(base as usize)) {
        return;
    }
    let mut n = 0;
    // SAFETY: the list is NULL-terminated; each device was tracked by get_device_list_1_0.
    unsafe {
        while !(*list.add(n)).is_null() {
            release(*list.add(n));
            n += 1;
        }
        crate::ibv_free_device_list(*base as *mut *mut ibv_device);
        drop(Box::from_raw(core::ptr::slice_from_raw_parts_mut(
            base,
            n + 2,
        )));
    }
}

/// The real device of a live 1.0 device (one of a list not yet freed), or NULL, which the
/// current functions refuse.
fn real_device(d: *mut ibv_device_1_0) -> *mut ibv_device {
    live(d).map_or(null_mut(), |d| d.real_device)
}

unsafe extern "C" fn get_device_name_1_0(d: *mut ibv_device_1_0) -> *const c_char {
    // SAFETY: forwarded; the current function checks the device.
    unsafe { crate::ibv_get_device_name(real_device(d)) }
}

unsafe extern "C" fn get_device_guid_1_0(d: *mut ibv_device_1_0) -> u64 {
    // SAFETY: as get_device_name_1_0.
    unsafe { crate::ibv_get_device_guid(real_device(d)) }
}

unsafe extern "C" fn poll_cq_wrapper(cq: *mut ibv_cq_1_0, n: c_int, wc: *mut ibv_wc) -> c_int {
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

unsafe extern "C" fn req_notify_wrapper(cq: *mut ibv_cq_1_0, solicited: c_int) -> c_int {
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
unsafe fn recv_list(mut w: *mut ibv_recv_wr_1_0) -> Vec<ibv_recv_wr> {
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
unsafe fn bad_1_0<W, O>(
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

unsafe extern "C" fn post_recv_wrapper(
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

unsafe extern "C" fn post_srq_recv_wrapper(
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

unsafe extern "C" fn post_send_wrapper(
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

unsafe extern "C" fn open_device_1_0(d: *mut ibv_device_1_0) -> *mut ibv_context_1_0 {
    // SAFETY: forwarded; the current function checks the device.
    let real = unsafe { crate::ibv_open_device(real_device(d)) };
    if real.is_null() {
        return null_mut();
    }
    // SAFETY: a context just opened.
    let r = unsafe { &*real };
    track(ibv_context_1_0 {
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
        cmd_fd: r.cmd_fd,
        async_fd: r.async_fd,
        num_comp_vectors: r.num_comp_vectors,
        real_context: real,
    })
}

unsafe extern "C" fn close_device_1_0(c: *mut ibv_context_1_0) -> c_int {
    let ctx = handle_or!(c, {
        set_errno(EINVAL);
        -1
    });
    // SAFETY: forwarded.
    let r = unsafe { crate::ibv_close_device(ctx.real_context) };
    if r == 0 {
        release(c);
    }
    r
}

/// IBV_EVENT_* whose element is a CQ, a QP or an SRQ.
fn event_element(t: c_uint) -> Option<u8> {
    match t {
        0 => Some(b'c'),          // CQ_ERR
        1..=7 | 16 => Some(b'q'), // QP_FATAL .. PATH_MIG_ERR, QP_LAST_WQE_REACHED
        14 | 15 => Some(b's'),    // SRQ_ERR, SRQ_LIMIT_REACHED
        _ => None,
    }
}

unsafe extern "C" fn get_async_event_1_0(
    c: *mut ibv_context_1_0,
    ev: *mut ibv_async_event,
) -> c_int {
    let ctx = handle_or!(c, {
        set_errno(EINVAL);
        -1
    });
    // SAFETY: forwarded; on success `ev` holds a current object, whose user context the 1.0
    // wrappers set to the 1.0 object.
    unsafe {
        let r = crate::ibv_get_async_event(ctx.real_context, ev);
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

unsafe extern "C" fn ack_async_event_1_0(ev: *mut ibv_async_event) {
    if ev.is_null() {
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
            Some(b'c') => handle_or!(el as *mut ibv_cq_1_0, void).real_cq as *mut c_void,
            Some(b'q') => handle_or!(el as *mut ibv_qp_1_0, void).real_qp as *mut c_void,
            Some(_) => handle_or!(el as *mut ibv_srq_1_0, void).real_srq as *mut c_void,
            None => el,
        };
        crate::ibv_ack_async_event(&mut real);
    }
}

/// The real context of a live 1.0 context, or NULL (which the current functions refuse).
fn real_ctx(c: *mut ibv_context_1_0) -> *mut ibv_context {
    live(c).map_or(null_mut(), |c| c.real_context)
}

unsafe extern "C" fn query_device_1_0(
    c: *mut ibv_context_1_0,
    attr: *mut ibv_device_attr,
) -> c_int {
    // SAFETY: forwarded; the current function checks the context.
    unsafe { crate::ibv_query_device(real_ctx(c), attr) }
}

unsafe extern "C" fn query_port_1_0(
    c: *mut ibv_context_1_0,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { crate::ibv_query_port(real_ctx(c), port, attr) }
}

unsafe extern "C" fn query_gid_1_0(
    c: *mut ibv_context_1_0,
    port: u8,
    index: c_int,
    gid: *mut [u8; 16],
) -> c_int {
    // SAFETY: forwarded.
    unsafe { crate::ibv_query_gid(real_ctx(c), port, index, gid) }
}

unsafe extern "C" fn query_pkey_1_0(
    c: *mut ibv_context_1_0,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { crate::ibv_query_pkey(real_ctx(c), port, index, pkey) }
}

unsafe extern "C" fn alloc_pd_1_0(c: *mut ibv_context_1_0) -> *mut ibv_pd_1_0 {
    let ctx = handle_or!(c, null);
    // SAFETY: forwarded.
    let real = unsafe { crate::ibv_alloc_pd(ctx.real_context) };
    if real.is_null() {
        return null_mut();
    }
    track(ibv_pd_1_0 {
        context: c,
        // SAFETY: a PD just allocated.
        handle: unsafe { (*real).handle },
        real_pd: real,
    })
}

unsafe extern "C" fn dealloc_pd_1_0(p: *mut ibv_pd_1_0) -> c_int {
    let pd = handle_or!(p, EINVAL);
    // SAFETY: forwarded.
    let r = unsafe { crate::ibv_dealloc_pd(pd.real_pd) };
    if r == 0 {
        release(p);
    }
    r
}

unsafe extern "C" fn reg_mr_1_0(
    p: *mut ibv_pd_1_0,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> *mut ibv_mr_1_0 {
    let pd = handle_or!(p, null);
    // SAFETY: forwarded.
    let real = unsafe { crate::ibv_reg_mr(pd.real_pd, addr, len, access) };
    if real.is_null() {
        return null_mut();
    }
    // SAFETY: an MR just registered.
    let r = unsafe { &*real };
    track(ibv_mr_1_0 {
        context: pd.context,
        pd: p,
        handle: r.handle,
        lkey: r.lkey,
        rkey: r.rkey,
        real_mr: real,
    })
}

unsafe extern "C" fn dereg_mr_1_0(m: *mut ibv_mr_1_0) -> c_int {
    let mr = handle_or!(m, EINVAL);
    // SAFETY: forwarded.
    let r = unsafe { crate::ibv_dereg_mr(mr.real_mr) };
    if r == 0 {
        release(m);
    }
    r
}

unsafe extern "C" fn create_cq_1_0(
    c: *mut ibv_context_1_0,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq_1_0 {
    let ctx = handle_or!(c, null);
    // SAFETY: forwarded.
    let real =
        unsafe { crate::ibv_create_cq(ctx.real_context, cqe, cq_context, channel, comp_vector) };
    if real.is_null() {
        return null_mut();
    }
    let cq = track(ibv_cq_1_0 {
        context: c,
        cq_context,
        // SAFETY: a CQ just created.
        handle: unsafe { (*real).handle },
        cqe,
        mutex: zeroed(),
        cond: zeroed(),
        comp_events_completed: 0,
        async_events_completed: 0,
        real_cq: real,
    });
    // The current CQ's user context is the 1.0 CQ, so that its events name the 1.0 CQ.
    // SAFETY: the CQ just created, owned by the program through the 1.0 one.
    unsafe { (*real).cq_context = cq as *mut c_void };
    cq
}

unsafe extern "C" fn resize_cq_1_0(p: *mut ibv_cq_1_0, cqe: c_int) -> c_int {
    let cq = handle_or!(p, EINVAL);
    // SAFETY: forwarded.
    unsafe { crate::ibv_resize_cq(cq.real_cq, cqe) }
}

unsafe extern "C" fn destroy_cq_1_0(p: *mut ibv_cq_1_0) -> c_int {
    let cq = handle_or!(p, EINVAL);
    // SAFETY: forwarded.
    let r = unsafe { crate::ibv_destroy_cq(cq.real_cq) };
    if r == 0 {
        release(p);
    }
    r
}

unsafe extern "C" fn get_cq_event_1_0(
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
    // The current CQ's user context: the 1.0 CQ (create_cq_1_0).
    let cq = user as *mut ibv_cq_1_0;
    let Some(c) = live(cq) else {
        set_errno(EINVAL);
        return -1;
    };
    // SAFETY: the caller's out pointers (checked non-NULL).
    unsafe {
        *cq_out = cq;
        *ctx_out = c.cq_context;
    }
    0
}

unsafe extern "C" fn ack_cq_events_1_0(p: *mut ibv_cq_1_0, n: c_uint) {
    let cq = handle_or!(p, void);
    // SAFETY: forwarded.
    unsafe { crate::ibv_ack_cq_events(cq.real_cq, n) };
    // SAFETY: `p` is live (checked); a plain field of the 1.0 CQ that the program owns.
    unsafe { (*p).comp_events_completed = cq.comp_events_completed.wrapping_add(n) };
}

unsafe extern "C" fn create_srq_1_0(
    p: *mut ibv_pd_1_0,
    init: *mut ibv_srq_init_attr,
) -> *mut ibv_srq_1_0 {
    let pd = handle_or!(p, null);
    // SAFETY: forwarded.
    let real = unsafe { crate::ibv_create_srq(pd.real_pd, init) };
    if real.is_null() {
        return null_mut();
    }
    let srq = track(ibv_srq_1_0 {
        context: pd.context,
        // SAFETY: the current function read `init` successfully.
        srq_context: unsafe { (*init).srq_context },
        pd: p,
        // SAFETY: an SRQ just created.
        handle: unsafe { (*real).handle },
        mutex: zeroed(),
        cond: zeroed(),
        events_completed: 0,
        real_srq: real,
    });
    // SAFETY: the SRQ just created; its events then name the 1.0 SRQ.
    unsafe { (*real).srq_context = srq as *mut c_void };
    srq
}

unsafe extern "C" fn modify_srq_1_0(
    p: *mut ibv_srq_1_0,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    let srq = handle_or!(p, EINVAL);
    // SAFETY: forwarded.
    unsafe { crate::ibv_modify_srq(srq.real_srq, attr, mask) }
}

unsafe extern "C" fn query_srq_1_0(p: *mut ibv_srq_1_0, attr: *mut ibv_srq_attr) -> c_int {
    let srq = handle_or!(p, EINVAL);
    // SAFETY: forwarded.
    unsafe { crate::ibv_query_srq(srq.real_srq, attr) }
}

unsafe extern "C" fn destroy_srq_1_0(p: *mut ibv_srq_1_0) -> c_int {
    let srq = handle_or!(p, EINVAL);
    // SAFETY: forwarded.
    let r = unsafe { crate::ibv_destroy_srq(srq.real_srq) };
    if r == 0 {
        release(p);
    }
    r
}

unsafe extern "C" fn create_qp_1_0(
    p: *mut ibv_pd_1_0,
    init: *mut ibv_qp_init_attr_1_0,
) -> *mut ibv_qp_1_0 {
    let pd = handle_or!(p, null);
    if init.is_null() {
        set_errno(EINVAL);
        return null_mut();
    }
    // SAFETY: the caller's init attributes (non-NULL).
    let ia = unsafe { &mut *init };
    let (Some(scq), Some(rcq)) = (live(ia.send_cq), live(ia.recv_cq)) else {
        set_errno(EINVAL);
        return null_mut();
    };
    let srq = if ia.srq.is_null() {
        null_mut()
    } else {
        handle_or!(ia.srq, null).real_srq
    };
    let mut real_init = ibv_qp_init_attr {
        qp_context: ia.qp_context,
        send_cq: scq.real_cq,
        recv_cq: rcq.real_cq,
        srq: srq as *mut c_void,
        cap: ia.cap,
        qp_type: ia.qp_type,
        sq_sig_all: ia.sq_sig_all,
    };
    // SAFETY: forwarded with our own attributes.
    let real = unsafe { crate::ibv_create_qp(pd.real_pd, &mut real_init) };
    if real.is_null() {
        return null_mut();
    }
    ia.cap = real_init.cap;
    // SAFETY: a QP just created.
    let r = unsafe { &mut *real };
    let qp = track(ibv_qp_1_0 {
        context: pd.context,
        qp_context: ia.qp_context,
        pd: p,
        send_cq: ia.send_cq,
        recv_cq: ia.recv_cq,
        srq: ia.srq,
        handle: r.handle,
        qp_num: r.qp_num,
        state: r.state,
        qp_type: ia.qp_type,
        mutex: zeroed(),
        cond: zeroed(),
        events_completed: 0,
        real_qp: real,
    });
    // Its events and query_qp then name the 1.0 QP.
    r.qp_context = qp as *mut c_void;
    qp
}

unsafe extern "C" fn query_qp_1_0(
    p: *mut ibv_qp_1_0,
    attr: *mut ibv_qp_attr,
    mask: c_int,
    init: *mut ibv_qp_init_attr_1_0,
) -> c_int {
    let qp = handle_or!(p, EINVAL);
    if init.is_null() {
        return EINVAL;
    }
    let mut real_init: ibv_qp_init_attr = zeroed();
    // SAFETY: forwarded with our own init attributes.
    let r = unsafe { crate::ibv_query_qp(qp.real_qp, attr, mask, &mut real_init) };
    if r != 0 {
        return r;
    }
    // SAFETY: the caller's init attributes (non-NULL).
    let ia = unsafe { &mut *init };
    ia.qp_context = qp.qp_context;
    ia.send_cq = qp.send_cq;
    ia.recv_cq = qp.recv_cq;
    ia.srq = qp.srq;
    ia.cap = real_init.cap;
    ia.qp_type = real_init.qp_type;
    ia.sq_sig_all = real_init.sq_sig_all;
    0
}

unsafe extern "C" fn modify_qp_1_0(
    p: *mut ibv_qp_1_0,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    let qp = handle_or!(p, EINVAL);
    // SAFETY: forwarded.
    let r = unsafe { crate::ibv_modify_qp(qp.real_qp, attr, mask) };
    if r == 0 {
        // SAFETY: `p` and its current QP are live (checked); the state field as rdma-core's
        // ibv_modify_qp sets the current QP's.
        unsafe { (*p).state = (*qp.real_qp).state };
    }
    r
}

unsafe extern "C" fn destroy_qp_1_0(p: *mut ibv_qp_1_0) -> c_int {
    let qp = handle_or!(p, EINVAL);
    // SAFETY: forwarded.
    let r = unsafe { crate::ibv_destroy_qp(qp.real_qp) };
    if r == 0 {
        release(p);
    }
    r
}

unsafe extern "C" fn create_ah_1_0(p: *mut ibv_pd_1_0, attr: *mut ibv_ah_attr) -> *mut ibv_ah_1_0 {
    let pd = handle_or!(p, null);
    // SAFETY: forwarded.
    let real = unsafe { crate::ibv_create_ah(pd.real_pd, attr) };
    if real.is_null() {
        return null_mut();
    }
    track(ibv_ah_1_0 {
        context: pd.context,
        pd: p,
        // SAFETY: an AH just created.
        handle: unsafe { (*real).handle },
        real_ah: real,
    })
}

unsafe extern "C" fn destroy_ah_1_0(p: *mut ibv_ah_1_0) -> c_int {
    let ah = handle_or!(p, EINVAL);
    // SAFETY: forwarded.
    let r = unsafe { crate::ibv_destroy_ah(ah.real_ah) };
    if r == 0 {
        release(p);
    }
    r
}

unsafe extern "C" fn attach_mcast_1_0(p: *mut ibv_qp_1_0, gid: *const c_void, lid: u16) -> c_int {
    let qp = handle_or!(p, EINVAL);
    crate::objects::ibv_attach_mcast(qp.real_qp as *mut c_void, gid, lid)
}

unsafe extern "C" fn detach_mcast_1_0(p: *mut ibv_qp_1_0, gid: *const c_void, lid: u16) -> c_int {
    let qp = handle_or!(p, EINVAL);
    crate::objects::ibv_detach_mcast(qp.real_qp as *mut c_void, gid, lid)
}

/// A trampoline `softroce_compat_NAME_1_0`, exported as `NAME@IBVERBS_1.0`, that jumps to
/// the Rust implementation.
macro_rules! symver_1_0 {
    ($($name:literal => $f:ident),* $(,)?) => {
        $(
            #[cfg(target_arch = "x86_64")]
            std::arch::global_asm!(
                concat!(".globl softroce_compat_", $name, "_1_0"),
                concat!(".type softroce_compat_", $name, "_1_0, %function"),
                concat!("softroce_compat_", $name, "_1_0:"),
                "jmp {f}@PLT",
                concat!(".size softroce_compat_", $name, "_1_0, . - softroce_compat_", $name, "_1_0"),
                concat!(".symver softroce_compat_", $name, "_1_0, ", $name, "@IBVERBS_1.0"),
                f = sym $f,
                options(att_syntax),
            );
            #[cfg(target_arch = "aarch64")]
            std::arch::global_asm!(
                concat!(".globl softroce_compat_", $name, "_1_0"),
                concat!(".type softroce_compat_", $name, "_1_0, %function"),
                concat!("softroce_compat_", $name, "_1_0:"),
                "b {f}",
                concat!(".size softroce_compat_", $name, "_1_0, . - softroce_compat_", $name, "_1_0"),
                concat!(".symver softroce_compat_", $name, "_1_0, ", $name, "@IBVERBS_1.0"),
                f = sym $f,
            );
        )*
    };
}

symver_1_0!(
    "ibv_get_device_list" => get_device_list_1_0,
    "ibv_free_device_list" => free_device_list_1_0,
    "ibv_get_device_name" => get_device_name_1_0,
    "ibv_get_device_guid" => get_device_guid_1_0,
    "ibv_open_device" => open_device_1_0,
    "ibv_close_device" => close_device_1_0,
    "ibv_get_async_event" => get_async_event_1_0,
    "ibv_ack_async_event" => ack_async_event_1_0,
    "ibv_query_device" => query_device_1_0,
    "ibv_query_port" => query_port_1_0,
    "ibv_query_gid" => query_gid_1_0,
    "ibv_query_pkey" => query_pkey_1_0,
    "ibv_alloc_pd" => alloc_pd_1_0,
    "ibv_dealloc_pd" => dealloc_pd_1_0,
    "ibv_reg_mr" => reg_mr_1_0,
    "ibv_dereg_mr" => dereg_mr_1_0,
    "ibv_create_cq" => create_cq_1_0,
    "ibv_resize_cq" => resize_cq_1_0,
    "ibv_destroy_cq" => destroy_cq_1_0,
    "ibv_get_cq_event" => get_cq_event_1_0,
    "ibv_ack_cq_events" => ack_cq_events_1_0,
    "ibv_create_srq" => create_srq_1_0,
    "ibv_modify_srq" => modify_srq_1_0,
    "ibv_query_srq" => query_srq_1_0,
    "ibv_destroy_srq" => destroy_srq_1_0,
    "ibv_create_qp" => create_qp_1_0,
    "ibv_query_qp" => query_qp_1_0,
    "ibv_modify_qp" => modify_qp_1_0,
    "ibv_destroy_qp" => destroy_qp_1_0,
    "ibv_create_ah" => create_ah_1_0,
    "ibv_destroy_ah" => destroy_ah_1_0,
    "ibv_attach_mcast" => attach_mcast_1_0,
    "ibv_detach_mcast" => detach_mcast_1_0,
);
