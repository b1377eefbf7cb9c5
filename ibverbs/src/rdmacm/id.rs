//! Communication identifiers: create, destroy and bind; their softroce identifier; the wait
//! of a synchronous identifier for its event; their ports. The types are object.rs's,
//! re-exported here with the helpers the other files use to make and address identifiers.

use std::net::SocketAddr;
use std::ptr::{self, null_mut};
use std::sync::Arc;

use libc::{c_int, c_void, sockaddr, EADDRINUSE, EADDRNOTAVAIL, EINVAL, ENODEV};
use softroce::rdma_cm::{CmId, PortSpace};

pub(super) use super::addr::sockaddr_from_c;
use super::addr::{ports, reserve};
use super::channel::{next_event, rdma_ack_cm_event};
use super::device::{cm, set_device, Cm};
use super::error::{errno_of, fail, lock};
use super::ffi::*;
use super::locate::{device_of_ip, is_local, stand_in_for_ud};
use super::object::{chan_of, new_channel, set_addrs, Chan, IdSt};
pub(super) use super::object::{id_of, new_id, Id, QpInit};
use crate::ffi::*;
use crate::objects::cm_hooks;
use crate::objects::handle::{self, Obj};

impl Obj<Id> {
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
    pub(super) fn new_cm_id(
        this: &Arc<Self>,
        st: &IdSt,
        dev: usize,
    ) -> Result<(Arc<Cm>, CmId), c_int> {
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
    // The event a synchronous call kept (librdmacm's rdma_destroy_id acknowledges it).
    ack_kept_event(&obj);
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

/// As [`complete`], keeping the event `want` in the identifier's `event` until its next
/// synchronous call or its destruction, as librdmacm's ucma_complete keeps every event:
/// rdma_xclient reads the REP's private data there after `rdma_connect`.
pub(super) fn complete_keeping(id: &Arc<Obj<Id>>, want: c_int) -> c_int {
    complete_with(id, want, true)
}

/// Acknowledges the event a synchronous identifier kept ([`complete_keeping`]), if any.
pub(super) fn ack_kept_event(id: &Obj<Id>) {
    let c = id.c();
    // SAFETY: raw access to the live identifier; a kept event is outstanding until now.
    unsafe {
        let ev = ptr::addr_of!((*c).event).read();
        if !ev.is_null() {
            ptr::addr_of_mut!((*c).event).write(null_mut());
            rdma_ack_cm_event(ev);
        }
    }
}

/// Waits, for a synchronous identifier, for the event its call queued and takes it: 0 when it
/// is `want`, otherwise the event's status as errno (as librdmacm's ucma_complete).
pub(super) fn complete(id: &Arc<Obj<Id>>, want: c_int) -> c_int {
    complete_with(id, want, false)
}

fn complete_with(id: &Arc<Obj<Id>>, want: c_int, keep: bool) -> c_int {
    if !id.sync() {
        return 0;
    }
    if keep {
        ack_kept_event(id);
    }
    let ch = id.chan();
    match next_event(&ch) {
        Ok(ev) => {
            // SAFETY: `ev` is an event just taken from the identifier's channel, live until
            // acknowledged below.
            let (kind, status) = unsafe { ((*ev).event, (*ev).status) };
            if keep && kind == want {
                // SAFETY: raw write into the live identifier; acknowledged by ack_kept_event.
                unsafe { ptr::addr_of_mut!((*id.c()).event).write(ev) };
                return 0;
            }
            // SAFETY: the event is outstanding; acknowledging it frees it.
            unsafe { rdma_ack_cm_event(ev) };
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
