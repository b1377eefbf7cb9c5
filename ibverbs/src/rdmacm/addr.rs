//! Addresses and ports: socket addresses to and from C, and the rdma_cm ports bound in this
//! process.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::ptr;
use std::sync::{Mutex, MutexGuard, OnceLock};

use libc::{
    c_int, sockaddr, sockaddr_in, sockaddr_in6, sockaddr_storage, socklen_t, AF_INET, AF_INET6,
    EADDRINUSE, EAFNOSUPPORT, EINVAL,
};

use super::error::lock;

/// The ports bound in this process (the kernel's per-namespace port table, for one device).
pub(super) fn ports() -> MutexGuard<'static, HashSet<u16>> {
    static P: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    lock(P.get_or_init(Default::default))
}

/// Reserves `port`, or an ephemeral one for 0 (the kernel's range, 32768..60999).
pub(super) fn reserve(port: u16, reuse: bool) -> Result<u16, c_int> {
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
