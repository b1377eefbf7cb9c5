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
use super::{cm, device_addr, errno, errno_of, fail, lock, verbs};
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
    pub(super) cm: Option<CmId>,
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

    /// The softroce identifier, made now if needed.
    pub(super) fn cm_id(this: &Arc<Self>) -> Result<CmId, c_int> {
        let mut st = lock(&this.st);
        if let Some(c) = &st.cm {
            return Ok(c.clone());
        }
        let m = cm()?;
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
        st.cm = Some(c.clone());
        Ok(c)
    }
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
    let v = verbs()?;
    let pd = default_pd(v)?;
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
    if let (Some(c), Ok(m)) = (&st.cm, cm()) {
        m.forget(obj);
        if st.listening {
            c.stop_listening();
        } else if c.disconnect().is_err() {
            // Not connected: an undecided connect request is refused, as the kernel's
            // cm_destroy_id does; for anything else (idle, resolving, closed) both are no-ops.
            let _ = c.reject(&[]);
        }
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

/// Binds `id` to `addr` (its IP: the device's, or a wildcard).
pub(super) fn bind(id: &Arc<Obj<Id>>, addr: SocketAddr) -> Result<(), c_int> {
    let dev = device_addr().ip();
    let ip = addr.ip();
    // The address SOFTROCE_BIND names stays the device's when the process stands in at
    // another (rule 10).
    if !ip.is_unspecified() && ip != dev && ip != cm_hooks::nominal_addr().ip() {
        // The kernel: an address of no interface is EADDRNOTAVAIL; one of an interface
        // without an RDMA device is ENODEV.
        return Err(if is_local(ip) { ENODEV } else { EADDRNOTAVAIL });
    }
    let mut st = lock(&id.st);
    if st.port != 0 {
        return Err(EINVAL);
    }
    let port = reserve(addr.port(), st.reuse)?;
    st.port = port;
    if let Some(c) = &st.cm {
        if let Err(e) = c.bind_addr(port) {
            ports().remove(&port);
            st.port = 0;
            return Err(errno_of(&e));
        }
    }
    drop(st);
    set_addrs(id, Some(SocketAddr::new(ip, port)), None);
    if !ip.is_unspecified() {
        match set_device(id) {
            Err(EADDRINUSE) if is_ud(id) && stand_in_for_ud() => set_device(id)?,
            r => r?,
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

/// Before a process's first identifier binds: if it is about to connect to its own device's
/// loopback address, and has started no engine and bound no port (so nothing of its own
/// listens there), the listener is another process on the same device, which holds that
/// address's socket. The kernel shares one device among processes; softroce's device is the
/// process's own, so this process's device stands in at an address of its own on loopback,
/// reachable from the other as any peer is (spec-notes/librdmacm.md, rule 10).
fn stand_in_to_reach_own_address(dst: IpAddr) {
    let nominal = cm_hooks::nominal_addr();
    let IpAddr::V4(v4) = nominal.ip() else {
        return; // ::1 is IPv6's only loopback address: nowhere else to stand.
    };
    if !v4.is_loopback() || dst != nominal.ip() || !ports().is_empty() {
        return;
    }
    take_stand_in(nominal.port());
}

/// Makes the first free stand-in address on `port` this process's device address; true if
/// one was free and the engine had not bound yet. The candidate must be free; the engine binds
/// it soon after (a process that takes it in between makes that bind fail with EADDRINUSE, as
/// without a stand-in).
fn take_stand_in(port: u16) -> bool {
    stand_in_candidates(std::process::id(), port)
        .into_iter()
        .any(|a| UdpSocket::bind(a).is_ok() && cm_hooks::stand_in(a))
}

/// A UD identifier bound to a loopback IPv4 device address whose socket another process
/// holds: this process's device stands in at a loopback address of its own, and true if it
/// could. The other process is a peer on the same device (mckey's receiver and sender under
/// one `softroce run`, rdma-core's multicast tests fork two members): a UD peer's address
/// is only where its datagrams come from, which every answer follows (spec-notes/librdmacm.md,
/// rule 10).
fn stand_in_for_ud() -> bool {
    let nominal = cm_hooks::nominal_addr();
    let IpAddr::V4(v4) = nominal.ip() else {
        return false;
    };
    v4.is_loopback() && take_stand_in(nominal.port())
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
        stand_in_to_reach_own_address(d.ip());
        let s = if src.is_null() {
            SocketAddr::new(device_addr().ip(), 0)
        } else {
            // SAFETY: as for dst.
            match unsafe { sockaddr_from_c(src) } {
                Ok(a) => a,
                Err(e) => return fail(e),
            }
        };
        let s = if s.ip().is_unspecified() {
            SocketAddr::new(device_addr().ip(), s.port())
        } else {
            s
        };
        if let Err(e) = bind(&obj, s) {
            return fail(e);
        }
    }
    let c = match Obj::cm_id(&obj) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let port = lock(&obj.st).port;
    set_addrs(
        &obj,
        Some(SocketAddr::new(device_addr().ip(), port)),
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
    let local = device_addr().ip();
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
    let c = match Obj::cm_id(&obj) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    // The kernel's ucma: at most 1024, and that for anything not positive.
    let backlog = if (1..=1024).contains(&backlog) {
        backlog as usize
    } else {
        1024
    };
    match c.listen(backlog) {
        Ok(()) => {
            lock(&obj.st).listening = true;
            0
        }
        Err(e) => fail(errno_of(&e)),
    }
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

/// The device's PD (librdmacm's per-device PD): every identifier's `pd` once it is on the
/// device, and what `rdma_create_qp` uses when given none. A child after fork allocates its
/// own (its parent's is on the parent's engine, which did not come with it).
fn default_pd(v: *mut ibv_context) -> Result<*mut ibv_pd, c_int> {
    static PD: Mutex<(usize, u32)> = Mutex::new((0, 0));
    let mut g = lock(&PD);
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
        match default_pd(v) {
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

/// `rdma_get_devices`: a NULL-terminated array holding the device's context.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut ibv_context {
    let v = match verbs() {
        Ok(v) => v,
        Err(e) => {
            fail(e);
            return null_mut();
        }
    };
    if !num_devices.is_null() {
        // SAFETY: the caller passes a writable int or NULL.
        unsafe { *num_devices = 1 };
    }
    Box::into_raw(Box::new([v, null_mut()])) as *mut *mut ibv_context
}

/// `rdma_free_devices`.
#[no_mangle]
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
    if !list.is_null() {
        // SAFETY: `list` came from rdma_get_devices, which boxed a 2-element array.
        drop(unsafe { Box::from_raw(list as *mut [*mut ibv_context; 2]) });
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
