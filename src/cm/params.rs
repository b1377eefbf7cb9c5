//! What the CM's users give it (connect, accept and reject parameters) and what it reports
//! (events carrying what the peer said).

use std::net::SocketAddr;

use super::conn::ConnId;
use crate::wire::cm::{transport_type, CmRep, CmReq, CmSidrRep, CmSidrReq};
use crate::wire::cma::CmaHeader;

/// What the active side asks for in its REQ (rdma_connect's conn_param plus the route).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectParams {
    /// The service to connect to (rdma_cm: [`crate::wire::cm::rdma_tcp_service_id`]).
    pub service_id: u64,
    /// The local QP's number.
    pub qpn: u32,
    /// The first PSN the local QP expects to receive (its RTR receive PSN): the peer sends
    /// from it. (A starting PSN names what its sender receives, as Linux's CM and rxe use it:
    /// tests/data/rxe/rping.pcap.)
    pub starting_psn: u32,
    /// Transport service type ([`transport_type`]: RC, UC, or `EXTENDED` for an XRC
    /// initiator, whose REQ is marked as the kernel's CM marks it).
    pub transport: u8,
    /// Path MTU (IBTA encoding: 1 = 256 ... 5 = 4096).
    pub path_mtu: u8,
    /// RDMA READs / atomics the local QP accepts at once as responder.
    pub responder_resources: u8,
    /// RDMA READs / atomics the local QP will have outstanding.
    pub initiator_depth: u8,
    /// Transport retry count (3 bits).
    pub retry_count: u8,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// Whether the local QP uses an SRQ.
    pub srq: bool,
    /// The local port's GID.
    pub local_gid: [u8; 16],
    /// The remote port's GID.
    pub remote_gid: [u8; 16],
    /// Flow label of the path (20 bits).
    pub flow_label: u32,
    /// Hop limit of the path.
    pub hop_limit: u8,
    /// Traffic class of the path.
    pub traffic_class: u8,
    /// Local ACK timeout exponent the QP uses (5 bits).
    pub local_ack_timeout: u8,
    /// The local channel adapter GUID.
    pub ca_guid: u64,
    /// Private data (at most 92 bytes; rdma_cm puts its header first).
    pub private_data: Vec<u8>,
}

impl ConnectParams {
    /// Parameters as rdma_cm fills them for an RC connection, with the given service, QP and
    /// GIDs: path MTU 1024, one READ each way, retry and RNR retry 7, hop limit 64, local ACK
    /// timeout 19 (as rxe's REQ in tests/data/rxe/rping.pcap carries).
    pub fn rc(
        service_id: u64,
        qpn: u32,
        starting_psn: u32,
        local_gid: [u8; 16],
        remote_gid: [u8; 16],
    ) -> Self {
        ConnectParams {
            service_id,
            qpn,
            starting_psn,
            transport: transport_type::RC,
            path_mtu: 3,
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: false,
            local_gid,
            remote_gid,
            flow_label: 0,
            hop_limit: 64,
            traffic_class: 0,
            local_ack_timeout: 19,
            ca_guid: 0,
            private_data: Vec::new(),
        }
    }
}

/// What the passive side answers in its REP (rdma_accept's conn_param).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptParams {
    /// The local QP's number.
    pub qpn: u32,
    /// The first PSN the local QP expects to receive (its RTR receive PSN).
    pub starting_psn: u32,
    /// RDMA READs / atomics the local QP accepts at once as responder.
    pub responder_resources: u8,
    /// RDMA READs / atomics the local QP will have outstanding.
    pub initiator_depth: u8,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// Whether the local QP uses an SRQ.
    pub srq: bool,
    /// The local channel adapter GUID.
    pub ca_guid: u64,
    /// Private data (at most 196 bytes).
    pub private_data: Vec<u8>,
}

/// Why and how a connection is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectInfo {
    /// The reason ([`crate::wire::cm::rej_reason`]).
    pub reason: u16,
    /// Private data (at most 148 bytes).
    pub private_data: Vec<u8>,
}

/// What the peer said about its side of a connection, from its REQ or REP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerParams {
    /// Where its MADs come from (and ours go).
    pub addr: SocketAddr,
    /// Its communication ID.
    pub comm_id: u32,
    /// Its channel adapter GUID.
    pub ca_guid: u64,
    /// Its QP's number.
    pub qpn: u32,
    /// The first PSN its QP expects to receive: our QP's first send PSN.
    pub starting_psn: u32,
    /// READs / atomics it accepts at once: bounds our initiator depth.
    pub responder_resources: u8,
    /// READs / atomics it will have outstanding: bounds what we must accept.
    pub initiator_depth: u8,
    /// Its RNR retry count.
    pub rnr_retry_count: u8,
    /// Whether its QP uses an SRQ.
    pub srq: bool,
    /// REQ only: the service asked for (0 in a REP).
    pub service_id: u64,
    /// REQ only: transport service type (`transport_type::EXTENDED` for an XRC REQ, the only
    /// extended type taken).
    pub transport: u8,
    /// REQ only: path MTU (IBTA encoding).
    pub path_mtu: u8,
    /// REQ only: transport retry count.
    pub retry_count: u8,
    /// REQ only: the requester's GID (the remote GID for the passive side's QP).
    pub gid: [u8; 16],
    /// REQ only: the GID the requester addressed.
    pub local_gid: [u8; 16],
    /// REQ only: the path's local ACK timeout.
    pub local_ack_timeout: u8,
    /// REQ only: the path's hop limit, which the passive side's QP sends with.
    pub hop_limit: u8,
    /// REQ only: the path's traffic class, which the passive side's QP sends with.
    pub traffic_class: u8,
    /// REQ only: rdma_cm's header at the front of the private data, when it is one.
    pub cma: Option<CmaHeader>,
    /// The whole private data area.
    pub private_data: Vec<u8>,
}

impl PeerParams {
    pub(super) fn from_req(addr: SocketAddr, r: &CmReq) -> Self {
        PeerParams {
            addr,
            comm_id: r.local_comm_id,
            ca_guid: r.local_ca_guid,
            qpn: r.local_qpn,
            starting_psn: r.starting_psn,
            responder_resources: r.responder_resources,
            initiator_depth: r.initiator_depth,
            rnr_retry_count: r.rnr_retry_count,
            srq: r.srq,
            service_id: r.service_id,
            transport: r.transport_service_type,
            path_mtu: r.path_mtu,
            retry_count: r.retry_count,
            gid: r.primary.local_gid,
            local_gid: r.primary.remote_gid,
            local_ack_timeout: r.primary.local_ack_timeout,
            hop_limit: r.primary.hop_limit,
            traffic_class: r.primary.traffic_class,
            cma: CmaHeader::parse(&r.private_data).ok(),
            private_data: r.private_data.to_vec(),
        }
    }

    /// The REP's figures; `qpn` is the peer's QPN, which an XRC target sends in another field.
    pub(super) fn from_rep(addr: SocketAddr, r: &CmRep, qpn: u32) -> Self {
        PeerParams {
            addr,
            comm_id: r.local_comm_id,
            ca_guid: r.local_ca_guid,
            qpn,
            starting_psn: r.starting_psn,
            responder_resources: r.responder_resources,
            initiator_depth: r.initiator_depth,
            rnr_retry_count: r.rnr_retry_count,
            srq: r.srq,
            service_id: 0,
            transport: transport_type::RC,
            path_mtu: 0,
            retry_count: 0,
            gid: [0; 16],
            local_gid: [0; 16],
            local_ack_timeout: 0,
            hop_limit: 0,
            traffic_class: 0,
            cma: None,
            private_data: r.private_data.to_vec(),
        }
    }
}

/// A SIDR_REQ that a listener received (IBTA §12.11): which UD QP serves `service_id`? The
/// request names no QP of the requester; its datagrams will.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrRequest {
    /// Where the request came from (and the reply goes).
    pub addr: SocketAddr,
    /// The requester's ID for this resolution.
    pub request_id: u32,
    /// The service asked for.
    pub service_id: u64,
    /// The partition key of the request.
    pub partition_key: u16,
    /// rdma_cm's header at the front of the private data, when it is one.
    pub cma: Option<CmaHeader>,
    /// The whole private data area (216 bytes).
    pub private_data: Vec<u8>,
}

impl SidrRequest {
    pub(super) fn from_msg(addr: SocketAddr, r: &CmSidrReq) -> Self {
        SidrRequest {
            addr,
            request_id: r.request_id,
            service_id: r.service_id,
            partition_key: r.partition_key,
            cma: CmaHeader::parse(&r.private_data).ok(),
            private_data: r.private_data.to_vec(),
        }
    }
}

/// A SIDR_REP that answered our SIDR_REQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrReply {
    /// Where it came from: the address the request went to.
    pub addr: SocketAddr,
    /// [`crate::wire::cm::sidr_status`]: 0 when `qpn` and `qkey` serve the service.
    pub status: u8,
    /// The UD QP that serves the service.
    pub qpn: u32,
    /// That QP's Q_Key.
    pub qkey: u32,
    /// The service, as the responder echoed it.
    pub service_id: u64,
    /// The private data area (136 bytes).
    pub private_data: Vec<u8>,
}

impl SidrReply {
    pub(super) fn from_msg(addr: SocketAddr, r: &CmSidrRep) -> Self {
        SidrReply {
            addr,
            status: r.status,
            qpn: r.qpn,
            qkey: r.qkey,
            service_id: r.service_id,
            private_data: r.private_data.to_vec(),
        }
    }
}

/// Something the application must hear about, in the order it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEvent {
    /// A REQ for a service we listen on (rdma_cm CONNECT_REQUEST): answer with
    /// [`super::CmEndpoint::accept`] or [`super::CmEndpoint::reject`].
    ConnectRequest {
        /// The new connection.
        conn: ConnId,
        /// What the requester asked for.
        peer: Box<PeerParams>,
    },
    /// The peer accepted our REQ: move the QP to RTR and RTS with what it said, then call
    /// [`super::CmEndpoint::establish`] (which sends the RTU).
    RepReceived {
        /// The connection.
        conn: ConnId,
        /// What the responder answered.
        peer: Box<PeerParams>,
    },
    /// The connection is established (rdma_cm ESTABLISHED): the RTU arrived (passive side) or
    /// was sent (active side).
    Established {
        /// The connection.
        conn: ConnId,
    },
    /// The peer rejected (rdma_cm REJECTED).
    Rejected {
        /// The connection, now closed.
        conn: ConnId,
        /// The peer's reason.
        reason: u16,
        /// The REJ's private data.
        private_data: Vec<u8>,
    },
    /// The peer never answered, after every retry (rdma_cm UNREACHABLE).
    Unreachable {
        /// The connection, now closed.
        conn: ConnId,
    },
    /// The connection is disconnected (rdma_cm DISCONNECTED): the peer sent a DREQ (answer
    /// with [`super::CmEndpoint::disconnect`], which sends the DREP), or our DREQ was answered or
    /// timed out.
    Disconnected {
        /// The connection.
        conn: ConnId,
    },
    /// A SIDR_REQ for a service we listen on (rdma_cm CONNECT_REQUEST on a UD identifier):
    /// answer with [`super::CmEndpoint::sidr_reply`].
    SidrRequest {
        /// The resolution, named by the ID this endpoint gave it.
        conn: ConnId,
        /// What the requester asked.
        req: Box<SidrRequest>,
    },
    /// The answer to our SIDR_REQ (rdma_cm ESTABLISHED on a UD identifier when its status is
    /// 0); the resolution is over. Had none come after every retry, [`CmEvent::Unreachable`].
    SidrReply {
        /// The resolution, now gone.
        conn: ConnId,
        /// What the responder said.
        rep: Box<SidrReply>,
    },
    /// Time-wait ended and the connection is gone (rdma_cm TIMEWAIT_EXIT): its QP may be reused.
    TimewaitExit {
        /// The connection.
        conn: ConnId,
    },
}

pub(super) fn fill<const N: usize>(data: &[u8]) -> Option<[u8; N]> {
    if data.len() > N {
        return None;
    }
    let mut out = [0u8; N];
    out[..data.len()].copy_from_slice(data);
    Some(out)
}
