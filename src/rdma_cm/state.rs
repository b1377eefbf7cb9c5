//! An identifier's state: where it stands in rdma_cm's life cycle and what it knows of its
//! connection, with the QP attributes that state gives (below the channel and the identifier,
//! which both read it).

use std::net::SocketAddr;
use std::sync::Arc;

use crate::cm::{ConnId, PeerParams};
use crate::ib::{Gid, Mtu};
use crate::verbs::{QueuePair, RcConnect};

use super::params::{ConnParam, PortSpace};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
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
    pub(super) fn name(self) -> &'static str {
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
pub(super) struct IdState {
    pub(super) phase: Phase,
    pub(super) ps: PortSpace,
    /// The peer's IP address and rdma_cm port.
    pub(super) remote: Option<SocketAddr>,
    /// The local rdma_cm port (listen: the service; connect: the source port in the header).
    pub(super) port: u16,
    pub(super) conn: Option<ConnId>,
    pub(super) qp: Option<Arc<QueuePair>>,
    /// The local QP's first PSN.
    pub(super) psn: u32,
    pub(super) param: ConnParam,
    pub(super) peer: Option<Box<PeerParams>>,
    /// `RDMA_OPTION_ID_ACK_TIMEOUT`: the QP's local ACK timeout at RTS in place of the one
    /// the connection would give it.
    pub(super) ack_timeout: Option<u8>,
    /// The number of a QP the application moves itself (connect or accept without a QP of
    /// the identifier's: [`CmId::connect_external`], [`CmId::accept_external`]).
    pub(super) ext_qpn: Option<u32>,
}

/// The active side's RTR and RTS attributes from the REP (`peer`): None without a remote.
pub(super) fn active_connect(st: &IdState, peer: &PeerParams) -> Option<RcConnect> {
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
pub(super) fn passive_connect(st: &IdState, peer: &PeerParams, param: &ConnParam) -> RcConnect {
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
