//! Datagram (SOCK_DGRAM) rsockets, as rsocket.c's `ds_*` functions: each stands on a real
//! UDP socket (its handle, `ds_init`) and owns one UD QP per local source address
//! (`ds_get_qp`), a map from destination address to the QP, address handle and QPN to send
//! to (`ds_get_dest`), and the queue of received datagrams (`dmsg`). Until a destination's
//! QPN is known a datagram goes over the UDP socket with a `ds_udp_header`; the UDP service
//! (`udp_svc.rs`) answers, learns the peer's QPN and makes the address handle
//! (spec-notes: rsockets.md R6, R7, R17-R20).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use libc::{c_int, MSG_DONTWAIT, MSG_PEEK};

use super::super::{device, locate};
use super::proto::{ds_header_decode, ds_udp_header};
use super::ud::{UdQp, GRH, RECV_ID, SLOT};
use crate::ffi::ibv_ah;

/// `RS_OP_DATA` in a `ds_udp_header`: a datagram carried over UDP.
pub(super) const UDP_OP_DATA: u8 = 0;
/// `RS_OP_CTRL` in a `ds_udp_header`: the reply that tells the sender our QPN.
pub(super) const UDP_OP_CTRL: u8 = 7;
/// `def_sqsize`/`def_rqsize`, cut to the buffer (`ds_set_qp_size`).
const DEF_QSIZE: u32 = 384;
/// The default send and receive buffer (`def_wmem`, `def_mem`).
const DEF_BUF: u32 = 1 << 17;
/// `RS_QP_MIN_SIZE`.
const MIN_QSIZE: u32 = 16;

/// Where datagrams to one address go (`struct ds_dest`).
pub(super) struct Dest {
    /// Index of the QP in `DsState::qps`.
    pub(super) qp: usize,
    /// The address handle to the peer's QP, once the UDP service learnt its QPN.
    pub(super) ah: *mut ibv_ah,
    /// The peer's QPN.
    pub(super) qpn: u32,
}

/// A received datagram waiting in its QP's receive slot (`struct ds_rmsg`).
struct Rmsg {
    qp: usize,
    offset: u32,
    /// Bytes after the GRH: the ds header and the payload.
    len: usize,
}

/// A datagram rsocket's state, under its lock.
pub(super) struct DsState {
    pub(super) qps: Vec<UdQp>,
    pub(super) dests: HashMap<SocketAddr, Dest>,
    /// The destination of rsend (rconnect's, or rsendto's last: `conn_dest`).
    conn: Option<SocketAddr>,
    rmsgs: VecDeque<Rmsg>,
    pub(super) nonblock: bool,
    sbuf: u32,
    rbuf: u32,
}

/// A datagram rsocket.
pub(super) struct Ds {
    /// Its UDP socket, also its handle.
    pub(super) fd: c_int,
    state: Mutex<DsState>,
    /// Set by rclose to stop the UDP service thread.
    pub(super) stop: AtomicBool,
    /// Set while the UDP service waits for the lock: the application's calls, which may
    /// retake it in a tight loop (a non-blocking receive polled until data comes), let it in
    /// first; a futex mutex alone would let them starve the service.
    svc_waiting: AtomicBool,
    svc: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Drop for Ds {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        for d in st.dests.values() {
            if !d.ah.is_null() {
                // SAFETY: an AH of ours, destroyed once, before its QP's PD (qps drop next).
                unsafe { crate::ibv_destroy_ah(d.ah) };
            }
        }
        st.dests.clear();
        st.qps.clear();
        // SAFETY: our UDP socket, closed once.
        unsafe { libc::close(self.fd) };
    }
}

// SAFETY: the raw AH pointers are the shim's thread-safe verbs objects, used under the lock.
unsafe impl Send for DsState {}

static TABLE: Mutex<Option<HashMap<c_int, Arc<Ds>>>> = Mutex::new(None);

/// The datagram rsocket of handle `fd`, if it is one.
pub(super) fn lookup(fd: c_int) -> Option<Arc<Ds>> {
    super::super::error::lock(&TABLE)
        .as_ref()?
        .get(&fd)
        .cloned()
}

fn errno() -> c_int {
    super::super::error::errno()
}

impl Ds {
    /// `rsocket(SOCK_DGRAM)`/`ds_init`: the rsocket on a new UDP socket of `domain`, whose
    /// fd is its handle.
    pub(super) fn open(domain: c_int) -> Result<Arc<Ds>, c_int> {
        // SAFETY: a plain socket call.
        let fd = unsafe { libc::socket(domain, libc::SOCK_DGRAM, 0) };
        if fd < 0 {
            return Err(errno());
        }
        let ds = Arc::new(Ds {
            fd,
            state: Mutex::new(DsState {
                qps: Vec::new(),
                dests: HashMap::new(),
                conn: None,
                rmsgs: VecDeque::new(),
                nonblock: false,
                sbuf: DEF_BUF,
                rbuf: DEF_BUF,
            }),
            stop: AtomicBool::new(false),
            svc_waiting: AtomicBool::new(false),
            svc: Mutex::new(None),
        });
        super::super::error::lock(&TABLE)
            .get_or_insert_with(HashMap::new)
            .insert(fd, ds.clone());
        Ok(ds)
    }

    /// Records the rsocket's UDP service thread, which rclose stops and joins.
    pub(super) fn set_service(&self, h: std::thread::JoinHandle<()>) {
        *super::super::error::lock(&self.svc) = Some(h);
    }

    /// The rsocket's state, for the application's calls: after the UDP service if it waits.
    pub(super) fn lock(&self) -> MutexGuard<'_, DsState> {
        let mut tries = 0;
        while self.svc_waiting.load(Ordering::Acquire) && tries < 10_000 {
            tries += 1;
            std::thread::yield_now();
        }
        super::super::error::lock(&self.state)
    }

    /// The rsocket's state, for the UDP service thread (see `svc_waiting`).
    pub(super) fn lock_for_service(&self) -> MutexGuard<'_, DsState> {
        self.svc_waiting.store(true, Ordering::Release);
        let g = super::super::error::lock(&self.state);
        self.svc_waiting.store(false, Ordering::Release);
        g
    }

    /// `rclose`: forgets the handle, stops the service thread; the QPs, AHs and the UDP
    /// socket go when the last reference does.
    pub(super) fn close(fd: c_int) -> Result<(), c_int> {
        let ds = super::super::error::lock(&TABLE)
            .as_mut()
            .and_then(|t| t.remove(&fd))
            .ok_or(libc::EBADF)?;
        ds.stop.store(true, Ordering::SeqCst);
        if let Some(h) = super::super::error::lock(&ds.svc).take() {
            let _ = h.join();
        }
        Ok(())
    }

    /// SO_SNDBUF/SO_RCVBUF: the buffers (twice the value, as rsocket.c) the next QP gets.
    pub(super) fn set_buf(&self, send: bool, value: u32) {
        let mut st = self.lock();
        let v = value.saturating_mul(2).max(SLOT as u32 * MIN_QSIZE);
        if send {
            st.sbuf = v;
        } else {
            st.rbuf = v;
        }
    }

    /// `rconnect`: connects the UDP socket and makes `addr` the destination of rsend.
    pub(super) fn connect(&self, addr: *const libc::sockaddr, len: u32) -> Result<(), c_int> {
        if !addr.is_null() && len as usize >= std::mem::size_of::<libc::sockaddr_in>() {
            // SAFETY: the caller's address, at least a sockaddr_in long.
            if let Ok(dst) = unsafe { super::super::addr::sockaddr_from_c(addr) } {
                bind_to_device(self.fd, dst)?;
            }
        }
        // SAFETY: the caller's address of `len` bytes, checked by the kernel.
        if unsafe { libc::connect(self.fd, addr, len) } != 0 {
            return Err(errno());
        }
        // SAFETY: the kernel accepted it as an address of its family.
        let dst = unsafe { super::super::addr::sockaddr_from_c(addr)? };
        let mut st = self.lock();
        st.get_dest(self.fd, dst)?;
        st.conn = Some(dst);
        Ok(())
    }

    /// `rsendto`/`dsend`: one datagram to `dst` (None: the connected destination).
    pub(super) fn send_to(
        &self,
        dst: Option<SocketAddr>,
        buf: &[u8],
        flags: c_int,
    ) -> Result<usize, c_int> {
        let mut tries = 0;
        loop {
            let mut st = self.lock();
            let nonblock = st.nonblock || flags & MSG_DONTWAIT != 0;
            if let Some(d) = dst {
                if st.conn != Some(d) {
                    bind_to_device(self.fd, d)?;
                    st.get_dest(self.fd, d)?;
                    st.conn = Some(d);
                }
            }
            let to = st.conn.ok_or(libc::EDESTADDRREQ)?;
            let (qp, ah, qpn) = match st.dests.get(&to) {
                Some(d) => (d.qp, d.ah, d.qpn),
                None => return Err(libc::EDESTADDRREQ),
            };
            let q = &st.qps[qp];
            if buf.len() + q.hdr.len() > SLOT.min(q.mtu) {
                return Err(libc::EMSGSIZE);
            }
            if ah.is_null() {
                return send_udp(self.fd, &st.qps[qp], to, buf, UDP_OP_DATA, flags);
            }
            st.poll_cqs();
            let q = &mut st.qps[qp];
            let hdr = q.hdr.clone();
            match q.send(ah, qpn, &hdr, buf) {
                Ok(()) => return Ok(buf.len()),
                Err(libc::EAGAIN) if !nonblock => {}
                Err(e) => return Err(e),
            }
            drop(st);
            super::io::back_off(&mut tries);
        }
    }

    /// `rrecvfrom`/`ds_recvfrom`: the next datagram's payload (cut to `buf`) and its source.
    pub(super) fn recv_from(
        &self,
        buf: &mut [u8],
        flags: c_int,
    ) -> Result<(usize, SocketAddr), c_int> {
        let mut tries = 0;
        loop {
            let mut st = self.lock();
            let nonblock = st.nonblock || flags & MSG_DONTWAIT != 0;
            if st.rmsgs.is_empty() {
                st.poll_cqs();
            }
            if let Some(m) = st.rmsgs.front() {
                let (qp, offset, len) = (m.qp, m.offset, m.len);
                let bytes = st.qps[qp].slot(offset, len);
                let (src, hlen) = ds_header_decode(bytes).ok_or(libc::EIO)?;
                let n = (len - hlen).min(buf.len());
                buf[..n].copy_from_slice(&bytes[hlen..hlen + n]);
                if flags & MSG_PEEK == 0 {
                    st.rmsgs.pop_front();
                    st.qps[qp].post_recv(offset)?;
                }
                return Ok((n, src));
            }
            if nonblock {
                return Err(libc::EAGAIN);
            }
            drop(st);
            super::io::back_off(&mut tries);
        }
    }

    /// rpoll's view (`rs_poll_rs` of a datagram rsocket): readable with a datagram queued,
    /// writable while a send slot is free or the destination is still reached over UDP.
    pub(super) fn revents(&self, events: i16) -> i16 {
        let mut st = self.lock();
        st.poll_cqs();
        let mut r = 0;
        if !st.rmsgs.is_empty() {
            r |= libc::POLLIN;
        }
        let can_send = match st.conn.and_then(|c| st.dests.get(&c)) {
            Some(d) => d.ah.is_null() || !st.qps[d.qp].free.is_empty(),
            None => true,
        };
        if can_send {
            r |= libc::POLLOUT;
        }
        r & events
    }
}

impl DsState {
    fn qsizes(&self) -> (u32, u32) {
        let cut = |buf: u32| DEF_QSIZE.min(buf / SLOT as u32).max(MIN_QSIZE);
        (cut(self.sbuf), cut(self.rbuf))
    }

    /// `ds_get_dest`: the destination record of `dst`, making the QP of the local address
    /// that reaches it (`ds_get_src_addr`, `ds_get_qp`) when needed.
    pub(super) fn get_dest(&mut self, udp: c_int, dst: SocketAddr) -> Result<&mut Dest, c_int> {
        if !self.dests.contains_key(&dst) {
            let src = src_addr(udp, dst)?;
            let qp = match self.qps.iter().position(|q| q.src == src) {
                Some(i) => i,
                None => {
                    let (sq, rq) = self.qsizes();
                    self.qps.push(UdQp::new(src, sq, rq)?);
                    self.qps.len() - 1
                }
            };
            let d = Dest {
                qp,
                ah: std::ptr::null_mut(),
                qpn: 0,
            };
            self.dests.insert(dst, d);
        }
        self.dests.get_mut(&dst).ok_or(libc::EINVAL)
    }

    /// `ds_poll_cqs`: takes every QP's completions; a valid receive is queued while there is
    /// room for it (else reposted: the datagram is dropped), a send frees its slot.
    pub(super) fn poll_cqs(&mut self) {
        let room = self.qsizes().1 as usize;
        for i in 0..self.qps.len() {
            while let Some(wc) = self.qps[i].poll() {
                if wc.wr_id & RECV_ID == 0 {
                    self.qps[i].free.push(wc.wr_id as u32);
                    continue;
                }
                let offset = (wc.wr_id & !RECV_ID) as u32;
                let len = (wc.byte_len as usize).saturating_sub(GRH);
                let valid = wc.status == 0
                    && wc.byte_len as usize >= GRH + 8
                    && ds_header_decode(self.qps[i].slot(offset, len)).is_some();
                if valid && self.rmsgs.len() < room {
                    self.rmsgs.push_back(Rmsg { qp: i, offset, len });
                } else {
                    let _ = self.qps[i].post_recv(offset);
                }
            }
        }
    }
}

/// `ds_get_src_addr`: the UDP socket's own address, or when that is a wildcard, the address
/// the kernel would send from to `dst`, with the socket's port. An address that is no
/// softroce device's (a socket bound to a wildcard, which the kernel then sends from
/// 127.0.0.1) is replaced by the device's that reaches `dst` (spec-notes: rsockets.md R20).
fn src_addr(udp: c_int, dst: SocketAddr) -> Result<SocketAddr, c_int> {
    let mut own = sock_name(udp)?;
    let ip = if own.ip().is_unspecified() {
        route_src(dst)?
    } else {
        own.ip()
    };
    own.set_ip(match locate::device_of_ip(ip) {
        Some(_) => ip,
        None => device_ip(dst),
    });
    Ok(own)
}

/// The source address of the kernel's route to `dst` (a UDP socket connected there).
fn route_src(dst: SocketAddr) -> Result<std::net::IpAddr, c_int> {
    let fam = if dst.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: a plain socket call; the socket is closed below.
    let s = unsafe { libc::socket(fam, libc::SOCK_DGRAM, 0) };
    if s < 0 {
        return Err(errno());
    }
    let (ss, len) = super::super::addr::sockaddr_to_c(dst);
    // SAFETY: our socket and address.
    let r = if unsafe { libc::connect(s, &ss as *const _ as *const libc::sockaddr, len) } == 0 {
        sock_name(s)
    } else {
        Err(errno())
    };
    // SAFETY: ours, closed once.
    unsafe { libc::close(s) };
    Ok(r?.ip())
}

/// The address of the device that reaches `dst` (rdma_resolve_addr's choice without a
/// source).
fn device_ip(dst: SocketAddr) -> std::net::IpAddr {
    device::device_addr(locate::route_device(dst.ip())).ip()
}

/// An unbound UDP socket is bound to the address of the device that reaches `dst` before
/// it sends or connects: the kernel would pick the host's source address (127.0.0.1 on
/// loopback), where no softroce device is, so the peer would answer and address its UD
/// datagrams there; on kernel rxe the device owns the kernel's source address (softroce's
/// devices each own one address, spec-notes: rsockets.md R20).
fn bind_to_device(udp: c_int, dst: SocketAddr) -> Result<(), c_int> {
    if sock_name(udp)?.port() != 0 {
        return Ok(());
    }
    let (ss, len) = super::super::addr::sockaddr_to_c(SocketAddr::new(device_ip(dst), 0));
    // SAFETY: our socket and address.
    if unsafe { libc::bind(udp, &ss as *const _ as *const libc::sockaddr, len) } != 0 {
        return Err(errno());
    }
    Ok(())
}

/// getsockname of a kernel socket.
pub(super) fn sock_name(fd: c_int) -> Result<SocketAddr, c_int> {
    // SAFETY: plain data, zero is valid.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: a writable storage of `len` bytes.
    if unsafe { libc::getsockname(fd, &mut ss as *mut _ as *mut libc::sockaddr, &mut len) } != 0 {
        return Err(errno());
    }
    // SAFETY: the kernel wrote an address of its family.
    unsafe { super::super::addr::sockaddr_from_c(&ss as *const _ as *const libc::sockaddr) }
}

/// `ds_send_udp`: `payload` over the UDP socket to `to`, behind a `ds_udp_header` naming
/// the QP `qp` (its QPN and address); the payload bytes sent.
pub(super) fn send_udp(
    fd: c_int,
    qp: &UdQp,
    to: SocketAddr,
    payload: &[u8],
    op: u8,
    flags: c_int,
) -> Result<usize, c_int> {
    let mut b = ds_udp_header(op, qp.qpn, &qp.src.ip());
    let hlen = b.len();
    b.extend_from_slice(payload);
    let (ss, len) = super::super::addr::sockaddr_to_c(to);
    // SAFETY: our socket, a buffer of `b.len()` bytes and an address of `len` bytes.
    let n = unsafe {
        libc::sendto(
            fd,
            b.as_ptr() as *const libc::c_void,
            b.len(),
            flags,
            &ss as *const _ as *const libc::sockaddr,
            len,
        )
    };
    if n < 0 {
        return Err(errno());
    }
    Ok((n as usize).saturating_sub(hlen))
}
