//! Listening: `rdma_listen`, on every device for a wildcard listener in a process with several.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use libc::{c_int, EINVAL, ENOSYS};
use softroce::rdma_cm::CmId;

use super::device::Cm;
use super::error::{errno_of, fail, lock};
use super::ffi::*;
use super::id::bind;
use super::object::{id_of, Id};
use crate::objects::cm_hooks;
use crate::objects::handle::Obj;

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
