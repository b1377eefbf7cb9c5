//! A device in the process as librdmacm sees it: its context and PD (one each, as librdmacm
//! opens each device once), its connection manager, and the dispatcher thread that turns the
//! manager's events into C events; the device list; the exit handler that closes what the
//! process left.

use std::net::SocketAddr;
use std::ptr::{self, null_mut};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use libc::{c_int, ETIMEDOUT};
use softroce::rdma_cm::{CmId, ConnParam, EventChannel, EventKind, RdmaCmEvent};
use softroce::verbs::Context;

use super::error::{errno, errno_of, fail, lock};
use super::ffi::*;
use super::object::{new_channel, new_id, set_addrs, EventInfo, Id};
use super::param::{param_to_c, ud_to_c};
use crate::ffi::*;
use crate::objects::cm_hooks;
use crate::objects::handle::Obj;

/// A device's connection manager in the process: the engine, its rdma_cm channel, and which
/// C identifier each softroce identifier is.
pub(super) struct Cm {
    /// The device (`softroceN`).
    pub(super) dev: usize,
    pub(super) chan: EventChannel,
    /// Keeps the engine running for the process's life (librdmacm keeps its devices open).
    _engine: Arc<Context>,
    ids: Mutex<Vec<(CmId, Weak<Obj<Id>>)>>,
}

/// How long the process's exit waits for CM messages still queued (see [`flush_at_exit`]).
const EXIT_FLUSH_WAIT: Duration = Duration::from_millis(500);
/// How long the exit handler waits for the identifiers' teardown beyond the flush: a lock that
/// the exiting thread itself holds never frees, and the process must still end.
const EXIT_TEARDOWN_WAIT: Duration = Duration::from_millis(500);

/// How long a call that sends a closing message (`rdma_reject`, `rdma_disconnect`) waits for
/// the engine to have sent it (see [`sent_before_return`]).
const CALL_FLUSH_WAIT: Duration = Duration::from_millis(200);

/// Waits (at most [`CALL_FLUSH_WAIT`]) until the engine has sent the CM messages queued so
/// far. The kernel's CM has a REJ or DREQ on the wire whatever its process does after the
/// call; softroce's engine is a thread of the process, and a process that leaves with
/// `_exit` right after the call (Python's multiprocessing children do: rdma-core's reject
/// test) runs no exit handler, so without this the message is lost and the peer waits.
pub(super) fn sent_before_return() {
    let cms: Vec<Arc<Cm>> = lock(&CM).iter().flatten().cloned().collect();
    for cm in cms {
        cm.chan.flush(CALL_FLUSH_WAIT);
    }
}

/// The started connection managers, by device, for the exit handler.
static CM: Mutex<Vec<Option<Arc<Cm>>>> = Mutex::new(Vec::new());

/// Runs at `exit`: the kernel's CM closes a process's identifiers when it exits and sends
/// what that takes whatever the process does next, but softroce's engine is a thread of the
/// process: so the identifiers are closed here and the process waits (at most
/// [`EXIT_FLUSH_WAIT`]) until the engine has sent what the CM queued (ucmatose's client
/// answers the server's DREQs and exits at once).
extern "C" fn flush_at_exit() {
    // try_lock: another thread may hold the lock while the process exits.
    let cms: Vec<Arc<Cm>> = match CM.try_lock() {
        Ok(g) => g.iter().flatten().cloned().collect(),
        Err(_) => Vec::new(),
    };
    if cms.is_empty() {
        return;
    }
    // On a thread of its own, waited for a bounded while: the thread that calls exit may hold
    // a lock the teardown needs (qperf's server exits from its SIGURG handler, which can
    // interrupt the main thread inside rdma_listen, holding the listener's state), and an
    // exit handler that waited for it would keep the process, and with it the address's
    // group lock, forever.
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let teardown = std::thread::Builder::new()
        .name("softroce-exit".into())
        .spawn(move || {
            close_identifiers(&cms);
            let _ = done.send(());
        });
    if teardown.is_ok() {
        let _ = finished.recv_timeout(EXIT_FLUSH_WAIT + EXIT_TEARDOWN_WAIT);
    }
}

/// What closing the kernel's rdma_cm file does to the identifiers a process leaves: a DREQ
/// for a connection up, the DREP for one the peer disconnected (qperf's server never destroys
/// the identifier it accepted), a REJ for an undecided request; then a wait (at most
/// [`EXIT_FLUSH_WAIT`]) until the engines have sent them.
fn close_identifiers(cms: &[Arc<Cm>]) {
    for cm in cms {
        let ids: Vec<CmId> = match cm.ids.try_lock() {
            Ok(g) => g.iter().map(|(c, _)| c.clone()).collect(),
            Err(_) => Vec::new(),
        };
        for c in ids {
            c.stop_listening();
            if c.disconnect().is_err() {
                let _ = c.reject(&[]);
            }
        }
    }
    // One wait for all: the devices' engines send at the same time.
    let end = std::time::Instant::now() + EXIT_FLUSH_WAIT;
    for cm in cms {
        cm.chan
            .flush(end.saturating_duration_since(std::time::Instant::now()));
    }
}

/// A context pointer that may live in a static: a context opened once and never closed.
#[derive(Clone, Copy)]
struct Verbs(*mut ibv_context);
// SAFETY: the pointer names a context the shim keeps open for the process's life; it is only
// passed to the shim's own functions, which look it up.
unsafe impl Send for Verbs {}
// SAFETY: as for Send.
unsafe impl Sync for Verbs {}

/// The context of device `dev` that every identifier on it has as its `verbs` (librdmacm
/// opens each device once).
pub(super) fn verbs(dev: usize) -> Result<*mut ibv_context, c_int> {
    static V: Mutex<Vec<Option<Verbs>>> = Mutex::new(Vec::new());
    let mut g = V.lock().unwrap_or_else(|e| e.into_inner());
    if g.len() <= dev {
        g.resize(dev + 1, None);
    }
    if let Some(v) = g[dev] {
        return Ok(v.0);
    }
    // SAFETY: the device handle is the shim's own.
    let c = unsafe { crate::ibv_open_device(cm_hooks::device_handle(dev)) };
    if c.is_null() {
        return Err(errno());
    }
    g[dev] = Some(Verbs(c));
    Ok(c)
}

/// Device `dev`'s connection manager, started on first need (binds the device's socket:
/// EADDRINUSE when another process holds the address).
pub(super) fn cm(dev: usize) -> Result<Arc<Cm>, c_int> {
    let mut g = CM.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = g.get(dev).and_then(Option::as_ref) {
        return Ok(Arc::clone(c));
    }
    let engine = cm_hooks::engine(verbs(dev)?)?;
    let chan = EventChannel::new(&engine).map_err(|e| errno_of(&e))?;
    let cm = Arc::new(Cm {
        dev,
        chan,
        _engine: engine,
        ids: Mutex::new(Vec::new()),
    });
    let d = Arc::clone(&cm);
    let name = if dev == 0 {
        "softroce-rdmacm".to_string()
    } else {
        format!("softroce-rdmacm{dev}")
    };
    softroce::driver::thread::spawn_settled(name, move || dispatch(d)).map_err(|_| libc::EAGAIN)?;
    if g.iter().all(Option::is_none) {
        // SAFETY: registers a function with no preconditions, defined in this object, which
        // the loader never unloads while the process runs (librdmacm is not dlclose'd by its
        // users; a failed registration only loses the flush). Once: it closes every device's.
        unsafe { libc::atexit(flush_at_exit) };
    }
    if g.len() <= dev {
        g.resize(dev + 1, None);
    }
    g[dev] = Some(Arc::clone(&cm));
    Ok(cm)
}

/// How long the dispatcher waits for a CM event before looking again (it also takes, at each
/// wake-up, the events softroce's channel queued without a message).
const DISPATCH_WAIT: Duration = Duration::from_millis(100);

impl Cm {
    pub(super) fn register(&self, cm: &CmId, id: &Arc<Obj<Id>>) {
        let mut g = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        g.retain(|(_, w)| w.strong_count() > 0);
        g.push((cm.clone(), Arc::downgrade(id)));
    }

    pub(super) fn find(&self, cm: &CmId) -> Option<Arc<Obj<Id>>> {
        let g = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        g.iter()
            .find(|(c, _)| c.same(cm))
            .and_then(|(_, w)| w.upgrade())
    }

    pub(super) fn forget(&self, id: &Obj<Id>) {
        let mut g = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        g.retain(|(_, w)| w.strong_count() > 0 && !std::ptr::eq(w.as_ptr(), id));
    }

    /// Forgets one softroce identifier (a listener made and then undone).
    pub(super) fn forget_cm(&self, cm: &CmId) {
        let mut g = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        g.retain(|(c, w)| w.strong_count() > 0 && !c.same(cm));
    }
}

/// Device `dev`'s address (its port is RoCE's UDP port, not an rdma_cm port).
pub(super) fn device_addr(dev: usize) -> SocketAddr {
    cm_hooks::bound_addr(dev)
}

/// The device an identifier is on (the first while it has none).
pub(super) fn dev_of(id: &Obj<Id>) -> usize {
    lock(&id.st).dev.unwrap_or(0)
}

/// Points the C struct at the device (`verbs`, `port_num`) and, if it has none yet, at the
/// device's PD (`pd`), as binding to its address does: librdmacm's ucma_get_device gives
/// every identifier on a device the PD it allocates once per device, and programs use
/// `id->pd` before they create a QP (pyverbs' CMID wraps it when the address resolves, and
/// its UD test makes AHs on it).
pub(super) fn set_device(id: &Obj<Id>) -> Result<(), c_int> {
    let dev = dev_of(id);
    let v = verbs(dev)?;
    let pd = default_pd(dev, v)?;
    let c = id.c();
    // SAFETY: raw reads and writes of the live identifier's C struct.
    unsafe {
        ptr::addr_of_mut!((*c).verbs).write(v);
        ptr::addr_of_mut!((*c).port_num).write(1);
        if ptr::addr_of!((*c).pd).read().is_null() {
            ptr::addr_of_mut!((*c).pd).write(pd);
        }
    }
    Ok(())
}

/// Device `dev`'s PD (librdmacm's per-device PD) on its context `v`: every identifier's `pd`
/// once it is on the device, and what `rdma_create_qp` uses when given none. A child after
/// fork allocates its own (its parent's is on the parent's engine, which did not come with
/// it).
pub(super) fn default_pd(dev: usize, v: *mut ibv_context) -> Result<*mut ibv_pd, c_int> {
    static PD: Mutex<Vec<(usize, u32)>> = Mutex::new(Vec::new());
    let mut all = lock(&PD);
    if all.len() <= dev {
        all.resize(dev + 1, (0, 0));
    }
    let g = &mut all[dev];
    let me = std::process::id();
    if g.0 == 0 || g.1 != me {
        // SAFETY: `v` is the shim's own context.
        let pd = unsafe { crate::ibv_alloc_pd(v) };
        if pd.is_null() {
            return Err(errno());
        }
        *g = (pd as usize, me);
    }
    Ok(g.0 as *mut ibv_pd)
}

/// The dispatcher thread's loop: every softroce CM event becomes a C event (for the process's
/// life: librdmacm keeps its devices too).
fn dispatch(m: Arc<Cm>) {
    loop {
        // A connect request stays in its listener's backlog until the application reads its
        // event from the channel it is queued on (channel.rs `next_event`).
        if let Ok(ev) = m.chan.take_event(DISPATCH_WAIT) {
            route(&m, ev);
        }
    }
}

fn route(m: &Cm, ev: RdmaCmEvent) {
    let (kind, status) = match &ev.kind {
        // Queued by rdma_resolve_addr / rdma_resolve_route themselves.
        EventKind::AddrResolved | EventKind::RouteResolved => return,
        EventKind::ConnectRequest => return connect_request(m, ev),
        EventKind::Established => (RDMA_CM_EVENT_ESTABLISHED, 0),
        EventKind::ConnectResponse => (RDMA_CM_EVENT_CONNECT_RESPONSE, 0),
        // The kernel reports the IB reject reason as the status (8: no listener).
        EventKind::Rejected { reason } => (RDMA_CM_EVENT_REJECTED, *reason as c_int),
        // No answer: -ETIMEDOUT; a UD peer's refusal: its SIDR status (cma_sidr_rep_handler).
        EventKind::Unreachable => (
            RDMA_CM_EVENT_UNREACHABLE,
            if ev.status == 0 {
                -ETIMEDOUT
            } else {
                ev.status
            },
        ),
        EventKind::Disconnected => (RDMA_CM_EVENT_DISCONNECTED, 0),
        EventKind::TimewaitExit => (RDMA_CM_EVENT_TIMEWAIT_EXIT, 0),
    };
    let Some(id) = m.find(&ev.id) else {
        return; // the identifier was destroyed
    };
    {
        let mut st = lock(&id.st);
        match kind {
            RDMA_CM_EVENT_ESTABLISHED => st.connected = true,
            RDMA_CM_EVENT_DISCONNECTED | RDMA_CM_EVENT_REJECTED | RDMA_CM_EVENT_UNREACHABLE => {
                st.connected = false
            }
            _ => {}
        }
    }
    // SAFETY: raw read of the live identifier.
    let qp = unsafe { ptr::addr_of!((*id.c()).qp).read() };
    cm_hooks::sync_qp_state(qp);
    let conn =
        (kind == RDMA_CM_EVENT_ESTABLISHED || kind == RDMA_CM_EVENT_CONNECT_RESPONSE).then(|| {
            let p = lock(&id.st)
                .cm
                .as_ref()
                .map(|_| ConnParam::default())
                .unwrap_or_default();
            // SAFETY: `qp` is NULL or the identifier's live QP (raw read of qp_num).
            let n = if qp.is_null() {
                0
            } else {
                unsafe { ptr::addr_of!((*qp).qp_num).read() }
            };
            param_to_c(&p, n)
        });
    let ud = ev.ud.as_ref().map(ud_to_c);
    Obj::event(
        &id,
        EventInfo {
            kind,
            status,
            data: ev.private_data,
            conn: conn.filter(|_| ud.is_none()),
            ud,
            join: None,
        },
    );
}

/// A connect request: a new identifier on the listener's channel (a synchronous listener's
/// requests get synchronous identifiers with channels of their own, as in librdmacm).
fn connect_request(m: &Cm, ev: RdmaCmEvent) {
    let listener = ev.listen_id.as_ref().and_then(|l| m.find(l));
    let Some(listener) = listener else {
        // Its listener is gone: refuse, as the kernel does for a destroyed listener.
        let _ = ev.id.reject(&[]);
        return;
    };
    let (chan, sync) = if listener.sync() {
        match new_channel() {
            Ok(c) => (c, true),
            Err(_) => {
                let _ = ev.id.reject(&[]);
                return;
            }
        }
    } else {
        (listener.chan(), false)
    };
    // SAFETY: raw read of the live listener's C struct.
    let context = unsafe { ptr::addr_of!((*listener.c()).context).read() };
    // SAFETY: raw read of the live listener's C struct.
    let listener_type = unsafe { ptr::addr_of!((*listener.c()).qp_type).read() };
    let qp_type = if listener.ps == RDMA_PS_UDP {
        IBV_QPT_UD
    } else if listener_type == IBV_QPT_XRC_RECV {
        IBV_QPT_XRC_RECV
    } else {
        IBV_QPT_RC
    };
    let child = new_id(chan, sync, context, listener.ps, qp_type);
    {
        let mut st = lock(&child.st);
        // On the device the request came to (a wildcard listener listens on each).
        st.dev = Some(m.dev);
        st.cm_dev = m.dev;
        st.cm = Some(ev.id.clone());
        st.port = lock(&listener.st).port;
        st.passive = true;
    }
    m.register(&ev.id, &child);
    let _ = set_device(&child);
    set_addrs(&child, Some(ev.id.local_addr()), ev.id.remote_addr());
    let conn = ev.param.as_ref().map(|p| param_to_c(p, 0));
    let ud = ev.ud.as_ref().map(ud_to_c);
    listener.chan().push(
        &child,
        Some(&listener),
        EventInfo {
            kind: RDMA_CM_EVENT_CONNECT_REQUEST,
            status: 0,
            data: ev.private_data,
            conn: conn.filter(|_| ud.is_none()),
            ud,
            join: None,
        },
    );
}

/// `rdma_get_devices`: a NULL-terminated array holding each device's context (the ones
/// identifiers on it have as `verbs`), softroce0's first.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut ibv_context {
    let n = cm_hooks::device_count();
    let list: Result<Vec<*mut ibv_context>, c_int> = (0..n).map(verbs).collect();
    let mut list = match list {
        Ok(l) => l,
        Err(e) => {
            fail(e);
            return null_mut();
        }
    };
    list.push(null_mut());
    if !num_devices.is_null() {
        // SAFETY: the caller passes a writable int or NULL.
        unsafe { *num_devices = n as c_int };
    }
    Box::into_raw(list.into_boxed_slice()) as *mut *mut ibv_context
}

/// `rdma_free_devices`.
#[no_mangle]
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
    // SAFETY: `list` came from rdma_get_devices, which boxed a slice of the contexts and a
    // NULL, and the caller only read it.
    unsafe { cm_hooks::free_null_terminated(list) }
}
