//! Multicast: `rdma_join_multicast`, `rdma_join_multicast_ex`, `rdma_leave_multicast`, as
//! librdmacm and the kernel's rdma_cm do them on RoCEv2 (no subnet administrator: a join is
//! local). The join queues MULTICAST_JOIN with the group's address handle (its MGID the
//! group's IPv4-mapped address, hop limit 64), QPN 0xFFFFFF and the UDP port space's Q_Key;
//! when the application takes that event, the identifier's QP is attached to the group, as
//! librdmacm's ucma_process_join does (MULTICAST_ERROR, status -1, if that fails).
//! spec-notes/librdmacm.md, rule 16.

use std::net::{IpAddr, SocketAddr};
use std::ptr;
use std::sync::Arc;

use libc::{c_int, c_void, sockaddr, EADDRNOTAVAIL, EINVAL};
use softroce::ib::Gid;

use super::addr::sockaddr_from_c;
use super::error::{fail, lock};
use super::ffi::*;
use super::id::{complete, id_of, Id};
use super::object::{EventInfo, Mc, McJoin};
use super::param::roce_ud_param;
use crate::objects::handle::Obj;

/// The kernel's ENOTSUPP (524): cma_iboe_join_multicast's answer for an IPv6 group on
/// RoCEv2, which Linux 6.1 does not join.
const ENOTSUPP: c_int = 524;

/// `rdma_join_multicast`: joins as a full member. 0, or -1 and errno.
#[no_mangle]
pub unsafe extern "C" fn rdma_join_multicast(
    id: *mut rdma_cm_id,
    addr: *mut sockaddr,
    context: *mut c_void,
) -> c_int {
    join(id, addr, RDMA_MC_JOIN_FLAG_FULLMEMBER, context)
}

/// `rdma_join_multicast_ex`: the address and join flags must both be given (EINVAL
/// otherwise, as librdmacm checks; EOPNOTSUPP for an unknown `comp_mask` bit). 0, or -1 and
/// errno.
#[no_mangle]
pub unsafe extern "C" fn rdma_join_multicast_ex(
    id: *mut rdma_cm_id,
    attr: *mut rdma_cm_join_mc_attr_ex,
    context: *mut c_void,
) -> c_int {
    if attr.is_null() {
        return fail_neg(EINVAL);
    }
    // SAFETY: the caller passes a live attribute struct (checked non-null).
    let a = unsafe { ptr::read(attr) };
    if a.comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED {
        return fail_neg(libc::EOPNOTSUPP);
    }
    let need = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
    if a.comp_mask & need != need || a.join_flags >= RDMA_MC_JOIN_FLAG_RESERVED {
        return fail_neg(EINVAL);
    }
    join(id, a.addr, a.join_flags, context)
}

/// -1 with errno `e` (librdmacm's calls return -1, not the errno).
fn fail_neg(e: c_int) -> c_int {
    fail(e);
    -1
}

fn join(id: *mut rdma_cm_id, addr: *mut sockaddr, flags: u32, context: *mut c_void) -> c_int {
    let Some(obj) = id_of(id) else {
        return fail_neg(EINVAL);
    };
    // SAFETY: the caller passes a sockaddr of its family's size.
    let a = match unsafe { sockaddr_from_c(addr) } {
        Ok(a) => a,
        Err(e) => return fail_neg(e),
    };
    {
        let st = lock(&obj.st);
        // rdma_join_multicast: an identifier bound to the device (ADDR_BOUND or
        // ADDR_RESOLVED), of a UD port space, neither listening nor connected.
        let bound = st.port != 0 && st.cm.is_some() && !st.listening && !st.connected;
        let ud = obj.ps == RDMA_PS_UDP || obj.ps == RDMA_PS_IPOIB;
        if !bound || !ud || a.ip().is_unspecified() {
            return fail_neg(EINVAL);
        }
    }
    let IpAddr::V4(v4) = a.ip() else {
        return fail_neg(ENOTSUPP);
    };
    let mgid = Gid::from_ip(IpAddr::V4(v4));
    let send_only = flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
    lock(&obj.st).mcs.push(Mc {
        addr: a,
        mgid,
        send_only,
    });
    let tos = lock(&obj.st).tos.unwrap_or(0);
    // cma_make_mc_event: hop limit 64 (IPV6_DEFAULT_HOPLIMIT for an IPv4 RoCEv2 group), the
    // identifier's TOS; librdmacm hands the join's context back as the private data.
    let ud = rdma_ud_param {
        private_data: context,
        ..roce_ud_param(
            mgid.0,
            tos,
            softroce::wire::bth::MULTICAST_QPN,
            RDMA_UDP_QKEY,
        )
    };
    let mut info = EventInfo::plain(RDMA_CM_EVENT_MULTICAST_JOIN, 0);
    info.ud = Some(ud);
    info.join = Some(McJoin {
        mgid: mgid.0,
        attach: !send_only,
    });
    Obj::event(&obj, info);
    if complete(&obj, RDMA_CM_EVENT_MULTICAST_JOIN) != 0 {
        return -1;
    }
    0
}

/// `rdma_leave_multicast`: detaches the identifier's QP from the group joined at `addr` and
/// forgets the join. 0, or -1 and errno (EADDRNOTAVAIL for an address it did not join).
#[no_mangle]
pub unsafe extern "C" fn rdma_leave_multicast(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
    let Some(obj) = id_of(id) else {
        return fail_neg(EINVAL);
    };
    // SAFETY: the caller passes a sockaddr of its family's size.
    let a = match unsafe { sockaddr_from_c(addr) } {
        Ok(a) => a,
        Err(e) => return fail_neg(e),
    };
    let Some(mc) = take_mc(&obj, a) else {
        return fail_neg(EADDRNOTAVAIL);
    };
    leave(&obj, &mc);
    0
}

/// Removes and returns the join at `addr`.
fn take_mc(obj: &Arc<Obj<Id>>, addr: SocketAddr) -> Option<Mc> {
    let mut st = lock(&obj.st);
    let i = st.mcs.iter().position(|m| m.addr == addr)?;
    Some(st.mcs.remove(i))
}

/// librdmacm's leave: the QP, if any and not send-only, is detached (its result ignored, as
/// librdmacm ignores it); the device leaves the IP group with its last attached QP.
fn leave(obj: &Arc<Obj<Id>>, mc: &Mc) {
    if mc.send_only {
        return;
    }
    let qp = obj.c();
    // SAFETY: a raw read of the live identifier's C struct.
    let qp = unsafe { ptr::addr_of!((*qp).qp).read() };
    if !qp.is_null() {
        let _ = crate::objects::ibv_detach_mcast(qp.cast(), mc.mgid.0.as_ptr().cast(), 0);
    }
}
