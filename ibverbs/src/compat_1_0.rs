//! The IBVERBS_1.0 compatibility layer: the non-default `name@IBVERBS_1.0` versions of 33
//! functions, for programs linked against libibverbs 1.0 (2006), whose objects had other
//! layouts. As rdma-core's `compat-1_0.c` does, each 1.0 object is a small struct of the old
//! layout that points at the current object (`real_*`), each 1.0 function unwraps its
//! arguments and calls the current one, and the data path of a 1.0 context (poll, notify,
//! post) goes through a 1.0 ops table whose entries convert the old work requests.
//!
//! Each 1.0 object is an object of the shim's one handle type (`objects::handle`), in the same
//! registry as the current ones, so that the 1.0 functions hold with any number of threads as
//! the current ones do: a control call looks its 1.0 handle up and takes a reference under
//! the registry lock, a 1.0 object holds the 1.0 objects it was made from (a 1.0 QP its PD,
//! CQs and SRQ), and a 1.0 destroy is refused with EBUSY while either is the case.
//!
//! Differences from rdma-core, all on its crash paths: a bad, foreign, already destroyed or
//! other-typed 1.0 handle is refused with EINVAL (or NULL and errno EINVAL) instead of a
//! crash, a destroy while another thread uses the object is EBUSY instead of a use after
//! free, and `ibv_query_qp` tolerates a QP without an SRQ.
//!
//! The versions are given with `.symver`, which needs the versioned symbol defined in the same
//! object as the directive: a one-instruction trampoline per function, in assembly, jumps to
//! the Rust implementation (a tail jump keeps every argument register and the return value).

use std::collections::HashMap;
use std::ptr::{self, null_mut};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use libc::{c_char, c_int, c_uint, c_void, pthread_cond_t, pthread_mutex_t, EBUSY, EINVAL};

use crate::ffi::*;
use crate::objects::handle::{self, CMutexGuard, Obj, Object};

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

/// Sets errno to `e` and returns it.
fn fail(e: c_int) -> c_int {
    set_errno(e);
    e
}

/// A handle of the current ABI that a 1.0 object wraps, kept on the Rust side (C may
/// overwrite the struct's `real_*` field). The 1.0 layer never dereferences it: it passes it
/// to the current functions, which look it up.
struct Real<T>(*mut T);

// SAFETY: a handle value only (above), never dereferenced through this type.
unsafe impl<T> Send for Real<T> {}
// SAFETY: as for Send.
unsafe impl<T> Sync for Real<T> {}

/// A 1.0 device: an entry of a 1.0 device list (its contexts keep it past the list).
struct Dev10 {
    real: Real<ibv_device>,
}

/// A 1.0 context. Its objects hold it, as the current ones hold theirs, so that the
/// `context` pointer of each stays valid after `ibv_close_device`.
struct Ctx10 {
    real: Real<ibv_context>,
    _dev: Arc<Obj<Dev10>>,
}

/// A 1.0 PD. Its MRs, SRQs, QPs and AHs hold it (EBUSY to destroy meanwhile, as the current
/// PD's answer).
struct Pd10 {
    real: Real<ibv_pd>,
    ctx: Arc<Obj<Ctx10>>,
}

/// A 1.0 MR.
struct Mr10 {
    real: Real<ibv_mr>,
    _pd: Arc<Obj<Pd10>>,
}

/// A 1.0 CQ. Its QPs hold it.
struct Cq10 {
    real: Real<ibv_cq>,
    _ctx: Arc<Obj<Ctx10>>,
}

/// A 1.0 SRQ. Its QPs hold it.
struct Srq10 {
    real: Real<ibv_srq>,
    _pd: Arc<Obj<Pd10>>,
}

/// A 1.0 QP, holding its 1.0 PD, CQs and SRQ.
struct Qp10 {
    real: Real<ibv_qp>,
    _pd: Arc<Obj<Pd10>>,
    _send_cq: Arc<Obj<Cq10>>,
    _recv_cq: Arc<Obj<Cq10>>,
    _srq: Option<Arc<Obj<Srq10>>>,
}

/// A 1.0 AH.
struct Ah10 {
    real: Real<ibv_ah>,
    _pd: Arc<Obj<Pd10>>,
}

macro_rules! object_1_0 {
    ($($t:ty => $c:ty),* $(,)?) => {
        $(
            impl Object for $t {
                type C = $c;
                type Handle = $c;
            }
        )*
    };
}

object_1_0!(
    Dev10 => ibv_device_1_0,
    Ctx10 => ibv_context_1_0,
    Pd10 => ibv_pd_1_0,
    Mr10 => ibv_mr_1_0,
    Cq10 => ibv_cq_1_0,
    Srq10 => ibv_srq_1_0,
    Qp10 => ibv_qp_1_0,
    Ah10 => ibv_ah_1_0,
);

/// Zeroed plain C data: the 1.0 objects' pthread mutexes and conditions (all zeroes is
/// PTHREAD_*_INITIALIZER on Linux) and init attributes.
fn zeroed<T>() -> T {
    // SAFETY: only instantiated with C structs of integers and raw pointers (pthread types
    // included), for which all-zero bytes is a valid value.
    unsafe { core::mem::zeroed() }
}

/// The live 1.0 object of type `$t` behind `$p`, referenced (see `handle::get`), or a return
/// with errno EINVAL in the function's C convention: `null` (NULL), `void` (nothing), or the
/// value given.
macro_rules! handle_or {
    ($t:ty, $p:expr, null) => {
        match handle::get::<$t>($p) {
            Some(x) => x,
            None => {
                set_errno(EINVAL);
                return null_mut();
            }
        }
    };
    ($t:ty, $p:expr, void) => {
        match handle::get::<$t>($p) {
            Some(x) => x,
            None => {
                set_errno(EINVAL);
                return;
            }
        }
    };
    ($t:ty, $p:expr, $ret:expr) => {
        match handle::get::<$t>($p) {
            Some(x) => x,
            None => {
                set_errno(EINVAL);
                return $ret;
            }
        }
    };
}

/// Destroys the 1.0 object `p` and its current one, as rdma-core does: the current object
/// first, and the 1.0 one freed only if that succeeded. The 1.0 object is retired first
/// (`handle::retire`: EINVAL for a handle that is not a live `T`, EBUSY while a 1.0 object or
/// a 1.0 call on another thread holds it, or `check`'s error), so that no 1.0 call can begin
/// on it while its current object goes; if that fails (its errno value returned), it is made
/// live again.
fn destroy_1_0<T: Object>(
    p: *mut T::Handle,
    check: impl FnOnce(&handle::Locked, &Obj<T>) -> Result<(), c_int>,
    destroy_current: impl FnOnce(&Obj<T>) -> c_int,
) -> c_int {
    let obj = match handle::retire::<T>(p, check) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let r = destroy_current(&obj);
    if r == 0 {
        drop(obj.finish());
    } else {
        obj.restore();
    }
    r
}

/// A 1.0 device list: what the program got (`slots[1..]`, NULL-terminated; `slots[0]` the
/// current list, as rdma-core lays it out) and the current list to free with it.
struct List10 {
    slots: Box<[*mut ibv_device_1_0]>,
    real: *mut *mut ibv_device,
}

// SAFETY: the pointers are handles, freed only by free_device_list_1_0, which owns the list
// once it has taken it out of `lists()`.
unsafe impl Send for List10 {}

/// The 1.0 device lists not yet freed, by the address the program got.
fn lists() -> MutexGuard<'static, HashMap<usize, List10>> {
    static LISTS: OnceLock<Mutex<HashMap<usize, List10>>> = OnceLock::new();
    LISTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
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

unsafe extern "C" fn free_device_list_1_0(list: *mut *mut ibv_device_1_0) {
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
fn real_device(d: *mut ibv_device_1_0) -> *mut ibv_device {
    handle::get::<Dev10>(d).map_or(null_mut(), |d| d.real.0)
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
unsafe extern "C" fn close_device_1_0(c: *mut ibv_context_1_0) -> c_int {
    // Unpublished first, under the registry lock: of two threads closing it, one goes on.
    let Some(ctx) = handle::remove_in_use::<Ctx10>(c) else {
        set_errno(EINVAL);
        return -1;
    };
    // SAFETY: forwarded.
    unsafe { crate::ibv_close_device(ctx.real.0) }
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

unsafe extern "C" fn ack_async_event_1_0(ev: *mut ibv_async_event) {
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
fn real_ctx(c: *mut ibv_context_1_0) -> *mut ibv_context {
    handle::get::<Ctx10>(c).map_or(null_mut(), |c| c.real.0)
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

unsafe extern "C" fn dealloc_pd_1_0(p: *mut ibv_pd_1_0) -> c_int {
    // SAFETY (of the closure's call): forwarded.
    destroy_1_0::<Pd10>(
        p,
        |_, _| Ok(()),
        |pd| unsafe { crate::ibv_dealloc_pd(pd.real.0) },
    )
}

unsafe extern "C" fn reg_mr_1_0(
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

unsafe extern "C" fn dereg_mr_1_0(m: *mut ibv_mr_1_0) -> c_int {
    // SAFETY (of the closure's call): forwarded.
    destroy_1_0::<Mr10>(
        m,
        |_, _| Ok(()),
        |mr| unsafe { crate::ibv_dereg_mr(mr.real.0) },
    )
}

unsafe extern "C" fn create_cq_1_0(
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

unsafe extern "C" fn resize_cq_1_0(p: *mut ibv_cq_1_0, cqe: c_int) -> c_int {
    let cq = handle_or!(Cq10, p, EINVAL);
    // SAFETY: forwarded.
    unsafe { crate::ibv_resize_cq(cq.real.0, cqe) }
}

/// `ibv_destroy_cq@IBVERBS_1.0`: as the current function (which waits for the events it
/// returned to be acknowledged: `ack_cq_events_1_0` reaches this CQ meanwhile).
unsafe extern "C" fn destroy_cq_1_0(p: *mut ibv_cq_1_0) -> c_int {
    // SAFETY (of the closure's call): forwarded.
    destroy_1_0::<Cq10>(
        p,
        |_, _| Ok(()),
        |cq| unsafe { crate::ibv_destroy_cq(cq.real.0) },
    )
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
unsafe extern "C" fn ack_cq_events_1_0(p: *mut ibv_cq_1_0, n: c_uint) {
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

unsafe extern "C" fn create_srq_1_0(
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

unsafe extern "C" fn modify_srq_1_0(
    p: *mut ibv_srq_1_0,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    let srq = handle_or!(Srq10, p, EINVAL);
    // SAFETY: forwarded.
    unsafe { crate::ibv_modify_srq(srq.real.0, attr, mask) }
}

unsafe extern "C" fn query_srq_1_0(p: *mut ibv_srq_1_0, attr: *mut ibv_srq_attr) -> c_int {
    let srq = handle_or!(Srq10, p, EINVAL);
    // SAFETY: forwarded.
    unsafe { crate::ibv_query_srq(srq.real.0, attr) }
}

unsafe extern "C" fn destroy_srq_1_0(p: *mut ibv_srq_1_0) -> c_int {
    // SAFETY (of the closure's call): forwarded.
    destroy_1_0::<Srq10>(
        p,
        |_, _| Ok(()),
        |srq| unsafe { crate::ibv_destroy_srq(srq.real.0) },
    )
}

unsafe extern "C" fn create_qp_1_0(
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

unsafe extern "C" fn query_qp_1_0(
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

unsafe extern "C" fn modify_qp_1_0(
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
unsafe extern "C" fn destroy_qp_1_0(p: *mut ibv_qp_1_0) -> c_int {
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

unsafe extern "C" fn create_ah_1_0(p: *mut ibv_pd_1_0, attr: *mut ibv_ah_attr) -> *mut ibv_ah_1_0 {
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

unsafe extern "C" fn destroy_ah_1_0(p: *mut ibv_ah_1_0) -> c_int {
    // SAFETY (of the closure's call): forwarded.
    destroy_1_0::<Ah10>(
        p,
        |_, _| Ok(()),
        |ah| unsafe { crate::ibv_destroy_ah(ah.real.0) },
    )
}

/// `ibv_attach_mcast@IBVERBS_1.0`: the 1.0 QP is held for the whole attach, so its destroy
/// is EBUSY meanwhile and sees the attachment after.
unsafe extern "C" fn attach_mcast_1_0(p: *mut ibv_qp_1_0, gid: *const c_void, lid: u16) -> c_int {
    let qp = handle_or!(Qp10, p, EINVAL);
    crate::objects::ibv_attach_mcast(qp.real.0.cast(), gid, lid)
}

unsafe extern "C" fn detach_mcast_1_0(p: *mut ibv_qp_1_0, gid: *const c_void, lid: u16) -> c_int {
    let qp = handle_or!(Qp10, p, EINVAL);
    crate::objects::ibv_detach_mcast(qp.real.0.cast(), gid, lid)
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
