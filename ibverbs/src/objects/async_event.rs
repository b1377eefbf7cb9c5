//! Asynchronous events and fork support.

use libc::{c_int, c_void, EINVAL, ENODEV};

use super::common::{fail_neg, set_errno, EVENTFD_COUNT};
use super::ctx::ctx_of;
use crate::ffi::*;

/// `ibv_get_async_event`: softroce raises no asynchronous events yet, so this blocks on the
/// context's `async_fd` like a quiet device (or fails EAGAIN if the application made it
/// non-blocking); -1 and errno. `ibv_close_device` wakes a thread blocked here, which then
/// fails with ENODEV, rather than leave it blocked for good.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_async_event(
    c: *mut ibv_context,
    _ev: *mut ibv_async_event,
) -> c_int {
    let Some(ctx) = ctx_of(c) else {
        return fail_neg(EINVAL);
    };
    let mut v: u64 = 0;
    // SAFETY: reading 8 bytes into a local, from the fd the referenced context keeps open.
    let n = unsafe {
        libc::read(
            ctx.async_fd(),
            &mut v as *mut u64 as *mut c_void,
            EVENTFD_COUNT,
        )
    };
    if n == EVENTFD_COUNT as isize {
        // Only ibv_close_device writes the eventfd.
        set_errno(ENODEV);
    }
    // Otherwise interrupted or non-blocking: errno from read.
    -1
}

/// `ibv_ack_async_event`: nothing to acknowledge.
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_async_event(_ev: *mut ibv_async_event) {}

/// `ibv_fork_init`: softroce pins no pages, so fork is safe without it; 0.
#[no_mangle]
pub unsafe extern "C" fn ibv_fork_init() -> c_int {
    0
}

/// `ibv_is_fork_initialized`: `IBV_FORK_UNNEEDED`.
#[no_mangle]
pub unsafe extern "C" fn ibv_is_fork_initialized() -> c_int {
    IBV_FORK_UNNEEDED
}
