//! Taking events from channels: `rdma_create_event_channel`, `rdma_destroy_event_channel`,
//! `rdma_get_cm_event` (with what taking a MULTICAST_JOIN does), `rdma_ack_cm_event`,
//! `rdma_event_str`.

use std::collections::HashSet;
use std::ptr::{self, null_mut};
use std::sync::{Mutex, MutexGuard, OnceLock};

use libc::{c_char, c_int, c_void, EINVAL};

use super::error::{errno, fail, lock};
use super::ffi::*;
use super::object::{chan_of, new_channel, Chan, EventBox, McJoin, Queued};
use crate::objects::handle::{self, Obj};

/// The events C holds, for `rdma_ack_cm_event` to refuse anything else with EINVAL.
fn outstanding() -> MutexGuard<'static, HashSet<usize>> {
    static LIVE: OnceLock<Mutex<HashSet<usize>>> = OnceLock::new();
    lock(LIVE.get_or_init(Default::default))
}

/// `rdma_create_event_channel`: NULL and errno on failure.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    match new_channel() {
        Ok(ch) => Obj::raw(&ch),
        Err(e) => {
            fail(e);
            null_mut()
        }
    }
}

/// `rdma_destroy_event_channel`. rdma-core frees it whatever still uses it; here the memory
/// and fd stay until the last identifier or event naming it is gone, so nothing dangles.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_event_channel(ch: *mut rdma_event_channel) {
    drop(handle::remove_in_use::<Chan>(ch));
}

/// Takes the next queued event of `ch`, waiting for one unless its fd is non-blocking.
pub(super) fn next_event(ch: &Obj<Chan>) -> Result<*mut rdma_cm_event, c_int> {
    loop {
        let mut v: u64 = 0;
        // SAFETY: reading 8 bytes into a local from the channel's eventfd (open while `ch`
        // lives).
        let n = unsafe { libc::read(ch.fd, &mut v as *mut u64 as *mut c_void, 8) };
        if n != 8 {
            let e = errno();
            if e == libc::EINTR {
                continue;
            }
            return Err(e);
        }
        let next = lock(&ch.queue).pop_front();
        if let Some(Queued(mut b)) = next {
            if b.ev.event == RDMA_CM_EVENT_CONNECT_REQUEST {
                // Read: it leaves its listener's backlog, which counts the requests the
                // application has not read (the kernel's ucma, ucma_get_event).
                let cm = lock(&b.subject().st).cm.clone();
                if let Some(cm) = cm {
                    cm.request_read();
                }
            }
            if let Some(join) = b.join.take() {
                let status = process_join(b.ev.id, &join);
                if status != 0 {
                    b.ev.event = RDMA_CM_EVENT_MULTICAST_ERROR;
                    b.ev.status = status;
                }
            }
            let p = Box::into_raw(b);
            outstanding().insert(p as usize);
            return Ok(p as *mut rdma_cm_event);
        }
    }
}

/// `rdma_get_cm_event`: 0, or -1 and errno (EINVAL for a bad channel or pointer, EAGAIN when
/// the fd is non-blocking and nothing is queued).
#[no_mangle]
pub unsafe extern "C" fn rdma_get_cm_event(
    ch: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    let Some(ch) = chan_of(ch) else {
        return fail(EINVAL);
    };
    if event.is_null() {
        return fail(EINVAL);
    }
    match next_event(&ch) {
        Ok(e) => {
            // SAFETY: the caller passes a writable pointer slot (checked non-null).
            unsafe { event.write(e) };
            0
        }
        Err(e) => fail(e),
    }
}

/// `rdma_ack_cm_event`: frees the event; 0, or -1 and EINVAL for anything that is not an
/// unacknowledged event.
#[no_mangle]
pub unsafe extern "C" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    if event.is_null() || !outstanding().remove(&(event as usize)) {
        return fail(EINVAL);
    }
    // SAFETY: the pointer was Box::into_raw of an EventBox (its first field is the event) and
    // was outstanding until just now, so this is its only owner.
    drop(unsafe { Box::from_raw(event as *mut EventBox) });
    0
}

/// `rdma_event_str`: the event type's name, as rdma-core spells it.
#[no_mangle]
pub unsafe extern "C" fn rdma_event_str(event: c_int) -> *const c_char {
    let s: &'static [u8] = match event {
        RDMA_CM_EVENT_ADDR_RESOLVED => b"RDMA_CM_EVENT_ADDR_RESOLVED\0",
        RDMA_CM_EVENT_ADDR_ERROR => b"RDMA_CM_EVENT_ADDR_ERROR\0",
        RDMA_CM_EVENT_ROUTE_RESOLVED => b"RDMA_CM_EVENT_ROUTE_RESOLVED\0",
        RDMA_CM_EVENT_ROUTE_ERROR => b"RDMA_CM_EVENT_ROUTE_ERROR\0",
        RDMA_CM_EVENT_CONNECT_REQUEST => b"RDMA_CM_EVENT_CONNECT_REQUEST\0",
        RDMA_CM_EVENT_CONNECT_RESPONSE => b"RDMA_CM_EVENT_CONNECT_RESPONSE\0",
        RDMA_CM_EVENT_CONNECT_ERROR => b"RDMA_CM_EVENT_CONNECT_ERROR\0",
        RDMA_CM_EVENT_UNREACHABLE => b"RDMA_CM_EVENT_UNREACHABLE\0",
        RDMA_CM_EVENT_REJECTED => b"RDMA_CM_EVENT_REJECTED\0",
        RDMA_CM_EVENT_ESTABLISHED => b"RDMA_CM_EVENT_ESTABLISHED\0",
        RDMA_CM_EVENT_DISCONNECTED => b"RDMA_CM_EVENT_DISCONNECTED\0",
        RDMA_CM_EVENT_DEVICE_REMOVAL => b"RDMA_CM_EVENT_DEVICE_REMOVAL\0",
        RDMA_CM_EVENT_MULTICAST_JOIN => b"RDMA_CM_EVENT_MULTICAST_JOIN\0",
        RDMA_CM_EVENT_MULTICAST_ERROR => b"RDMA_CM_EVENT_MULTICAST_ERROR\0",
        RDMA_CM_EVENT_ADDR_CHANGE => b"RDMA_CM_EVENT_ADDR_CHANGE\0",
        RDMA_CM_EVENT_TIMEWAIT_EXIT => b"RDMA_CM_EVENT_TIMEWAIT_EXIT\0",
        _ => b"UNKNOWN EVENT\0",
    };
    s.as_ptr() as *const c_char
}

/// What ucma_process_join does when the application takes a MULTICAST_JOIN event: attaches
/// the identifier's QP (if it has one) to the group, unless it joined send-only. Returns the
/// event's status: 0, or -1 (errno set) when the attach failed.
pub(super) fn process_join(id: *mut rdma_cm_id, join: &McJoin) -> c_int {
    if !join.attach {
        return 0;
    }
    // SAFETY: `id` is the identifier the event names, kept alive by the event.
    let qp = unsafe { ptr::addr_of!((*id).qp).read() };
    if qp.is_null() {
        return 0;
    }
    match crate::objects::ibv_attach_mcast(qp.cast(), join.mgid.as_ptr().cast(), 0) {
        0 => 0,
        e => fail(e),
    }
}
