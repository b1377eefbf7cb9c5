//! The rsocket exports of librdmacm for stream sockets: each looks the handle up, does its
//! work in `stream.rs`/`io.rs`, and fails with -1 and the errno rsocket.c gives (EBADF for
//! an unknown handle, ENOTSUP for an option it does not know). Never prints, never panics.

use std::sync::Arc;

use libc::{c_int, c_void, iovec, size_t, sockaddr, ssize_t, EBADF, EINVAL, ENOTSUP};

use super::dgram_api;
use super::keepalive;
use super::proto::{scale_to_value, value_to_scale};
use super::status::{fail, ret, ret_len};
use super::stream::Rs;
use super::table;
use crate::rdmacm::{rdma_bind_addr, rdma_listen, rdma_set_option};

/// `SOL_RDMA`, rsocket's own option level.
const SOL_RDMA: c_int = 0x10000;

fn lookup(s: c_int) -> Result<Arc<Rs>, c_int> {
    table::lookup(s).ok_or(EBADF)
}

/// Whether an rsend/rrecv buffer has bytes to move: EFAULT for a null buffer with a length,
/// false for an empty one (nothing to do, as a socket returns 0).
fn user_buffer(buf: *const c_void, len: size_t) -> Result<bool, c_int> {
    if buf.is_null() && len > 0 {
        return Err(libc::EFAULT);
    }
    Ok(len > 0)
}

/// `rsocket`: a stream or datagram rsocket's handle. As rsocket.c, ENOTSUP unless the family
/// is IPv4 or IPv6, the type exactly SOCK_STREAM or SOCK_DGRAM and the protocol 0 or the
/// type's own.
#[no_mangle]
pub unsafe extern "C" fn rsocket(domain: c_int, kind: c_int, protocol: c_int) -> c_int {
    let family_ok = domain == libc::AF_INET || domain == libc::AF_INET6;
    let proto_ok = match kind {
        libc::SOCK_STREAM => protocol == 0 || protocol == libc::IPPROTO_TCP,
        libc::SOCK_DGRAM => protocol == 0 || protocol == libc::IPPROTO_UDP,
        _ => false,
    };
    if !family_ok || !proto_ok {
        return fail(ENOTSUP);
    }
    if kind == libc::SOCK_DGRAM {
        return dgram_api::socket(domain);
    }
    match Rs::open() {
        Ok(rs) => {
            let fd = rs.fd;
            table::insert(rs);
            fd
        }
        Err(e) => fail(e),
    }
}

/// `rbind`: rdma_bind_addr on the rsocket's identifier.
#[no_mangle]
pub unsafe extern "C" fn rbind(s: c_int, addr: *const sockaddr, len: u32) -> c_int {
    // SAFETY: forwarded contract.
    if let Some(r) = unsafe { dgram_api::bind(s, addr, len) } {
        return r;
    }
    ret(lookup(s).and_then(|rs| {
        if addr.is_null() {
            return Err(EINVAL);
        }
        let id = rs.lock().id;
        // SAFETY: a live identifier and the caller's address.
        match unsafe { rdma_bind_addr(id, addr as *mut sockaddr) } {
            0 => Ok(0),
            _ => Err(super::super::error::errno()),
        }
    }))
}

/// `rlisten`: rdma_listen; a second call is a no-op, as rsocket.c's.
#[no_mangle]
pub unsafe extern "C" fn rlisten(s: c_int, backlog: c_int) -> c_int {
    if let Some(r) = dgram_api::listen(s) {
        return r;
    }
    ret(lookup(s).and_then(|rs| {
        let mut st = rs.lock();
        if st.listening {
            return Ok(0);
        }
        // SAFETY: a live identifier.
        if unsafe { rdma_listen(st.id, backlog) } != 0 {
            return Err(super::super::error::errno());
        }
        st.listening = true;
        Ok(0)
    }))
}

/// `raccept`: the connected rsocket's handle, the peer's address in `addr` if asked.
#[no_mangle]
pub unsafe extern "C" fn raccept(s: c_int, addr: *mut sockaddr, len: *mut u32) -> c_int {
    ret(lookup(s).and_then(|rs| {
        let new = rs.accept()?;
        let fd = new.fd;
        table::insert(new);
        if !addr.is_null() && !len.is_null() {
            // SAFETY: forwarded caller's buffers.
            unsafe { rgetpeername(fd, addr, len) };
        }
        Ok(fd)
    }))
}

/// `rconnect`: resolves, connects and waits until established.
#[no_mangle]
pub unsafe extern "C" fn rconnect(s: c_int, addr: *const sockaddr, len: u32) -> c_int {
    if let Some(r) = dgram_api::connect(s, addr, len) {
        return r;
    }
    ret(lookup(s).and_then(|rs| {
        if addr.is_null() {
            return Err(EINVAL);
        }
        match rs.connect(addr) {
            Ok(()) => Ok(0),
            Err(e) => {
                rs.lock().so_error = e;
                Err(e)
            }
        }
    }))
}

/// `rclose`: disconnects and frees the rsocket.
#[no_mangle]
pub unsafe extern "C" fn rclose(s: c_int) -> c_int {
    if let Some(r) = dgram_api::close(s) {
        return r;
    }
    match table::remove(s) {
        Some(rs) => {
            rs.close();
            0
        }
        None => fail(EBADF),
    }
}

/// `rshutdown`: see [`Rs::shutdown`]; ENOTCONN before connecting, EINVAL for a bad `how`.
#[no_mangle]
pub unsafe extern "C" fn rshutdown(s: c_int, how: c_int) -> c_int {
    ret(lookup(s).and_then(|rs| rs.shutdown(how).map(|()| 0)))
}

/// `rrecv`.
#[no_mangle]
pub unsafe extern "C" fn rrecv(s: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
    let none = std::ptr::null_mut();
    // SAFETY: forwarded contract.
    if let Some(r) = unsafe { dgram_api::recv_from(s, buf, len, flags, none, none as _) } {
        return r;
    }
    ret_len(lookup(s).and_then(|rs| {
        if !user_buffer(buf, len)? {
            return Ok(0);
        }
        // SAFETY: the caller's buffer of `len` writable bytes (checked non-null).
        rs.recv(
            unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, len) },
            flags,
        )
    }))
}

/// `rsend`.
#[no_mangle]
pub unsafe extern "C" fn rsend(s: c_int, buf: *const c_void, len: size_t, flags: c_int) -> ssize_t {
    // SAFETY: forwarded contract.
    if let Some(r) = unsafe { dgram_api::send_to(s, buf, len, flags, std::ptr::null()) } {
        return r;
    }
    ret_len(lookup(s).and_then(|rs| {
        if !user_buffer(buf, len)? {
            return Ok(0);
        }
        // SAFETY: the caller's buffer of `len` readable bytes (checked non-null).
        rs.send(
            unsafe { std::slice::from_raw_parts(buf as *const u8, len) },
            flags,
        )
    }))
}

/// `rread`: rrecv without flags.
#[no_mangle]
pub unsafe extern "C" fn rread(s: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    // SAFETY: forwarded contract.
    unsafe { rrecv(s, buf, count, 0) }
}

/// `rwrite`: rsend without flags.
#[no_mangle]
pub unsafe extern "C" fn rwrite(s: c_int, buf: *const c_void, count: size_t) -> ssize_t {
    // SAFETY: forwarded contract.
    unsafe { rsend(s, buf, count, 0) }
}

/// Runs `f` over the vectors in order, summing its counts, until one fails or comes short:
/// the total, or the first failure's -1 when nothing was moved.
///
/// # Safety
/// `iov` points at `iovcnt` iovecs (or is null with none).
unsafe fn over_iovs(
    iov: *const iovec,
    iovcnt: c_int,
    mut f: impl FnMut(*mut c_void, usize) -> ssize_t,
) -> ssize_t {
    let Ok(n) = usize::try_from(iovcnt) else {
        return fail(EINVAL) as ssize_t;
    };
    if iov.is_null() && n > 0 {
        return fail(EINVAL) as ssize_t;
    }
    let mut total: ssize_t = 0;
    for i in 0..n {
        // SAFETY: the caller's array of `iovcnt` entries.
        let v = unsafe { *iov.add(i) };
        let moved = f(v.iov_base, v.iov_len);
        if moved < 0 {
            return if total > 0 { total } else { moved };
        }
        total += moved;
        if (moved as usize) < v.iov_len {
            break;
        }
    }
    total
}

/// `rreadv`: fills the vectors in order (rsocket.c fills only the first; this is the
/// superset a reader of readv expects).
#[no_mangle]
pub unsafe extern "C" fn rreadv(s: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    // SAFETY: forwarded contracts.
    unsafe { over_iovs(iov, iovcnt, |b, l| rrecv(s, b, l, 0)) }
}

/// `rwritev`: sends the vectors in order.
#[no_mangle]
pub unsafe extern "C" fn rwritev(s: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    // SAFETY: forwarded contracts.
    unsafe { over_iovs(iov, iovcnt, |b, l| rsend(s, b, l, 0)) }
}

/// `rrecvmsg`: the vectors of `msg` as rreadv with `flags`; ENOTSUP with control data, as
/// rsocket.c (which passes `msg_flags` for the flags; the argument is what recvmsg means).
#[no_mangle]
pub unsafe extern "C" fn rrecvmsg(s: c_int, msg: *mut libc::msghdr, flags: c_int) -> ssize_t {
    // SAFETY: the caller's msghdr, or NULL.
    match unsafe { msg_vectors(msg) } {
        // SAFETY: forwarded contracts.
        Ok((iov, cnt)) => unsafe { over_iovs(iov, cnt, |b, l| rrecv(s, b, l, flags)) },
        Err(e) => fail(e) as ssize_t,
    }
}

/// `rsendmsg`: the vectors of `msg` as rwritev with `flags`; ENOTSUP with control data.
#[no_mangle]
pub unsafe extern "C" fn rsendmsg(s: c_int, msg: *const libc::msghdr, flags: c_int) -> ssize_t {
    // SAFETY: the caller's msghdr, or NULL.
    match unsafe { msg_vectors(msg) } {
        // SAFETY: forwarded contracts.
        Ok((iov, cnt)) => unsafe { over_iovs(iov, cnt, |b, l| rsend(s, b, l, flags)) },
        Err(e) => fail(e) as ssize_t,
    }
}

/// The vectors of an rsendmsg/rrecvmsg `msghdr`: EINVAL for none, ENOTSUP with control data
/// (as rsocket.c).
///
/// # Safety
/// `msg` is NULL or a readable msghdr.
unsafe fn msg_vectors(msg: *const libc::msghdr) -> Result<(*const libc::iovec, c_int), c_int> {
    if msg.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: the caller's msghdr (non-null).
    let m = unsafe { &*msg };
    if !m.msg_control.is_null() && m.msg_controllen > 0 {
        return Err(ENOTSUP);
    }
    Ok((m.msg_iov, c_int::try_from(m.msg_iovlen).unwrap_or(-1)))
}

/// `rsendto`: on a datagram rsocket one datagram to `dst` (`dgram_api`); on a stream
/// rsocket EISCONN with a destination, else rsend.
#[no_mangle]
pub unsafe extern "C" fn rsendto(
    s: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
    dst: *const sockaddr,
    alen: u32,
) -> ssize_t {
    // SAFETY: forwarded contract.
    if let Some(r) = unsafe { dgram_api::send_to(s, buf, len, flags, dst) } {
        return r;
    }
    if table::lookup(s).is_none() {
        return fail(EBADF) as ssize_t;
    }
    if !dst.is_null() || alen != 0 {
        return fail(libc::EISCONN) as ssize_t;
    }
    // SAFETY: forwarded contract.
    unsafe { rsend(s, buf, len, flags) }
}

/// `rrecvfrom`: on a datagram rsocket the next datagram and its source (`dgram_api`); on a
/// stream rsocket rrecv, then the peer's address when data came.
#[no_mangle]
pub unsafe extern "C" fn rrecvfrom(
    s: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    src: *mut sockaddr,
    alen: *mut u32,
) -> ssize_t {
    // SAFETY: forwarded contract.
    if let Some(r) = unsafe { dgram_api::recv_from(s, buf, len, flags, src, alen) } {
        return r;
    }
    // SAFETY: forwarded contract.
    let n = unsafe { rrecv(s, buf, len, flags) };
    if n > 0 && !src.is_null() {
        // SAFETY: the caller's address buffer.
        unsafe { rgetpeername(s, src, alen) };
    }
    n
}

/// Copies an address from the identifier's route into the caller's buffer.
unsafe fn name(s: c_int, addr: *mut sockaddr, len: *mut u32, peer: bool) -> c_int {
    ret(lookup(s).and_then(|rs| {
        if addr.is_null() || len.is_null() {
            return Err(libc::EFAULT);
        }
        let id = rs.lock().id;
        // SAFETY: a live identifier; its route's addresses are sockaddr_storage.
        let a = unsafe {
            if peer {
                (*id).route.addr.dst
            } else {
                (*id).route.addr.src
            }
        };
        let full = match c_int::from(a.ss_family) {
            libc::AF_INET6 => std::mem::size_of::<libc::sockaddr_in6>(),
            _ => std::mem::size_of::<libc::sockaddr_in>(),
        };
        // SAFETY: the caller's length slot and a buffer of that many bytes.
        unsafe {
            let n = full.min(*len as usize);
            std::ptr::copy_nonoverlapping(&a as *const _ as *const u8, addr as *mut u8, n);
            *len = full as u32;
        }
        Ok(0)
    }))
}

/// `rgetpeername`.
#[no_mangle]
pub unsafe extern "C" fn rgetpeername(s: c_int, addr: *mut sockaddr, len: *mut u32) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { name(s, addr, len, true) }
}

/// `rgetsockname`.
#[no_mangle]
pub unsafe extern "C" fn rgetsockname(s: c_int, addr: *mut sockaddr, len: *mut u32) -> c_int {
    // SAFETY: forwarded contract.
    if let Some(r) = unsafe { dgram_api::sock_name(s, addr, len) } {
        return r;
    }
    // SAFETY: forwarded contract.
    unsafe { name(s, addr, len, false) }
}

/// `rsetsockopt`: buffer sizes (doubled, as rsocket.c's), queue sizes, the iomap area,
/// address reuse, keepalive (`keepalive.rs`); TCP_NODELAY and the like are taken with no
/// effect, as rsocket.c; others ENOTSUP.
#[no_mangle]
pub unsafe extern "C" fn rsetsockopt(
    s: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: u32,
) -> c_int {
    // SAFETY: forwarded contract.
    if let Some(r) = unsafe { dgram_api::set_opt(s, level, name, val, len) } {
        return r;
    }
    ret(lookup(s).and_then(|rs| {
        if val.is_null() || (len as usize) < std::mem::size_of::<c_int>() {
            return Err(EINVAL);
        }
        // SAFETY: the caller's value of at least an int (checked).
        let v = unsafe { (val as *const c_int).read_unaligned() };
        let mut st = rs.lock();
        let u = |v: c_int| u32::try_from(v).unwrap_or(0);
        match (level, name) {
            (libc::SOL_SOCKET, libc::SO_REUSEADDR) => {
                // SAFETY: a live identifier and the caller's int.
                if unsafe { rdma_set_option(st.id, 0, 1, val as *mut c_void, len as usize) } != 0 {
                    return Err(super::super::error::errno());
                }
            }
            (libc::SOL_SOCKET, libc::SO_SNDBUF) if st.conn.is_none() => {
                st.sizes.sbuf = u(v).saturating_mul(2).max(4096)
            }
            (libc::SOL_SOCKET, libc::SO_RCVBUF) if st.conn.is_none() => {
                st.sizes.rbuf = u(v).saturating_mul(2).max(4096)
            }
            (libc::SOL_SOCKET, libc::SO_SNDBUF | libc::SO_RCVBUF) => {}
            (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => {
                st.keepalive = v != 0;
                if st.keepalive {
                    if st.keepalive_time == 0 {
                        st.keepalive_time = keepalive::default_time();
                    }
                    drop(st);
                    keepalive::start();
                }
            }
            (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => {
                st.keepalive_time = u32::try_from(v).ok().filter(|&t| t > 0).ok_or(EINVAL)?;
                st.keepalive_next = None;
            }
            (libc::SOL_SOCKET, libc::SO_LINGER) => {}
            (libc::IPPROTO_TCP, libc::TCP_NODELAY | libc::TCP_MAXSEG) => {}
            (libc::IPPROTO_TCP, libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL) => {}
            (SOL_RDMA, 0) => st.sizes.sq = u(v).clamp(2, 65535) as u16,
            (SOL_RDMA, 1) => st.sizes.rq = u(v).clamp(2, 65535) as u16,
            (SOL_RDMA, 3) if st.conn.is_none() => {
                let scaled = value_to_scale(u(v).min(u32::from(u16::MAX)), 8);
                st.sizes.iomap = scale_to_value(scaled, 8).min(u32::from(u16::MAX)) as u16;
            }
            (SOL_RDMA, 2 | 3) => {}
            _ => return Err(ENOTSUP),
        }
        Ok(0)
    }))
}

/// `rgetsockopt`: SO_ERROR (once), the buffer sizes, keepalive; others ENOTSUP.
#[no_mangle]
pub unsafe extern "C" fn rgetsockopt(
    s: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut u32,
) -> c_int {
    ret(lookup(s).and_then(|rs| {
        // SAFETY: the caller's length slot, checked non-null.
        if val.is_null() || len.is_null() || (unsafe { *len } as usize) < 4 {
            return Err(EINVAL);
        }
        let mut st = rs.lock();
        let v: u32 = match (level, name) {
            (libc::SOL_SOCKET, libc::SO_ERROR) => std::mem::take(&mut st.so_error) as u32,
            (libc::SOL_SOCKET, libc::SO_SNDBUF) => st.sizes.sbuf,
            (libc::SOL_SOCKET, libc::SO_RCVBUF) => st.sizes.rbuf,
            (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => u32::from(st.keepalive),
            (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => st.keepalive_time,
            (libc::IPPROTO_TCP, libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL) => 1,
            (libc::IPPROTO_TCP, libc::TCP_NODELAY) => 1,
            _ => return Err(ENOTSUP),
        };
        // SAFETY: the caller's buffer of at least 4 bytes (checked).
        unsafe {
            (val as *mut u32).write_unaligned(v);
            *len = 4;
        }
        Ok(0)
    }))
}

/// `rfcntl`: F_GETFL and F_SETFL (O_NONBLOCK); ENOTSUP for other commands, as rsocket.c.
#[no_mangle]
pub unsafe extern "C" fn rfcntl(s: c_int, cmd: c_int, arg: usize) -> c_int {
    if let Some(r) = dgram_api::fcntl(s, cmd, arg) {
        return r;
    }
    ret(lookup(s).and_then(|rs| {
        let mut st = rs.lock();
        match cmd {
            libc::F_GETFL => Ok(libc::O_RDWR | if st.nonblock { libc::O_NONBLOCK } else { 0 }),
            libc::F_SETFL => {
                st.nonblock = arg as c_int & libc::O_NONBLOCK != 0;
                Ok(0)
            }
            _ => Err(ENOTSUP),
        }
    }))
}

/// `riomap`: maps `len` bytes at `buf` for the peer's riowrite (PROT_WRITE) or locally
/// (PROT_NONE); the offset mapped, or -1 and errno: EINVAL for other protections or before
/// connecting, ENOMEM when the peer's iomap area is full.
#[no_mangle]
pub unsafe extern "C" fn riomap(
    s: c_int,
    buf: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    offset: libc::off_t,
) -> libc::off_t {
    let _ = flags;
    let r = lookup(s).and_then(|rs| {
        if prot & !libc::PROT_WRITE != 0 || buf.is_null() {
            return Err(EINVAL);
        }
        let mut st = rs.lock();
        let conn = st.conn.as_mut().ok_or(EINVAL)?;
        // SAFETY: the caller keeps the buffer until riounmap (riomap's contract).
        unsafe { conn.map(buf as *mut u8, len, prot & libc::PROT_WRITE != 0, offset) }
    });
    r.unwrap_or_else(|e| libc::off_t::from(fail(e)))
}

/// `riounmap`: 0, or -1 and EINVAL when no mapping is exactly `buf` and `len`.
#[no_mangle]
pub unsafe extern "C" fn riounmap(s: c_int, buf: *mut c_void, len: size_t) -> c_int {
    ret(lookup(s).and_then(|rs| {
        let mut st = rs.lock();
        let conn = st.conn.as_mut().ok_or(EINVAL)?;
        conn.unmap(buf as *mut u8, len).map(|()| 0)
    }))
}

/// `riowrite`: bytes written into the peer's mappings at `offset`, or -1 (as size_t) and
/// errno as rsend's.
#[no_mangle]
pub unsafe extern "C" fn riowrite(
    s: c_int,
    buf: *const c_void,
    count: size_t,
    offset: libc::off_t,
    flags: c_int,
) -> size_t {
    let r = lookup(s).and_then(|rs| {
        if (buf.is_null() && count > 0) || offset < 0 {
            return Err(EINVAL);
        }
        if count == 0 {
            return Ok(0);
        }
        // SAFETY: the caller's buffer of `count` readable bytes.
        let b = unsafe { std::slice::from_raw_parts(buf as *const u8, count) };
        rs.iowrite(b, offset as u64, flags)
    });
    ret_len(r) as size_t
}
