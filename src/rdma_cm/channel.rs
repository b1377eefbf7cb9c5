//! The event channel and its communication identifiers.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::cm::{
    AcceptParams, CmCounters, CmError, CmEvent, ConnId, ConnectParams, PeerParams, RejectInfo,
    SidrReply, SidrRequest,
};
use crate::driver::device::Device;
use crate::driver::gsi::GSI_QPN;
use crate::driver::node_guid;
use crate::ib::QpType;
use crate::ib::{AccessFlags, Gid, Mtu, QpAttr, QpAttrMask, QpState, VerbsError};
use crate::verbs::{Context, ProtectionDomain, QpInitAttr, QueuePair, RcConnect};
use crate::wire::cm::{
    rdma_tcp_service_id, rdma_udp_service_id, rej_reason, sidr_status, REQ_PRIVATE_DATA_LEN,
    SIDR_REQ_PRIVATE_DATA_LEN,
};
use crate::wire::cma::CmaHeader;
use crate::wire::psn::random_start;

/// Private data a connect request carries for the application: the REQ's 92 bytes less
/// rdma_cm's 36-byte header.
pub const CONNECT_PRIVATE_DATA_LEN: usize = REQ_PRIVATE_DATA_LEN - CmaHeader::LEN;

/// Private data a UD identifier's connect (its SIDR_REQ) carries for the application: 216
/// bytes less rdma_cm's header.
pub const UD_CONNECT_PRIVATE_DATA_LEN: usize = SIDR_REQ_PRIVATE_DATA_LEN - CmaHeader::LEN;

/// The Q_Key of every QP in rdma_cm's UDP port space (`RDMA_UDP_QKEY`): what a UD identifier's
/// QP is created with and what its accept advertises.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// `ETIMEDOUT`, negated: the status of an [`EventKind::Unreachable`] whose peer never
/// answered, as the kernel's rdma_cm reports it.
pub const STATUS_TIMED_OUT: i32 = -110;

/// `EINVAL`, negated: the status of an [`EventKind::Unreachable`] on a UD identifier whose
/// peer's SIDR_REP named another Q_Key than rdma_cm's (the kernel's cma_set_qkey refuses it).
pub const STATUS_INVALID: i32 = -22;

/// rdma_cm's port spaces that softroce serves (`enum rdma_port_space`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortSpace {
    /// RDMA_PS_TCP: connected (RC) identifiers, REQ / REP / RTU.
    Tcp,
    /// RDMA_PS_UDP: datagram (UD) identifiers, resolved with SIDR_REQ / SIDR_REP.
    Udp,
}

impl PortSpace {
    /// The CM service ID of `port` in this space.
    pub fn service_id(self, port: u16) -> u64 {
        match self {
            PortSpace::Tcp => rdma_tcp_service_id(port),
            PortSpace::Udp => rdma_udp_service_id(port),
        }
    }
}

/// What a UD identifier's events say about the peer (rdma_cm's `rdma_ud_param`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdParam {
    /// The peer's address: its GID (the IP address on RoCE) for an address handle.
    pub addr: IpAddr,
    /// The peer's UD QP (established: the SIDR_REP's; a connect request: 0, since a SIDR_REQ
    /// names none, as with the kernel's rdma_cm).
    pub qp_num: u32,
    /// That QP's Q_Key (0 on a connect request).
    pub qkey: u32,
}

/// Why an rdma_cm call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RdmaCmError {
    /// The connection manager refused the call.
    Cm(CmError),
    /// A verbs call on the identifier's QP failed.
    Verbs(VerbsError),
    /// The call does not apply to the identifier now (e.g. connect before the route is
    /// resolved, accept on an identifier that did not come from a connect request).
    WrongState {
        /// The call.
        op: &'static str,
        /// What the identifier is doing.
        state: &'static str,
    },
    /// The destination address is of another family than the device's.
    AddressFamily(IpAddr),
    /// Another event channel is open on this device (QP1's events go to one channel).
    ChannelInUse,
    /// No event arrived in time.
    Timeout,
}

impl std::fmt::Display for RdmaCmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RdmaCmError::Cm(e) => write!(f, "connection manager: {e}"),
            RdmaCmError::Verbs(e) => write!(f, "QP: {e}"),
            RdmaCmError::WrongState { op, state } => {
                write!(f, "{op} is not possible while the identifier is {state}")
            }
            RdmaCmError::AddressFamily(a) => {
                write!(f, "{a} is not of the device's address family")
            }
            RdmaCmError::ChannelInUse => {
                write!(f, "another rdma_cm event channel is open on this device")
            }
            RdmaCmError::Timeout => write!(f, "no rdma_cm event in time"),
        }
    }
}

impl std::error::Error for RdmaCmError {}

impl From<CmError> for RdmaCmError {
    fn from(e: CmError) -> Self {
        RdmaCmError::Cm(e)
    }
}

impl From<VerbsError> for RdmaCmError {
    fn from(e: VerbsError) -> Self {
        RdmaCmError::Verbs(e)
    }
}

type Result<T> = std::result::Result<T, RdmaCmError>;

/// rdma_conn_param: what a connect, accept or connect request says about the QP's resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnParam {
    /// Private data for the peer (connect: at most 56 bytes; accept: 196).
    pub private_data: Vec<u8>,
    /// RDMA READs / atomics this side accepts at once as responder.
    pub responder_resources: u8,
    /// RDMA READs / atomics this side will have outstanding.
    pub initiator_depth: u8,
    /// Transport retry count (connect only).
    pub retry_count: u8,
    /// RNR retry count.
    pub rnr_retry_count: u8,
}

impl Default for ConnParam {
    /// rping's: one READ each way, retry 7, RNR retry 7.
    fn default() -> Self {
        ConnParam {
            private_data: Vec::new(),
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
        }
    }
}

/// rdma_cm's event types (`enum rdma_cm_event_type`) that softroce produces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// `rdma_resolve_addr` finished.
    AddrResolved,
    /// `rdma_resolve_route` finished.
    RouteResolved,
    /// A peer wants to connect to a listening identifier: the event's `id` is the new
    /// connection's, `listen_id` the listener's.
    ConnectRequest,
    /// The connection is up.
    Established,
    /// The REP came for a connect whose QP the application moves itself
    /// ([`CmId::connect_external`]): it takes the QP to RTR and RTS with
    /// [`CmId::rc_connect`]'s attributes, then calls [`CmId::establish`].
    ConnectResponse,
    /// The peer refused, with IBTA's reason ([`crate::wire::cm::rej_reason`]).
    Rejected {
        /// The REJ's reason.
        reason: u16,
    },
    /// The peer's CM never answered.
    Unreachable,
    /// The connection was disconnected (by either side).
    Disconnected,
    /// The connection's time-wait ended; its QP may be destroyed or reused.
    TimewaitExit,
}

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle,
    AddrResolved,
    RouteResolved,
    Listening,
    Connecting,
    ConnectRequest,
    Connected,
    Disconnected,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Idle => "idle",
            Phase::AddrResolved => "address-resolved",
            Phase::RouteResolved => "route-resolved",
            Phase::Listening => "listening",
            Phase::Connecting => "connecting",
            Phase::ConnectRequest => "a connect request",
            Phase::Connected => "connected",
            Phase::Disconnected => "disconnected",
        }
    }
}

#[derive(Debug)]
struct IdState {
    phase: Phase,
    ps: PortSpace,
    /// The peer's IP address and rdma_cm port.
    remote: Option<SocketAddr>,
    /// The local rdma_cm port (listen: the service; connect: the source port in the header).
    port: u16,
    conn: Option<ConnId>,
    qp: Option<Arc<QueuePair>>,
    /// The local QP's first PSN.
    psn: u32,
    param: ConnParam,
    peer: Option<Box<PeerParams>>,
    /// `RDMA_OPTION_ID_ACK_TIMEOUT`: the QP's local ACK timeout at RTS in place of the one
    /// the connection would give it.
    ack_timeout: Option<u8>,
    /// The number of a QP the application moves itself (connect or accept without a QP of
    /// the identifier's: [`CmId::connect_external`], [`CmId::accept_external`]).
    ext_qpn: Option<u32>,
}

#[derive(Debug)]
struct Shared {
    dev: Arc<Device>,
    state: Mutex<ChannelState>,
}

#[derive(Debug, Default)]
struct ChannelState {
    conns: HashMap<ConnId, CmId>,
    listeners: HashMap<u64, CmId>,
    queued: VecDeque<RdmaCmEvent>,
}

/// `rdma_event_channel`: where a device's rdma_cm events arrive. Dropping it closes it.
#[derive(Debug)]
pub struct EventChannel {
    shared: Arc<Shared>,
}

/// `rdma_cm_id`: one connection (or listener). Clones name the same identifier.
#[derive(Debug, Clone)]
pub struct CmId {
    shared: Arc<Shared>,
    st: Arc<Mutex<IdState>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
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
    /// kernel's rdma_cm does them before it reports.
    pub fn get_event(&self, timeout: Duration) -> Result<RdmaCmEvent> {
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
    fn kick(&self) {
        self.dev.ring(GSI_QPN);
    }

    fn id_of(&self, conn: ConnId) -> Option<CmId> {
        lock(&self.state).conns.get(&conn).cloned()
    }

    fn forget(&self, conn: ConnId) {
        lock(&self.state).conns.remove(&conn);
    }

    fn event(id: CmId, kind: EventKind, private_data: Vec<u8>) -> RdmaCmEvent {
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

impl CmId {
    fn state(&self) -> MutexGuard<'_, IdState> {
        lock(&self.st)
    }

    fn wrong(op: &'static str, phase: Phase) -> RdmaCmError {
        RdmaCmError::WrongState {
            op,
            state: phase.name(),
        }
    }

    fn queue(&self, kind: EventKind) {
        lock(&self.shared.state)
            .queued
            .push_back(Shared::event(self.clone(), kind, Vec::new()));
    }

    /// The peer's address and rdma_cm port, once known.
    pub fn remote_addr(&self) -> Option<SocketAddr> {
        self.state().remote
    }

    /// The local address and rdma_cm port.
    pub fn local_addr(&self) -> SocketAddr {
        SocketAddr::new(self.shared.dev.local.ip(), self.state().port)
    }

    /// The connection's communication IDs, this side's and the peer's, once both are known
    /// (an established connection has them): what a CM message about it must name.
    pub fn comm_ids(&self) -> Option<(u32, u32)> {
        let conn = self.state().conn?;
        let peer = self.shared.dev.gsi.lock().cm.peer_comm_id(conn)?;
        Some((conn.0, peer))
    }

    /// How long [`CmId::connect`] may go unanswered before [`EventKind::Unreachable`]: the
    /// CM's REQ retransmissions and their timeouts.
    pub fn connect_patience(&self) -> Duration {
        self.shared.dev.gsi.lock().cm.connect_patience()
    }

    /// The identifier's QP, once created.
    pub fn qp(&self) -> Option<Arc<QueuePair>> {
        self.state().qp.clone()
    }

    /// `rdma_resolve_addr`: the device's address reaches `dst` directly (RoCE needs no ARP
    /// here: the GID is the IP address). Reports [`EventKind::AddrResolved`].
    pub fn resolve_addr(&self, dst: IpAddr, port: u16) -> Result<()> {
        if dst.is_ipv4() != self.shared.dev.local.is_ipv4() {
            return Err(RdmaCmError::AddressFamily(dst));
        }
        let mut st = self.state();
        if st.phase != Phase::Idle {
            return Err(Self::wrong("resolve_addr", st.phase));
        }
        st.remote = Some(SocketAddr::new(dst, port));
        if st.port == 0 {
            // An ephemeral source port for rdma_cm's header, as the kernel binds one.
            st.port = 32768 + (random_start().value() % 28232) as u16;
        }
        st.phase = Phase::AddrResolved;
        drop(st);
        self.queue(EventKind::AddrResolved);
        Ok(())
    }

    /// `rdma_resolve_route`: the path is the IP route; reports [`EventKind::RouteResolved`].
    pub fn resolve_route(&self) -> Result<()> {
        let mut st = self.state();
        if st.phase != Phase::AddrResolved {
            return Err(Self::wrong("resolve_route", st.phase));
        }
        st.phase = Phase::RouteResolved;
        drop(st);
        self.queue(EventKind::RouteResolved);
        Ok(())
    }

    /// `rdma_create_qp`: creates the identifier's RC QP on `pd` and moves it to INIT with
    /// local write and remote read and write access, as rdma_cm does.
    pub fn create_qp(&self, pd: &ProtectionDomain, init: &QpInitAttr) -> Result<Arc<QueuePair>> {
        let mut st = self.state();
        if st.qp.is_some() {
            return Err(Self::wrong("create_qp", st.phase));
        }
        let qp = Arc::new(pd.create_qp(init)?);
        if st.ps == PortSpace::Udp {
            // A datagram QP needs no peer: rdma_cm takes it to RTS at once with its Q_Key
            // (the kernel's cma_init_ud_qp and rdma_create_qp's ucma_init_ud_qp).
            if init.qp_type != QpType::Ud {
                return Err(RdmaCmError::WrongState {
                    op: "create_qp",
                    state: "in the UDP port space, which takes UD QPs only",
                });
            }
            qp.ready_ud(RDMA_UDP_QKEY, st.psn)?;
        } else {
            qp.init(
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
            )?;
        }
        st.qp = Some(Arc::clone(&qp));
        Ok(qp)
    }

    /// `rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT)`: the local ACK timeout (4.096 us x
    /// 2^`t`) the QP gets when connect or accept moves it to RTS, in place of the path's
    /// (Linux cma.c: `timeout_set`, used by rdma_init_qp_attr for RTS). It cannot change
    /// later: RTS to RTS does not take a timeout (IBTA 11.2.1, Table 91).
    pub fn set_ack_timeout(&self, t: u8) {
        self.state().ack_timeout = Some(t);
    }

    /// Gives the identifier a QP the caller created and moved to INIT with the access it
    /// wants (in place of [`CmId::create_qp`], whose INIT has no remote atomics): connect and
    /// accept move it to RTR and RTS as they move a QP of their own. A UD identifier takes a
    /// UD QP the caller already moved to RTS with [`RDMA_UDP_QKEY`], as rdma_cm's create_qp
    /// does.
    pub fn set_qp(&self, qp: Arc<QueuePair>) -> Result<()> {
        let mut st = self.state();
        if st.qp.is_some() {
            return Err(Self::wrong("set_qp", st.phase));
        }
        if st.ps == PortSpace::Udp {
            let a = qp.query();
            if a.qp_state != QpState::Rts || a.qkey != RDMA_UDP_QKEY {
                return Err(RdmaCmError::WrongState {
                    op: "set_qp",
                    state: "given a QP that is not in RTS with rdma_cm's Q_Key",
                });
            }
            st.qp = Some(qp);
            return Ok(());
        }
        if qp.query().qp_state != QpState::Init {
            return Err(RdmaCmError::WrongState {
                op: "set_qp",
                state: "given a QP that is not in INIT",
            });
        }
        st.qp = Some(qp);
        Ok(())
    }

    /// Whether `other` names the same identifier (clones do).
    pub fn same(&self, other: &CmId) -> bool {
        Arc::ptr_eq(&self.st, &other.st)
    }

    /// `rdma_connect`: sends the REQ. [`EventKind::Established`] follows once the REP came and
    /// the QP moved to RTS; [`EventKind::Rejected`] or [`EventKind::Unreachable`] otherwise.
    pub fn connect(&self, param: &ConnParam) -> Result<()> {
        if self.port_space() == PortSpace::Udp {
            return self.connect_ud(param);
        }
        // One lock at a time: the guard of a match scrutinee lives through its arms.
        let (qp, phase) = {
            let st = self.state();
            (st.qp.clone(), st.phase)
        };
        let Some(qp) = qp else {
            return Err(Self::wrong("connect", phase));
        };
        self.connect_rc(param, qp.qp_num(), false)
    }

    /// `rdma_connect` for a QP the application moves itself (rdma_cm's identifier has none;
    /// `qpn` is the one `rdma_conn_param.qp_num` names): sends the REQ for it.
    /// [`EventKind::ConnectResponse`] follows the REP; the application then moves the QP with
    /// [`CmId::rc_connect`]'s attributes and calls [`CmId::establish`].
    pub fn connect_external(&self, param: &ConnParam, qpn: u32) -> Result<()> {
        let (own_qp, phase) = {
            let st = self.state();
            (st.qp.is_some(), st.phase)
        };
        if self.port_space() == PortSpace::Udp || own_qp {
            return Err(Self::wrong("connect_external", phase));
        }
        self.connect_rc(param, qpn, true)
    }

    fn connect_rc(&self, param: &ConnParam, qpn: u32, external: bool) -> Result<()> {
        let mut st = self.state();
        let (Phase::RouteResolved, Some(remote)) = (st.phase, st.remote) else {
            return Err(Self::wrong("connect", st.phase));
        };
        let dev = &self.shared.dev;
        let pd = cma_private_data(
            st.port,
            dev.local.ip(),
            remote,
            param,
            CONNECT_PRIVATE_DATA_LEN,
        )?;
        let mut p = ConnectParams::rc(
            rdma_tcp_service_id(remote.port()),
            qpn,
            st.psn,
            Gid::from_ip(dev.local.ip()).0,
            Gid::from_ip(remote.ip()).0,
        );
        p.responder_resources = param.responder_resources;
        p.initiator_depth = param.initiator_depth;
        p.retry_count = param.retry_count.min(7);
        p.rnr_retry_count = param.rnr_retry_count.min(7);
        p.private_data = pd;
        p.ca_guid = node_guid(dev.local.ip());
        let to = SocketAddr::new(remote.ip(), dev.remote_port);
        let conn = {
            let mut g = dev.gsi.lock();
            let now = g.now();
            g.cm.connect(now, to, &p)?
        };
        st.conn = Some(conn);
        st.param = param.clone();
        st.phase = Phase::Connecting;
        st.ext_qpn = external.then_some(qpn);
        drop(st);
        lock(&self.shared.state).conns.insert(conn, self.clone());
        self.shared.kick();
        Ok(())
    }

    /// The identifier's port space.
    pub fn port_space(&self) -> PortSpace {
        self.state().ps
    }

    /// `rdma_connect` on a UD identifier: a SIDR_REQ for the peer's port in the UDP port
    /// space, rdma_cm's header and `param.private_data` (at most
    /// [`UD_CONNECT_PRIVATE_DATA_LEN`] bytes) in its private data (the kernel's
    /// cma_resolve_ib_udp). [`EventKind::Established`] with [`RdmaCmEvent::ud`] follows when
    /// the peer accepts, [`EventKind::Unreachable`] when it refuses or never answers.
    fn connect_ud(&self, param: &ConnParam) -> Result<()> {
        let mut st = self.state();
        let (Phase::RouteResolved, Some(remote)) = (st.phase, st.remote) else {
            return Err(Self::wrong("connect", st.phase));
        };
        let dev = &self.shared.dev;
        let pd = cma_private_data(
            st.port,
            dev.local.ip(),
            remote,
            param,
            UD_CONNECT_PRIVATE_DATA_LEN,
        )?;
        let to = SocketAddr::new(remote.ip(), dev.remote_port);
        let conn = {
            let mut g = dev.gsi.lock();
            let now = g.now();
            g.cm.sidr_request(now, to, rdma_udp_service_id(remote.port()), &pd)?
        };
        st.conn = Some(conn);
        st.param = param.clone();
        st.phase = Phase::Connecting;
        drop(st);
        lock(&self.shared.state).conns.insert(conn, self.clone());
        self.shared.kick();
        Ok(())
    }

    /// `rdma_bind_addr` on the device's address and `port` (the service listened on).
    pub fn bind_addr(&self, port: u16) -> Result<()> {
        let mut st = self.state();
        if st.phase != Phase::Idle {
            return Err(Self::wrong("bind_addr", st.phase));
        }
        st.port = port;
        Ok(())
    }

    /// `rdma_listen`: connect requests for the bound port arrive as
    /// [`EventKind::ConnectRequest`]; at most `backlog` of them undecided at once.
    pub fn listen(&self, backlog: usize) -> Result<()> {
        let mut st = self.state();
        if st.phase != Phase::Idle || st.port == 0 {
            return Err(Self::wrong("listen", st.phase));
        }
        let service = st.ps.service_id(st.port);
        // Registered before the CM listens: REQs that waited for a listener on this port
        // (the CM keeps them a moment after the last one went) become connect requests at
        // once, and their events look the listener up.
        {
            let mut shared = lock(&self.shared.state);
            if shared.listeners.contains_key(&service) {
                return Err(CmError::AlreadyListening(service).into());
            }
            shared.listeners.insert(service, self.clone());
        }
        if let Err(e) = self.shared.dev.listen(service, backlog) {
            lock(&self.shared.state).listeners.remove(&service);
            return Err(e.into());
        }
        st.phase = Phase::Listening;
        drop(st);
        self.shared.kick();
        Ok(())
    }

    /// Stops listening (librdmacm's `rdma_destroy_id` of a listener): the service is free
    /// for another listener, and later REQs for it are rejected (invalid service ID).
    pub fn stop_listening(&self) {
        let mut st = self.state();
        if st.phase != Phase::Listening {
            return;
        }
        let service = st.ps.service_id(st.port);
        self.shared.dev.unlisten(service);
        lock(&self.shared.state).listeners.remove(&service);
        st.phase = Phase::Idle;
    }

    /// `rdma_accept` on a connect request's identifier: moves its QP to RTR and RTS with the
    /// requester's QPN and PSN and sends the REP. [`EventKind::Established`] follows with the
    /// RTU.
    pub fn accept(&self, param: &ConnParam) -> Result<()> {
        if self.port_space() == PortSpace::Udp {
            return self.sidr_answer("accept", sidr_status::SUCCESS, &param.private_data);
        }
        let (qp, phase) = {
            let st = self.state();
            (st.qp.clone(), st.phase)
        };
        match qp {
            Some(qp) => self.accept_rc(param, Some(&qp), qp.qp_num()),
            None => Err(Self::wrong("accept", phase)),
        }
    }

    /// `rdma_accept` for a QP the application moved itself (with [`CmId::rc_connect`]'s
    /// attributes; `qpn` is the one `rdma_conn_param.qp_num` names): sends the REP naming it.
    /// [`EventKind::Established`] follows the RTU.
    pub fn accept_external(&self, param: &ConnParam, qpn: u32) -> Result<()> {
        let (own_qp, phase) = {
            let st = self.state();
            (st.qp.is_some(), st.phase)
        };
        if self.port_space() == PortSpace::Udp || own_qp {
            return Err(Self::wrong("accept_external", phase));
        }
        self.state().ext_qpn = Some(qpn);
        self.accept_rc(param, None, qpn)
    }

    fn accept_rc(&self, param: &ConnParam, qp: Option<&Arc<QueuePair>>, qpn: u32) -> Result<()> {
        let mut st = self.state();
        let (Phase::ConnectRequest, Some(conn), Some(peer)) = (st.phase, st.conn, st.peer.clone())
        else {
            return Err(Self::wrong("accept", st.phase));
        };
        if let Some(qp) = qp {
            let c = passive_connect(&st, &peer, param);
            qp.ready_to_receive(&c)?;
            qp.ready_to_send(&c)?;
        }
        let a = AcceptParams {
            qpn,
            starting_psn: st.psn,
            responder_resources: param.responder_resources,
            initiator_depth: param.initiator_depth,
            rnr_retry_count: param.rnr_retry_count.min(7),
            srq: false,
            ca_guid: node_guid(self.shared.dev.local.ip()),
            private_data: param.private_data.clone(),
        };
        {
            let mut g = self.shared.dev.gsi.lock();
            let now = g.now();
            g.cm.accept(now, conn, &a)?;
        }
        st.param = param.clone();
        drop(st);
        self.shared.kick();
        Ok(())
    }

    /// `rdma_reject` of a connect request, with `private_data` for the requester (reason:
    /// consumer defined, as rdma_cm sends it).
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        if self.port_space() == PortSpace::Udp {
            return self.sidr_answer("reject", sidr_status::REJECT, private_data);
        }
        let mut st = self.state();
        let (Phase::ConnectRequest, Some(conn)) = (st.phase, st.conn) else {
            return Err(Self::wrong("reject", st.phase));
        };
        let info = RejectInfo {
            reason: rej_reason::CONSUMER_DEFINED,
            private_data: private_data.to_vec(),
        };
        self.shared.dev.gsi.lock().cm.reject(conn, &info)?;
        st.phase = Phase::Idle;
        st.conn = None;
        drop(st);
        self.shared.forget(conn);
        self.shared.kick();
        Ok(())
    }

    /// `rdma_disconnect`: moves the QP to ERROR and sends a DREQ (or, after the peer's, the
    /// DREP). [`EventKind::Disconnected`] follows (unless the peer's DREQ already brought it)
    /// and then [`EventKind::TimewaitExit`].
    pub fn disconnect(&self) -> Result<()> {
        // librdmacm moves the identifier's QP to the error state first, whatever the
        // connection's state (rdma-core v44 cma.c `rdma_disconnect`: `ucma_shutdown`, then the
        // kernel's DISCONNECT, which may refuse): the flush completes the posted WRs, and a
        // program that disconnects an accepted but not yet established connection (rping 44
        // under a REQ flood) joins its CQ thread on that flush.
        self.to_error();
        let conn = {
            let st = self.state();
            match (st.phase, st.conn) {
                (Phase::Connected | Phase::Disconnected, Some(c)) => c,
                (phase, _) => return Err(Self::wrong("disconnect", phase)),
            }
        };
        {
            let mut g = self.shared.dev.gsi.lock();
            let now = g.now();
            g.cm.disconnect(now, conn)?;
        }
        self.shared.kick();
        Ok(())
    }

    /// `rdma_establish`: after [`EventKind::ConnectResponse`] and the application's move of
    /// its QP to RTS, sends the RTU; the connection is up (no event follows, as with the
    /// kernel's rdma_cm).
    pub fn establish(&self) -> Result<()> {
        let mut st = self.state();
        let (Phase::Connecting, Some(conn), Some(_), Some(_)) =
            (st.phase, st.conn, st.ext_qpn, st.peer.as_ref())
        else {
            return Err(Self::wrong("establish", st.phase));
        };
        self.shared.dev.gsi.lock().cm.establish(conn)?;
        st.phase = Phase::Connected;
        drop(st);
        self.shared.kick();
        Ok(())
    }

    /// The attributes the connection gives an RC QP for RTR and RTS (what `rdma_init_qp_attr`
    /// reports): on the active side once the REP came, on the passive side once the REQ came
    /// (with the requester's resources, as Linux's cm_req_handler keeps them). The same the
    /// CM uses when it moves a QP of the identifier's own.
    pub fn rc_connect(&self) -> Result<RcConnect> {
        let st = self.state();
        let Some(peer) = st.peer.clone() else {
            return Err(Self::wrong("init_qp_attr", st.phase));
        };
        let c = match st.phase {
            Phase::Connecting | Phase::Connected if st.remote.is_some() && st.ext_qpn.is_some() => {
                active_connect(&st, &peer)
            }
            Phase::ConnectRequest => {
                let param = ConnParam {
                    responder_resources: peer.initiator_depth,
                    initiator_depth: peer.responder_resources,
                    ..st.param.clone()
                };
                Some(passive_connect(&st, &peer, &param))
            }
            _ => None,
        };
        c.ok_or_else(|| Self::wrong("init_qp_attr", st.phase))
    }

    /// Answers a UD connect request with a SIDR_REP: `status` 0 (accept) names the QP and
    /// rdma_cm's Q_Key; another (reject) refuses. Either way the resolution is over and no
    /// event follows on this side (as with the kernel's rdma_cm: a UD identifier has no
    /// connection to establish).
    fn sidr_answer(&self, op: &'static str, status: u8, private_data: &[u8]) -> Result<()> {
        let mut st = self.state();
        let (Phase::ConnectRequest, Some(conn)) = (st.phase, st.conn) else {
            return Err(Self::wrong(op, st.phase));
        };
        let qpn = match (status, &st.qp) {
            (sidr_status::SUCCESS, Some(qp)) => qp.qp_num(),
            (sidr_status::SUCCESS, None) => return Err(Self::wrong(op, st.phase)),
            _ => 0,
        };
        {
            let mut g = self.shared.dev.gsi.lock();
            let now = g.now();
            g.cm.sidr_reply(now, conn, status, qpn, RDMA_UDP_QKEY, private_data)?;
        }
        st.conn = None;
        st.phase = if status == sidr_status::SUCCESS {
            Phase::Connected
        } else {
            Phase::Idle
        };
        st.param = ConnParam {
            private_data: private_data.to_vec(),
            ..st.param.clone()
        };
        drop(st);
        self.shared.forget(conn);
        self.shared.kick();
        Ok(())
    }

    fn to_error(&self) {
        if let Some(qp) = self.state().qp.clone() {
            if qp.query().qp_state != QpState::Err {
                let _ = qp.modify(
                    &QpAttr {
                        qp_state: QpState::Err,
                        ..Default::default()
                    },
                    QpAttrMask::STATE,
                );
            }
        }
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

/// The active side's RTR and RTS attributes from the REP (`peer`): None without a remote.
fn active_connect(st: &IdState, peer: &PeerParams) -> Option<RcConnect> {
    let remote = st.remote?;
    let mut c = RcConnect {
        path_mtu: Mtu::Mtu1024,
        // The path the REQ described (ConnectParams::rc): hop limit 64, class 0.
        hop_limit: 64,
        max_dest_rd_atomic: st.param.responder_resources,
        max_rd_atomic: st.param.initiator_depth.min(peer.responder_resources),
        retry_cnt: st.param.retry_count,
        // Each side's RNR retry count is the one its peer sent (Linux cm.c
        // cm_rep_handler / cm_req_handler).
        rnr_retry: peer.rnr_retry_count.min(7),
        // A starting PSN is what its sender expects to receive: ours (in the REQ) is
        // our receive PSN, the REP's is our send PSN (tests/data/rxe/rping.pcap).
        ..RcConnect::new(
            peer.qpn,
            st.psn,
            Gid::from_ip(remote.ip()),
            peer.starting_psn,
        )
    };
    if let Some(t) = st.ack_timeout {
        c.timeout = t;
    }
    Some(c)
}

/// The passive side's RTR and RTS attributes from the REQ (`peer`) and the accept's `param`.
fn passive_connect(st: &IdState, peer: &PeerParams, param: &ConnParam) -> RcConnect {
    RcConnect {
        path_mtu: Mtu::from_bytes(128 << peer.path_mtu.clamp(1, 5)).unwrap_or(Mtu::Mtu1024),
        max_dest_rd_atomic: param.responder_resources,
        max_rd_atomic: param.initiator_depth.min(peer.responder_resources),
        timeout: st.ack_timeout.unwrap_or(peer.local_ack_timeout),
        retry_cnt: peer.retry_count,
        rnr_retry: peer.rnr_retry_count.min(7),
        // The path as the REQ gave it (Linux: cm_format_paths_from_req).
        hop_limit: peer.hop_limit,
        traffic_class: peer.traffic_class,
        // Ours (in the REP) is our receive PSN; the REQ's is our send PSN.
        ..RcConnect::new(peer.qpn, st.psn, Gid(peer.gid), peer.starting_psn)
    }
}

/// A connect request's private data as rdma_cm lays it out: its header (the requester's port
/// and both addresses) and then `param.private_data`, at most `max` bytes of it.
fn cma_private_data(
    src_port: u16,
    local: IpAddr,
    remote: SocketAddr,
    param: &ConnParam,
    max: usize,
) -> Result<Vec<u8>> {
    if param.private_data.len() > max {
        return Err(RdmaCmError::Cm(CmError::PrivateDataTooLong {
            len: param.private_data.len(),
            max,
        }));
    }
    let mut pd = vec![0u8; CmaHeader::LEN];
    let header = CmaHeader {
        src_port,
        src_addr: local,
        dst_addr: remote.ip(),
    };
    // The buffer is the header's length, so emitting cannot fail.
    let _ = header.emit(&mut pd);
    pd.extend_from_slice(&param.private_data);
    Ok(pd)
}
