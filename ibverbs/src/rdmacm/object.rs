//! The two objects behind librdmacm's handles, which refer to each other: the identifier
//! (`rdma_cm_id`) with its state, and the event channel (`rdma_event_channel`) with its queue
//! of events, each of which keeps the identifiers it names alive.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::ptr::{self, null_mut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use libc::{c_int, c_void};
use softroce::ib::Gid;
use softroce::rdma_cm::CmId;

use super::addr::sockaddr_to_c;
use super::error::{errno, lock};
use super::ffi::*;
use crate::ffi::*;
use crate::objects::handle::{self, Obj, Object};

/// An identifier. The C struct is `rdma_cm_id`; the softroce identifier is made when the
/// identifier is first bound (explicitly or by `rdma_resolve_addr`).
pub(super) struct Id {
    pub(super) ps: c_int,
    /// The channel its events go to (`rdma_migrate_id` changes it).
    pub(super) chan: Mutex<Arc<Obj<Chan>>>,
    /// Made without a channel: its calls wait for their own events (librdmacm's synchronous
    /// mode, as `rdma_create_ep` uses it). `rdma_migrate_id` onto a channel ends it.
    sync: AtomicBool,
    pub(super) st: Mutex<IdSt>,
}

impl Id {
    /// Whether its calls wait for their own events (no channel of the caller's).
    pub(super) fn sync(&self) -> bool {
        self.sync.load(Ordering::Acquire)
    }

    /// Makes its calls wait for their own events (`sync`) or not; whether they did.
    pub(super) fn swap_sync(&self, sync: bool) -> bool {
        self.sync.swap(sync, Ordering::AcqRel)
    }
}

/// What an identifier's calls change.
#[derive(Default)]
pub(super) struct IdSt {
    /// The device it is on (`softroceN`): the one whose address it is bound to, or that it
    /// resolved its destination on, or that its connect request came to. None before, and
    /// for an identifier bound to a wildcard address.
    pub(super) dev: Option<usize>,
    /// The softroce identifier, on device `cm_dev`'s connection manager.
    pub(super) cm: Option<CmId>,
    pub(super) cm_dev: usize,
    /// A listener on a wildcard address in a process with several devices listens on each
    /// (the kernel's cma_listen_on_all): `cm` on device 0, these on the others.
    pub(super) also: Vec<(usize, CmId)>,
    /// The bound rdma_cm port (0: not bound).
    pub(super) port: u16,
    pub(super) listening: bool,
    /// An identifier of a connect request (its QP is moved by `rdma_accept`).
    pub(super) passive: bool,
    pub(super) connected: bool,
    /// The one path record `route.path_rec` points at.
    pub(super) path: Option<Box<ibv_sa_path_rec>>,
    /// CQs and channels `rdma_create_qp` made (freed by `rdma_destroy_qp`).
    pub(super) own_cqs: bool,
    /// The receive CQ and channel `rdma_create_srq_ex` made for an XRC SRQ (freed by
    /// `rdma_destroy_srq`).
    pub(super) own_srq_cq: bool,
    pub(super) tos: Option<u8>,
    pub(super) reuse: bool,
    pub(super) afonly: bool,
    pub(super) ack_timeout: Option<u8>,
    /// `rdma_create_ep`'s QP attributes for a synchronous listener's requests.
    pub(super) qp_init: Option<QpInit>,
    /// The multicast groups joined and not left.
    pub(super) mcs: Vec<Mc>,
}

/// A copy of an `ibv_qp_init_attr` (whose CQ and context pointers the application owns).
pub(super) struct QpInit(pub(super) ibv_qp_init_attr);
// SAFETY: the pointers are only passed back to ibv_create_qp, which looks them up.
unsafe impl Send for QpInit {}

impl QpInit {
    /// A bitwise copy of `a`.
    pub(super) fn of(a: &ibv_qp_init_attr) -> QpInit {
        // SAFETY: a plain C struct of integers and pointers: a bitwise copy is a valid value.
        QpInit(unsafe { ptr::read(a) })
    }
}

impl Object for Id {
    type C = rdma_cm_id;
    type Handle = rdma_cm_id;
}

/// The live identifier behind `id`, referenced.
pub(super) fn id_of(id: *mut rdma_cm_id) -> Option<Arc<Obj<Id>>> {
    handle::get::<Id>(id)
}

impl Obj<Id> {
    pub(super) fn chan(&self) -> Arc<Obj<Chan>> {
        Arc::clone(&lock(&self.chan))
    }

    /// Queues an event about this identifier on its channel.
    pub(super) fn event(this: &Arc<Self>, info: EventInfo) {
        this.chan().push(this, None, info);
    }
}

/// Writes the C struct's source and destination addresses (None leaves one as it is).
pub(super) fn set_addrs(id: &Obj<Id>, src: Option<SocketAddr>, dst: Option<SocketAddr>) {
    let c = id.c();
    // SAFETY: raw writes into the live identifier's C struct (C only reads these fields).
    unsafe {
        if let Some(s) = src {
            ptr::addr_of_mut!((*c).route.addr.src).write(sockaddr_to_c(s).0);
            let g = softroce::ib::Gid::from_ip(s.ip()).0;
            ptr::addr_of_mut!((*c).route.addr.ibaddr.sgid).write(g);
        }
        if let Some(d) = dst {
            ptr::addr_of_mut!((*c).route.addr.dst).write(sockaddr_to_c(d).0);
            let g = softroce::ib::Gid::from_ip(d.ip()).0;
            ptr::addr_of_mut!((*c).route.addr.ibaddr.dgid).write(g);
        }
        ptr::addr_of_mut!((*c).route.addr.ibaddr.pkey).write(0xffffu16.to_be());
    }
}

/// A new identifier on `chan`, published.
pub(super) fn new_id(
    chan: Arc<Obj<Chan>>,
    sync: bool,
    context: *mut c_void,
    ps: c_int,
    qp_type: libc::c_uint,
) -> Arc<Obj<Id>> {
    // SAFETY: all-zero is a valid rdma_route (null pointer, zeroed addresses).
    let route: rdma_route = unsafe { std::mem::zeroed() };
    let id = Obj::new(
        rdma_cm_id {
            verbs: null_mut(),
            channel: Obj::handle(&chan),
            context,
            qp: null_mut(),
            route,
            ps,
            port_num: 0,
            event: null_mut(),
            send_cq_channel: null_mut(),
            send_cq: null_mut(),
            recv_cq_channel: null_mut(),
            recv_cq: null_mut(),
            srq: null_mut(),
            pd: null_mut(),
            qp_type,
        },
        Id {
            ps,
            chan: Mutex::new(chan),
            sync: AtomicBool::new(sync),
            st: Mutex::new(IdSt::default()),
        },
    );
    handle::publish(&id);
    id
}

/// A group an identifier joined.
pub(super) struct Mc {
    /// The address given to the join (what a leave names).
    pub(super) addr: SocketAddr,
    pub(super) mgid: Gid,
    pub(super) send_only: bool,
}

/// An event handed to C: the C struct first (the pointer C holds), then what it points into
/// and the identifiers it names, kept alive until the application acknowledges it.
#[repr(C)]
pub(super) struct EventBox {
    pub(super) ev: rdma_cm_event,
    data: Vec<u8>,
    pub(super) join: Option<McJoin>,
    _id: Arc<Obj<Id>>,
    _listen: Option<Arc<Obj<Id>>>,
}

impl EventBox {
    /// The identifier the event is about.
    pub(super) fn subject(&self) -> &Obj<Id> {
        &self._id
    }
}

/// An event owned by a channel's queue.
pub(super) struct Queued(pub(super) Box<EventBox>);
// SAFETY: the raw pointers in the event name objects that `_id`/`_listen` keep alive (Obj is
// Send + Sync) and the event's own `data`; nothing else refers to the box until C gets it.
unsafe impl Send for Queued {}

/// An event channel: its eventfd counts the queued events.
pub(super) struct Chan {
    pub(super) fd: c_int,
    pub(super) queue: Mutex<VecDeque<Queued>>,
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
