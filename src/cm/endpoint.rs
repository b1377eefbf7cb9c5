//! The CM endpoint: every connection's state, the retransmission of unanswered messages, and
//! the answers to duplicates and strangers.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use super::config::EndpointConfig;
use super::conn::{ConnId, ConnState};
use super::counters::CmCounters;
use super::error::CmError;
use super::iba_time;
use super::params::{
    fill, AcceptParams, CmEvent, ConnectParams, PeerParams, RejectInfo, SidrReply, SidrRequest,
};
use crate::wire::cm::{
    message_ref, rej_reason, sidr_status, transport_type, CmDreq, CmIds, CmMessage, CmMra, CmPath,
    CmRej, CmRep, CmReq, CmSidrRep, CmSidrReq, REJ_ARI_LEN, SIDR_REP_INFO_LEN,
    SIDR_REP_PRIVATE_DATA_LEN, SIDR_REQ_PRIVATE_DATA_LEN,
};
use crate::wire::mad;

/// A MAD to send to QP1 at `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// The peer's address.
    pub to: SocketAddr,
    /// The whole MAD.
    pub mad: [u8; mad::LEN],
}

#[derive(Debug, Clone)]
struct Pending {
    mad: [u8; mad::LEN],
    retries_left: u8,
    timeout: Duration,
    deadline: Duration,
}

#[derive(Debug, Clone)]
struct Conn {
    state: ConnState,
    peer: SocketAddr,
    tid: u64,
    remote_comm_id: u32,
    remote_ca_guid: u64,
    local_qpn: u32,
    remote_qpn: u32,
    /// How long the peer's CM says it may take to answer.
    peer_response: Duration,
    /// The message we repeat until it is answered.
    pending: Option<Pending>,
    /// The last message we sent that a duplicate of the peer's previous one is answered with.
    last: Option<[u8; mad::LEN]>,
    /// When the connection gives up waiting without a message to repeat (half-open passive
    /// connections, time-wait).
    expires: Option<Duration>,
    /// The listener this passive connection counts against while the application decides.
    listener: Option<u64>,
}

impl Conn {
    fn deadline(&self) -> Option<Duration> {
        match (&self.pending, self.expires) {
            (Some(p), Some(e)) => Some(p.deadline.min(e)),
            (Some(p), None) => Some(p.deadline),
            (None, e) => e,
        }
    }
}

#[derive(Debug, Clone)]
struct Listener {
    backlog: usize,
    half_open: usize,
}

/// Where the endpoint's communication and transaction IDs come from.
#[derive(Debug, Clone)]
enum IdSource {
    /// The kernel's random generator ([`crate::random`]).
    Os,
    /// SplitMix64 from a seed (tests and fuzzing).
    Seeded(u64),
}

impl IdSource {
    fn next_u64(&mut self) -> u64 {
        match self {
            IdSource::Os => crate::random::u64(),
            IdSource::Seeded(state) => {
                *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut x = *state;
                x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                x ^ (x >> 31)
            }
        }
    }
}

/// How long a REQ for a service whose listener just went away waits for it to listen again.
const RELISTEN_GRACE: Duration = Duration::from_millis(200);
/// At most this many REQs wait for a listener, and this many service IDs are remembered as
/// about to listen again: a peer cannot grow either.
const MAX_PARKED: usize = 64;

/// A REQ waiting for its service to listen again.
#[derive(Debug, Clone)]
struct ParkedReq {
    arrived: Duration,
    from: SocketAddr,
    tid: u64,
    req: CmReq,
}

/// The communication manager of one device.
#[derive(Debug)]
pub struct CmEndpoint {
    cfg: EndpointConfig,
    conns: HashMap<u32, Conn>,
    /// Passive connections by the requester's (communication ID, CA GUID), to spot a repeated
    /// REQ.
    by_remote: HashMap<(u32, u64), u32>,
    listeners: HashMap<u64, Listener>,
    /// SIDR resolutions we answer, by the requester's (address, request ID), to spot a
    /// repeated SIDR_REQ (a request ID is the requester's own, unique only with its address).
    sidr_by_remote: HashMap<(SocketAddr, u32), u32>,
    /// Undecided connect requests per source address (those with a `listener`).
    half_open_by_source: HashMap<IpAddr, usize>,
    /// Service IDs whose listener went away and has not come back: a REQ for one waits a
    /// moment for the new listener instead of being refused at once (see `park_req`).
    relisten: VecDeque<u64>,
    /// REQs waiting for a listener to come back, with when they arrived and when they are
    /// refused.
    parked: Vec<ParkedReq>,
    out: VecDeque<Outgoing>,
    events: VecDeque<CmEvent>,
    ids: IdSource,
    /// The top byte of every communication and request ID, if set (`set_comm_id_tag`).
    comm_id_tag: Option<u8>,
    counters: CmCounters,
}

impl CmEndpoint {
    /// An endpoint with no connections and no listeners.
    pub fn new(cfg: EndpointConfig) -> Self {
        CmEndpoint {
            ids: match cfg.comm_id_seed {
                None => IdSource::Os,
                Some(seed) => IdSource::Seeded(seed),
            },
            cfg,
            conns: HashMap::new(),
            by_remote: HashMap::new(),
            sidr_by_remote: HashMap::new(),
            listeners: HashMap::new(),
            half_open_by_source: HashMap::new(),
            relisten: VecDeque::new(),
            parked: Vec::new(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            comm_id_tag: None,
            counters: CmCounters::default(),
        }
    }

    /// Makes `tag` the top byte of every communication and request ID from now on: a device
    /// that shares its address with other processes routes a peer's answer (which names the
    /// ID we chose) to the member in that slot (driver/group.rs). The other 24 bits stay
    /// random.
    pub fn set_comm_id_tag(&mut self, tag: u8) {
        self.comm_id_tag = Some(tag);
    }

    /// What the endpoint counted.
    pub fn counters(&self) -> CmCounters {
        self.counters
    }

    /// A connection's state, `None` once it is gone.
    pub fn state(&self, conn: ConnId) -> Option<ConnState> {
        self.conns.get(&conn.0).map(|c| c.state)
    }

    /// The communication ID the peer gave a connection, once known (after the REQ on the
    /// passive side, the REP on the active side).
    pub fn peer_comm_id(&self, conn: ConnId) -> Option<u32> {
        self.conns
            .get(&conn.0)
            .map(|c| c.remote_comm_id)
            .filter(|&id| id != 0)
    }

    /// How long a REQ goes unanswered before the endpoint gives up and reports
    /// [`CmEvent::Unreachable`]: its retransmissions and their timeouts (with rdma_cm's
    /// defaults, 16 REQs 4.8 s apart: 77 s).
    pub fn connect_patience(&self) -> Duration {
        self.wait_for_peer(iba_time(self.cfg.cm_response_timeout))
            * (u32::from(self.cfg.max_cm_retries) + 1)
    }

    /// Every connection held and its state, in no particular order.
    pub fn connection_states(&self) -> Vec<(ConnId, ConnState)> {
        self.conns
            .iter()
            .map(|(&id, c)| (ConnId(id), c.state))
            .collect()
    }

    /// Connections held (in any state, time-wait included).
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// The next MAD to send.
    pub fn poll_transmit(&mut self) -> Option<Outgoing> {
        self.out.pop_front()
    }

    /// Whether messages wait for [`CmEndpoint::poll_transmit`].
    pub fn has_transmit(&self) -> bool {
        !self.out.is_empty()
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    /// When [`CmEndpoint::handle_timeout`] must next be called.
    pub fn poll_timeout(&self) -> Option<Duration> {
        let parked = self.parked.iter().map(|p| p.arrived + RELISTEN_GRACE).min();
        self.conns
            .values()
            .filter_map(Conn::deadline)
            .chain(parked)
            .min()
    }

    /// Accepts REQs for `service_id`, at most `backlog` of them undecided at once.
    pub fn listen(&mut self, service_id: u64, backlog: usize) -> Result<(), CmError> {
        if self.listeners.contains_key(&service_id) {
            return Err(CmError::AlreadyListening(service_id));
        }
        self.listeners.insert(
            service_id,
            Listener {
                backlog: backlog.max(1),
                half_open: 0,
            },
        );
        self.relisten.retain(|&s| s != service_id);
        // The REQs that came while the service was between listeners are taken now, as if
        // they had come now (their own times: they have been waiting that long).
        let (waiting, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.parked)
            .into_iter()
            .partition(|p| p.req.service_id == service_id);
        self.parked = rest;
        for p in waiting {
            self.on_req(p.arrived, p.from, p.tid, &p.req);
        }
        Ok(())
    }

    /// Stops listening on `service_id`; later REQs for it are rejected (after a moment in
    /// which a new listener on it takes them: see `park_req`).
    pub fn unlisten(&mut self, service_id: u64) {
        if self.listeners.remove(&service_id).is_some() {
            self.relisten.retain(|&s| s != service_id);
            if self.relisten.len() >= MAX_PARKED {
                self.relisten.pop_front();
            }
            self.relisten.push_back(service_id);
        }
    }

    /// A REQ for a service with no listener, whose listener went away since it last listened:
    /// kept for up to `RELISTEN_GRACE` for a new listener on it (returns true) instead of
    /// being refused at once. A server that hands its port from one listener to the next
    /// (perftest -R: the exchange's listener, then one for the data QPs, after a handshake
    /// its client may answer with a REQ before the new listener is up) loses no connection
    /// to that window; the kernel's CM refuses such a REQ and perftest's retry then fails.
    /// A service nobody listened on is refused at once, as by the kernel.
    fn park_req(&mut self, now: Duration, from: SocketAddr, tid: u64, r: &CmReq) -> bool {
        if !self.relisten.contains(&r.service_id) || self.parked.len() >= MAX_PARKED {
            return false;
        }
        let same = |p: &ParkedReq| {
            p.from == from
                && p.req.local_comm_id == r.local_comm_id
                && p.req.local_ca_guid == r.local_ca_guid
        };
        if !self.parked.iter().any(same) {
            self.parked.push(ParkedReq {
                arrived: now,
                from,
                tid,
                req: *r,
            });
        }
        true
    }

    /// Refuses the parked REQs whose grace is over; their services are no longer waited for.
    fn expire_parked(&mut self, now: Duration) {
        let (over, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.parked)
            .into_iter()
            .partition(|p| p.arrived + RELISTEN_GRACE <= now);
        self.parked = rest;
        for p in over {
            self.relisten.retain(|&s| s != p.req.service_id);
            self.counters.rej_no_listener += 1;
            self.reject_req(p.from, p.tid, &p.req, rej_reason::INVALID_SERVICE_ID);
        }
    }

    /// Admits one more half-open connection (a REQ or SIDR_REQ not yet answered) to the
    /// listener on `service_id` from `source`: within the listener's backlog and the
    /// per-source bound, and with a fresh communication ID, which it returns. None (counted
    /// as no resources) when a bound is reached: the caller refuses the request.
    fn admit_half_open(&mut self, source: IpAddr, service_id: u64) -> Option<u32> {
        let listener = self.listeners.get(&service_id)?;
        let from_source = self.half_open_by_source.get(&source).copied().unwrap_or(0);
        // A listener that asked for a larger backlog may take that many from one source
        // (perftest connects all its QPs from one address at once).
        let source_limit = self.cfg.max_half_open_per_source.max(listener.backlog);
        let full = listener.half_open >= listener.backlog || from_source >= source_limit;
        let id = if full { None } else { self.new_comm_id().ok() };
        let Some(id) = id else {
            self.counters.rej_no_resources += 1;
            return None;
        };
        if let Some(l) = self.listeners.get_mut(&service_id) {
            l.half_open += 1;
        }
        *self.half_open_by_source.entry(source).or_insert(0) += 1;
        Some(id)
    }

    fn new_comm_id(&mut self) -> Result<u32, CmError> {
        if self.conns.len() >= self.cfg.max_connections {
            return Err(CmError::TooManyConnections);
        }
        // Every ID is drawn afresh, so that one observed ID tells nothing of the next (Linux
        // XORs a cyclic index with one random operand, which leaves neighbours related). An
        // ID held by a connection, time-wait included, is never handed out again; 0 means
        // "not yet known" in REJs and is skipped. At most 4096 of 2^32 values are held, so
        // the loop ends at once but for a vanishing chance.
        loop {
            let mut id = self.ids.next_u64() as u32;
            if let Some(tag) = self.comm_id_tag {
                id = (id & 0x00ff_ffff) | u32::from(tag) << 24;
            }
            if id != 0 && !self.conns.contains_key(&id) {
                return Ok(id);
            }
        }
    }

    fn wait_for_peer(&self, peer_response: Duration) -> Duration {
        peer_response + 2 * iba_time(self.cfg.packet_life_time)
    }

    fn send(&mut self, to: SocketAddr, tid: u64, msg: &CmMessage) -> [u8; mad::LEN] {
        let mut m = [0u8; mad::LEN];
        // The buffer is a whole MAD, so emitting cannot fail.
        let _ = msg.emit(tid, &mut m);
        self.out.push_back(Outgoing { to, mad: m });
        m
    }

    /// Sends `mad` and repeats it until answered, every `timeout`.
    fn send_pending(&mut self, id: u32, now: Duration, msg: &CmMessage, timeout: Duration) {
        let retries = self.cfg.max_cm_retries;
        let Some(c) = self.conns.get(&id) else { return };
        let (peer, tid) = (c.peer, c.tid);
        let mad = self.send(peer, tid, msg);
        if let Some(c) = self.conns.get_mut(&id) {
            c.pending = Some(Pending {
                mad,
                retries_left: retries,
                timeout,
                deadline: now + timeout,
            });
        }
    }

    fn conn_mut(&mut self, conn: ConnId) -> Result<&mut Conn, CmError> {
        self.conns
            .get_mut(&conn.0)
            .ok_or(CmError::UnknownConnection(conn))
    }

    /// Sends a REQ to the CM at `to` (rdma_connect).
    pub fn connect(
        &mut self,
        now: Duration,
        to: SocketAddr,
        p: &ConnectParams,
    ) -> Result<ConnId, CmError> {
        let private_data = fill(&p.private_data).ok_or(CmError::PrivateDataTooLong {
            len: p.private_data.len(),
            max: crate::wire::cm::REQ_PRIVATE_DATA_LEN,
        })?;
        let id = self.new_comm_id()?;
        let req = CmReq {
            local_comm_id: id,
            service_id: p.service_id,
            local_ca_guid: p.ca_guid,
            local_qkey: 0,
            local_qpn: p.qpn,
            responder_resources: p.responder_resources,
            local_eecn: 0,
            initiator_depth: p.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: self.cfg.cm_response_timeout,
            transport_service_type: p.transport,
            end_to_end_flow_control: false,
            starting_psn: p.starting_psn,
            local_cm_response_timeout: self.cfg.cm_response_timeout,
            retry_count: p.retry_count,
            partition_key: 0xffff,
            path_mtu: p.path_mtu,
            rdc_exists: false,
            rnr_retry_count: p.rnr_retry_count,
            max_cm_retries: self.cfg.max_cm_retries.min(15),
            srq: p.srq,
            extended_transport_type: 0,
            primary: CmPath {
                local_lid: 0xffff,
                remote_lid: 0xffff,
                local_gid: p.local_gid,
                remote_gid: p.remote_gid,
                flow_label: p.flow_label,
                packet_rate: 0,
                traffic_class: p.traffic_class,
                hop_limit: p.hop_limit,
                sl: 0,
                subnet_local: false,
                local_ack_timeout: p.local_ack_timeout,
            },
            alternate: CmPath::default(),
            sap_supported: false,
            private_data,
        };
        // The transaction ID names this endpoint's transaction. Linux forms it from the MAD
        // agent's counter and the (random) communication ID; here it is drawn whole, so that
        // it says nothing of the endpoint's other transactions either.
        let tid = self.ids.next_u64();
        self.conns.insert(
            id,
            Conn {
                state: ConnState::ReqSent,
                peer: to,
                tid,
                remote_comm_id: 0,
                remote_ca_guid: 0,
                local_qpn: p.qpn,
                remote_qpn: 0,
                peer_response: iba_time(self.cfg.cm_response_timeout),
                pending: None,
                last: None,
                expires: None,
                listener: None,
            },
        );
        let timeout = self.wait_for_peer(iba_time(self.cfg.cm_response_timeout));
        self.send_pending(id, now, &CmMessage::Req(req), timeout);
        Ok(ConnId(id))
    }

    /// Answers a REQ with a REP (rdma_accept), after the application moved its QP to RTR.
    pub fn accept(&mut self, now: Duration, conn: ConnId, p: &AcceptParams) -> Result<(), CmError> {
        let private_data = fill(&p.private_data).ok_or(CmError::PrivateDataTooLong {
            len: p.private_data.len(),
            max: crate::wire::cm::REP_PRIVATE_DATA_LEN,
        })?;
        let c = self.conn_mut(conn)?;
        if c.state != ConnState::ReqRcvd {
            return Err(CmError::WrongState {
                op: "accept",
                state: c.state,
            });
        }
        c.state = ConnState::RepSent;
        c.local_qpn = p.qpn;
        c.expires = None;
        let remote_comm_id = c.remote_comm_id;
        let peer_response = c.peer_response;
        let listener = c.listener.take();
        let peer_ip = c.peer.ip();
        self.release_backlog(listener, peer_ip);
        let rep = CmRep {
            local_comm_id: conn.0,
            remote_comm_id,
            local_qkey: 0,
            local_qpn: p.qpn,
            local_eecn: 0,
            starting_psn: p.starting_psn,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            target_ack_delay: 15,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: p.rnr_retry_count,
            srq: p.srq,
            local_ca_guid: p.ca_guid,
            private_data,
        };
        let timeout = self.wait_for_peer(peer_response);
        self.send_pending(conn.0, now, &CmMessage::Rep(rep), timeout);
        if let Some(c) = self.conns.get_mut(&conn.0) {
            c.last = c.pending.as_ref().map(|p| p.mad);
        }
        Ok(())
    }

    /// Refuses a REQ or a REP with a REJ (rdma_reject); the connection is gone.
    pub fn reject(&mut self, conn: ConnId, info: &RejectInfo) -> Result<(), CmError> {
        let private_data = fill(&info.private_data).ok_or(CmError::PrivateDataTooLong {
            len: info.private_data.len(),
            max: crate::wire::cm::REJ_PRIVATE_DATA_LEN,
        })?;
        let c = self.conn_mut(conn)?;
        let message_rejected = match c.state {
            ConnState::ReqRcvd => message_ref::REQ,
            ConnState::RepRcvd => message_ref::REP,
            state => {
                return Err(CmError::WrongState {
                    op: "reject",
                    state,
                })
            }
        };
        let (peer, tid, remote_comm_id) = (c.peer, c.tid, c.remote_comm_id);
        let rej = CmRej {
            local_comm_id: conn.0,
            remote_comm_id,
            message_rejected,
            rejected_info_length: 0,
            reason: info.reason,
            ari: [0; REJ_ARI_LEN],
            private_data,
        };
        self.send(peer, tid, &CmMessage::Rej(rej));
        self.remove(conn.0);
        Ok(())
    }

    /// Completes an active connection after [`CmEvent::RepReceived`]: sends the RTU (the
    /// application has moved its QP to RTS) and reports [`CmEvent::Established`].
    pub fn establish(&mut self, conn: ConnId) -> Result<(), CmError> {
        let c = self.conn_mut(conn)?;
        if c.state != ConnState::RepRcvd {
            return Err(CmError::WrongState {
                op: "establish",
                state: c.state,
            });
        }
        c.state = ConnState::Established;
        let (peer, tid, remote_comm_id) = (c.peer, c.tid, c.remote_comm_id);
        let rtu = CmIds {
            local_comm_id: conn.0,
            remote_comm_id,
            private_data: [0; crate::wire::cm::RTU_PRIVATE_DATA_LEN],
        };
        let m = self.send(peer, tid, &CmMessage::Rtu(rtu));
        if let Some(c) = self.conns.get_mut(&conn.0) {
            c.last = Some(m);
        }
        self.events.push_back(CmEvent::Established { conn });
        Ok(())
    }

    /// rdma_disconnect: sends a DREQ on an established connection, or the DREP that answers
    /// the peer's DREQ. Disconnecting a connection already disconnecting does nothing.
    pub fn disconnect(&mut self, now: Duration, conn: ConnId) -> Result<(), CmError> {
        let timewait = self.cfg.timewait;
        let c = self.conn_mut(conn)?;
        let (peer, tid, remote_comm_id) = (c.peer, c.tid, c.remote_comm_id);
        match c.state {
            ConnState::Established | ConnState::RepSent | ConnState::MraRepRcvd => {
                c.state = ConnState::DreqSent;
                let dreq = CmDreq {
                    local_comm_id: conn.0,
                    remote_comm_id,
                    remote_qpn: c.remote_qpn,
                    private_data: [0; crate::wire::cm::DREQ_PRIVATE_DATA_LEN],
                };
                let peer_response = c.peer_response;
                let timeout = self.wait_for_peer(peer_response);
                self.send_pending(conn.0, now, &CmMessage::Dreq(dreq), timeout);
                Ok(())
            }
            ConnState::DreqRcvd => {
                c.state = ConnState::TimeWait;
                c.expires = Some(now + timewait);
                let m = self.send(peer, tid, &drep(conn.0, remote_comm_id));
                if let Some(c) = self.conns.get_mut(&conn.0) {
                    c.last = Some(m);
                }
                Ok(())
            }
            ConnState::DreqSent | ConnState::TimeWait => Ok(()),
            state => Err(CmError::WrongState {
                op: "disconnect",
                state,
            }),
        }
    }

    /// An undecided connect request from `peer` on `listener` was decided or dropped.
    fn release_backlog(&mut self, listener: Option<u64>, peer: IpAddr) {
        let Some(service) = listener else { return };
        if let Some(l) = self.listeners.get_mut(&service) {
            l.half_open = l.half_open.saturating_sub(1);
        }
        if let Some(n) = self.half_open_by_source.get_mut(&peer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.half_open_by_source.remove(&peer);
            }
        }
    }

    fn remove(&mut self, id: u32) {
        if let Some(c) = self.conns.remove(&id) {
            match c.state {
                ConnState::SidrReqSent => {}
                ConnState::SidrReqRcvd | ConnState::SidrRepSent => {
                    self.sidr_by_remote.remove(&(c.peer, c.remote_comm_id));
                }
                _ => {
                    self.by_remote.remove(&(c.remote_comm_id, c.remote_ca_guid));
                }
            }
            self.release_backlog(c.listener, c.peer.ip());
        }
    }

    /// The connection a message from `from` names by our communication ID `ours` and the
    /// sender's `theirs`. It is ours to act on only when both IDs are the connection's (the
    /// sender's is unknown to us until its REP, and then any goes) and it comes from the
    /// connection's peer: Linux's cm.c checks the IDs alone, but on RoCE the source address is
    /// what a third host cannot choose without also spoofing it, and a connection has one
    /// peer (spec-notes/security.md).
    fn lookup(&mut self, from: SocketAddr, ours: u32, theirs: u32) -> Lookup {
        let Some(c) = self.conns.get(&ours) else {
            self.counters.unmatched += 1;
            return Lookup::Unknown;
        };
        if c.remote_comm_id != 0 && c.remote_comm_id != theirs {
            self.counters.unmatched += 1;
            return Lookup::Unknown;
        }
        if c.peer != from {
            self.counters.wrong_peer += 1;
            return Lookup::WrongPeer;
        }
        Lookup::Ours
    }

    /// Handles the payload of a SEND that QP1 received from `from`.
    pub fn handle_mad(&mut self, now: Duration, from: SocketAddr, payload: &[u8]) {
        self.counters.mads_received += 1;
        let Ok((hdr, msg)) = CmMessage::parse(payload) else {
            self.counters.bad_mads += 1;
            return;
        };
        match msg {
            CmMessage::Req(r) => self.on_req(now, from, hdr.tid, &r),
            CmMessage::Mra(m) => self.on_mra(now, from, &m),
            CmMessage::Rej(r) => self.on_rej(now, from, &r),
            CmMessage::Rep(r) => self.on_rep(from, &r),
            CmMessage::Rtu(r) => self.on_rtu(from, &r),
            CmMessage::Dreq(d) => self.on_dreq(now, from, hdr.tid, &d),
            CmMessage::Drep(d) => self.on_drep(now, from, &d),
            CmMessage::SidrReq(r) => self.on_sidr_req(now, from, hdr.tid, &r),
            CmMessage::SidrRep(r) => self.on_sidr_rep(from, hdr.tid, &r),
        }
    }

    fn reject_req(&mut self, to: SocketAddr, tid: u64, req: &CmReq, reason: u16) {
        let rej = CmRej {
            local_comm_id: 0,
            remote_comm_id: req.local_comm_id,
            message_rejected: message_ref::REQ,
            rejected_info_length: 0,
            reason,
            ari: [0; REJ_ARI_LEN],
            private_data: [0; crate::wire::cm::REJ_PRIVATE_DATA_LEN],
        };
        self.send(to, tid, &CmMessage::Rej(rej));
    }

    fn on_req(&mut self, now: Duration, from: SocketAddr, tid: u64, r: &CmReq) {
        if let Some(&id) = self.by_remote.get(&(r.local_comm_id, r.local_ca_guid)) {
            if self.conns.get(&id).is_some_and(|c| c.peer != from) {
                // Another host names a requester's connection: not a duplicate, and not
                // something to answer.
                self.counters.wrong_peer += 1;
                return;
            }
            self.counters.duplicates += 1;
            self.on_duplicate_req(id, from, tid, r);
            return;
        }
        if !self.listeners.contains_key(&r.service_id) {
            if self.park_req(now, from, tid, r) {
                return;
            }
            self.counters.rej_no_listener += 1;
            self.reject_req(from, tid, r, rej_reason::INVALID_SERVICE_ID);
            return;
        }
        if !matches!(
            r.transport_service_type,
            transport_type::RC | transport_type::UC
        ) {
            self.counters.rej_invalid += 1;
            self.reject_req(from, tid, r, rej_reason::INVALID_TRANSPORT_TYPE);
            return;
        }
        if !(1..=5).contains(&r.path_mtu) {
            self.counters.rej_invalid += 1;
            self.reject_req(from, tid, r, rej_reason::INVALID_MTU);
            return;
        }
        let Some(id) = self.admit_half_open(from.ip(), r.service_id) else {
            self.reject_req(from, tid, r, rej_reason::NO_RESOURCES);
            return;
        };
        // The requester repeats its REQ for this long before it gives up; a connection the
        // application has not answered by then is one nobody waits for.
        let peer_response = iba_time(r.local_cm_response_timeout);
        // The REQ's own figures are the sender's to choose: a bound keeps a hostile one from
        // holding a backlog slot for days.
        let requester_patience = ((self.wait_for_peer(iba_time(r.remote_cm_response_timeout)))
            * (u32::from(r.max_cm_retries) + 1))
            .min(self.cfg.max_half_open_time);
        self.conns.insert(
            id,
            Conn {
                state: ConnState::ReqRcvd,
                peer: from,
                tid,
                remote_comm_id: r.local_comm_id,
                remote_ca_guid: r.local_ca_guid,
                local_qpn: 0,
                remote_qpn: r.local_qpn,
                peer_response,
                pending: None,
                last: None,
                expires: Some(now + requester_patience),
                listener: Some(r.service_id),
            },
        );
        self.by_remote
            .insert((r.local_comm_id, r.local_ca_guid), id);
        self.events.push_back(CmEvent::ConnectRequest {
            conn: ConnId(id),
            peer: Box::new(PeerParams::from_req(from, r)),
        });
    }

    /// A REQ we already have: the requester did not hear from us in time, or the network
    /// repeated it. As Linux's CM (cm_dup_req_handler): ignored while the application decides
    /// (the requester keeps retrying until it does) and after our REP (which our own timer
    /// repeats); rejected as stale for a connection in time-wait.
    fn on_duplicate_req(&mut self, id: u32, from: SocketAddr, tid: u64, r: &CmReq) {
        if self
            .conns
            .get(&id)
            .is_some_and(|c| c.state == ConnState::TimeWait)
        {
            self.reject_req(from, tid, r, rej_reason::STALE_CONN);
        }
    }

    fn on_mra(&mut self, now: Duration, from: SocketAddr, m: &CmMra) {
        let wait = self.wait_for_peer(iba_time(m.service_timeout));
        if self.lookup(from, m.remote_comm_id, m.local_comm_id) != Lookup::Ours {
            return;
        }
        let Some(c) = self.conns.get_mut(&m.remote_comm_id) else {
            return;
        };
        let next = match (c.state, m.message_mraed) {
            (ConnState::ReqSent, message_ref::REQ) => ConnState::MraReqRcvd,
            (ConnState::RepSent, message_ref::REP) => ConnState::MraRepRcvd,
            (ConnState::MraReqRcvd | ConnState::MraRepRcvd, _) => {
                self.counters.duplicates += 1;
                return;
            }
            _ => {
                self.counters.unmatched += 1;
                return;
            }
        };
        c.state = next;
        if let Some(p) = c.pending.as_mut() {
            p.timeout = wait;
            p.deadline = now + wait;
        }
    }

    fn on_rej(&mut self, now: Duration, from: SocketAddr, r: &CmRej) {
        let timewait = self.cfg.timewait;
        if self.lookup(from, r.remote_comm_id, r.local_comm_id) != Lookup::Ours {
            return;
        }
        let Some(c) = self.conns.get_mut(&r.remote_comm_id) else {
            return;
        };
        let conn = ConnId(r.remote_comm_id);
        match c.state {
            ConnState::ReqSent
            | ConnState::MraReqRcvd
            | ConnState::RepRcvd
            | ConnState::RepSent
            | ConnState::MraRepRcvd => {
                self.events.push_back(CmEvent::Rejected {
                    conn,
                    reason: r.reason,
                    private_data: r.private_data.to_vec(),
                });
                self.remove(conn.0);
            }
            // A REJ on a live connection ends it, as a DREQ would, without an answer.
            ConnState::Established | ConnState::DreqSent | ConnState::DreqRcvd => {
                c.state = ConnState::TimeWait;
                c.pending = None;
                c.expires = Some(now + timewait);
                self.events.push_back(CmEvent::Disconnected { conn });
            }
            _ => self.counters.unmatched += 1,
        }
    }

    fn on_rep(&mut self, from: SocketAddr, r: &CmRep) {
        if self.lookup(from, r.remote_comm_id, r.local_comm_id) != Lookup::Ours {
            return;
        }
        let Some(c) = self.conns.get_mut(&r.remote_comm_id) else {
            return;
        };
        let conn = ConnId(r.remote_comm_id);
        match c.state {
            ConnState::ReqSent | ConnState::MraReqRcvd => {
                c.state = ConnState::RepRcvd;
                c.pending = None;
                c.remote_comm_id = r.local_comm_id;
                c.remote_ca_guid = r.local_ca_guid;
                c.remote_qpn = r.local_qpn;
                self.events.push_back(CmEvent::RepReceived {
                    conn,
                    peer: Box::new(PeerParams::from_rep(from, r)),
                });
            }
            ConnState::RepRcvd => self.counters.duplicates += 1,
            // Our RTU was lost: the responder repeats its REP; repeat the RTU.
            ConnState::Established => {
                self.counters.duplicates += 1;
                if let Some(m) = c.last {
                    let to = c.peer;
                    self.out.push_back(Outgoing { to, mad: m });
                }
            }
            _ => self.counters.unmatched += 1,
        }
    }

    fn on_rtu(&mut self, from: SocketAddr, r: &CmIds) {
        if self.lookup(from, r.remote_comm_id, r.local_comm_id) != Lookup::Ours {
            return;
        }
        let Some(c) = self.conns.get_mut(&r.remote_comm_id) else {
            return;
        };
        match c.state {
            ConnState::RepSent | ConnState::MraRepRcvd => {
                c.state = ConnState::Established;
                c.pending = None;
                self.events.push_back(CmEvent::Established {
                    conn: ConnId(r.remote_comm_id),
                });
            }
            ConnState::Established => self.counters.duplicates += 1,
            _ => self.counters.unmatched += 1,
        }
    }

    fn on_dreq(&mut self, now: Duration, from: SocketAddr, tid: u64, d: &CmDreq) {
        let timewait = self.cfg.timewait;
        match self.lookup(from, d.remote_comm_id, d.local_comm_id) {
            Lookup::Ours => {}
            // Linux answers a DREQ for a connection it no longer has (or whose IDs do not
            // match) with a DREP, so that the peer need not retry until it gives up.
            Lookup::Unknown => {
                self.send(from, tid, &drep(d.remote_comm_id, d.local_comm_id));
                return;
            }
            // Both IDs right, the address wrong: no answer, which would confirm a guess.
            Lookup::WrongPeer => return,
        }
        let Some(c) = self.conns.get_mut(&d.remote_comm_id) else {
            return;
        };
        if c.local_qpn != d.remote_qpn {
            self.counters.unmatched += 1;
            return;
        }
        let conn = ConnId(d.remote_comm_id);
        match c.state {
            ConnState::Established | ConnState::RepSent | ConnState::MraRepRcvd => {
                c.state = ConnState::DreqRcvd;
                c.pending = None;
                self.events.push_back(CmEvent::Disconnected { conn });
            }
            // Both ends disconnected at once: answer, and wait.
            ConnState::DreqSent => {
                c.state = ConnState::TimeWait;
                c.pending = None;
                c.expires = Some(now + timewait);
                let (peer, tid, remote) = (c.peer, c.tid, c.remote_comm_id);
                let m = self.send(peer, tid, &drep(conn.0, remote));
                if let Some(c) = self.conns.get_mut(&conn.0) {
                    c.last = Some(m);
                }
                self.events.push_back(CmEvent::Disconnected { conn });
            }
            // Our DREP was lost.
            ConnState::TimeWait => {
                self.counters.duplicates += 1;
                if let Some(m) = c.last {
                    let to = c.peer;
                    self.out.push_back(Outgoing { to, mad: m });
                }
            }
            ConnState::DreqRcvd => self.counters.duplicates += 1,
            _ => self.counters.unmatched += 1,
        }
    }

    fn on_drep(&mut self, now: Duration, from: SocketAddr, d: &CmIds) {
        let timewait = self.cfg.timewait;
        if self.lookup(from, d.remote_comm_id, d.local_comm_id) != Lookup::Ours {
            return;
        }
        let Some(c) = self.conns.get_mut(&d.remote_comm_id) else {
            return;
        };
        match c.state {
            ConnState::DreqSent => {
                c.state = ConnState::TimeWait;
                c.pending = None;
                c.expires = Some(now + timewait);
                self.events.push_back(CmEvent::Disconnected {
                    conn: ConnId(d.remote_comm_id),
                });
            }
            ConnState::TimeWait => self.counters.duplicates += 1,
            _ => self.counters.unmatched += 1,
        }
    }

    /// Sends a SIDR_REQ for `service_id` to the CM at `to` (rdma_connect on a UD identifier):
    /// [`CmEvent::SidrReply`] follows with the answer, or [`CmEvent::Unreachable`] after every
    /// retry (the REQ's timeouts and retry count: rdma_cm's cma_resolve_ib_udp asks for
    /// CMA_MAX_CM_RETRIES).
    pub fn sidr_request(
        &mut self,
        now: Duration,
        to: SocketAddr,
        service_id: u64,
        private_data: &[u8],
    ) -> Result<ConnId, CmError> {
        let private_data = fill(private_data).ok_or(CmError::PrivateDataTooLong {
            len: private_data.len(),
            max: SIDR_REQ_PRIVATE_DATA_LEN,
        })?;
        let id = self.new_comm_id()?;
        let req = CmSidrReq {
            request_id: id,
            partition_key: 0xffff,
            service_id,
            private_data,
        };
        let tid = self.ids.next_u64();
        self.conns.insert(
            id,
            Conn {
                state: ConnState::SidrReqSent,
                peer: to,
                tid,
                remote_comm_id: 0,
                remote_ca_guid: 0,
                local_qpn: 0,
                remote_qpn: 0,
                peer_response: iba_time(self.cfg.cm_response_timeout),
                pending: None,
                last: None,
                expires: None,
                listener: None,
            },
        );
        let timeout = self.wait_for_peer(iba_time(self.cfg.cm_response_timeout));
        self.send_pending(id, now, &CmMessage::SidrReq(req), timeout);
        Ok(ConnId(id))
    }

    /// Answers a [`CmEvent::SidrRequest`] with a SIDR_REP: `status` 0
    /// ([`sidr_status::SUCCESS`]) with the UD QP `qpn` and its `qkey` (rdma_accept), or a
    /// refusal such as [`sidr_status::REJECT`] (rdma_reject). The resolution is then over;
    /// the reply is kept a while so that a repeated SIDR_REQ gets it again.
    pub fn sidr_reply(
        &mut self,
        now: Duration,
        conn: ConnId,
        status: u8,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let private_data = fill(private_data).ok_or(CmError::PrivateDataTooLong {
            len: private_data.len(),
            max: SIDR_REP_PRIVATE_DATA_LEN,
        })?;
        let keep = 2 * self.wait_for_peer(iba_time(self.cfg.cm_response_timeout));
        let c = self.conn_mut(conn)?;
        if c.state != ConnState::SidrReqRcvd {
            return Err(CmError::WrongState {
                op: "sidr_reply",
                state: c.state,
            });
        }
        let service_id = c.listener.unwrap_or(0);
        let rep = CmSidrRep {
            request_id: c.remote_comm_id,
            status,
            additional_information_length: 0,
            qpn: if status == sidr_status::SUCCESS {
                qpn
            } else {
                0
            },
            service_id,
            qkey: if status == sidr_status::SUCCESS {
                qkey
            } else {
                0
            },
            additional_information: [0; SIDR_REP_INFO_LEN],
            private_data,
        };
        c.state = ConnState::SidrRepSent;
        c.local_qpn = qpn;
        c.expires = Some(now + keep);
        let (peer, tid, listener) = (c.peer, c.tid, c.listener.take());
        self.release_backlog(listener, peer.ip());
        let m = self.send(peer, tid, &CmMessage::SidrRep(rep));
        if let Some(c) = self.conns.get_mut(&conn.0) {
            c.last = Some(m);
        }
        Ok(())
    }

    /// A SIDR_REP that answers nothing of ours: status "unsupported" for a service nobody
    /// listens on (Linux's cm_sidr_req_handler), "no QP" when the backlog is full.
    fn refuse_sidr(&mut self, to: SocketAddr, tid: u64, r: &CmSidrReq, status: u8) {
        let rep = CmSidrRep {
            request_id: r.request_id,
            status,
            additional_information_length: 0,
            qpn: 0,
            service_id: r.service_id,
            qkey: 0,
            additional_information: [0; SIDR_REP_INFO_LEN],
            private_data: [0; SIDR_REP_PRIVATE_DATA_LEN],
        };
        self.send(to, tid, &CmMessage::SidrRep(rep));
    }

    fn on_sidr_req(&mut self, now: Duration, from: SocketAddr, tid: u64, r: &CmSidrReq) {
        if let Some(&id) = self.sidr_by_remote.get(&(from, r.request_id)) {
            self.counters.duplicates += 1;
            // Answered already: the requester missed the reply; undecided: it is coming.
            if let Some(c) = self.conns.get(&id) {
                if let (ConnState::SidrRepSent, Some(m)) = (c.state, c.last) {
                    self.out.push_back(Outgoing { to: from, mad: m });
                }
            }
            return;
        }
        if !self.listeners.contains_key(&r.service_id) {
            self.counters.rej_no_listener += 1;
            self.refuse_sidr(from, tid, r, sidr_status::UNSUPPORTED);
            return;
        }
        let Some(id) = self.admit_half_open(from.ip(), r.service_id) else {
            self.refuse_sidr(from, tid, r, sidr_status::NO_QP);
            return;
        };
        // A SIDR_REQ says nothing of its sender's patience: ours bounds the wait.
        let patience = self.connect_patience().min(self.cfg.max_half_open_time);
        self.conns.insert(
            id,
            Conn {
                state: ConnState::SidrReqRcvd,
                peer: from,
                tid,
                remote_comm_id: r.request_id,
                remote_ca_guid: 0,
                local_qpn: 0,
                remote_qpn: 0,
                peer_response: iba_time(self.cfg.cm_response_timeout),
                pending: None,
                last: None,
                expires: Some(now + patience),
                listener: Some(r.service_id),
            },
        );
        self.sidr_by_remote.insert((from, r.request_id), id);
        self.events.push_back(CmEvent::SidrRequest {
            conn: ConnId(id),
            req: Box::new(SidrRequest::from_msg(from, r)),
        });
    }

    /// A SIDR_REP counts only for a SIDR_REQ of ours still unanswered, from the address the
    /// request went to, in the request's transaction (Linux's CM sends the reply in the
    /// request's): a third host that guesses the 32-bit request ID still cannot choose the
    /// requester's peer (spec-notes/security.md).
    fn on_sidr_rep(&mut self, from: SocketAddr, tid: u64, r: &CmSidrRep) {
        let Some(c) = self.conns.get(&r.request_id) else {
            self.counters.unmatched += 1;
            return;
        };
        if c.state != ConnState::SidrReqSent {
            self.counters.unmatched += 1;
            return;
        }
        if c.peer != from {
            self.counters.wrong_peer += 1;
            return;
        }
        if c.tid != tid {
            self.counters.unmatched += 1;
            return;
        }
        self.events.push_back(CmEvent::SidrReply {
            conn: ConnId(r.request_id),
            rep: Box::new(SidrReply::from_msg(from, r)),
        });
        self.remove(r.request_id);
    }

    /// Runs every deadline that has passed: repeats unanswered messages, gives up on those
    /// out of retries, ends time-waits and forgets abandoned half-open connections.
    pub fn handle_timeout(&mut self, now: Duration) {
        self.expire_parked(now);
        let due: Vec<u32> = self
            .conns
            .iter()
            .filter(|(_, c)| c.deadline().is_some_and(|d| d <= now))
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            self.expire(id, now);
        }
    }

    fn expire(&mut self, id: u32, now: Duration) {
        let conn = ConnId(id);
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if let Some(p) = c.pending.as_mut().filter(|p| p.deadline <= now) {
            if p.retries_left > 0 {
                p.retries_left -= 1;
                p.deadline = now + p.timeout;
                let (to, mad) = (c.peer, p.mad);
                self.counters.retransmits += 1;
                self.out.push_back(Outgoing { to, mad });
                return;
            }
            c.pending = None;
            self.counters.timeouts += 1;
            match c.state {
                ConnState::DreqSent => {
                    c.state = ConnState::TimeWait;
                    c.expires = Some(now + self.cfg.timewait);
                    self.events.push_back(CmEvent::Disconnected { conn });
                }
                _ => {
                    self.events.push_back(CmEvent::Unreachable { conn });
                    self.remove(id);
                }
            }
            return;
        }
        if c.expires.is_some_and(|e| e <= now) {
            match c.state {
                ConnState::TimeWait => self.events.push_back(CmEvent::TimewaitExit { conn }),
                // The reply was sent and reported long ago: nothing to tell.
                ConnState::SidrRepSent => {}
                _ => {
                    self.counters.timeouts += 1;
                    self.events.push_back(CmEvent::Unreachable { conn });
                }
            }
            self.remove(id);
        }
    }
}

/// What [`CmEndpoint::lookup`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lookup {
    /// A connection of ours, both IDs matching, from its peer.
    Ours,
    /// No connection with both IDs.
    Unknown,
    /// The IDs match, the sender is not the connection's peer.
    WrongPeer,
}

fn drep(local_comm_id: u32, remote_comm_id: u32) -> CmMessage {
    CmMessage::Drep(CmIds {
        local_comm_id,
        remote_comm_id,
        private_data: [0; crate::wire::cm::RTU_PRIVATE_DATA_LEN],
    })
}
