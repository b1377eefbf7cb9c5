//! Communication identifiers: create, destroy, bind, resolve, listen, their QP, ports,
//! migration between channels, options and the device list.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::ptr::{self, null_mut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use libc::{
    c_int, c_void, sockaddr, sockaddr_in, sockaddr_in6, sockaddr_storage, socklen_t, AF_INET,
    AF_INET6, EADDRINUSE, EADDRNOTAVAIL, EAFNOSUPPORT, EINVAL, ENODEV, ENOSYS,
};
use softroce::rdma_cm::{CmId, PortSpace};

use super::channel::{chan_of, new_channel, Chan, EventInfo};
use super::ffi::*;
use super::{cm, device_addr, errno, errno_of, fail, lock, verbs, Cm};
use crate::ffi::*;
use crate::objects::cm_hooks;
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
    pub(super) tos: Option<u8>,
    pub(super) reuse: bool,
    pub(super) afonly: bool,
    pub(super) ack_timeout: Option<u8>,
    /// `rdma_create_ep`'s QP attributes for a synchronous listener's requests.
    pub(super) qp_init: Option<QpInit>,
    /// The multicast groups joined and not left.
    pub(super) mcs: Vec<super::multicast::Mc>,
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

/// The ports bound in this process (the kernel's per-namespace port table, for one device).
fn ports() -> MutexGuard<'static, HashSet<u16>> {
    static P: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    lock(P.get_or_init(Default::default))
}

/// Reserves `port`, or an ephemeral one for 0 (the kernel's range, 32768..60999).
fn reserve(port: u16, reuse: bool) -> Result<u16, c_int> {
    let mut p = ports();
    if port != 0 {
        if p.contains(&port) && !reuse {
            return Err(EADDRINUSE);
        }
        p.insert(port);
        return Ok(port);
    }
    let start = 32768 + (softroce::wire::psn::random_start().value() % 28232) as u16;
    for i in 0..28232u16 {
        let cand = 32768 + ((start - 32768 + i) % 28232);
        if p.insert(cand) {
            return Ok(cand);
        }
    }
    Err(EADDRINUSE)
}

impl Obj<Id> {
    pub(super) fn chan(&self) -> Arc<Obj<Chan>> {
        Arc::clone(&lock(&self.chan))
    }

    /// Queues an event about this identifier on its channel.
    pub(super) fn event(this: &Arc<Self>, info: EventInfo) {
        this.chan().push(this, None, info);
    }

    /// The softroce identifier, made now if needed, on the identifier's device (the first
    /// device while it has none).
    pub(super) fn cm_id(this: &Arc<Self>) -> Result<CmId, c_int> {
        let mut st = lock(&this.st);
        if let Some(c) = &st.cm {
            return Ok(c.clone());
        }
        let dev = st.dev.unwrap_or(0);
        let (_, c) = Obj::new_cm_id(this, &st, dev)?;
        st.cm = Some(c.clone());
        st.cm_dev = dev;
        Ok(c)
    }

    /// A softroce identifier for this one on device `dev`, bound to its port, registered.
    fn new_cm_id(this: &Arc<Self>, st: &IdSt, dev: usize) -> Result<(Arc<Cm>, CmId), c_int> {
        let m = cm(dev)?;
        let c = m.chan.create_id_in(if this.ps == RDMA_PS_UDP {
            PortSpace::Udp
        } else {
            PortSpace::Tcp
        });
        if st.port != 0 {
            c.bind_addr(st.port).map_err(|e| errno_of(&e))?;
        }
        if let Some(t) = st.ack_timeout {
            c.set_ack_timeout(t);
        }
        m.register(&c, this);
        Ok((m, c))
    }
}

/// The device whose address `ip` is (its own, the stand-in it took, or the one
/// `SOFTROCE_BIND` names for it): the first such, or None.
fn device_of_ip(ip: IpAddr) -> Option<usize> {
    (0..cm_hooks::device_count())
        .find(|&d| device_addr(d).ip() == ip || cm_hooks::nominal_addr(d).ip() == ip)
}

/// The device an identifier with no source address reaches `dst` from, as the kernel's
/// rdma_resolve_addr picks it: the device whose address `dst` is (the kernel's route to a
/// local address has that address as its source), else the one whose address is the source
/// of the host's route to `dst` (what a UDP socket connected there is bound to), else the
/// first.
fn route_device(dst: IpAddr) -> usize {
    if let Some(d) = device_of_ip(dst) {
        return d;
    }
    if cm_hooks::device_count() == 1 {
        return 0;
    }
    let any: IpAddr = if dst.is_ipv4() {
        Ipv4Addr::UNSPECIFIED.into()
    } else {
        Ipv6Addr::UNSPECIFIED.into()
    };
    UdpSocket::bind(SocketAddr::new(any, 0))
        .and_then(|s| {
            // Connecting a UDP socket sends nothing: the kernel only picks the route.
            s.connect(SocketAddr::new(dst, 9))?;
            s.local_addr()
        })
        .ok()
        .and_then(|a| device_of_ip(a.ip()))
        .unwrap_or(0)
}

/// The device an identifier is on (the first while it has none).
fn dev_of(id: &Obj<Id>) -> usize {
    lock(&id.st).dev.unwrap_or(0)
}

/// A socket address from C: AF_INET or AF_INET6 (EAFNOSUPPORT for others, EINVAL for NULL).
///
/// # Safety
///
/// `a` is NULL or points to a sockaddr of its family's size.
pub(super) unsafe fn sockaddr_from_c(a: *const sockaddr) -> Result<SocketAddr, c_int> {
    if a.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: by the caller's promise, per family.
    unsafe {
        match (*a).sa_family as c_int {
            AF_INET => {
                let s = &*(a as *const sockaddr_in);
                Ok(SocketAddr::new(
                    IpAddr::V4(Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr))),
                    u16::from_be(s.sin_port),
                ))
            }
            AF_INET6 => {
                let s = &*(a as *const sockaddr_in6);
                Ok(SocketAddr::new(
                    IpAddr::V6(Ipv6Addr::from(s.sin6_addr.s6_addr)),
                    u16::from_be(s.sin6_port),
                ))
            }
            _ => Err(EAFNOSUPPORT),
        }
    }
}

/// `a` as a `sockaddr_storage` and its length.
pub(super) fn sockaddr_to_c(a: SocketAddr) -> (sockaddr_storage, socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(v4) => {
            let s = sockaddr_in {
                sin_family: AF_INET as u16,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v4.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in and suitably aligned.
            unsafe { ptr::write(&mut ss as *mut _ as *mut sockaddr_in, s) };
            std::mem::size_of::<sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let s = sockaddr_in6 {
                sin6_family: AF_INET6 as u16,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: as above.
            unsafe { ptr::write(&mut ss as *mut _ as *mut sockaddr_in6, s) };
            std::mem::size_of::<sockaddr_in6>()
        }
    };
    (ss, len as socklen_t)
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

/// `rdma_create_id`: 0, or -1 and errno (EINVAL for a bad channel or port space).
/// A NULL channel makes a synchronous identifier (its calls wait for their events).
#[no_mangle]
pub unsafe extern "C" fn rdma_create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: c_int,
) -> c_int {
    if id.is_null() {
        return fail(EINVAL);
    }
    let qp_type = match ps {
        RDMA_PS_TCP | RDMA_PS_IB => IBV_QPT_RC,
        RDMA_PS_UDP | RDMA_PS_IPOIB => IBV_QPT_UD,
        _ => return fail(EINVAL),
    };
    let (chan, sync) = if channel.is_null() {
        match new_channel() {
            Ok(c) => (c, true),
            Err(e) => return fail(e),
        }
    } else {
        match chan_of(channel) {
            Some(c) => (c, false),
            None => return fail(EINVAL),
        }
    };
    let new = new_id(chan, sync, context, ps, qp_type);
    // SAFETY: the caller passes a writable pointer slot (checked non-null).
    unsafe { id.write(Obj::handle(&new)) };
    0
}

/// `rdma_destroy_id`: 0, or -1 and EINVAL. As the kernel's cm_destroy_id: a connection still
/// up gets a DREQ, one the peer disconnected its DREP, an undecided request a REJ, and a
/// listener stops listening. The memory stays until the events naming the identifier are
/// acknowledged, so rdma-core's wait for them is not needed.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    let Some(obj) = handle::remove_in_use::<Id>(id) else {
        return fail(EINVAL);
    };
    destroy(&obj);
    0
}

/// Tears `obj` down (its handle already removed): the events queued about it go, connect
/// requests queued for it as a listener are refused and their identifiers destroyed, its
/// connection is ended or refused, its port freed.
fn destroy(obj: &Arc<Obj<Id>>) {
    for request in obj.chan().purge(obj) {
        drop(handle::remove_in_use::<Id>(Obj::handle(&request)));
        destroy(&request);
    }
    let st = std::mem::take(&mut *lock(&obj.st));
    // (The manager is looked up only for an identifier that has a softroce one: destroying
    // one that never bound starts no device.)
    if let Some((c, Ok(m))) = st.cm.as_ref().map(|c| (c, cm(st.cm_dev))) {
        m.forget(obj);
        if st.listening {
            c.stop_listening();
        } else if c.disconnect().is_err() {
            // Not connected: an undecided connect request is refused, as the kernel's
            // cm_destroy_id does; for anything else (idle, resolving, closed) both are no-ops.
            let _ = c.reject(&[]);
        }
    }
    for (d, c) in &st.also {
        if let Ok(m) = cm(*d) {
            m.forget(obj);
        }
        c.stop_listening();
    }
    if st.port != 0 && !st.passive {
        ports().remove(&st.port);
    }
    if obj.sync() {
        // The channel made for it goes with it.
        let ch = obj.chan();
        drop(handle::remove_in_use::<Chan>(Obj::handle(&ch)));
    }
}

/// Whether `ip` is an address of this host (binding a UDP socket to it succeeds).
fn is_local(ip: IpAddr) -> bool {
    UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// Binds `id` to `addr` (its IP: a device's, or a wildcard).
pub(super) fn bind(id: &Arc<Obj<Id>>, addr: SocketAddr) -> Result<(), c_int> {
    let ip = addr.ip();
    // The address SOFTROCE_BIND names stays the device's when the process stands in at
    // another (rule 10).
    let dev = if ip.is_unspecified() {
        None
    } else {
        // The kernel: an address of no interface is EADDRNOTAVAIL; one of an interface
        // without an RDMA device is ENODEV.
        let e = || if is_local(ip) { ENODEV } else { EADDRNOTAVAIL };
        Some(device_of_ip(ip).ok_or_else(e)?)
    };
    let mut st = lock(&id.st);
    if st.port != 0 {
        return Err(EINVAL);
    }
    let port = reserve(addr.port(), st.reuse)?;
    st.port = port;
    st.dev = dev;
    if let Some(c) = &st.cm {
        if let Err(e) = c.bind_addr(port) {
            ports().remove(&port);
            st.port = 0;
            return Err(errno_of(&e));
        }
    }
    drop(st);
    set_addrs(id, Some(SocketAddr::new(ip, port)), None);
    if let Some(dev) = dev {
        match set_device(id) {
            Err(EADDRINUSE) if is_ud(id) && stand_in_for_ud(dev) => set_device(id)?,
            r => r?,
        }
    } else if cm_hooks::device_count() > 1 {
        // As below for each device: a wildcard listener listens on every one, and the
        // identifier is not on any until it resolves a destination (then on the device that
        // reaches it), so no softroce identifier is made yet.
        for d in 0..cm_hooks::device_count() {
            let _ = cm(d);
        }
    } else {
        // A wildcard bind starts the device now, as the kernel's has long been up: what
        // rdma_listen then does takes microseconds, as in the kernel. A server that tells
        // its client its port between the bind and the listen (Debian's qperf 0.4.11, before
        // upstream's 118a571 "Fix rdmacm race") otherwise races the device's start-up and
        // its client's REQ is refused. Failing here is not this call's error: the listen
        // or connect that needs the device reports it.
        let _ = Obj::cm_id(id);
    }
    Ok(())
}

/// Whether the identifier is of a UD port space (UDP or IPoIB).
fn is_ud(id: &Obj<Id>) -> bool {
    id.ps == RDMA_PS_UDP || id.ps == RDMA_PS_IPOIB
}

/// `rdma_bind_addr`: 0, or -1 and errno (EINVAL when bound already, EADDRINUSE, ENODEV for
/// an address of this host that is not the device's, EADDRNOTAVAIL for none of this host's).
#[no_mangle]
pub unsafe extern "C" fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
    let Some(obj) = id_of(id) else {
        return fail(EINVAL);
    };
    // SAFETY: the caller passes a sockaddr of its family's size.
    let a = match unsafe { sockaddr_from_c(addr) } {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    match bind(&obj, a) {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

/// Waits, for a synchronous identifier, for the event its call queued and takes it: 0 when it
/// is `want`, otherwise the event's status as errno (as librdmacm's ucma_complete).
pub(super) fn complete(id: &Arc<Obj<Id>>, want: c_int) -> c_int {
    if !id.sync() {
        return 0;
    }
    let ch = id.chan();
    match super::channel::next_event(&ch) {
        Ok(ev) => {
            // SAFETY: `ev` is an event just taken from the identifier's channel, live until
            // acknowledged below.
            let (kind, status) = unsafe { ((*ev).event, (*ev).status) };
            // SAFETY: the event is outstanding; acknowledging it frees it.
            unsafe { super::channel::rdma_ack_cm_event(ev) };
            if kind == want {
                0
            } else {
                // librdmacm's ucma_complete: REJECTED is ECONNREFUSED; another status is its
                // own errno (negated: -ETIMEDOUT; positive: a UD peer's SIDR status).
                fail(if kind == RDMA_CM_EVENT_REJECTED {
                    libc::ECONNREFUSED
                } else if status < 0 {
                    -status
                } else if status > 0 {
                    status
                } else {
                    libc::EINVAL
                })
            }
        }
        Err(e) => fail(e),
    }
}

/// Before a process's first identifier binds on device `dev`, when devices hold their
/// addresses alone (`SOFTROCE_SHARE=0`): if it is about to connect to that device's own
/// loopback address, and has started no engine and bound no port (so nothing of its own
/// listens there), the listener is another process on the same device, which holds that
/// address's socket. The kernel shares one device among processes;
/// softroce's device is the process's own, so this process's device stands in at an address
/// of its own on loopback, reachable from the other as any peer is (spec-notes/librdmacm.md,
/// rule 10).
fn stand_in_to_reach_own_address(dev: usize, dst: IpAddr) {
    if softroce::driver::sharing_enabled() {
        // Both processes are members of the address's group: the listener's REQs reach it
        // there (spec-notes/shared-device.md), with no address of this process's own.
        return;
    }
    let nominal = cm_hooks::nominal_addr(dev);
    let IpAddr::V4(v4) = nominal.ip() else {
        return; // ::1 is IPv6's only loopback address: nowhere else to stand.
    };
    if !v4.is_loopback() || dst != nominal.ip() || !ports().is_empty() {
        return;
    }
    take_stand_in(dev, nominal.port());
}

/// Makes the first free stand-in address on `port` device `dev`'s address in this process;
/// true if one was free and the engine had not bound yet. The candidate must be free; the
/// engine binds it soon after (a process that takes it in between makes that bind fail with
/// EADDRINUSE, as without a stand-in).
fn take_stand_in(dev: usize, port: u16) -> bool {
    stand_in_candidates(std::process::id(), port)
        .into_iter()
        .any(|a| UdpSocket::bind(a).is_ok() && cm_hooks::stand_in(dev, a))
}

/// A UD identifier bound to a loopback IPv4 device address whose socket another process
/// holds: this process's device stands in at a loopback address of its own, and true if it
/// could. The other process is a peer on the same device (mckey's receiver and sender under
/// one `softroce run`, rdma-core's multicast tests fork two members): a UD peer's address
/// is only where its datagrams come from, which every answer follows (spec-notes/librdmacm.md,
/// rule 10).
fn stand_in_for_ud(dev: usize) -> bool {
    let nominal = cm_hooks::nominal_addr(dev);
    let IpAddr::V4(v4) = nominal.ip() else {
        return false;
    };
    v4.is_loopback() && take_stand_in(dev, nominal.port())
}

/// Loopback addresses for process `pid`'s device to stand in at, on `port`: 127.128.0.0/9,
/// which the project's tests and tools do not use, numbered by the process (pid_max is at
/// most 2^22), the upper half tried second.
fn stand_in_candidates(pid: u32, port: u16) -> [SocketAddr; 2] {
    let [_, hi, mid, lo] = pid.to_be_bytes();
    let hi = hi & 0x3f;
    [128 + hi, 192 + hi].map(|b| SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, b, mid, lo)), port))
}

/// `rdma_resolve_addr`: binds if needed (to `src`, or any address), then queues
/// ADDR_RESOLVED, or ADDR_ERROR (status -ENODEV) for a destination the device cannot reach
/// (another address family). 0, or -1 and errno.
#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src: *mut sockaddr,
    dst: *mut sockaddr,
    _timeout_ms: c_int,
) -> c_int {
    let Some(obj) = id_of(id) else {
        return fail(EINVAL);
    };
    // SAFETY: the caller passes a sockaddr of its family's size.
    let d = match unsafe { sockaddr_from_c(dst) } {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    if lock(&obj.st).port == 0 {
        let s = if src.is_null() {
            None
        } else {
            // SAFETY: as for dst.
            match unsafe { sockaddr_from_c(src) } {
                Ok(a) => Some(a),
                Err(e) => return fail(e),
            }
        };
        // The device: the source address's, else the one that reaches the destination.
        let dev = match s.filter(|s| !s.ip().is_unspecified()) {
            Some(s) => device_of_ip(s.ip()),
            None => Some(route_device(d.ip())),
        };
        if let Some(dev) = dev {
            stand_in_to_reach_own_address(dev, d.ip());
        }
        let s = match (s, dev) {
            (Some(s), _) if !s.ip().is_unspecified() => s,
            // (no device for a given source: bind refuses it)
            (s, dev) => SocketAddr::new(
                device_addr(dev.unwrap_or(0)).ip(),
                s.map_or(0, |s| s.port()),
            ),
        };
        if let Err(e) = bind(&obj, s) {
            return fail(e);
        }
    } else {
        // Bound to a wildcard address: on the device that reaches the destination now.
        let mut st = lock(&obj.st);
        if st.dev.is_none() {
            st.dev = Some(route_device(d.ip()));
        }
    }
    let c = match Obj::cm_id(&obj) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let (port, dev) = {
        let st = lock(&obj.st);
        (st.port, st.cm_dev)
    };
    set_addrs(
        &obj,
        Some(SocketAddr::new(device_addr(dev).ip(), port)),
        Some(d),
    );
    if let Err(e) = set_device(&obj) {
        return fail(e);
    }
    match c.resolve_addr(d.ip(), d.port()) {
        Ok(()) => Obj::event(&obj, EventInfo::plain(RDMA_CM_EVENT_ADDR_RESOLVED, 0)),
        Err(softroce::rdma_cm::RdmaCmError::AddressFamily(_)) => {
            Obj::event(&obj, EventInfo::plain(RDMA_CM_EVENT_ADDR_ERROR, -ENODEV))
        }
        Err(e) => return fail(errno_of(&e)),
    }
    complete(&obj, RDMA_CM_EVENT_ADDR_RESOLVED)
}

/// `rdma_resolve_route`: the path is the IP route; queues ROUTE_RESOLVED with one path
/// record. 0, or -1 and EINVAL before the address is resolved.
#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_route(id: *mut rdma_cm_id, _timeout_ms: c_int) -> c_int {
    let Some(obj) = id_of(id) else {
        return fail(EINVAL);
    };
    let Some(c) = lock(&obj.st).cm.clone() else {
        return fail(EINVAL);
    };
    if let Err(e) = c.resolve_route() {
        return fail(errno_of(&e));
    }
    let local = c.local_addr().ip();
    let remote = c.remote_addr().map(|a| a.ip()).unwrap_or(local);
    let mut path = Box::new(ibv_sa_path_rec {
        dgid: softroce::ib::Gid::from_ip(remote).0,
        sgid: softroce::ib::Gid::from_ip(local).0,
        raw_traffic: 0,
        flow_label: 0,
        hop_limit: 64,
        traffic_class: lock(&obj.st).tos.unwrap_or(0),
        reversible: 1,
        numb_path: 1,
        pkey: 0xffffu16.to_be(),
        sl: 0,
        mtu_selector: 2,
        mtu: 3, // IBV_MTU_1024
        rate_selector: 2,
        rate: 3,
        packet_life_time_selector: 2,
        packet_life_time: 0,
        ..Default::default()
    });
    let p: *mut ibv_sa_path_rec = &mut *path;
    lock(&obj.st).path = Some(path);
    let cs = obj.c();
    // SAFETY: raw writes into the live identifier; `p` stays valid while the identifier holds
    // the box (until it is destroyed).
    unsafe {
        ptr::addr_of_mut!((*cs).route.path_rec).write(p);
        ptr::addr_of_mut!((*cs).route.num_paths).write(1);
    }
    Obj::event(&obj, EventInfo::plain(RDMA_CM_EVENT_ROUTE_RESOLVED, 0));
    complete(&obj, RDMA_CM_EVENT_ROUTE_RESOLVED)
}

/// `rdma_listen`: 0, or -1 and errno (EADDRINUSE when the port is listened on already,
/// ENOSYS for the IPoIB port space, which RoCE has not; a UDP identifier's requests come as
/// SIDR_REQs).
#[no_mangle]
pub unsafe extern "C" fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
    let Some(obj) = id_of(id) else {
        return fail(EINVAL);
    };
    if obj.ps == RDMA_PS_IPOIB {
        return fail(ENOSYS);
    }
    if lock(&obj.st).port == 0 {
        if let Err(e) = bind(&obj, SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0)) {
            return fail(e);
        }
    }
    // The kernel's ucma: at most 1024, and that for anything not positive.
    let backlog = if (1..=1024).contains(&backlog) {
        backlog as usize
    } else {
        1024
    };
    if lock(&obj.st).dev.is_none() && cm_hooks::device_count() > 1 {
        return match listen_on_all(&obj, backlog) {
            Ok(()) => 0,
            Err(e) => fail(e),
        };
    }
    let c = match Obj::cm_id(&obj) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    match c.listen(backlog) {
        Ok(()) => {
            lock(&obj.st).listening = true;
            0
        }
        Err(e) => fail(errno_of(&e)),
    }
}

/// A listener bound to a wildcard address in a process with several devices listens on each,
/// as the kernel's cma_listen_on_all makes an internal listener per device: a connect request
/// to any device's address comes to it, and the identifier made for it is on that device.
/// All or none: a device that cannot listen (its engine does not start, the port is listened
/// on there) undoes the others, as the kernel's does.
fn listen_on_all(obj: &Arc<Obj<Id>>, backlog: usize) -> Result<(), c_int> {
    let mut st = lock(&obj.st);
    if st.listening || st.cm.is_some() {
        return Err(EINVAL);
    }
    let mut made: Vec<(usize, Arc<Cm>, CmId)> = Vec::new();
    for d in 0..cm_hooks::device_count() {
        let r = Obj::new_cm_id(obj, &st, d).and_then(|(m, c)| {
            if let Err(e) = c.listen(backlog) {
                m.forget_cm(&c);
                return Err(errno_of(&e));
            }
            Ok((d, m, c))
        });
        match r {
            Ok(x) => made.push(x),
            Err(e) => {
                for (_, m, c) in made {
                    c.stop_listening();
                    m.forget_cm(&c);
                }
                return Err(e);
            }
        }
    }
    let mut it = made.into_iter().map(|(d, _, c)| (d, c));
    if let Some((d, c)) = it.next() {
        st.cm = Some(c);
        st.cm_dev = d;
    }
    st.also = it.collect();
    st.listening = true;
    Ok(())
}

/// `rdma_get_src_port`: the bound port (network order), 0 for a bad identifier.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    id_of(id).map_or(0, |o| lock(&o.st).port.to_be())
}

/// `rdma_get_dst_port`: the peer's port (network order), 0 when none.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    id_of(id)
        .and_then(|o| lock(&o.st).cm.as_ref().and_then(|c| c.remote_addr()))
        .map_or(0, |a| a.port().to_be())
}

const QP_STATE: c_int = 1;
const QP_ACCESS_FLAGS: c_int = 1 << 3;
const QP_PKEY_INDEX: c_int = 1 << 4;
const QP_PORT: c_int = 1 << 5;
const QP_QKEY: c_int = 1 << 6;
const QP_SQ_PSN: c_int = 1 << 16;
/// rdma_cm's QKEY for the UDP port space.
const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// Device `dev`'s PD (librdmacm's per-device PD) on its context `v`: every identifier's `pd`
/// once it is on the device, and what `rdma_create_qp` uses when given none. A child after
/// fork allocates its own (its parent's is on the parent's engine, which did not come with
/// it).
fn default_pd(dev: usize, v: *mut ibv_context) -> Result<*mut ibv_pd, c_int> {
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

/// Creates the CQs (and their completion channels) an `rdma_create_qp` without CQs asks for.
fn create_cqs(id: &Obj<Id>, v: *mut ibv_context, attr: &mut ibv_qp_init_attr) -> Result<(), c_int> {
    let c = id.c();
    // SAFETY: the shim's own constructors on its own context; raw writes into the live
    // identifier's C struct.
    unsafe {
        for (send, n) in [(true, attr.cap.max_send_wr), (false, attr.cap.max_recv_wr)] {
            let ch = crate::ibv_create_comp_channel(v);
            if ch.is_null() {
                return Err(errno());
            }
            let cq = crate::ibv_create_cq(v, n.max(1) as c_int, c as *mut c_void, ch, 0);
            if cq.is_null() {
                let e = errno();
                crate::ibv_destroy_comp_channel(ch);
                return Err(e);
            }
            if send {
                ptr::addr_of_mut!((*c).send_cq_channel).write(ch);
                ptr::addr_of_mut!((*c).send_cq).write(cq);
                attr.send_cq = cq;
            } else {
                ptr::addr_of_mut!((*c).recv_cq_channel).write(ch);
                ptr::addr_of_mut!((*c).recv_cq).write(cq);
                attr.recv_cq = cq;
            }
        }
    }
    lock(&id.st).own_cqs = true;
    Ok(())
}

/// Destroys the CQs `create_cqs` made.
fn destroy_cqs(id: &Obj<Id>) {
    if !std::mem::take(&mut lock(&id.st).own_cqs) {
        return;
    }
    let c = id.c();
    // SAFETY: the CQs and channels were made by create_cqs and are named only here and by the
    // application (which must not use them after rdma_destroy_qp, as with rdma-core).
    unsafe {
        for (cq, ch) in [
            (
                ptr::addr_of_mut!((*c).send_cq),
                ptr::addr_of_mut!((*c).send_cq_channel),
            ),
            (
                ptr::addr_of_mut!((*c).recv_cq),
                ptr::addr_of_mut!((*c).recv_cq_channel),
            ),
        ] {
            crate::ibv_destroy_cq(cq.read());
            crate::ibv_destroy_comp_channel(ch.read());
            cq.write(null_mut());
            ch.write(null_mut());
        }
    }
}

/// `rdma_create_qp`: creates the QP on the identifier's device (and its CQs when `attr`
/// names none), moves it to INIT (UD: to RTS with rdma_cm's QKEY) and hands it to the CM.
/// 0, or -1 and errno (EINVAL for a PD of another context or an identifier not bound to the
/// device).
#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    let Some(obj) = id_of(id) else {
        return fail(EINVAL);
    };
    if attr.is_null() {
        return fail(EINVAL);
    }
    let c = obj.c();
    // SAFETY: raw reads of the live identifier's C struct.
    let (v, id_pd, has_qp) = unsafe {
        (
            ptr::addr_of!((*c).verbs).read(),
            ptr::addr_of!((*c).pd).read(),
            !ptr::addr_of!((*c).qp).read().is_null(),
        )
    };
    if v.is_null() || has_qp {
        return fail(EINVAL);
    }
    let pd = if !pd.is_null() {
        pd
    } else if !id_pd.is_null() {
        id_pd
    } else {
        let dev = cm_hooks::context_device(v).unwrap_or(0);
        match default_pd(dev, v) {
            Ok(p) => p,
            Err(e) => return fail(e),
        }
    };
    if cm_hooks::pd_context(pd) != Some(v) {
        return fail(EINVAL);
    }
    // SAFETY: the caller passes a writable ibv_qp_init_attr (checked non-null).
    let a = unsafe { &mut *attr };
    // librdmacm gives the QP the identifier's type (rdma_client leaves qp_type 0).
    // SAFETY: raw read of the live identifier.
    a.qp_type = unsafe { ptr::addr_of!((*c).qp_type).read() };
    if a.send_cq.is_null() && a.recv_cq.is_null() {
        if let Err(e) = create_cqs(&obj, v, a) {
            return fail(e);
        }
    } else if a.send_cq.is_null() || a.recv_cq.is_null() {
        return fail(EINVAL);
    }
    // SAFETY: the shim's own ibv_create_qp with the caller's (valid) attributes.
    let qp = unsafe { crate::ibv_create_qp(pd, a) };
    if qp.is_null() {
        let e = errno();
        destroy_cqs(&obj);
        return fail(e);
    }
    let r = init_qp(&obj, qp, a.qp_type);
    if let Err(e) = r {
        // SAFETY: the QP was created just above and handed to nobody.
        unsafe { crate::ibv_destroy_qp(qp) };
        destroy_cqs(&obj);
        return fail(e);
    }
    // SAFETY: raw writes into the live identifier (rdma_verbs.h's helpers use its `pd`).
    unsafe {
        ptr::addr_of_mut!((*c).qp).write(qp);
        ptr::addr_of_mut!((*c).pd).write(pd);
    }
    0
}

fn modify(qp: *mut ibv_qp, attr: &mut ibv_qp_attr, mask: c_int) -> Result<(), c_int> {
    // SAFETY: the shim's own ibv_modify_qp on a QP it made, with a local attribute struct.
    match unsafe { crate::ibv_modify_qp(qp, attr, mask) } {
        0 => Ok(()),
        e => Err(e),
    }
}

/// The QP's first states: INIT with rdma_cm's access (RC), or up to RTS with its QKEY (UD).
fn init_qp(id: &Arc<Obj<Id>>, qp: *mut ibv_qp, qp_type: libc::c_uint) -> Result<(), c_int> {
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_INIT,
        pkey_index: 0,
        port_num: 1,
        ..Default::default()
    };
    if qp_type == IBV_QPT_UD {
        a.qkey = RDMA_UDP_QKEY;
        modify(qp, &mut a, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_QKEY)?;
        a.qp_state = IBV_QPS_RTR;
        modify(qp, &mut a, QP_STATE)?;
        a.qp_state = IBV_QPS_RTS;
        a.sq_psn = 0;
        modify(qp, &mut a, QP_STATE | QP_SQ_PSN)?;
        // The CM answers a SIDR_REQ with this QP's number.
        if id.ps == RDMA_PS_UDP {
            let (inner, _) = cm_hooks::qp_inner(qp).ok_or(EINVAL)?;
            let c = Obj::cm_id(id)?;
            return c.set_qp(inner).map_err(|e| errno_of(&e));
        }
        return Ok(());
    }
    // LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC: what the kernel's rdma_cm
    // allows a connected QP (its responder resources are set at RTR).
    a.qp_access_flags = 0xf;
    modify(
        qp,
        &mut a,
        QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS,
    )?;
    let (inner, _) = cm_hooks::qp_inner(qp).ok_or(EINVAL)?;
    let c = Obj::cm_id(id)?;
    c.set_qp(inner).map_err(|e| errno_of(&e))
}

/// `rdma_destroy_qp`: destroys the identifier's QP (and the CQs `rdma_create_qp` made).
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    let Some(obj) = id_of(id) else {
        return;
    };
    let c = obj.c();
    // SAFETY: raw access to the live identifier; the QP is the one rdma_create_qp made.
    unsafe {
        let qp = ptr::addr_of!((*c).qp).read();
        if !qp.is_null() {
            crate::ibv_destroy_qp(qp);
            ptr::addr_of_mut!((*c).qp).write(null_mut());
        }
    }
    destroy_cqs(&obj);
}

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
    if obj.sync.swap(channel.is_null(), Ordering::AcqRel) {
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
    if !list.is_null() {
        // SAFETY: `list` came from rdma_get_devices, which boxed a slice of the contexts and
        // a NULL, and which the caller only read: its length is up to the NULL and one.
        drop(unsafe {
            let mut len = 0;
            while !(*list.add(len)).is_null() {
                len += 1;
            }
            Box::from_raw(ptr::slice_from_raw_parts_mut(list, len + 1))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stand_in_candidates_are_loopback_outside_the_low_range_and_per_process() {
        let a = stand_in_candidates(0x0012_3456, 4791);
        assert_eq!(a[0], "127.146.52.86:4791".parse().unwrap()); // 128 + 0x12
        assert_eq!(a[1], "127.210.52.86:4791".parse().unwrap()); // 192 + 0x12
                                                                 // pid_max is 2^22: the top process number still lands in 127/8.
        let top = stand_in_candidates((1 << 22) - 1, 7);
        assert_eq!(top[1], "127.255.255.255:7".parse().unwrap());
        // Two processes never share a first candidate.
        assert_ne!(
            stand_in_candidates(100, 1)[0],
            stand_in_candidates(101, 1)[0]
        );
    }
}
