//! The communication identifier's calls (`rdma_cm_id`): address and route resolution, QP
//! creation, connect, listen, accept, reject, disconnect.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use crate::cm::{AcceptParams, CmError, ConnectParams, RejectInfo};
use crate::driver::node_guid;
use crate::ib::QpType;
use crate::ib::{AccessFlags, Gid, QpAttr, QpAttrMask, QpState};
use crate::verbs::{ProtectionDomain, QpInitAttr, QueuePair, RcConnect};
use crate::wire::cm::{rdma_tcp_service_id, rdma_udp_service_id, rej_reason, sidr_status};
use crate::wire::cma::CmaHeader;
use crate::wire::psn::random_start;

use super::channel::{lock, CmId, Shared};
use super::error::{RdmaCmError, Result};
use super::event::EventKind;
use super::params::{
    ConnParam, PortSpace, CONNECT_PRIVATE_DATA_LEN, RDMA_UDP_QKEY, UD_CONNECT_PRIVATE_DATA_LEN,
};
use super::state::{active_connect, passive_connect, IdState, Phase};

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
        let (remote, pd) = self.connect_target(&st, param, CONNECT_PRIVATE_DATA_LEN)?;
        let dev = &self.shared.dev;
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
        if st.qp.as_ref().is_some_and(|q| q.is_xrc_initiator()) {
            p.transport = crate::wire::cm::transport_type::EXTENDED;
        }
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

    /// Where a connect from `st` goes and the private data it carries (rdma_cm's header, then
    /// at most `max` bytes of the application's); the route must be resolved.
    fn connect_target(
        &self,
        st: &IdState,
        param: &ConnParam,
        max: usize,
    ) -> Result<(SocketAddr, Vec<u8>)> {
        let (Phase::RouteResolved, Some(remote)) = (st.phase, st.remote) else {
            return Err(Self::wrong("connect", st.phase));
        };
        let pd = cma_private_data(st.port, self.shared.dev.local.ip(), remote, param, max)?;
        Ok((remote, pd))
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
        let (remote, pd) = self.connect_target(&st, param, UD_CONNECT_PRIVATE_DATA_LEN)?;
        let dev = &self.shared.dev;
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
    /// [`EventKind::ConnectRequest`]; at most `backlog` of them not yet read at once (the
    /// kernel's ucma bound; later ones are rejected with "no resources"). Requests read but
    /// not yet answered do not count.
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

    /// The application has read this identifier's connect request: it no longer counts
    /// against its listener's backlog. Nothing for any other identifier, or a second time.
    pub fn request_read(&self) {
        // The identifier's lock is let go before the CM's is taken.
        let conn = self.state().conn;
        if let Some(conn) = conn {
            self.shared.dev.gsi.lock().cm.request_read(conn);
        }
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
