//! `ibv_resize_cq`, as rxe answers it: the CQ keeps the completions waiting in it and gets
//! room for `cqe` from then on; `ibv_cq.cqe` tells the program the new size.

use std::ptr;

use libc::{c_int, EINVAL};

use super::common::{errno_of, fail};
use super::cq::cq_of;
use super::handle::CMutexGuard;
use crate::ffi::*;

/// `ibv_resize_cq`: 0 or an errno value: EINVAL for a bad handle, `cqe` below 1 or above the
/// device's `max_cqe`, or below the completions waiting in the CQ (rxe's `rxe_cq_chk_attr`),
/// the CQ then unchanged.
pub(super) fn resize_cq(p: *mut ibv_cq, cqe: c_int) -> c_int {
    let Some(cq) = cq_of(p) else {
        return fail(EINVAL);
    };
    if cqe < 1 {
        return fail(EINVAL);
    }
    let c = cq.cq_c();
    // The new `cqe` is written under the CQ's mutex (the handle module's rule for fields the
    // shim changes after creation), taken before the resize so that two resizes leave the
    // field saying the size the CQ has.
    // SAFETY: the mutex of the live, referenced CQ's C struct.
    let _g = unsafe { CMutexGuard::lock(ptr::addr_of_mut!((*c).mutex)) };
    if let Err(e) = cq.cq.resize(cqe as usize) {
        return fail(errno_of(&e));
    }
    // SAFETY: a raw write to the live CQ's C struct, under its mutex.
    unsafe { ptr::addr_of_mut!((*c).cqe).write(cqe) };
    0
}

/// `ibv_resize_cq`: see `resize_cq`.
#[no_mangle]
pub unsafe extern "C" fn ibv_resize_cq(p: *mut ibv_cq, cqe: c_int) -> c_int {
    resize_cq(p, cqe)
}
