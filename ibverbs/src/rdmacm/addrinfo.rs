//! `rdma_getaddrinfo` / `rdma_freeaddrinfo` (over the C library's getaddrinfo: RoCE needs no
//! IB service record) and the endpoint calls built on them, `rdma_create_ep` /
//! `rdma_destroy_ep`, with their srq and extended QP companions.

use std::ptr::{self, null_mut};

use libc::{addrinfo, c_char, c_int, c_void, sockaddr, EINVAL, ENOSYS};

use super::error::{errno, fail, lock};
use super::ffi::*;
use super::id::{id_of, QpInit};
use crate::ffi::*;

/// Copies a C sockaddr of `len` bytes into a new allocation (freed by `rdma_freeaddrinfo`).
///
/// # Safety
///
/// `a` points to `len` readable bytes.
unsafe fn dup_sockaddr(a: *const sockaddr, len: usize) -> *mut sockaddr {
    let mut buf = vec![0u8; len.max(std::mem::size_of::<libc::sockaddr_storage>())];
    // SAFETY: by the caller's promise; the buffer holds at least `len` bytes.
    unsafe { ptr::copy_nonoverlapping(a as *const u8, buf.as_mut_ptr(), len) };
    Box::into_raw(buf.into_boxed_slice()) as *mut sockaddr
}

/// Frees what `dup_sockaddr` made.
///
/// # Safety
///
/// `a` is NULL or from `dup_sockaddr` and not freed yet.
unsafe fn free_sockaddr(a: *mut sockaddr) {
    if !a.is_null() {
        let n = std::mem::size_of::<libc::sockaddr_storage>();
        // SAFETY: dup_sockaddr boxed a slice of at least `n` bytes; `len` was at most a
        // sockaddr_storage for every family getaddrinfo returns here (inet, inet6).
        drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(a as *mut u8, n)) });
    }
}

/// `rdma_getaddrinfo`: 0 and a one-entry list, or getaddrinfo's EAI_* code (as rdma-core
/// returns it). With RAI_PASSIVE the address is the source (NULL node: any), otherwise the
/// destination, and the hints' source address is kept. RC over the TCP port space unless the
/// hints say UD / UDP.
#[no_mangle]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    // SAFETY: NULL or the caller's readable hints.
    let h = unsafe { hints.as_ref() };
    if res.is_null() || (node.is_null() && service.is_null() && h.is_none()) {
        fail(EINVAL);
        return libc::EAI_NONAME;
    }
    if let (true, true, Some(h)) = (node.is_null(), service.is_null(), h) {
        // SAFETY: the caller's result slot (checked non-null) and readable hints.
        return unsafe { from_hints(h, res) };
    }
    let flags = h.map_or(0, |h| h.ai_flags);
    let passive = flags & RAI_PASSIVE != 0;
    // SAFETY: all-zero is a valid addrinfo hint.
    let mut ah: addrinfo = unsafe { std::mem::zeroed() };
    ah.ai_family = h.map_or(0, |h| h.ai_family);
    if ah.ai_family != libc::AF_INET && ah.ai_family != libc::AF_INET6 {
        ah.ai_family = libc::AF_UNSPEC;
    }
    ah.ai_socktype = libc::SOCK_STREAM;
    if passive {
        ah.ai_flags |= libc::AI_PASSIVE;
    }
    if flags & RAI_NUMERICHOST != 0 {
        ah.ai_flags |= libc::AI_NUMERICHOST;
    }
    let mut list: *mut addrinfo = null_mut();
    // SAFETY: NUL-terminated strings or NULL from the caller; local hints and result slot.
    let r = unsafe { libc::getaddrinfo(node, service, &ah, &mut list) };
    if r != 0 {
        return r;
    }
    // The first IPv4 answer, else the first (the device is IPv4 unless bound to IPv6).
    let mut pick = list;
    let mut p = list;
    while !p.is_null() {
        // SAFETY: a node of getaddrinfo's list.
        if unsafe { (*p).ai_family } == libc::AF_INET {
            pick = p;
            break;
        }
        // SAFETY: as above.
        p = unsafe { (*p).ai_next };
    }
    // SAFETY: `pick` is a node of the list (non-empty on success).
    let (fam, addr, len) = unsafe { ((*pick).ai_family, (*pick).ai_addr, (*pick).ai_addrlen) };
    // SAFETY: getaddrinfo's address of `len` bytes.
    let resolved = unsafe { dup_sockaddr(addr, len as usize) };
    // SAFETY: the list from getaddrinfo, freed once.
    unsafe { libc::freeaddrinfo(list) };
    let (qp_type, ps) = qp_type_and_space(h.map(|h| (h.ai_qp_type, h.ai_port_space)));
    let mut ai = Box::new(rdma_addrinfo {
        ai_flags: flags,
        ai_family: fam,
        ai_qp_type: qp_type,
        ai_port_space: ps,
        ai_src_len: 0,
        ai_dst_len: 0,
        ai_src_addr: null_mut(),
        ai_dst_addr: null_mut(),
        ai_src_canonname: null_mut(),
        ai_dst_canonname: null_mut(),
        ai_route_len: 0,
        ai_route: null_mut(),
        ai_connect_len: 0,
        ai_connect: null_mut(),
        ai_next: null_mut(),
    });
    if passive {
        ai.ai_src_addr = resolved;
        ai.ai_src_len = len;
    } else {
        ai.ai_dst_addr = resolved;
        ai.ai_dst_len = len;
        if let Some(h) = h.filter(|h| !h.ai_src_addr.is_null() && h.ai_src_len > 0) {
            // SAFETY: the hints' source address of `ai_src_len` bytes.
            ai.ai_src_addr = unsafe { dup_sockaddr(h.ai_src_addr, h.ai_src_len as usize) };
            ai.ai_src_len = h.ai_src_len;
        }
    }
    // SAFETY: the caller's writable result slot (checked non-null).
    unsafe { res.write(Box::into_raw(ai)) };
    0
}

/// `rdma_getaddrinfo` with neither node nor service: as rdma-core, the answer is the hints'
/// flags, family, QP type and port space with copies of their addresses (libfabric's verbs
/// provider asks so for a peer whose address it already holds, from `fi_getname`).
///
/// # Safety
///
/// `res` is writable; the hints' addresses are NULL or readable for their lengths.
unsafe fn from_hints(h: &rdma_addrinfo, res: *mut *mut rdma_addrinfo) -> c_int {
    let storage = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // free_sockaddr frees one sockaddr_storage: a longer address cannot be held.
    if h.ai_src_len > storage || h.ai_dst_len > storage {
        fail(EINVAL);
        return libc::EAI_FAMILY;
    }
    let copy = |a: *mut sockaddr, len: libc::socklen_t| {
        if a.is_null() || len == 0 {
            (null_mut(), 0)
        } else {
            // SAFETY: by the caller's promise the address holds `len` readable bytes.
            (unsafe { dup_sockaddr(a, len as usize) }, len)
        }
    };
    let (src, src_len) = copy(h.ai_src_addr, h.ai_src_len);
    let (dst, dst_len) = copy(h.ai_dst_addr, h.ai_dst_len);
    let ai = Box::new(rdma_addrinfo {
        ai_flags: h.ai_flags,
        ai_family: h.ai_family,
        ai_qp_type: h.ai_qp_type,
        ai_port_space: h.ai_port_space,
        ai_src_len: src_len,
        ai_dst_len: dst_len,
        ai_src_addr: src,
        ai_dst_addr: dst,
        ai_src_canonname: null_mut(),
        ai_dst_canonname: null_mut(),
        ai_route_len: 0,
        ai_route: null_mut(),
        ai_connect_len: 0,
        ai_connect: null_mut(),
        ai_next: null_mut(),
    });
    // SAFETY: the caller's writable result slot.
    unsafe { res.write(Box::into_raw(ai)) };
    0
}

/// `rdma_freeaddrinfo`.
#[no_mangle]
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    let mut p = res;
    while !p.is_null() {
        // SAFETY: every node was boxed by rdma_getaddrinfo and is freed once here.
        let ai = unsafe { Box::from_raw(p) };
        // SAFETY: the addresses were made by dup_sockaddr.
        unsafe {
            free_sockaddr(ai.ai_src_addr);
            free_sockaddr(ai.ai_dst_addr);
        }
        p = ai.ai_next;
    }
}

/// `rdma_create_ep`: a synchronous identifier from `res`: bound (RAI_PASSIVE: a listener
/// that keeps `qp_init_attr` for `rdma_get_request`), or with its address and route resolved
/// and its QP created. 0, or -1 and errno.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    if id.is_null() || res.is_null() {
        return fail(EINVAL);
    }
    // SAFETY: the caller's addrinfo (from rdma_getaddrinfo or filled by hand).
    let r = unsafe { &*res };
    let mut cm_id: *mut rdma_cm_id = null_mut();
    // SAFETY: a NULL channel makes a synchronous identifier.
    if unsafe { super::id::rdma_create_id(null_mut(), &mut cm_id, null_mut(), r.ai_port_space) }
        != 0
    {
        return -1;
    }
    let Some(obj) = id_of(cm_id) else {
        return fail(EINVAL);
    };
    if r.ai_qp_type == IBV_QPT_XRC_SEND as c_int || r.ai_qp_type == IBV_QPT_XRC_RECV as c_int {
        // SAFETY: raw write into the live identifier: its QPs are of the addrinfo's XRC type.
        unsafe { ptr::addr_of_mut!((*obj.c()).qp_type).write(r.ai_qp_type as libc::c_uint) };
    }
    let undo = |e: c_int| {
        // SAFETY: the identifier made above, handed to nobody.
        unsafe { super::id::rdma_destroy_id(cm_id) };
        fail(e)
    };
    if r.ai_flags & RAI_PASSIVE != 0 {
        // SAFETY: the addrinfo's source address.
        if unsafe { super::id::rdma_bind_addr(cm_id, r.ai_src_addr) } != 0 {
            return undo(errno());
        }
        if !qp_init_attr.is_null() {
            // SAFETY: the caller's readable attributes.
            lock(&obj.st).qp_init = Some(QpInit::of(unsafe { &*qp_init_attr }));
        }
        // SAFETY: raw write into the live identifier.
        unsafe { ptr::addr_of_mut!((*obj.c()).pd).write(pd) };
    } else {
        // SAFETY: the addrinfo's addresses (NULL source allowed).
        if unsafe { super::resolve::rdma_resolve_addr(cm_id, r.ai_src_addr, r.ai_dst_addr, 2000) }
            != 0
        {
            return undo(errno());
        }
        // SAFETY: the live identifier.
        if unsafe { super::resolve::rdma_resolve_route(cm_id, 2000) } != 0 {
            return undo(errno());
        }
        // SAFETY: the caller's attributes, passed through.
        if !qp_init_attr.is_null()
            && unsafe { super::qp::rdma_create_qp(cm_id, pd, qp_init_attr) } != 0
        {
            return undo(errno());
        }
    }
    // SAFETY: the caller's writable slot (checked non-null).
    unsafe { id.write(cm_id) };
    0
}

/// `rdma_destroy_ep`: its QP, SRQ and identifier.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_ep(id: *mut rdma_cm_id) {
    let Some(obj) = id_of(id) else {
        return;
    };
    let c = obj.c();
    drop(obj);
    // SAFETY: the caller's live identifier; each call checks its handles.
    unsafe {
        if !ptr::addr_of!((*c).qp).read().is_null() {
            super::qp::rdma_destroy_qp(id);
        }
        if !ptr::addr_of!((*c).srq).read().is_null() {
            super::srq::rdma_destroy_srq(id);
        }
        super::id::rdma_destroy_id(id);
    }
}

/// `IBV_QP_INIT_ATTR_PD`, the one extended QP attribute softroce takes.
const QP_INIT_ATTR_PD: u32 = 1;

/// `rdma_create_qp_ex`: as `rdma_create_qp` when the extended attributes name at most the
/// PD (the first fields are `ibv_qp_init_attr`'s); ENOSYS for other extensions.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp_ex(id: *mut rdma_cm_id, attr: *mut c_void) -> c_int {
    if attr.is_null() {
        return fail(EINVAL);
    }
    // `struct ibv_qp_init_attr_ex` starts with ibv_qp_init_attr's fields; comp_mask is at
    // offset 60 and pd at 64 (rdma-core 44, x86_64).
    let base = attr as *mut u8;
    // SAFETY: the caller's ibv_qp_init_attr_ex is at least 72 bytes.
    let (mask, pd) = unsafe {
        (
            ptr::read_unaligned(base.add(60) as *const u32),
            ptr::read_unaligned(base.add(64) as *const *mut ibv_pd),
        )
    };
    if mask & !QP_INIT_ATTR_PD != 0 {
        return fail(ENOSYS);
    }
    let pd = if mask & QP_INIT_ATTR_PD != 0 {
        pd
    } else {
        null_mut()
    };
    // SAFETY: the leading ibv_qp_init_attr of the caller's struct.
    unsafe { super::qp::rdma_create_qp(id, pd, attr as *mut ibv_qp_init_attr) }
}

/// The QP type and port space of an `rdma_addrinfo` for the hints' (type, space): UD for the
/// UDP space or a UD type, XRC types kept in the IB space, RC otherwise.
fn qp_type_and_space(hint: Option<(c_int, c_int)>) -> (c_int, c_int) {
    match hint {
        Some((t, ps)) if t == IBV_QPT_UD as c_int || ps == RDMA_PS_UDP => {
            (IBV_QPT_UD as c_int, RDMA_PS_UDP)
        }
        // rdma_xserver/rdma_xclient's XRC: the port space IB with an XRC type, kept.
        Some((t, ps))
            if ps == RDMA_PS_IB
                && (t == IBV_QPT_XRC_SEND as c_int || t == IBV_QPT_XRC_RECV as c_int) =>
        {
            (t, RDMA_PS_IB)
        }
        Some((_, ps)) if ps == RDMA_PS_IB => (IBV_QPT_RC as c_int, RDMA_PS_IB),
        _ => (IBV_QPT_RC as c_int, RDMA_PS_TCP),
    }
}
