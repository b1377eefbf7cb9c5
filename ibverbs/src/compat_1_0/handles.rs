//! The Rust side of the 1.0 objects: the current handle each wraps, the 1.0 objects each
//! holds, their `Object` impls, the destroy protocol and the 1.0 device lists.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use libc::c_int;

use super::structs::*;
use crate::ffi::*;
use crate::objects::handle::{self, Obj, Object};

pub(super) fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno, always valid to write.
    unsafe { *libc::__errno_location() = e };
}

/// Sets errno to `e` and returns it.
pub(super) fn fail(e: c_int) -> c_int {
    set_errno(e);
    e
}

/// A handle of the current ABI that a 1.0 object wraps, kept on the Rust side (C may
/// overwrite the struct's `real_*` field). The 1.0 layer never dereferences it: it passes it
/// to the current functions, which look it up.
pub(super) struct Real<T>(pub(super) *mut T);

// SAFETY: a handle value only (above), never dereferenced through this type.
unsafe impl<T> Send for Real<T> {}
// SAFETY: as for Send.
unsafe impl<T> Sync for Real<T> {}

/// A 1.0 device: an entry of a 1.0 device list (its contexts keep it past the list).
pub(super) struct Dev10 {
    pub(super) real: Real<ibv_device>,
}

/// A 1.0 context. Its objects hold it, as the current ones hold theirs, so that the
/// `context` pointer of each stays valid after `ibv_close_device`.
pub(super) struct Ctx10 {
    pub(super) real: Real<ibv_context>,
    pub(super) _dev: Arc<Obj<Dev10>>,
}

/// A 1.0 PD. Its MRs, SRQs, QPs and AHs hold it (EBUSY to destroy meanwhile, as the current
/// PD's answer).
pub(super) struct Pd10 {
    pub(super) real: Real<ibv_pd>,
    pub(super) ctx: Arc<Obj<Ctx10>>,
}

/// A 1.0 MR.
pub(super) struct Mr10 {
    pub(super) real: Real<ibv_mr>,
    pub(super) _pd: Arc<Obj<Pd10>>,
}

/// A 1.0 CQ. Its QPs hold it.
pub(super) struct Cq10 {
    pub(super) real: Real<ibv_cq>,
    pub(super) _ctx: Arc<Obj<Ctx10>>,
}

/// A 1.0 SRQ. Its QPs hold it.
pub(super) struct Srq10 {
    pub(super) real: Real<ibv_srq>,
    pub(super) _pd: Arc<Obj<Pd10>>,
}

/// A 1.0 QP, holding its 1.0 PD, CQs and SRQ.
pub(super) struct Qp10 {
    pub(super) real: Real<ibv_qp>,
    pub(super) _pd: Arc<Obj<Pd10>>,
    pub(super) _send_cq: Arc<Obj<Cq10>>,
    pub(super) _recv_cq: Arc<Obj<Cq10>>,
    pub(super) _srq: Option<Arc<Obj<Srq10>>>,
}

/// A 1.0 AH.
pub(super) struct Ah10 {
    pub(super) real: Real<ibv_ah>,
    pub(super) _pd: Arc<Obj<Pd10>>,
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
pub(super) fn zeroed<T>() -> T {
    // SAFETY: only instantiated with C structs of integers and raw pointers (pthread types
    // included), for which all-zero bytes is a valid value.
    unsafe { core::mem::zeroed() }
}

/// Destroys the 1.0 object `p` and its current one, as rdma-core does: the current object
/// first, and the 1.0 one freed only if that succeeded. The 1.0 object is retired first
/// (`handle::retire`: EINVAL for a handle that is not a live `T`, EBUSY while a 1.0 object or
/// a 1.0 call on another thread holds it, or `check`'s error), so that no 1.0 call can begin
/// on it while its current object goes; if that fails (its errno value returned), it is made
/// live again.
pub(super) fn destroy_1_0<T: Object>(
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
pub(super) struct List10 {
    pub(super) slots: Box<[*mut ibv_device_1_0]>,
    pub(super) real: *mut *mut ibv_device,
}

// SAFETY: the pointers are handles, freed only by free_device_list_1_0, which owns the list
// once it has taken it out of `lists()`.
unsafe impl Send for List10 {}

/// The 1.0 device lists not yet freed, by the address the program got.
pub(super) fn lists() -> MutexGuard<'static, HashMap<usize, List10>> {
    static LISTS: OnceLock<Mutex<HashMap<usize, List10>>> = OnceLock::new();
    LISTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}
