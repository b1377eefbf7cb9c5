//! Address and route resolution: `rdma_resolve_addr` and `rdma_resolve_route` (the GID is
//! the IP address and the path the IP route, so no message is needed).

use std::net::SocketAddr;
use std::ptr;

use libc::{c_int, sockaddr, EINVAL, ENODEV};

use super::addr::sockaddr_from_c;
use super::device::{device_addr, set_device};
use super::error::{errno_of, fail, lock};
use super::ffi::*;
use super::id::{bind, complete};
use super::locate::{device_of_ip, route_device, stand_in_to_reach_own_address};
use super::object::{id_of, set_addrs, EventInfo};
use crate::objects::handle::Obj;

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
