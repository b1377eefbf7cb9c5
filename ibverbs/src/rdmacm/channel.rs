//! Event channels and events: `rdma_create_event_channel`, `rdma_destroy_event_channel`,
//! `rdma_get_cm_event`, `rdma_ack_cm_event`, `rdma_event_str`.

use std::collections::{HashSet, VecDeque};
use std::ptr::{self, null_mut};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use libc::{c_char, c_int, c_void, EINVAL};

use super::ffi::*;
use super::id::Id;
use super::{errno, fail, lock};
use crate::objects::handle::{self, Obj, Object};

/// An event handed to C: the C struct first (the pointer C holds), then what it points into
/// and the identifiers it names, kept alive until the application acknowledges it.
#[repr(C)]
pub(super) struct EventBox {
    ev: rdma_cm_event,
    data: Vec<u8>,
    join: Option<McJoin>,
    _id: Arc<Obj<Id>>,
    _listen: Option<Arc<Obj<Id>>>,
}

/// An event owned by a channel's queue.
struct Queued(Box<EventBox>);
// SAFETY: the raw pointers in the event name objects that `_id`/`_listen` keep alive (Obj is
// Send + Sync) and the event's own `data`; nothing else refers to the box until C gets it.
unsafe impl Send for Queued {}

/// An event channel: its eventfd counts the queued events.
pub(super) struct Chan {
    fd: c_int,
    queue: Mutex<VecDeque<Queued>>,
}

impl Object for Chan {
    type C = rdma_event_channel;
    type Handle = rdma_event_channel;
}

impl Drop for Chan {
    fn drop(&mut self) {
        // SAFETY: the fd was opened with the channel and is closed only here.
        unsafe { libc::close(self.fd) };
    }
}

/// The events C holds, for `rdma_ack_cm_event` to refuse anything else with EINVAL.
fn outstanding() -> MutexGuard<'static, HashSet<usize>> {
    static LIVE: OnceLock<Mutex<HashSet<usize>>> = OnceLock::new();
    lock(LIVE.get_or_init(Default::default))
}

/// What an event says beyond its type.
pub(super) struct EventInfo {
    pub(super) kind: c_int,
    pub(super) status: c_int,
    pub(super) data: Vec<u8>,
    /// Connection parameters (connect request, established); private data is `data`.
    pub(super) conn: Option<rdma_conn_param>,
    /// A UD identifier's parameters (connect request, established), in place of `conn`;
    /// private data is `data`.
    pub(super) ud: Option<rdma_ud_param>,
    /// A MULTICAST_JOIN's group, for the attach done when the application takes the event.
    pub(super) join: Option<McJoin>,
}

/// The group of a MULTICAST_JOIN event (multicast.rs `process_join`).
#[derive(Clone, Copy)]
pub(super) struct McJoin {
    /// The group's GID.
    pub(super) mgid: [u8; 16],
    /// Whether to attach the identifier's QP (not for a send-only join).
    pub(super) attach: bool,
}

impl EventInfo {
    pub(super) fn plain(kind: c_int, status: c_int) -> EventInfo {
        EventInfo {
            kind,
            status,
            data: Vec::new(),
            conn: None,
            ud: None,
            join: None,
        }
    }
}

impl Obj<Chan> {
    /// Queues an event about `id` (for a connect request, `listen` is the listener) and
    /// counts it on the eventfd.
    pub(super) fn push(&self, id: &Arc<Obj<Id>>, listen: Option<&Arc<Obj<Id>>>, info: EventInfo) {
        let mut b = Box::new(EventBox {
            ev: rdma_cm_event {
                id: Obj::handle(id),
                listen_id: listen.map_or(null_mut(), Obj::handle),
                event: info.kind,
                status: info.status,
                // SAFETY: all-zero is a valid rdma_conn_param / rdma_ud_param (null pointers
                // and integers).
                param: unsafe { std::mem::zeroed() },
            },
            data: info.data,
            join: info.join,
            _id: Arc::clone(id),
            _listen: listen.cloned(),
        });
        let mut conn = info.conn.unwrap_or(rdma_conn_param {
            private_data: ptr::null(),
            private_data_len: 0,
            responder_resources: 0,
            initiator_depth: 0,
            flow_control: 0,
            retry_count: 0,
            rnr_retry_count: 0,
            srq: 0,
            qp_num: 0,
        });
        if !b.data.is_empty() {
            conn.private_data = b.data.as_ptr() as *const c_void;
            conn.private_data_len = b.data.len().min(255) as u8;
        }
        match info.ud {
            Some(mut ud) => {
                if !b.data.is_empty() {
                    ud.private_data = b.data.as_ptr() as *const c_void;
                    ud.private_data_len = b.data.len().min(255) as u8;
                }
                b.ev.param.ud = ud;
            }
            None => b.ev.param.conn = conn,
        }
        lock(&self.queue).push_back(Queued(b));
        let one: u64 = 1;
        // SAFETY: 8 bytes from a local to the channel's eventfd, open while `self` lives.
        unsafe { libc::write(self.fd, &one as *const u64 as *const c_void, 8) };
    }

    /// Drops the queued, not yet reported events about `id` and the connect requests queued
    /// for it as a listener, as the kernel does when an identifier is destroyed
    /// (`ucma_cleanup_ctx_events`): an application that destroyed an identifier never gets an
    /// event naming it (its `context` is gone: libfabric's rxm crashed reading one). Returns
    /// the identifiers of those connect requests, for the caller to destroy as the kernel
    /// does. The eventfd keeps its count for them: a reader that takes one finds the queue
    /// without that event and reads again (or gets EAGAIN on a non-blocking fd).
    pub(super) fn purge(&self, id: &Obj<Id>) -> Vec<Arc<Obj<Id>>> {
        let mut requests = Vec::new();
        lock(&self.queue).retain(|Queued(b)| {
            if ptr::eq(Arc::as_ptr(&b._id), id) {
                return false;
            }
            if b._listen
                .as_ref()
                .is_some_and(|l| ptr::eq(Arc::as_ptr(l), id))
            {
                requests.push(Arc::clone(&b._id));
                return false;
            }
            true
        });
        requests
    }

    /// The channel's C handle.
    pub(super) fn raw(this: &Arc<Self>) -> *mut rdma_event_channel {
        Obj::handle(this)
    }
}

/// The live channel behind `ch`, referenced.
pub(super) fn chan_of(ch: *mut rdma_event_channel) -> Option<Arc<Obj<Chan>>> {
    handle::get::<Chan>(ch)
}

/// A new channel (also made for an identifier created without one).
pub(super) fn new_channel() -> Result<Arc<Obj<Chan>>, c_int> {
    // SAFETY: no memory preconditions. Semaphore mode: one read takes one event.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) };
    if fd < 0 {
        return Err(errno());
    }
    let ch = Obj::new(
        rdma_event_channel { fd },
        Chan {
            fd,
            queue: Mutex::new(VecDeque::new()),
        },
    );
    handle::publish(&ch);
    Ok(ch)
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
                let cm = lock(&b._id.st).cm.clone();
                if let Some(cm) = cm {
                    cm.request_read();
                }
            }
            if let Some(join) = b.join.take() {
                let status = super::multicast::process_join(b.ev.id, &join);
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
