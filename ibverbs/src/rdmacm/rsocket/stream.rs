//! A stream rsocket: its own event channel (whose fd is its handle, see `table.rs`), its
//! identifier, and once connected its [`Conn`]. Connecting follows `rs_do_connect`
//! (resolve address, resolve route, `rs_create_ep`, connect with `rs_conn_data`, save the
//! reply's), accepting follows `rs_accept` (spec-notes: rsockets.md R1, R2, R11).

use std::ptr::null_mut;
use std::sync::{Arc, Mutex, MutexGuard};

use libc::{c_int, c_void, sockaddr};

use super::conn::{Conn, Sizes};
use super::proto::{ConnData, CONN_DATA_LEN, CTRL_DISCONNECT, CTRL_SHUTDOWN};
use crate::rdmacm::ffi::*;
use crate::rdmacm::{
    rdma_ack_cm_event, rdma_connect, rdma_create_event_channel, rdma_create_id,
    rdma_destroy_event_channel, rdma_destroy_id, rdma_get_cm_event, rdma_migrate_id,
    rdma_resolve_addr, rdma_resolve_route,
};

/// Address and route resolution timeout handed to rdma_cm (rsocket.c: 1000 << retries).
const RESOLVE_MS: c_int = 2000;

/// What the rsocket's calls change.
pub(super) struct St {
    pub(super) id: *mut rdma_cm_id,
    pub(super) sizes: Sizes,
    /// `O_NONBLOCK` of `rfcntl` (`fs_flags`).
    pub(super) nonblock: bool,
    pub(super) listening: bool,
    pub(super) conn: Option<Conn>,
    /// A connect that failed: what SO_ERROR reports once.
    pub(super) so_error: c_int,
    /// SO_KEEPALIVE (`RS_OPT_KEEPALIVE`).
    pub(super) keepalive: bool,
    /// TCP_KEEPIDLE seconds; 0 until set or keepalive turned on.
    pub(super) keepalive_time: u32,
    /// When the next keepalive is due.
    pub(super) keepalive_next: Option<std::time::Instant>,
}

/// One rsocket.
pub(super) struct Rs {
    /// Its handle: the event channel's fd.
    pub(super) fd: c_int,
    chan: *mut rdma_event_channel,
    pub(super) st: Mutex<St>,
}

// SAFETY: the raw pointers are the shim's rdma_cm objects, which are thread-safe; the
// identifier is used only under `st`'s lock, the channel only for its own blocking reads.
unsafe impl Send for Rs {}
// SAFETY: as above.
unsafe impl Sync for Rs {}

/// A CM event taken from a channel, acknowledged when dropped.
struct Event(*mut rdma_cm_event);

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: an outstanding event of ours, acknowledged once.
        unsafe { rdma_ack_cm_event(self.0) };
    }
}

impl Event {
    /// The next event of `chan` (blocking unless its fd is non-blocking).
    fn next(chan: *mut rdma_event_channel) -> Result<Event, c_int> {
        let mut ev = null_mut();
        // SAFETY: a live channel of ours and a local slot.
        if unsafe { rdma_get_cm_event(chan, &mut ev) } != 0 {
            return Err(super::super::error::errno());
        }
        Ok(Event(ev))
    }

    fn kind(&self) -> (c_int, c_int) {
        // SAFETY: live until acknowledged.
        unsafe { ((*self.0).event, (*self.0).status) }
    }

    /// The `rs_conn_data` at the start of the event's private data.
    fn conn_data(&self) -> Option<ConnData> {
        // SAFETY: live until acknowledged; a connect request's or reply's parameters.
        let p = unsafe { (*self.0).param.conn };
        if p.private_data.is_null() || usize::from(p.private_data_len) < CONN_DATA_LEN {
            return None;
        }
        // SAFETY: the shim's private data holds `private_data_len` bytes.
        let b = unsafe { std::slice::from_raw_parts(p.private_data as *const u8, CONN_DATA_LEN) };
        ConnData::decode(b)
    }
}

/// Waits for `want` on `chan`: the event, or the errno of librdmacm's `ucma_complete`.
fn wait_for(chan: *mut rdma_event_channel, want: c_int) -> Result<Event, c_int> {
    let ev = Event::next(chan)?;
    match ev.kind() {
        (k, 0) if k == want => Ok(ev),
        (RDMA_CM_EVENT_REJECTED, _) => Err(libc::ECONNREFUSED),
        (_, s) if s < 0 => Err(-s),
        (_, s) if s > 0 => Err(s),
        _ => Err(libc::ECONNREFUSED),
    }
}

/// A new event channel and a TCP-port-space identifier on it.
fn new_endpoint() -> Result<(*mut rdma_event_channel, *mut rdma_cm_id), c_int> {
    // SAFETY: the shim's export, no arguments.
    let chan = unsafe { rdma_create_event_channel() };
    if chan.is_null() {
        return Err(super::super::error::errno());
    }
    let mut id = null_mut();
    // SAFETY: a live channel and a local slot.
    if unsafe { rdma_create_id(chan, &mut id, null_mut(), RDMA_PS_TCP) } != 0 {
        let e = super::super::error::errno();
        // SAFETY: the channel has no identifier.
        unsafe { rdma_destroy_event_channel(chan) };
        return Err(e);
    }
    Ok((chan, id))
}

impl Rs {
    /// `rsocket(AF_INET*, SOCK_STREAM, 0)`.
    pub(super) fn open() -> Result<Arc<Rs>, c_int> {
        let (chan, id) = new_endpoint()?;
        Ok(Rs::of(chan, id, Sizes::default(), false))
    }

    fn of(chan: *mut rdma_event_channel, id: *mut rdma_cm_id, sizes: Sizes, nb: bool) -> Arc<Rs> {
        // SAFETY: a live channel.
        let fd = unsafe { (*chan).fd };
        Arc::new(Rs {
            fd,
            chan,
            st: Mutex::new(St {
                id,
                sizes,
                nonblock: nb,
                listening: false,
                conn: None,
                so_error: 0,
                keepalive: false,
                keepalive_time: 0,
                keepalive_next: None,
            }),
        })
    }

    /// The state, locked.
    pub(super) fn lock(&self) -> MutexGuard<'_, St> {
        super::super::error::lock(&self.st)
    }

    /// `rs_do_connect` done synchronously: resolve, create the endpoint, connect, save the
    /// reply's `rs_conn_data`. Errors are rconnect's errno.
    pub(super) fn connect(&self, dst: *const sockaddr) -> Result<(), c_int> {
        let mut st = self.lock();
        if st.conn.is_some() {
            return Err(libc::EISCONN);
        }
        let id = st.id;
        // SAFETY: a live identifier and the caller's checked address.
        if unsafe { rdma_resolve_addr(id, null_mut(), dst as *mut sockaddr, RESOLVE_MS) } != 0 {
            return Err(super::super::error::errno());
        }
        drop(wait_for(self.chan, RDMA_CM_EVENT_ADDR_RESOLVED)?);
        // SAFETY: a live identifier.
        if unsafe { rdma_resolve_route(id, RESOLVE_MS) } != 0 {
            return Err(super::super::error::errno());
        }
        drop(wait_for(self.chan, RDMA_CM_EVENT_ROUTE_RESOLVED)?);
        // SAFETY: the identifier is live and resolved, and outlives the Conn (rclose drops
        // the Conn before destroying it).
        let mut conn = unsafe { Conn::new(id, st.sizes)? };
        let mine = conn.conn_data().encode();
        let mut param = conn_param(&mine);
        // SAFETY: a live identifier with its QP, parameters pointing at live bytes.
        if unsafe { rdma_connect(id, &mut param) } != 0 {
            return Err(super::super::error::errno());
        }
        let ev = wait_for(self.chan, RDMA_CM_EVENT_ESTABLISHED)?;
        let peer = ev.conn_data().ok_or(libc::ENOTSUP)?;
        drop(ev);
        conn.save(&peer);
        st.conn = Some(conn);
        Ok(())
    }

    /// `rs_accept` + `raccept`: the next connect request, answered with our `rs_conn_data`
    /// on an identifier moved to its own channel (its handle), once established. A request
    /// that fails is rejected or dropped and the next one taken, as rsocket.c's listen service
    /// does; a non-blocking listener fails with EAGAIN when none waits.
    pub(super) fn accept(&self) -> Result<Arc<Rs>, c_int> {
        let (sizes, nb) = {
            let st = self.lock();
            if !st.listening {
                return Err(libc::EINVAL);
            }
            (st.sizes, st.nonblock)
        };
        loop {
            if nb && !request_waiting(self.fd) {
                return Err(libc::EAGAIN);
            }
            let ev = Event::next(self.chan)?;
            let (kind, status) = ev.kind();
            if kind != RDMA_CM_EVENT_CONNECT_REQUEST || status != 0 {
                continue; // a listener's other events concern no new connection
            }
            // SAFETY: live until acknowledged.
            let child = unsafe { (*ev.0).id };
            let peer = ev.conn_data();
            drop(ev);
            let Some(peer) = peer else {
                // SAFETY: the child is ours until given a handle.
                unsafe {
                    crate::rdmacm::rdma_reject(child, std::ptr::null(), 0);
                    rdma_destroy_id(child);
                }
                continue;
            };
            if let Some(rs) = Rs::answer(child, &peer, sizes, nb) {
                return Ok(rs);
            }
        }
    }

    /// Answers one connect request on `child`: its own channel, the endpoint, the accept,
    /// ESTABLISHED. `None` when any step fails; the request is then rejected (or the
    /// connection closed) and everything made for it freed.
    fn answer(child: *mut rdma_cm_id, peer: &ConnData, sizes: Sizes, nb: bool) -> Option<Arc<Rs>> {
        // SAFETY: the shim's export, no arguments.
        let chan = unsafe { rdma_create_event_channel() };
        // SAFETY: a live identifier and channel.
        if chan.is_null() || unsafe { rdma_migrate_id(child, chan) } != 0 {
            // SAFETY: the child is ours; the channel (if made) has no identifier.
            unsafe {
                crate::rdmacm::rdma_reject(child, std::ptr::null(), 0);
                rdma_destroy_id(child);
                if !chan.is_null() {
                    rdma_destroy_event_channel(chan);
                }
            }
            return None;
        }
        let rs = Rs::of(chan, child, sizes, nb);
        let up = (|| {
            // SAFETY: the child is live and outlives the Conn (rclose order).
            let mut conn = unsafe { Conn::new(child, sizes)? };
            conn.save(peer);
            let mine = conn.conn_data().encode();
            let mut param = conn_param(&mine);
            // SAFETY: a live identifier with its QP, parameters pointing at live bytes.
            if unsafe { crate::rdmacm::rdma_accept(child, &mut param) } != 0 {
                return Err(super::super::error::errno());
            }
            rs.lock().conn = Some(conn);
            wait_for(chan, RDMA_CM_EVENT_ESTABLISHED).map(drop)
        })();
        if up.is_err() {
            // SAFETY: the child is ours; rejecting an accepted one fails harmlessly.
            unsafe { crate::rdmacm::rdma_reject(child, std::ptr::null(), 0) };
            rs.close();
            return None;
        }
        Some(rs)
    }

    /// `rshutdown` (R12): SHUT_RDWR sends DISCONNECT, SHUT_WR sends SHUTDOWN (DISCONNECT
    /// when reading was shut already), SHUT_RD only stops reading unless writing is shut
    /// too; then waits until every message posted has completed or the connection is down.
    pub(super) fn shutdown(&self, how: c_int) -> Result<(), c_int> {
        let mut tries = 0;
        let mut sent = false;
        loop {
            {
                let mut st = self.lock();
                let conn = st.conn.as_mut().ok_or(libc::ENOTCONN)?;
                conn.poll();
                if !sent && conn.connected() {
                    let ctrl = match how {
                        libc::SHUT_RDWR => Some(CTRL_DISCONNECT),
                        libc::SHUT_WR if conn.flow.readable => Some(CTRL_SHUTDOWN),
                        libc::SHUT_WR => Some(CTRL_DISCONNECT),
                        libc::SHUT_RD if conn.flow.writable => None,
                        libc::SHUT_RD => Some(CTRL_DISCONNECT),
                        _ => return Err(libc::EINVAL),
                    };
                    if how != libc::SHUT_WR {
                        conn.flow.readable = false;
                    }
                    if how != libc::SHUT_RD {
                        conn.flow.writable = false;
                    }
                    match ctrl {
                        None => return Ok(()),
                        Some(c) => sent = conn.send_ctrl(c),
                    }
                }
                if sent && conn.all_sends_done() || !conn.connected() {
                    return Ok(());
                }
            }
            super::io::back_off(&mut tries);
        }
    }

    /// `rclose`: rshutdown(SHUT_RDWR) when connected, then the endpoint, identifier and
    /// channel go (`rs_free`).
    pub(super) fn close(&self) {
        let up = self.lock().conn.as_ref().is_some_and(|c| c.connected());
        if up {
            let _ = self.shutdown(libc::SHUT_RDWR);
        }
        let mut st = self.lock();
        st.conn = None;
        // SAFETY: the Conn (QP) is gone; the identifier and the channel are ours.
        unsafe {
            rdma_destroy_id(st.id);
            let fd = (*self.chan).fd;
            let fl = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        while let Ok(ev) = Event::next(self.chan) {
            drop(ev);
        }
        // SAFETY: no identifier is on it any more and its events are acknowledged.
        unsafe { rdma_destroy_event_channel(self.chan) };
    }
}

/// Whether the listener's channel holds an event (a connect request) now.
fn request_waiting(fd: c_int) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd of ours, no wait.
    unsafe { libc::poll(&mut p, 1, 0) > 0 }
}

/// rs_do_connect's parameters: our private data, flow control, retries 7.
fn conn_param(private: &[u8; CONN_DATA_LEN]) -> rdma_conn_param {
    rdma_conn_param {
        private_data: private.as_ptr() as *const c_void,
        private_data_len: CONN_DATA_LEN as u8,
        responder_resources: 0,
        initiator_depth: 0,
        flow_control: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: 0,
        qp_num: 0,
    }
}
