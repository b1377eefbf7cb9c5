//! The rsocket exports' datagram branches (rsocket.c's `rs->type == SOCK_DGRAM` arms): each
//! returns `None` when the handle is not a datagram rsocket, so the export goes on with its
//! stream path, else the export's result (-1 and errno on failure). Never prints, never
//! panics.

use std::net::SocketAddr;

use libc::{c_int, c_void, size_t, sockaddr, ssize_t, EINVAL};

use super::dgram::{self, Ds};
use super::status::{fail, ret, ret_len};

/// `rsocket(SOCK_DGRAM)`: the new handle, or -1 and errno.
pub(super) fn socket(domain: c_int) -> c_int {
    ret(Ds::open(domain).map(|ds| {
        ds.set_service(super::udp_svc::start(ds.clone()));
        ds.fd
    }))
}

/// `rbind`: binds the UDP socket (the kernel's errno on failure).
pub(super) unsafe fn bind(s: c_int, addr: *const sockaddr, len: u32) -> Option<c_int> {
    let ds = dgram::lookup(s)?;
    // SAFETY: the caller's address of `len` bytes, checked by the kernel.
    Some(match unsafe { libc::bind(ds.fd, addr, len) } {
        0 => 0,
        _ => -1,
    })
}

/// `rconnect`: connects the UDP socket and resolves the destination's QP.
pub(super) fn connect(s: c_int, addr: *const sockaddr, len: u32) -> Option<c_int> {
    let ds = dgram::lookup(s)?;
    Some(ret(ds.connect(addr, len).map(|()| 0)))
}

/// `rlisten`: EOPNOTSUPP, as listen(2) on a UDP socket.
pub(super) fn listen(s: c_int) -> Option<c_int> {
    dgram::lookup(s).map(|_| fail(libc::EOPNOTSUPP))
}

/// `rclose`.
pub(super) fn close(s: c_int) -> Option<c_int> {
    dgram::lookup(s)?;
    Some(ret(Ds::close(s).map(|()| 0)))
}

/// The caller's buffer as a slice: EFAULT for a null one with a length.
///
/// # Safety
/// `buf` is null or `len` bytes the caller lets us use.
unsafe fn bytes<'a>(buf: *const c_void, len: size_t) -> Result<&'a [u8], c_int> {
    if buf.is_null() {
        return if len == 0 { Ok(&[]) } else { Err(libc::EFAULT) };
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(buf as *const u8, len) })
}

/// `rsend`/`rsendto`: one datagram to `dst` (null: the connected destination).
pub(super) unsafe fn send_to(
    s: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
    dst: *const sockaddr,
) -> Option<ssize_t> {
    let ds = dgram::lookup(s)?;
    Some(ret_len((|| {
        // SAFETY: the caller's buffer of `len` bytes.
        let data = unsafe { bytes(buf, len)? };
        let to: Option<SocketAddr> = if dst.is_null() {
            None
        } else {
            // SAFETY: the caller's address.
            Some(unsafe { super::super::addr::sockaddr_from_c(dst)? })
        };
        ds.send_to(to, data, flags)
    })()))
}

/// `rrecv`/`rrecvfrom`: the next datagram, its source into `src` when asked.
pub(super) unsafe fn recv_from(
    s: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    src: *mut sockaddr,
    alen: *mut u32,
) -> Option<ssize_t> {
    let ds = dgram::lookup(s)?;
    Some(ret_len((|| {
        // SAFETY: the caller's buffer of `len` writable bytes.
        let out = unsafe {
            if buf.is_null() {
                if len > 0 {
                    return Err(libc::EFAULT);
                }
                &mut [][..]
            } else {
                std::slice::from_raw_parts_mut(buf as *mut u8, len)
            }
        };
        let (n, from) = ds.recv_from(out, flags)?;
        if !src.is_null() && !alen.is_null() {
            // SAFETY: the caller's address buffer of `*alen` bytes.
            unsafe { write_addr(from, src, alen) };
        }
        Ok(n)
    })()))
}

/// Copies `a` into a caller's address buffer (cut to its length) and sets the full length.
///
/// # Safety
/// `out` has `*len` writable bytes.
unsafe fn write_addr(a: SocketAddr, out: *mut sockaddr, len: *mut u32) {
    let (ss, full) = super::super::addr::sockaddr_to_c(a);
    // SAFETY: the caller's contract.
    unsafe {
        let n = (full as usize).min(*len as usize);
        std::ptr::copy_nonoverlapping(&ss as *const _ as *const u8, out as *mut u8, n);
        *len = full;
    }
}

/// `rgetsockname`: the UDP socket's address.
pub(super) unsafe fn sock_name(s: c_int, addr: *mut sockaddr, len: *mut u32) -> Option<c_int> {
    let ds = dgram::lookup(s)?;
    Some(ret((|| {
        if addr.is_null() || len.is_null() {
            return Err(libc::EFAULT);
        }
        let a = dgram::sock_name(ds.fd)?;
        // SAFETY: the caller's buffer of `*len` bytes.
        unsafe { write_addr(a, addr, len) };
        Ok(0)
    })()))
}

/// `rsetsockopt`: set on the UDP socket too (as rsocket.c), SO_SNDBUF/SO_RCVBUF also size
/// the QPs made afterwards.
pub(super) unsafe fn set_opt(
    s: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: u32,
) -> Option<c_int> {
    let ds = dgram::lookup(s)?;
    Some(ret((|| {
        if val.is_null() || (len as usize) < std::mem::size_of::<c_int>() {
            return Err(EINVAL);
        }
        // SAFETY: the caller's value of `len` bytes.
        if unsafe { libc::setsockopt(ds.fd, level, name, val, len) } != 0 {
            return Err(super::super::error::errno());
        }
        // SAFETY: at least an int (checked).
        let v = unsafe { (val as *const c_int).read_unaligned() };
        if level == libc::SOL_SOCKET && (name == libc::SO_SNDBUF || name == libc::SO_RCVBUF) {
            ds.set_buf(name == libc::SO_SNDBUF, u32::try_from(v).unwrap_or(0));
        }
        Ok(0)
    })()))
}

/// `rfcntl`: F_GETFL, F_SETFL (O_NONBLOCK); ENOTSUP otherwise.
pub(super) fn fcntl(s: c_int, cmd: c_int, arg: usize) -> Option<c_int> {
    let ds = dgram::lookup(s)?;
    let mut st = ds.lock();
    Some(match cmd {
        libc::F_GETFL => libc::O_RDWR | if st.nonblock { libc::O_NONBLOCK } else { 0 },
        libc::F_SETFL => {
            st.nonblock = arg as c_int & libc::O_NONBLOCK != 0;
            0
        }
        _ => fail(libc::ENOTSUP),
    })
}

/// rpoll's readiness of a datagram rsocket, if `fd` is one.
pub(super) fn revents(fd: c_int, events: i16) -> Option<i16> {
    dgram::lookup(fd).map(|ds| ds.revents(events))
}
