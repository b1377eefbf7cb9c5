//! What rdma_cm's calls take and its events carry about a connection: private data sizes,
//! the UDP port space's Q_Key, event statuses, port spaces and connection parameters.

use std::net::IpAddr;

use crate::wire::cm::{
    rdma_tcp_service_id, rdma_udp_service_id, REQ_PRIVATE_DATA_LEN, SIDR_REQ_PRIVATE_DATA_LEN,
};
use crate::wire::cma::CmaHeader;

/// Private data a connect request carries for the application: the REQ's 92 bytes less
/// rdma_cm's 36-byte header.
pub const CONNECT_PRIVATE_DATA_LEN: usize = REQ_PRIVATE_DATA_LEN - CmaHeader::LEN;

/// Private data a UD identifier's connect (its SIDR_REQ) carries for the application: 216
/// bytes less rdma_cm's header.
pub const UD_CONNECT_PRIVATE_DATA_LEN: usize = SIDR_REQ_PRIVATE_DATA_LEN - CmaHeader::LEN;

/// The Q_Key of every QP in rdma_cm's UDP port space (`RDMA_UDP_QKEY`): what a UD identifier's
/// QP is created with and what its accept advertises.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// `ETIMEDOUT`, negated: the status of an [`super::EventKind::Unreachable`] whose peer never
/// answered, as the kernel's rdma_cm reports it.
pub const STATUS_TIMED_OUT: i32 = -110;

/// `EINVAL`, negated: the status of an [`super::EventKind::Unreachable`] on a UD identifier whose
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
