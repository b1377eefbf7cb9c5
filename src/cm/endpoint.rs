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

mod calls;
mod receive;

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
    /// An XRC connection (the REQ's transport type extended, XRC): the target QP's number
    /// travels in the REP's local EE context number, as the kernel's CM sends it.
    xrc: bool,
    /// How long the peer's CM says it may take to answer.
    peer_response: Duration,
    /// The message we repeat until it is answered.
    pending: Option<Pending>,
    /// The last message we sent that a duplicate of the peer's previous one is answered with.
    last: Option<[u8; mad::LEN]>,
    /// When the connection gives up waiting without a message to repeat (half-open passive
    /// connections, time-wait).
    expires: Option<Duration>,
    /// The listener whose service this passive connection's request came for, while the
    /// application has not decided it (it counts against its source's bound meanwhile).
    listener: Option<u64>,
    /// The listener whose backlog this request's event counts against until the application
    /// reads it (as the kernel's ucma counts a listener's unread connect-request events).
    unread: Option<u64>,
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
    /// Connect requests whose event the application has not read yet.
    unread: usize,
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

    /// Accepts REQs for `service_id`, with at most `backlog` of their events unread by the
    /// application at once (see [`CmEndpoint::request_read`]); past it a REQ is dropped
    /// unanswered (its requester sends it again after its timeout), as the kernel's CM drops
    /// one when ucma finds its listener's backlog of unread events full. Requests read but
    /// not yet answered do not count: a server may hold many while it decides (their memory
    /// is bounded per source and in time instead: [`EndpointConfig::max_half_open_per_source`],
    /// [`EndpointConfig::max_half_open_time`]).
    pub fn listen(&mut self, service_id: u64, backlog: usize) -> Result<(), CmError> {
        if self.listeners.contains_key(&service_id) {
            return Err(CmError::AlreadyListening(service_id));
        }
        self.listeners.insert(
            service_id,
            Listener {
                backlog: backlog.max(1),
                unread: 0,
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
    /// listener on `service_id` from `source`: within the listener's backlog of unread
    /// requests and the per-source bound on undecided ones, and with a fresh communication
    /// ID, which it returns. None when a bound is reached: the caller drops or refuses the
    /// request, and counts it. The caller's connection names the listener in both its
    /// `listener` and `unread`.
    fn admit_half_open(&mut self, source: IpAddr, service_id: u64) -> Option<u32> {
        let listener = self.listeners.get(&service_id)?;
        let from_source = self.half_open_by_source.get(&source).copied().unwrap_or(0);
        // A listener that asked for a larger backlog may take that many from one source
        // (perftest connects all its QPs from one address at once).
        let source_limit = self.cfg.max_half_open_per_source.max(listener.backlog);
        let full = listener.unread >= listener.backlog || from_source >= source_limit;
        let id = if full { None } else { self.new_comm_id().ok() }?;
        if let Some(l) = self.listeners.get_mut(&service_id) {
            l.unread += 1;
        }
        *self.half_open_by_source.entry(source).or_insert(0) += 1;
        Some(id)
    }

    /// The application read the connect request (REQ or SIDR_REQ) of `conn`: it no longer
    /// counts against its listener's backlog, whether or not it is answered yet. Nothing for
    /// a connection already read, answered or gone.
    pub fn request_read(&mut self, conn: ConnId) {
        if let Some(service) = self.conns.get_mut(&conn.0).and_then(|c| c.unread.take()) {
            self.release_unread(service);
        }
    }

    fn release_unread(&mut self, service: u64) {
        if let Some(l) = self.listeners.get_mut(&service) {
            l.unread = l.unread.saturating_sub(1);
        }
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

    /// An undecided connect request from `peer` on `listener` was decided or dropped: its
    /// source may send another.
    fn release_backlog(&mut self, listener: Option<u64>, peer: IpAddr) {
        if listener.is_none() {
            return;
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
            if let Some(service) = c.unread {
                self.release_unread(service);
            }
        }
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

fn drep(local_comm_id: u32, remote_comm_id: u32) -> CmMessage {
    CmMessage::Drep(CmIds {
        local_comm_id,
        remote_comm_id,
        private_data: [0; crate::wire::cm::RTU_PRIVATE_DATA_LEN],
    })
}
