//! What later calls change about an identifier: its event channel (`rdma_migrate_id`) and
//! its options (`rdma_set_option`).

use libc::{c_int, c_void, EINVAL, ENOSYS};
use std::ptr;

use super::error::{fail, lock};
use super::ffi::*;
use super::object::{chan_of, id_of, new_channel, Chan};
use crate::objects::handle::{self, Obj};

/// `rdma_migrate_id`: moves the identifier's future events to `channel` (NULL: a channel of
/// its own). 0, or -1 and EINVAL.
#[no_mangle]
pub unsafe extern "C" fn rdma_migrate_id(
    id: *mut rdma_cm_id,
    channel: *mut rdma_event_channel,
) -> c_int {
    let Some(obj) = id_of(id) else {
        return fail(EINVAL);
    };
    let ch = if channel.is_null() {
        match new_channel() {
            Ok(c) => c,
            Err(e) => return fail(e),
        }
    } else {
        match chan_of(channel) {
            Some(c) => c,
            None => return fail(EINVAL),
        }
    };
    let h = Obj::handle(&ch);
    let old = std::mem::replace(&mut *lock(&obj.chan), ch);
    // As librdmacm: the channel made for a synchronous identifier goes, and the identifier is
    // synchronous again only on a channel of its own. libfabric's verbs provider resolves its
    // address synchronously, then migrates onto its EQ's channel and waits there for
    // ROUTE_RESOLVED, which a still-synchronous identifier would have taken itself.
    if obj.swap_sync(channel.is_null()) {
        drop(handle::remove_in_use::<Chan>(Obj::handle(&old)));
    }
    // SAFETY: raw write into the live identifier.
    unsafe { ptr::addr_of_mut!((*obj.c()).channel).write(h) };
    0
}

/// `rdma_set_option`: TOS, REUSEADDR, AFONLY and ACK_TIMEOUT at RDMA_OPTION_ID (EINVAL for
/// a short value), ENOSYS for an IB path record (set by the SA, which RoCE has not) and
/// anything else, as the kernel answers unknown options.
#[no_mangle]
pub unsafe extern "C" fn rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: usize,
) -> c_int {
    let Some(obj) = id_of(id) else {
        return fail(EINVAL);
    };
    if level != RDMA_OPTION_ID {
        return fail(ENOSYS);
    }
    if optval.is_null() {
        return fail(EINVAL);
    }
    let mut st = lock(&obj.st);
    match (optname, optlen) {
        // SAFETY (each read): the caller passes `optlen` readable bytes, checked to be the
        // option's size.
        (RDMA_OPTION_ID_TOS, 1) => st.tos = Some(unsafe { *(optval as *const u8) }),
        (RDMA_OPTION_ID_ACK_TIMEOUT, 1) => {
            let t = unsafe { *(optval as *const u8) };
            st.ack_timeout = Some(t);
            // The CM gives the QP this timeout when it moves it to RTS (an identifier made
            // later gets it in `cm_id`).
            if let Some(c) = &st.cm {
                c.set_ack_timeout(t);
            }
        }
        (RDMA_OPTION_ID_REUSEADDR, 4) => {
            if st.port != 0 {
                return fail(EINVAL);
            }
            st.reuse = unsafe { *(optval as *const c_int) } != 0
        }
        (RDMA_OPTION_ID_AFONLY, 4) => st.afonly = unsafe { *(optval as *const c_int) } != 0,
        (RDMA_OPTION_ID_TOS | RDMA_OPTION_ID_ACK_TIMEOUT, _)
        | (RDMA_OPTION_ID_REUSEADDR | RDMA_OPTION_ID_AFONLY, _) => return fail(EINVAL),
        _ => return fail(ENOSYS),
    }
    0
}
