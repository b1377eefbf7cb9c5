//! librdmacm.so.1 (rdma-core 44's C API and symbol versions RDMACM_1.0 .. 1.3) on softroce's
//! connection manager ([`softroce::rdma_cm`] over IB CM MADs on QP1).
//!
//! # One object, two sonames
//!
//! The functions here are exported by the same shared object as the libibverbs shim, under
//! rdma-core's RDMACM_* version nodes (`librdmacm.map`); `librdmacm.so.1` is a symbolic link
//! to that file. glibc maps a file once per process (by device and inode), adds the second
//! name to the loaded object, and checks a program's RDMACM_1.x version needs against it: so a
//! program linked against both libraries gets one engine, one UDP socket and one QP1, shared
//! by the CM and by the QPs it creates through libibverbs. (spec-notes/librdmacm.md, "why".)
//!
//! # Events
//!
//! softroce's CM reports to one Rust [`EventChannel`] per device. A dispatcher thread per
//! device, started with its engine, takes its events and turns each into a C `rdma_cm_event` on the C event
//! channel of the identifier it concerns (a process may have many); a C channel's `fd` is an
//! eventfd in semaphore mode that counts its queued events, so poll/select/epoll work on it
//! and a non-blocking fd makes `rdma_get_cm_event` fail with EAGAIN, as with the kernel's.
//! Address and route resolution need no message (the GID is the IP address), so their events
//! are queued by the call itself.

mod addrinfo;
mod channel;
mod conn;
pub mod ffi;
mod id;
mod multicast;
mod rsocket;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use libc::c_int;
use softroce::rdma_cm::{CmId, EventChannel, RdmaCmError};
use softroce::verbs::Context;

use crate::ffi::ibv_context;
use crate::objects::cm_hooks;
use crate::objects::handle::Obj;
use id::Id;

pub use addrinfo::*;
pub use channel::*;
pub use conn::*;
pub use id::*;
pub use multicast::*;
pub use rsocket::*;

/// A device's connection manager in the process: the engine, its rdma_cm channel, and which
/// C identifier each softroce identifier is.
struct Cm {
    /// The device (`softroceN`).
    dev: usize,
    chan: EventChannel,
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
fn sent_before_return() {
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
fn verbs(dev: usize) -> Result<*mut ibv_context, c_int> {
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
fn cm(dev: usize) -> Result<Arc<Cm>, c_int> {
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
    softroce::driver::thread::spawn_settled(name, move || conn::dispatch(d))
        .map_err(|_| libc::EAGAIN)?;
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
    fn register(&self, cm: &CmId, id: &Arc<Obj<Id>>) {
        let mut g = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        g.retain(|(_, w)| w.strong_count() > 0);
        g.push((cm.clone(), Arc::downgrade(id)));
    }

    fn find(&self, cm: &CmId) -> Option<Arc<Obj<Id>>> {
        let g = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        g.iter()
            .find(|(c, _)| c.same(cm))
            .and_then(|(_, w)| w.upgrade())
    }

    fn forget(&self, id: &Obj<Id>) {
        let mut g = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        g.retain(|(_, w)| w.strong_count() > 0 && !std::ptr::eq(w.as_ptr(), id));
    }

    /// Forgets one softroce identifier (a listener made and then undone).
    fn forget_cm(&self, cm: &CmId) {
        let mut g = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        g.retain(|(c, w)| w.strong_count() > 0 && !c.same(cm));
    }
}

/// Locks `m`, through poisoning (a panic elsewhere leaves the data consistent: every
/// critical section here is a plain update).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// This thread's errno.
fn errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Sets errno to `e` and returns -1 (librdmacm's convention for every int call).
fn fail(e: c_int) -> c_int {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
    -1
}

/// The errno the kernel's rdma_cm gives for what softroce's refused.
fn errno_of(e: &RdmaCmError) -> c_int {
    use softroce::cm::CmError;
    match e {
        RdmaCmError::Cm(CmError::AlreadyListening(_)) => libc::EADDRINUSE,
        RdmaCmError::Cm(CmError::TooManyConnections) => libc::ENOMEM,
        RdmaCmError::Cm(_) => libc::EINVAL,
        RdmaCmError::Verbs(v) => match v {
            softroce::ib::VerbsError::DeviceClosed => libc::ENODEV,
            _ => libc::EINVAL,
        },
        RdmaCmError::WrongState { .. } => libc::EINVAL,
        RdmaCmError::AddressFamily(_) => libc::EAFNOSUPPORT,
        RdmaCmError::ChannelInUse => libc::EBUSY,
        RdmaCmError::Timeout => libc::ETIMEDOUT,
    }
}

/// Device `dev`'s address (its port is RoCE's UDP port, not an rdma_cm port).
fn device_addr(dev: usize) -> SocketAddr {
    cm_hooks::bound_addr(dev)
}
