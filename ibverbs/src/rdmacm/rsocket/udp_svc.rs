//! The UDP service of a datagram rsocket (rsocket.c's `udp_svc_run`, `udp_svc_process_rs`):
//! a thread that reads the rsocket's UDP socket. A valid `ds_udp_header` names the sender's
//! QPN; the service finds (or makes) the destination of the sender's address, answers a DATA
//! header with a CTRL header carrying our own QPN, makes the address handle to the sender's
//! QP when it has none or the QPN changed, and hands a DATA datagram's payload to the
//! application by sending it over UD to its own QP behind a `ds_header` of the sender's
//! address (`udp_svc_forward`). rsocket.c runs one such thread for every datagram rsocket
//! of the process; softroce runs one per rsocket, stopped by rclose
//! (spec-notes: rsockets.md R7, R19).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

use libc::c_int;

use super::dgram::{send_udp, Ds, UDP_OP_CTRL, UDP_OP_DATA};
use super::proto::{ds_header, DS_UDP_TAG};
use super::ud::SLOT;

/// How long one wait for a datagram lasts before the stop flag is checked again (ms).
const TICK_MS: c_int = 50;
/// Tries to find a free send slot for a forwarded datagram before dropping it.
const FORWARD_TRIES: u32 = 400;

/// Starts the service thread of `ds`.
pub(super) fn start(ds: Arc<Ds>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; SLOT];
        while !ds.stop.load(Ordering::SeqCst) {
            let mut p = libc::pollfd {
                fd: ds.fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd of ours.
            if unsafe { libc::poll(&mut p, 1, TICK_MS) } > 0 {
                if let Some((n, from)) = recv(ds.fd, &mut buf) {
                    process(&ds, &buf[..n], from);
                }
            }
        }
    })
}

/// One datagram of the UDP socket, without waiting.
fn recv(fd: c_int, buf: &mut [u8]) -> Option<(usize, SocketAddr)> {
    // SAFETY: plain data, zero is valid.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: our socket, a writable buffer and address storage of the sizes given.
    let n = unsafe {
        libc::recvfrom(
            fd,
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len(),
            libc::MSG_DONTWAIT,
            &mut ss as *mut _ as *mut libc::sockaddr,
            &mut len,
        )
    };
    if n < 0 {
        return None;
    }
    // SAFETY: the kernel wrote the sender's address.
    let from =
        unsafe { super::super::addr::sockaddr_from_c(&ss as *const _ as *const libc::sockaddr) };
    Some((n as usize, from.ok()?))
}

/// `udp_svc_valid_udp_hdr`: the header's op, QPN and length when its tag is DS_UDP_TAG and
/// its version and length match the sender's address family (IPv4 16, IPv6 28 bytes).
pub(super) fn valid_udp_header(b: &[u8], from: &SocketAddr) -> Option<(u8, u32, usize)> {
    if b.len() < 16 || u32::from_be_bytes(b[0..4].try_into().ok()?) != DS_UDP_TAG {
        return None;
    }
    let (version, op, len) = (b[4], b[5], b[6] as usize);
    let ok = match from {
        SocketAddr::V4(_) => version == 4 && len == 16,
        SocketAddr::V6(_) => version == 6 && len == 28,
    };
    if !ok || b.len() < len {
        return None;
    }
    let qpn = u32::from_be_bytes(b[8..12].try_into().ok()?) & 0xFF_FFFF;
    Some((op, qpn, len))
}

/// `udp_svc_process_rs` for one datagram `b` from `from`.
fn process(ds: &Ds, b: &[u8], from: SocketAddr) {
    let Some((op, qpn, hlen)) = valid_udp_header(b, &from) else {
        return;
    };
    let mut st = ds.lock_for_service();
    let Ok(dest) = st.get_dest(ds.fd, from) else {
        return;
    };
    let (qp, old_ah, old_qpn) = (dest.qp, dest.ah, dest.qpn);
    if op == UDP_OP_DATA {
        let _ = send_udp(ds.fd, &st.qps[qp], from, &[], UDP_OP_CTRL, 0);
    }
    if old_ah.is_null() || old_qpn != qpn {
        let made = st.qps[qp].make_ah(from);
        let Some(dest) = st.dests.get_mut(&from) else {
            return;
        };
        if !old_ah.is_null() {
            // SAFETY: our AH, replaced: no send holds it outside the lock.
            unsafe { crate::ibv_destroy_ah(old_ah) };
            dest.ah = std::ptr::null_mut();
        }
        if let Ok(ah) = made {
            dest.ah = ah;
            dest.qpn = qpn;
        }
    }
    if op == UDP_OP_DATA {
        drop(st);
        forward(ds, qp, &ds_header(&from), &b[hlen..]);
    }
}

/// `udp_svc_forward`: the payload to our own QP `qp` over UD, so that rrecvfrom finds it.
fn forward(ds: &Ds, qp: usize, hdr: &[u8], payload: &[u8]) {
    let mut tries = 0;
    while tries < FORWARD_TRIES {
        let mut st = ds.lock_for_service();
        st.poll_cqs();
        let q = &mut st.qps[qp];
        let (ah, qpn) = (q.self_ah, q.qpn);
        match q.send(ah, qpn, hdr, payload) {
            Err(libc::EAGAIN) => {}
            _ => return,
        }
        drop(st);
        super::io::back_off(&mut tries);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_header_checks_tag_family_and_length() {
        let v4: SocketAddr = "127.0.0.1:7174".parse().unwrap();
        let v6: SocketAddr = "[::1]:7174".parse().unwrap();
        let h = super::super::proto::ds_udp_header(UDP_OP_CTRL, 0x12_3456, &v4.ip());
        assert_eq!(
            valid_udp_header(&h, &v4),
            Some((UDP_OP_CTRL, 0x12_3456, 16))
        );
        assert_eq!(valid_udp_header(&h, &v6), None);
        assert_eq!(valid_udp_header(&h[..15], &v4), None);
        let mut bad = h.clone();
        bad[0] = 0x54;
        assert_eq!(valid_udp_header(&bad, &v4), None);
        let h6 = super::super::proto::ds_udp_header(UDP_OP_DATA, 9, &v6.ip());
        assert_eq!(valid_udp_header(&h6, &v6), Some((UDP_OP_DATA, 9, 28)));
    }
}
