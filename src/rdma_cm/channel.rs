//! The event channel (`rdma_event_channel`), the identifiers (`rdma_cm_id`, whose calls are in
//! id.rs) and the state they share, and the CM events turned into rdma_cm events.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::cm::{CmCounters, CmEvent, ConnId, PeerParams, RejectInfo, SidrReply, SidrRequest};
use crate::driver::device::Device;
use crate::driver::gsi::GSI_QPN;
use crate::verbs::Context;
use crate::wire::cm::{rej_reason, sidr_status};
use crate::wire::cma::CmaHeader;
use crate::wire::psn::random_start;

use super::error::{RdmaCmError, Result};
use super::event::EventKind;
use super::params::{
    ConnParam, PortSpace, UdParam, RDMA_UDP_QKEY, STATUS_INVALID, STATUS_TIMED_OUT,
};
use super::state::{active_connect, IdState, Phase};

/// An rdma_cm event.
#[derive(Debug, Clone)]
pub struct RdmaCmEvent {
    /// The identifier the event is about.
    pub id: CmId,
    /// For a connect request: the listening identifier it arrived on.
    pub listen_id: Option<CmId>,
    /// What happened.
    pub kind: EventKind,
    /// The peer's private data (connect request: without rdma_cm's header; established
    /// on the active side: the REP's; rejected: the REJ's).
    pub private_data: Vec<u8>,
    /// For a connect request: the requester's parameters.
    pub param: Option<ConnParam>,
    /// For a UD identifier's connect request and established events: the peer's datagram
    /// address, QP and Q_Key.
    pub ud: Option<UdParam>,
    /// rdma_cm's `event->status`: 0, or for [`EventKind::Unreachable`]
    /// [`STATUS_TIMED_OUT`] (no answer), a UD peer's SIDR status (it refused) or
    /// [`STATUS_INVALID`]; for [`EventKind::Rejected`] the REJ's reason.
    pub status: i32,
}

#[derive(Debug)]
pub(super) struct Shared {
    pub(super) dev: Arc<Device>,
    pub(super) state: Mutex<ChannelState>,
}

#[derive(Debug, Default)]
pub(super) struct ChannelState {
    pub(super) conns: HashMap<ConnId, CmId>,
    pub(super) listeners: HashMap<u64, CmId>,
    pub(super) queued: VecDeque<RdmaCmEvent>,
}

/// `rdma_event_channel`: where a device's rdma_cm events arrive. Dropping it closes it.
#[derive(Debug)]
pub struct EventChannel {
    shared: Arc<Shared>,
}

/// `rdma_cm_id`: one connection (or listener). Clones name the same identifier.
#[derive(Debug, Clone)]
pub struct CmId {
    pub(super) shared: Arc<Shared>,
    pub(super) st: Arc<Mutex<IdState>>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl EventChannel {
    /// `rdma_create_event_channel` on `ctx`'s device; one at a time per device.
    pub fn new(ctx: &Context) -> Result<EventChannel> {
        let dev = Arc::clone(&ctx.dev);
        {
            let mut g = dev.gsi.lock();
            if g.channel_open {
                return Err(RdmaCmError::ChannelInUse);
            }
            g.channel_open = true;
        }
        Ok(EventChannel {
            shared: Arc::new(Shared {
                dev,
                state: Mutex::new(ChannelState::default()),
            }),
        })
    }

    /// `rdma_create_id` in the TCP port space.
    pub fn create_id(&self) -> CmId {
        self.create_id_in(PortSpace::Tcp)
    }

    /// `rdma_create_id` in port space `ps`.
    pub fn create_id_in(&self, ps: PortSpace) -> CmId {
        CmId {
            shared: Arc::clone(&self.shared),
            st: Arc::new(Mutex::new(IdState {
                phase: Phase::Idle,
                ps,
                remote: None,
                port: 0,
                conn: None,
                qp: None,
                psn: random_start().value(),
                param: ConnParam::default(),
                peer: None,
                ack_timeout: None,
                ext_qpn: None,
            })),
        }
    }

    /// What the device's connection manager counted: MADs received, dropped as malformed or
    /// unmatched, duplicates, retransmissions, rejections it sent on its own, timeouts.
    pub fn cm_counters(&self) -> CmCounters {
        self.shared.dev.gsi.lock().cm.counters()
    }

    /// `rdma_get_cm_event`: the next event, waiting at most `timeout`. Connection steps that
    /// need no decision (moving the QP on a REP and sending the RTU) happen here, as the
    /// kernel's rdma_cm does them before it reports. A connect request taken here is read:
    /// it leaves its listener's backlog ([`CmId::request_read`]).
    pub fn get_event(&self, timeout: Duration) -> Result<RdmaCmEvent> {
        let e = self.take_event(timeout)?;
        if e.kind == EventKind::ConnectRequest {
            e.id.request_read();
        }
        Ok(e)
    }

    /// As [`EventChannel::get_event`], but a connect request stays in its listener's backlog
    /// until its identifier's [`CmId::request_read`]: for a layer that queues the events for
    /// an application of its own (the librdmacm shim's dispatcher), whose backlog counts the
    /// events that application has not read, as the kernel's ucma does.
    pub fn take_event(&self, timeout: Duration) -> Result<RdmaCmEvent> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(e) = lock(&self.shared.state).queued.pop_front() {
                return Ok(e);
            }
            // A zero timeout still takes an event that is already there.
            let left = end.saturating_duration_since(Instant::now());
            match self.shared.dev.gsi.wait_event(left) {
                Some(ev) => {
                    if let Some(out) = self.shared.translate(ev) {
                        return Ok(out);
                    }
                }
                None => return Err(RdmaCmError::Timeout),
            }
        }
    }
}

impl EventChannel {
    /// Waits at most `timeout` until the engine has sent every CM message queued so far;
    /// false if it may not have. For a process about to exit: the engine is one of its
    /// threads, while the kernel's CM sends a DREQ or DREP whatever its process does next.
    /// The engine takes the messages into its transmit batch and wakes the waiters, then sends
    /// the batch in the same pass; so once none waits, two more rung passes (each waking the
    /// waiters once) put a whole pass, and its send, between the taking and the return.
    pub fn flush(&self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        self.shared.kick();
        let gsi = &self.shared.dev.gsi;
        let mut g = gsi.lock();
        while g.cm.has_transmit() {
            let Some(next) = gsi.wait_until(g, end) else {
                return false;
            };
            g = next;
        }
        for _ in 0..2 {
            self.shared.kick();
            let Some(next) = gsi.wait_until(g, end) else {
                return false;
            };
            g = next;
        }
        true
    }
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        self.shared.dev.gsi.lock().channel_open = false;
    }
}

impl Shared {
    /// Has the engine send what the CM queued.
    pub(super) fn kick(&self) {
        self.dev.ring(GSI_QPN);
    }

    pub(super) fn id_of(&self, conn: ConnId) -> Option<CmId> {
        lock(&self.state).conns.get(&conn).cloned()
    }

    pub(super) fn forget(&self, conn: ConnId) {
        lock(&self.state).conns.remove(&conn);
    }

    pub(super) fn event(id: CmId, kind: EventKind, private_data: Vec<u8>) -> RdmaCmEvent {
        RdmaCmEvent {
            id,
            listen_id: None,
            kind,
            private_data,
            param: None,
            ud: None,
            status: 0,
        }
    }

    /// Turns a CM event into an rdma_cm event (or acts on it and reports nothing yet).
    fn translate(&self, ev: CmEvent) -> Option<RdmaCmEvent> {
        match ev {
            CmEvent::ConnectRequest { conn, peer } => self.on_connect_request(conn, peer),
            CmEvent::RepReceived { conn, peer } => {
                self.on_rep(conn, peer);
                None
            }
            CmEvent::Established { conn } => {
                let id = self.id_of(conn)?;
                let pd = {
                    let mut st = lock(&id.st);
                    if st.ext_qpn.is_some() && st.phase == Phase::Connected {
                        // The active side of an external QP: CONNECT_RESPONSE was its event
                        // and `establish` sent the RTU (the kernel's rdma_cm reports nothing
                        // more).
                        return None;
                    }
                    // The active side (still connecting: its peer parameters are the REP's)
                    // reports the REP's private data with ESTABLISHED; the passive side none.
                    let active = st.phase == Phase::Connecting;
                    st.phase = Phase::Connected;
                    st.peer
                        .as_ref()
                        .filter(|_| active)
                        .map(|p| p.private_data.clone())
                        .unwrap_or_default()
                };
                Some(Self::event(id, EventKind::Established, pd))
            }
            CmEvent::Rejected {
                conn,
                reason,
                private_data,
            } => self
                .closed(conn, EventKind::Rejected { reason }, private_data)
                .map(|e| RdmaCmEvent {
                    status: i32::from(reason),
                    ..e
                }),
            CmEvent::Unreachable { conn } => self
                .closed(conn, EventKind::Unreachable, Vec::new())
                .map(|e| RdmaCmEvent {
                    status: STATUS_TIMED_OUT,
                    ..e
                }),
            CmEvent::Disconnected { conn } => {
                let id = self.id_of(conn)?;
                // The QP is left as it is: neither the kernel's rdma_cm nor librdmacm touch
                // it on the peer's DREQ (only `rdma_disconnect` moves it to ERROR). Flushing
                // its receives here put completions in the CQ of a QP that libfabric's rxm
                // was closing, and rxm reposted their buffers on the closed endpoint.
                lock(&id.st).phase = Phase::Disconnected;
                Some(Self::event(id, EventKind::Disconnected, Vec::new()))
            }
            CmEvent::SidrRequest { conn, req } => self.on_sidr_request(conn, &req),
            CmEvent::SidrReply { conn, rep } => self.on_sidr_reply(conn, &rep),
            CmEvent::TimewaitExit { conn } => {
                let id = self.id_of(conn)?;
                self.forget(conn);
                lock(&id.st).conn = None;
                Some(Self::event(id, EventKind::TimewaitExit, Vec::new()))
            }
        }
    }

    /// A connection attempt that ended (rejected, unreachable): the identifier is idle again.
    fn closed(&self, conn: ConnId, kind: EventKind, private_data: Vec<u8>) -> Option<RdmaCmEvent> {
        let id = self.id_of(conn)?;
        self.forget(conn);
        let mut st = lock(&id.st);
        st.phase = Phase::Idle;
        st.conn = None;
        drop(st);
        Some(Self::event(id, kind, private_data))
    }

    fn on_connect_request(&self, conn: ConnId, peer: Box<PeerParams>) -> Option<RdmaCmEvent> {
        let listener = lock(&self.state).listeners.get(&peer.service_id).cloned();
        let Some(listener) = listener else {
            // The listener went away between the REQ and this event.
            let info = RejectInfo {
                reason: rej_reason::INVALID_SERVICE_ID,
                private_data: Vec::new(),
            };
            let _ = self.dev.gsi.lock().cm.reject(conn, &info);
            self.kick();
            return None;
        };
        let (remote, user_data) = requester_view(peer.cma, peer.addr, &peer.private_data);
        let param = ConnParam {
            private_data: user_data.clone(),
            responder_resources: peer.responder_resources,
            initiator_depth: peer.initiator_depth,
            retry_count: peer.retry_count,
            rnr_retry_count: peer.rnr_retry_count,
        };
        let port = lock(&listener.st).port;
        let id = CmId {
            shared: Arc::clone(&listener.shared),
            st: Arc::new(Mutex::new(IdState {
                phase: Phase::ConnectRequest,
                ps: PortSpace::Tcp,
                remote: Some(remote),
                port,
                conn: Some(conn),
                qp: None,
                psn: random_start().value(),
                param: param.clone(),
                peer: Some(peer),
                ack_timeout: None,
                ext_qpn: None,
            })),
        };
        lock(&self.state).conns.insert(conn, id.clone());
        Some(RdmaCmEvent {
            id,
            listen_id: Some(listener),
            kind: EventKind::ConnectRequest,
            private_data: user_data,
            param: Some(param),
            ud: None,
            status: 0,
        })
    }

    /// A SIDR_REQ for a UD listener: a connect request whose identifier answers with a
    /// SIDR_REP (accept or reject).
    fn on_sidr_request(&self, conn: ConnId, req: &SidrRequest) -> Option<RdmaCmEvent> {
        let listener = lock(&self.state).listeners.get(&req.service_id).cloned();
        let Some(listener) = listener else {
            let mut g = self.dev.gsi.lock();
            let now = g.now();
            let _ =
                g.cm.sidr_reply(now, conn, sidr_status::UNSUPPORTED, 0, 0, &[]);
            drop(g);
            self.kick();
            return None;
        };
        let (remote, user_data) = requester_view(req.cma, req.addr, &req.private_data);
        let param = ConnParam {
            private_data: user_data.clone(),
            ..ConnParam::default()
        };
        let port = lock(&listener.st).port;
        let id = CmId {
            shared: Arc::clone(&listener.shared),
            st: Arc::new(Mutex::new(IdState {
                phase: Phase::ConnectRequest,
                ps: PortSpace::Udp,
                remote: Some(remote),
                port,
                conn: Some(conn),
                qp: None,
                psn: random_start().value(),
                param: param.clone(),
                peer: None,
                ack_timeout: None,
                ext_qpn: None,
            })),
        };
        lock(&self.state).conns.insert(conn, id.clone());
        Some(RdmaCmEvent {
            id,
            listen_id: Some(listener),
            kind: EventKind::ConnectRequest,
            private_data: user_data,
            param: Some(param),
            ud: Some(UdParam {
                addr: remote.ip(),
                qp_num: 0,
                qkey: 0,
            }),
            status: 0,
        })
    }

    /// The answer to a UD identifier's SIDR_REQ, as the kernel's cma_sidr_rep_handler turns
    /// it into an event: ESTABLISHED with the peer's QPN and Q_Key when it accepted with
    /// rdma_cm's Q_Key; UNREACHABLE with the SIDR status when it refused.
    fn on_sidr_reply(&self, conn: ConnId, rep: &SidrReply) -> Option<RdmaCmEvent> {
        let id = self.id_of(conn)?;
        self.forget(conn);
        let mut st = lock(&id.st);
        st.conn = None;
        let (kind, status) = match (rep.status, rep.qkey) {
            (sidr_status::SUCCESS, RDMA_UDP_QKEY) => (EventKind::Established, 0),
            (sidr_status::SUCCESS, _) => (EventKind::Unreachable, STATUS_INVALID),
            (s, _) => (EventKind::Unreachable, i32::from(s)),
        };
        st.phase = if status == 0 {
            Phase::Connected
        } else {
            Phase::Idle
        };
        let addr = st.remote.map_or(rep.addr.ip(), |r| r.ip());
        drop(st);
        Some(RdmaCmEvent {
            ud: (status == 0).then_some(UdParam {
                addr,
                qp_num: rep.qpn,
                qkey: rep.qkey,
            }),
            status,
            ..Self::event(id, kind, rep.private_data.clone())
        })
    }

    /// The REP: RTR and RTS with what the responder said, then the RTU.
    fn on_rep(&self, conn: ConnId, peer: Box<PeerParams>) {
        let Some(id) = self.id_of(conn) else {
            return;
        };
        let moved = {
            let mut st = lock(&id.st);
            if st.ext_qpn.is_some() && st.qp.is_none() {
                // The application moves its QP: it hears of the REP, and sends the RTU
                // with `establish` (Linux cma.c: RDMA_CM_EVENT_CONNECT_RESPONSE when the
                // identifier has no QP).
                let data = peer.private_data.clone();
                st.peer = Some(peer);
                drop(st);
                lock(&self.state).queued.push_back(Self::event(
                    id,
                    EventKind::ConnectResponse,
                    data,
                ));
                self.kick();
                return;
            }
            let (Some(qp), Some(c)) = (st.qp.clone(), active_connect(&st, &peer)) else {
                return;
            };
            st.peer = Some(peer);
            qp.ready_to_receive(&c).and_then(|()| qp.ready_to_send(&c))
        };
        let mut g = self.dev.gsi.lock();
        if moved.is_ok() {
            let _ = g.cm.establish(conn);
        } else {
            let info = RejectInfo {
                reason: rej_reason::CONSUMER_DEFINED,
                private_data: Vec::new(),
            };
            let _ = g.cm.reject(conn, &info);
            // Reported as the peer being unreachable: the connection cannot be used.
            drop(g);
            self.forget(conn);
            lock(&self.state)
                .queued
                .push_back(Self::event(id, EventKind::Unreachable, Vec::new()));
            self.kick();
            return;
        }
        drop(g);
        self.kick();
    }
}

/// Who sent a connect request (REQ or SIDR_REQ) and what it says to the application: with
/// rdma_cm's header, the address and port the header names and the private data after it;
/// without (a plain IB CM requester), the packet's source and all of the private data.
fn requester_view(
    cma: Option<CmaHeader>,
    from: SocketAddr,
    private_data: &[u8],
) -> (SocketAddr, Vec<u8>) {
    match cma {
        Some(h) => (
            SocketAddr::new(h.src_addr, h.src_port),
            private_data
                .get(CmaHeader::LEN..)
                .unwrap_or_default()
                .to_vec(),
        ),
        None => (from, private_data.to_vec()),
    }
}
