//! Communication management messages (IBTA vol. 1 §12.6, Tables 106-120): REQ, MRA, REJ, REP,
//! RTU, DREQ, DREP, SIDR_REQ and SIDR_REP, each the 232 data bytes of a CM-class MAD
//! ([`super::mad`]) whose attribute ID names the message.
//!
//! Offsets and widths are IBTA's (the same as Linux's `include/rdma/ibta_vol1_c12.h`): a byte
//! offset into the message data, a bit offset from that byte's most significant bit and a
//! width. Each is written once, as a [`BitField`] or [`ByteField`], and both `parse` and `emit`
//! go through it. Reserved bits are sent as zero and ignored on receipt. Private data has no
//! length on the wire: the whole area travels, zero-filled after what the consumer gave.

use super::mad::{self, BitField, ByteField, MadRepr};
use super::{check_emit_len, Error, Result};

/// CM attribute IDs (IBTA Table 105).
pub mod attr {
    /// ClassPortInfo.
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    /// Connection request.
    pub const REQ: u16 = 0x0010;
    /// Message receipt acknowledgement.
    pub const MRA: u16 = 0x0011;
    /// Reject.
    pub const REJ: u16 = 0x0012;
    /// Reply to a request.
    pub const REP: u16 = 0x0013;
    /// Ready to use.
    pub const RTU: u16 = 0x0014;
    /// Disconnect request.
    pub const DREQ: u16 = 0x0015;
    /// Disconnect reply.
    pub const DREP: u16 = 0x0016;
    /// Service ID resolution request (UD).
    pub const SIDR_REQ: u16 = 0x0017;
    /// Service ID resolution reply (UD).
    pub const SIDR_REP: u16 = 0x0018;
    /// Load alternate path.
    pub const LAP: u16 = 0x0019;
    /// Alternate path response.
    pub const APR: u16 = 0x001a;
}

/// The name of a CM attribute, as IBTA and Wireshark spell it.
pub fn attr_name(attr_id: u16) -> Option<&'static str> {
    Some(match attr_id {
        attr::CLASS_PORT_INFO => "ClassPortInfo",
        attr::REQ => "REQ",
        attr::MRA => "MRA",
        attr::REJ => "REJ",
        attr::REP => "REP",
        attr::RTU => "RTU",
        attr::DREQ => "DREQ",
        attr::DREP => "DREP",
        attr::SIDR_REQ => "SIDR_REQ",
        attr::SIDR_REP => "SIDR_REP",
        attr::LAP => "LAP",
        attr::APR => "APR",
        _ => return None,
    })
}

/// The service ID of rdma_cm's TCP port space (RDMA_PS_TCP = 0x0106) for `port`.
pub const fn rdma_tcp_service_id(port: u16) -> u64 {
    (0x0106u64 << 16) | port as u64
}

/// The port of an rdma_cm service ID in the TCP or UDP port space, if it is one.
pub fn rdma_service_port(service_id: u64) -> Option<u16> {
    let ps = (service_id >> 16) & 0xffff_ffff_ffff;
    // RDMA_PS_IPOIB 0x0002, RDMA_PS_IB 0x013F, RDMA_PS_TCP 0x0106, RDMA_PS_UDP 0x0111.
    matches!(ps, 0x0106 | 0x0111 | 0x013f | 0x0002).then_some(service_id as u16)
}

/// Transport service type of a REQ (IBTA Table 106).
pub mod transport_type {
    /// Reliable Connected.
    pub const RC: u8 = 0;
    /// Unreliable Connected.
    pub const UC: u8 = 1;
    /// Reliable Datagram.
    pub const RD: u8 = 2;
}

/// Which message an MRA or REJ refers to (MessageMRAed, MessageRejected).
pub mod message_ref {
    /// The REQ.
    pub const REQ: u8 = 0;
    /// The REP.
    pub const REP: u8 = 1;
    /// Something else (a LAP for MRA; "other" for REJ).
    pub const OTHER: u8 = 2;
}

/// Why a connection was rejected (IBTA Table 109; Linux's `enum ib_cm_rej_reason`).
pub mod rej_reason {
    /// No QP available.
    pub const NO_QP: u16 = 1;
    /// No EEC available.
    pub const NO_EEC: u16 = 2;
    /// No resources available.
    pub const NO_RESOURCES: u16 = 3;
    /// The CM timed out waiting for a reply.
    pub const TIMEOUT: u16 = 4;
    /// The request is not supported.
    pub const UNSUPPORTED: u16 = 5;
    /// The communication ID is not valid.
    pub const INVALID_COMM_ID: u16 = 6;
    /// The communication instance is not valid.
    pub const INVALID_COMM_INSTANCE: u16 = 7;
    /// Nobody listens on the service ID.
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// The transport service type is not valid.
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    /// A stale connection.
    pub const STALE_CONN: u16 = 10;
    /// RDC does not exist.
    pub const RDC_NOT_EXIST: u16 = 11;
    /// The GID is not valid.
    pub const INVALID_GID: u16 = 12;
    /// The LID is not valid.
    pub const INVALID_LID: u16 = 13;
    /// The SL is not valid.
    pub const INVALID_SL: u16 = 14;
    /// The traffic class is not valid.
    pub const INVALID_TRAFFIC_CLASS: u16 = 15;
    /// The hop limit is not valid.
    pub const INVALID_HOP_LIMIT: u16 = 16;
    /// The packet rate is not valid.
    pub const INVALID_PACKET_RATE: u16 = 17;
    /// The MTU is not valid.
    pub const INVALID_MTU: u16 = 26;
    /// Not enough responder resources.
    pub const INSUFFICIENT_RESP_RESOURCES: u16 = 27;
    /// The consumer rejected the connection (private data says why).
    pub const CONSUMER_DEFINED: u16 = 28;
    /// The RNR retry count is not valid.
    pub const INVALID_RNR_RETRY: u16 = 29;
    /// The local communication ID is a duplicate.
    pub const DUPLICATE_LOCAL_COMM_ID: u16 = 30;
    /// The class version is not supported.
    pub const INVALID_CLASS_VERSION: u16 = 31;
    /// The flow label is not valid.
    pub const INVALID_FLOW_LABEL: u16 = 32;

    /// Linux's wording of a reason (`ibcm_reject_msg`), for reports.
    pub fn name(reason: u16) -> &'static str {
        match reason {
            1 => "no QP",
            2 => "no EEC",
            3 => "no resources",
            4 => "timeout",
            5 => "unsupported",
            6 => "invalid comm ID",
            7 => "invalid comm instance",
            8 => "invalid service ID",
            9 => "invalid transport type",
            10 => "stale conn",
            11 => "RDC not exist",
            12 => "invalid GID",
            13 => "invalid LID",
            14 => "invalid SL",
            15 => "invalid traffic class",
            16 => "invalid hop limit",
            17 => "invalid packet rate",
            18 => "invalid alt GID",
            19 => "invalid alt LID",
            20 => "invalid alt SL",
            21 => "invalid alt traffic class",
            22 => "invalid alt hop limit",
            23 => "invalid alt packet rate",
            24 => "port CM redirect",
            25 => "port redirect",
            26 => "invalid MTU",
            27 => "insufficient resp resources",
            28 => "consumer defined",
            29 => "invalid RNR retry",
            30 => "duplicate local comm ID",
            31 => "invalid class version",
            32 => "invalid flow label",
            33 => "invalid alt flow label",
            35 => "vendor option is not supported",
            _ => "unrecognized reason",
        }
    }
}

const fn f(byte: usize, bit: u8, width: u8) -> BitField {
    BitField::data(byte, bit, width)
}
const fn b(byte: usize, len: usize) -> ByteField {
    ByteField::data(byte, len)
}

/// Zeroes the message data of a MAD (so that reserved bits go out as zero) and writes its
/// CM SEND header.
fn start(mad: &mut [u8], tid: u64, attr_id: u16) -> Result<()> {
    check_emit_len(mad, mad::LEN)?;
    mad[mad::HEADER_LEN..mad::LEN].fill(0);
    MadRepr::cm_send(tid, attr_id).emit(mad)
}

/// One path of a REQ (the primary or the alternate): on RoCE the GIDs carry the IP addresses
/// and the LIDs are the permissive 0xFFFF.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CmPath {
    /// The requester's port LID.
    pub local_lid: u16,
    /// The responder's port LID.
    pub remote_lid: u16,
    /// The requester's port GID.
    pub local_gid: [u8; 16],
    /// The responder's port GID.
    pub remote_gid: [u8; 16],
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Packet rate (6 bits, IBTA encoding).
    pub packet_rate: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// Whether the path stays in the local subnet.
    pub subnet_local: bool,
    /// Local ACK timeout exponent (5 bits: 4.096 us * 2^n).
    pub local_ack_timeout: u8,
}

/// The bit fields of one REQ path, at the path's base offset (52 primary, 96 alternate, each
/// laid out the same way from there; the GIDs and the byte fields are relative to it).
struct PathLayout {
    local_lid: BitField,
    remote_lid: BitField,
    local_gid: ByteField,
    remote_gid: ByteField,
    flow_label: BitField,
    packet_rate: BitField,
    traffic_class: BitField,
    hop_limit: BitField,
    sl: BitField,
    subnet_local: BitField,
    local_ack_timeout: BitField,
}

impl PathLayout {
    const fn at(base: usize) -> Self {
        PathLayout {
            local_lid: f(base, 0, 16),
            remote_lid: f(base + 2, 0, 16),
            local_gid: b(base + 4, 16),
            remote_gid: b(base + 20, 16),
            flow_label: f(base + 36, 0, 20),
            packet_rate: f(base + 39, 2, 6),
            traffic_class: f(base + 40, 0, 8),
            hop_limit: f(base + 41, 0, 8),
            sl: f(base + 42, 0, 4),
            subnet_local: f(base + 42, 4, 1),
            local_ack_timeout: f(base + 43, 0, 5),
        }
    }

    fn parse(&self, m: &[u8]) -> CmPath {
        CmPath {
            local_lid: self.local_lid.get(m) as u16,
            remote_lid: self.remote_lid.get(m) as u16,
            local_gid: self.local_gid.get_array(m),
            remote_gid: self.remote_gid.get_array(m),
            flow_label: self.flow_label.get(m) as u32,
            packet_rate: self.packet_rate.get(m) as u8,
            traffic_class: self.traffic_class.get(m) as u8,
            hop_limit: self.hop_limit.get(m) as u8,
            sl: self.sl.get(m) as u8,
            subnet_local: self.subnet_local.get(m) != 0,
            local_ack_timeout: self.local_ack_timeout.get(m) as u8,
        }
    }

    fn emit(&self, p: &CmPath, m: &mut [u8]) {
        self.local_lid.put(m, p.local_lid.into());
        self.remote_lid.put(m, p.remote_lid.into());
        self.local_gid.put(m, &p.local_gid);
        self.remote_gid.put(m, &p.remote_gid);
        self.flow_label.put(m, p.flow_label.into());
        self.packet_rate.put(m, p.packet_rate.into());
        self.traffic_class.put(m, p.traffic_class.into());
        self.hop_limit.put(m, p.hop_limit.into());
        self.sl.put(m, p.sl.into());
        self.subnet_local.put(m, p.subnet_local.into());
        self.local_ack_timeout.put(m, p.local_ack_timeout.into());
    }
}

/// Bytes of private data a REQ carries.
pub const REQ_PRIVATE_DATA_LEN: usize = 92;

/// A connection request (IBTA Table 106).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmReq {
    /// The requester's communication ID.
    pub local_comm_id: u32,
    /// The service the requester connects to (rdma_cm: port space and port).
    pub service_id: u64,
    /// The requester's channel adapter GUID.
    pub local_ca_guid: u64,
    /// The requester QP's Q_Key (UD/RD only; 0 for RC).
    pub local_qkey: u32,
    /// The requester's QP number (24 bits).
    pub local_qpn: u32,
    /// RDMA READ / atomic operations the requester accepts at once as responder.
    pub responder_resources: u8,
    /// The requester's EE context (RD only; 24 bits).
    pub local_eecn: u32,
    /// RDMA READ / atomic operations the requester will have outstanding as initiator.
    pub initiator_depth: u8,
    /// The responder's EE context (RD only; 24 bits).
    pub remote_eecn: u32,
    /// How long the responder's CM may take to answer (5 bits: 4.096 us * 2^n).
    pub remote_cm_response_timeout: u8,
    /// Transport service type (2 bits: [`transport_type`]).
    pub transport_service_type: u8,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// The requester's first PSN (24 bits).
    pub starting_psn: u32,
    /// How long the requester's CM may take to answer (5 bits).
    pub local_cm_response_timeout: u8,
    /// Transport retry count (3 bits).
    pub retry_count: u8,
    /// Partition key.
    pub partition_key: u16,
    /// Path MTU (4 bits, IBTA encoding: 1 = 256 ... 5 = 4096).
    pub path_mtu: u8,
    /// RDC exists (RD only).
    pub rdc_exists: bool,
    /// RNR retry count (3 bits; 7 = forever).
    pub rnr_retry_count: u8,
    /// How many times the CM retransmits a message (4 bits).
    pub max_cm_retries: u8,
    /// Whether the requester's QP uses a shared receive queue.
    pub srq: bool,
    /// Extended transport type (3 bits; XRC = 1).
    pub extended_transport_type: u8,
    /// The primary path.
    pub primary: CmPath,
    /// The alternate path (all zero when there is none).
    pub alternate: CmPath,
    /// Whether the requester supports the SAP.
    pub sap_supported: bool,
    /// Private data (rdma_cm puts its [`super::cma::CmaHeader`] first).
    pub private_data: [u8; REQ_PRIVATE_DATA_LEN],
}

mod req {
    use super::{b, f, BitField, ByteField, PathLayout};
    pub const LOCAL_COMM_ID: BitField = f(0, 0, 32);
    pub const SERVICE_ID: BitField = f(8, 0, 64);
    pub const LOCAL_CA_GUID: BitField = f(16, 0, 64);
    pub const LOCAL_Q_KEY: BitField = f(28, 0, 32);
    pub const LOCAL_QPN: BitField = f(32, 0, 24);
    pub const RESPONDER_RESOURCES: BitField = f(35, 0, 8);
    pub const LOCAL_EECN: BitField = f(36, 0, 24);
    pub const INITIATOR_DEPTH: BitField = f(39, 0, 8);
    pub const REMOTE_EECN: BitField = f(40, 0, 24);
    pub const REMOTE_CM_RESPONSE_TIMEOUT: BitField = f(43, 0, 5);
    pub const TRANSPORT_SERVICE_TYPE: BitField = f(43, 5, 2);
    pub const END_TO_END_FLOW_CONTROL: BitField = f(43, 7, 1);
    pub const STARTING_PSN: BitField = f(44, 0, 24);
    pub const LOCAL_CM_RESPONSE_TIMEOUT: BitField = f(47, 0, 5);
    pub const RETRY_COUNT: BitField = f(47, 5, 3);
    pub const PARTITION_KEY: BitField = f(48, 0, 16);
    pub const PATH_MTU: BitField = f(50, 0, 4);
    pub const RDC_EXISTS: BitField = f(50, 4, 1);
    pub const RNR_RETRY_COUNT: BitField = f(50, 5, 3);
    pub const MAX_CM_RETRIES: BitField = f(51, 0, 4);
    pub const SRQ: BitField = f(51, 4, 1);
    pub const EXTENDED_TRANSPORT_TYPE: BitField = f(51, 5, 3);
    pub const PRIMARY: PathLayout = PathLayout::at(52);
    pub const ALTERNATE: PathLayout = PathLayout::at(96);
    pub const SAP_SUPPORTED: BitField = f(139, 5, 1);
    pub const PRIVATE_DATA: ByteField = b(140, super::REQ_PRIVATE_DATA_LEN);
}

impl CmReq {
    fn parse(m: &[u8]) -> Self {
        CmReq {
            local_comm_id: req::LOCAL_COMM_ID.get(m) as u32,
            service_id: req::SERVICE_ID.get(m),
            local_ca_guid: req::LOCAL_CA_GUID.get(m),
            local_qkey: req::LOCAL_Q_KEY.get(m) as u32,
            local_qpn: req::LOCAL_QPN.get(m) as u32,
            responder_resources: req::RESPONDER_RESOURCES.get(m) as u8,
            local_eecn: req::LOCAL_EECN.get(m) as u32,
            initiator_depth: req::INITIATOR_DEPTH.get(m) as u8,
            remote_eecn: req::REMOTE_EECN.get(m) as u32,
            remote_cm_response_timeout: req::REMOTE_CM_RESPONSE_TIMEOUT.get(m) as u8,
            transport_service_type: req::TRANSPORT_SERVICE_TYPE.get(m) as u8,
            end_to_end_flow_control: req::END_TO_END_FLOW_CONTROL.get(m) != 0,
            starting_psn: req::STARTING_PSN.get(m) as u32,
            local_cm_response_timeout: req::LOCAL_CM_RESPONSE_TIMEOUT.get(m) as u8,
            retry_count: req::RETRY_COUNT.get(m) as u8,
            partition_key: req::PARTITION_KEY.get(m) as u16,
            path_mtu: req::PATH_MTU.get(m) as u8,
            rdc_exists: req::RDC_EXISTS.get(m) != 0,
            rnr_retry_count: req::RNR_RETRY_COUNT.get(m) as u8,
            max_cm_retries: req::MAX_CM_RETRIES.get(m) as u8,
            srq: req::SRQ.get(m) != 0,
            extended_transport_type: req::EXTENDED_TRANSPORT_TYPE.get(m) as u8,
            primary: req::PRIMARY.parse(m),
            alternate: req::ALTERNATE.parse(m),
            sap_supported: req::SAP_SUPPORTED.get(m) != 0,
            private_data: req::PRIVATE_DATA.get_array(m),
        }
    }

    fn emit(&self, m: &mut [u8]) {
        req::LOCAL_COMM_ID.put(m, self.local_comm_id.into());
        req::SERVICE_ID.put(m, self.service_id);
        req::LOCAL_CA_GUID.put(m, self.local_ca_guid);
        req::LOCAL_Q_KEY.put(m, self.local_qkey.into());
        req::LOCAL_QPN.put(m, self.local_qpn.into());
        req::RESPONDER_RESOURCES.put(m, self.responder_resources.into());
        req::LOCAL_EECN.put(m, self.local_eecn.into());
        req::INITIATOR_DEPTH.put(m, self.initiator_depth.into());
        req::REMOTE_EECN.put(m, self.remote_eecn.into());
        req::REMOTE_CM_RESPONSE_TIMEOUT.put(m, self.remote_cm_response_timeout.into());
        req::TRANSPORT_SERVICE_TYPE.put(m, self.transport_service_type.into());
        req::END_TO_END_FLOW_CONTROL.put(m, self.end_to_end_flow_control.into());
        req::STARTING_PSN.put(m, self.starting_psn.into());
        req::LOCAL_CM_RESPONSE_TIMEOUT.put(m, self.local_cm_response_timeout.into());
        req::RETRY_COUNT.put(m, self.retry_count.into());
        req::PARTITION_KEY.put(m, self.partition_key.into());
        req::PATH_MTU.put(m, self.path_mtu.into());
        req::RDC_EXISTS.put(m, self.rdc_exists.into());
        req::RNR_RETRY_COUNT.put(m, self.rnr_retry_count.into());
        req::MAX_CM_RETRIES.put(m, self.max_cm_retries.into());
        req::SRQ.put(m, self.srq.into());
        req::EXTENDED_TRANSPORT_TYPE.put(m, self.extended_transport_type.into());
        req::PRIMARY.emit(&self.primary, m);
        req::ALTERNATE.emit(&self.alternate, m);
        req::SAP_SUPPORTED.put(m, self.sap_supported.into());
        req::PRIVATE_DATA.put(m, &self.private_data);
    }
}

/// Bytes of private data an MRA carries.
pub const MRA_PRIVATE_DATA_LEN: usize = 222;

/// Message receipt acknowledgement (IBTA Table 107): "I have your message; give me longer".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmMra {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID (0 when MRAing a REQ whose sender's ID is all we know).
    pub remote_comm_id: u32,
    /// Which message is acknowledged (2 bits: [`message_ref`]).
    pub message_mraed: u8,
    /// How much longer the sender needs (5 bits: 4.096 us * 2^n).
    pub service_timeout: u8,
    /// Private data.
    pub private_data: [u8; MRA_PRIVATE_DATA_LEN],
}

mod mra {
    use super::{b, f, BitField, ByteField};
    pub const LOCAL_COMM_ID: BitField = f(0, 0, 32);
    pub const REMOTE_COMM_ID: BitField = f(4, 0, 32);
    pub const MESSAGE_MRAED: BitField = f(8, 0, 2);
    pub const SERVICE_TIMEOUT: BitField = f(9, 0, 5);
    pub const PRIVATE_DATA: ByteField = b(10, super::MRA_PRIVATE_DATA_LEN);
}

impl CmMra {
    fn parse(m: &[u8]) -> Self {
        CmMra {
            local_comm_id: mra::LOCAL_COMM_ID.get(m) as u32,
            remote_comm_id: mra::REMOTE_COMM_ID.get(m) as u32,
            message_mraed: mra::MESSAGE_MRAED.get(m) as u8,
            service_timeout: mra::SERVICE_TIMEOUT.get(m) as u8,
            private_data: mra::PRIVATE_DATA.get_array(m),
        }
    }

    fn emit(&self, m: &mut [u8]) {
        mra::LOCAL_COMM_ID.put(m, self.local_comm_id.into());
        mra::REMOTE_COMM_ID.put(m, self.remote_comm_id.into());
        mra::MESSAGE_MRAED.put(m, self.message_mraed.into());
        mra::SERVICE_TIMEOUT.put(m, self.service_timeout.into());
        mra::PRIVATE_DATA.put(m, &self.private_data);
    }
}

/// Bytes of additional rejection information (ARI) a REJ carries.
pub const REJ_ARI_LEN: usize = 72;
/// Bytes of private data a REJ carries.
pub const REJ_PRIVATE_DATA_LEN: usize = 148;

/// Reject (IBTA Table 108).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmRej {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID (0 if unknown).
    pub remote_comm_id: u32,
    /// Which message is rejected (2 bits: [`message_ref`]).
    pub message_rejected: u8,
    /// Bytes of `ari` that are meaningful (7 bits).
    pub rejected_info_length: u8,
    /// Why ([`rej_reason`]).
    pub reason: u16,
    /// Additional rejection information.
    pub ari: [u8; REJ_ARI_LEN],
    /// Private data.
    pub private_data: [u8; REJ_PRIVATE_DATA_LEN],
}

mod rej {
    use super::{b, f, BitField, ByteField};
    pub const LOCAL_COMM_ID: BitField = f(0, 0, 32);
    pub const REMOTE_COMM_ID: BitField = f(4, 0, 32);
    pub const MESSAGE_REJECTED: BitField = f(8, 0, 2);
    pub const REJECTED_INFO_LENGTH: BitField = f(9, 0, 7);
    pub const REASON: BitField = f(10, 0, 16);
    pub const ARI: ByteField = b(12, super::REJ_ARI_LEN);
    pub const PRIVATE_DATA: ByteField = b(84, super::REJ_PRIVATE_DATA_LEN);
}

impl CmRej {
    fn parse(m: &[u8]) -> Self {
        CmRej {
            local_comm_id: rej::LOCAL_COMM_ID.get(m) as u32,
            remote_comm_id: rej::REMOTE_COMM_ID.get(m) as u32,
            message_rejected: rej::MESSAGE_REJECTED.get(m) as u8,
            rejected_info_length: rej::REJECTED_INFO_LENGTH.get(m) as u8,
            reason: rej::REASON.get(m) as u16,
            ari: rej::ARI.get_array(m),
            private_data: rej::PRIVATE_DATA.get_array(m),
        }
    }

    fn emit(&self, m: &mut [u8]) {
        rej::LOCAL_COMM_ID.put(m, self.local_comm_id.into());
        rej::REMOTE_COMM_ID.put(m, self.remote_comm_id.into());
        rej::MESSAGE_REJECTED.put(m, self.message_rejected.into());
        rej::REJECTED_INFO_LENGTH.put(m, self.rejected_info_length.into());
        rej::REASON.put(m, self.reason.into());
        rej::ARI.put(m, &self.ari);
        rej::PRIVATE_DATA.put(m, &self.private_data);
    }
}

/// Bytes of private data a REP carries.
pub const REP_PRIVATE_DATA_LEN: usize = 196;

/// Reply to a request (IBTA Table 110).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmRep {
    /// The responder's communication ID.
    pub local_comm_id: u32,
    /// The requester's communication ID.
    pub remote_comm_id: u32,
    /// The responder QP's Q_Key (UD/RD only).
    pub local_qkey: u32,
    /// The responder's QP number (24 bits).
    pub local_qpn: u32,
    /// The responder's EE context (RD only; 24 bits).
    pub local_eecn: u32,
    /// The responder's first PSN (24 bits).
    pub starting_psn: u32,
    /// RDMA READ / atomic operations the responder accepts at once.
    pub responder_resources: u8,
    /// RDMA READ / atomic operations the responder will have outstanding.
    pub initiator_depth: u8,
    /// The responder's target ACK delay (5 bits).
    pub target_ack_delay: u8,
    /// Failover accepted (2 bits).
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// Whether the responder's QP uses a shared receive queue.
    pub srq: bool,
    /// The responder's channel adapter GUID.
    pub local_ca_guid: u64,
    /// Private data.
    pub private_data: [u8; REP_PRIVATE_DATA_LEN],
}

mod rep {
    use super::{b, f, BitField, ByteField};
    pub const LOCAL_COMM_ID: BitField = f(0, 0, 32);
    pub const REMOTE_COMM_ID: BitField = f(4, 0, 32);
    pub const LOCAL_Q_KEY: BitField = f(8, 0, 32);
    pub const LOCAL_QPN: BitField = f(12, 0, 24);
    pub const LOCAL_EECN: BitField = f(16, 0, 24);
    pub const STARTING_PSN: BitField = f(20, 0, 24);
    pub const RESPONDER_RESOURCES: BitField = f(24, 0, 8);
    pub const INITIATOR_DEPTH: BitField = f(25, 0, 8);
    pub const TARGET_ACK_DELAY: BitField = f(26, 0, 5);
    pub const FAILOVER_ACCEPTED: BitField = f(26, 5, 2);
    pub const END_TO_END_FLOW_CONTROL: BitField = f(26, 7, 1);
    pub const RNR_RETRY_COUNT: BitField = f(27, 0, 3);
    pub const SRQ: BitField = f(27, 3, 1);
    pub const LOCAL_CA_GUID: BitField = f(28, 0, 64);
    pub const PRIVATE_DATA: ByteField = b(36, super::REP_PRIVATE_DATA_LEN);
}

impl CmRep {
    fn parse(m: &[u8]) -> Self {
        CmRep {
            local_comm_id: rep::LOCAL_COMM_ID.get(m) as u32,
            remote_comm_id: rep::REMOTE_COMM_ID.get(m) as u32,
            local_qkey: rep::LOCAL_Q_KEY.get(m) as u32,
            local_qpn: rep::LOCAL_QPN.get(m) as u32,
            local_eecn: rep::LOCAL_EECN.get(m) as u32,
            starting_psn: rep::STARTING_PSN.get(m) as u32,
            responder_resources: rep::RESPONDER_RESOURCES.get(m) as u8,
            initiator_depth: rep::INITIATOR_DEPTH.get(m) as u8,
            target_ack_delay: rep::TARGET_ACK_DELAY.get(m) as u8,
            failover_accepted: rep::FAILOVER_ACCEPTED.get(m) as u8,
            end_to_end_flow_control: rep::END_TO_END_FLOW_CONTROL.get(m) != 0,
            rnr_retry_count: rep::RNR_RETRY_COUNT.get(m) as u8,
            srq: rep::SRQ.get(m) != 0,
            local_ca_guid: rep::LOCAL_CA_GUID.get(m),
            private_data: rep::PRIVATE_DATA.get_array(m),
        }
    }

    fn emit(&self, m: &mut [u8]) {
        rep::LOCAL_COMM_ID.put(m, self.local_comm_id.into());
        rep::REMOTE_COMM_ID.put(m, self.remote_comm_id.into());
        rep::LOCAL_Q_KEY.put(m, self.local_qkey.into());
        rep::LOCAL_QPN.put(m, self.local_qpn.into());
        rep::LOCAL_EECN.put(m, self.local_eecn.into());
        rep::STARTING_PSN.put(m, self.starting_psn.into());
        rep::RESPONDER_RESOURCES.put(m, self.responder_resources.into());
        rep::INITIATOR_DEPTH.put(m, self.initiator_depth.into());
        rep::TARGET_ACK_DELAY.put(m, self.target_ack_delay.into());
        rep::FAILOVER_ACCEPTED.put(m, self.failover_accepted.into());
        rep::END_TO_END_FLOW_CONTROL.put(m, self.end_to_end_flow_control.into());
        rep::RNR_RETRY_COUNT.put(m, self.rnr_retry_count.into());
        rep::SRQ.put(m, self.srq.into());
        rep::LOCAL_CA_GUID.put(m, self.local_ca_guid);
        rep::PRIVATE_DATA.put(m, &self.private_data);
    }
}

/// Bytes of private data an RTU or a DREP carries.
pub const RTU_PRIVATE_DATA_LEN: usize = 224;

/// Ready to use (IBTA Table 111) and disconnect reply (Table 113), which share one layout: the
/// two communication IDs and private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmIds {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: [u8; RTU_PRIVATE_DATA_LEN],
}

mod ids {
    use super::{b, f, BitField, ByteField};
    pub const LOCAL_COMM_ID: BitField = f(0, 0, 32);
    pub const REMOTE_COMM_ID: BitField = f(4, 0, 32);
    pub const PRIVATE_DATA: ByteField = b(8, super::RTU_PRIVATE_DATA_LEN);
}

impl CmIds {
    fn parse(m: &[u8]) -> Self {
        CmIds {
            local_comm_id: ids::LOCAL_COMM_ID.get(m) as u32,
            remote_comm_id: ids::REMOTE_COMM_ID.get(m) as u32,
            private_data: ids::PRIVATE_DATA.get_array(m),
        }
    }

    fn emit(&self, m: &mut [u8]) {
        ids::LOCAL_COMM_ID.put(m, self.local_comm_id.into());
        ids::REMOTE_COMM_ID.put(m, self.remote_comm_id.into());
        ids::PRIVATE_DATA.put(m, &self.private_data);
    }
}

/// Bytes of private data a DREQ carries.
pub const DREQ_PRIVATE_DATA_LEN: usize = 220;

/// Disconnect request (IBTA Table 112).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmDreq {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID.
    pub remote_comm_id: u32,
    /// The receiver's QP number (24 bits), which it checks against the connection.
    pub remote_qpn: u32,
    /// Private data.
    pub private_data: [u8; DREQ_PRIVATE_DATA_LEN],
}

mod dreq {
    use super::{b, f, BitField, ByteField};
    pub const LOCAL_COMM_ID: BitField = f(0, 0, 32);
    pub const REMOTE_COMM_ID: BitField = f(4, 0, 32);
    pub const REMOTE_QPN: BitField = f(8, 0, 24);
    pub const PRIVATE_DATA: ByteField = b(12, super::DREQ_PRIVATE_DATA_LEN);
}

impl CmDreq {
    fn parse(m: &[u8]) -> Self {
        CmDreq {
            local_comm_id: dreq::LOCAL_COMM_ID.get(m) as u32,
            remote_comm_id: dreq::REMOTE_COMM_ID.get(m) as u32,
            remote_qpn: dreq::REMOTE_QPN.get(m) as u32,
            private_data: dreq::PRIVATE_DATA.get_array(m),
        }
    }

    fn emit(&self, m: &mut [u8]) {
        dreq::LOCAL_COMM_ID.put(m, self.local_comm_id.into());
        dreq::REMOTE_COMM_ID.put(m, self.remote_comm_id.into());
        dreq::REMOTE_QPN.put(m, self.remote_qpn.into());
        dreq::PRIVATE_DATA.put(m, &self.private_data);
    }
}

/// Bytes of private data a SIDR_REQ carries.
pub const SIDR_REQ_PRIVATE_DATA_LEN: usize = 216;

/// Service ID resolution request (IBTA Table 119): which UD QP serves this service?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmSidrReq {
    /// The requester's ID for this resolution.
    pub request_id: u32,
    /// Partition key.
    pub partition_key: u16,
    /// The service asked for.
    pub service_id: u64,
    /// Private data.
    pub private_data: [u8; SIDR_REQ_PRIVATE_DATA_LEN],
}

mod sidr_req {
    use super::{b, f, BitField, ByteField};
    pub const REQUEST_ID: BitField = f(0, 0, 32);
    pub const PARTITION_KEY: BitField = f(4, 0, 16);
    pub const SERVICE_ID: BitField = f(8, 0, 64);
    pub const PRIVATE_DATA: ByteField = b(16, super::SIDR_REQ_PRIVATE_DATA_LEN);
}

impl CmSidrReq {
    fn parse(m: &[u8]) -> Self {
        CmSidrReq {
            request_id: sidr_req::REQUEST_ID.get(m) as u32,
            partition_key: sidr_req::PARTITION_KEY.get(m) as u16,
            service_id: sidr_req::SERVICE_ID.get(m),
            private_data: sidr_req::PRIVATE_DATA.get_array(m),
        }
    }

    fn emit(&self, m: &mut [u8]) {
        sidr_req::REQUEST_ID.put(m, self.request_id.into());
        sidr_req::PARTITION_KEY.put(m, self.partition_key.into());
        sidr_req::SERVICE_ID.put(m, self.service_id);
        sidr_req::PRIVATE_DATA.put(m, &self.private_data);
    }
}

/// Bytes of additional information a SIDR_REP carries.
pub const SIDR_REP_INFO_LEN: usize = 72;
/// Bytes of private data a SIDR_REP carries.
pub const SIDR_REP_PRIVATE_DATA_LEN: usize = 136;

/// Service ID resolution reply (IBTA Table 120).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmSidrRep {
    /// The request's ID, echoed.
    pub request_id: u32,
    /// 0 = the QP is valid; otherwise why not (IBTA Table 121).
    pub status: u8,
    /// Bytes of `additional_information` that are meaningful.
    pub additional_information_length: u8,
    /// The UD QP that serves the service (24 bits).
    pub qpn: u32,
    /// The service, echoed.
    pub service_id: u64,
    /// The Q_Key of that QP.
    pub qkey: u32,
    /// Additional information.
    pub additional_information: [u8; SIDR_REP_INFO_LEN],
    /// Private data.
    pub private_data: [u8; SIDR_REP_PRIVATE_DATA_LEN],
}

mod sidr_rep {
    use super::{b, f, BitField, ByteField};
    pub const REQUEST_ID: BitField = f(0, 0, 32);
    pub const STATUS: BitField = f(4, 0, 8);
    pub const ADDITIONAL_INFORMATION_LENGTH: BitField = f(5, 0, 8);
    pub const QPN: BitField = f(8, 0, 24);
    pub const SERVICE_ID: BitField = f(12, 0, 64);
    pub const Q_KEY: BitField = f(20, 0, 32);
    pub const ADDITIONAL_INFORMATION: ByteField = b(24, super::SIDR_REP_INFO_LEN);
    pub const PRIVATE_DATA: ByteField = b(96, super::SIDR_REP_PRIVATE_DATA_LEN);
}

impl CmSidrRep {
    fn parse(m: &[u8]) -> Self {
        CmSidrRep {
            request_id: sidr_rep::REQUEST_ID.get(m) as u32,
            status: sidr_rep::STATUS.get(m) as u8,
            additional_information_length: sidr_rep::ADDITIONAL_INFORMATION_LENGTH.get(m) as u8,
            qpn: sidr_rep::QPN.get(m) as u32,
            service_id: sidr_rep::SERVICE_ID.get(m),
            qkey: sidr_rep::Q_KEY.get(m) as u32,
            additional_information: sidr_rep::ADDITIONAL_INFORMATION.get_array(m),
            private_data: sidr_rep::PRIVATE_DATA.get_array(m),
        }
    }

    fn emit(&self, m: &mut [u8]) {
        sidr_rep::REQUEST_ID.put(m, self.request_id.into());
        sidr_rep::STATUS.put(m, self.status.into());
        sidr_rep::ADDITIONAL_INFORMATION_LENGTH.put(m, self.additional_information_length.into());
        sidr_rep::QPN.put(m, self.qpn.into());
        sidr_rep::SERVICE_ID.put(m, self.service_id);
        sidr_rep::Q_KEY.put(m, self.qkey.into());
        sidr_rep::ADDITIONAL_INFORMATION.put(m, &self.additional_information);
        sidr_rep::PRIVATE_DATA.put(m, &self.private_data);
    }
}

/// One CM message, as the attribute ID of its MAD names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmMessage {
    /// Connection request.
    Req(CmReq),
    /// Message receipt acknowledgement.
    Mra(CmMra),
    /// Reject.
    Rej(CmRej),
    /// Reply.
    Rep(CmRep),
    /// Ready to use.
    Rtu(CmIds),
    /// Disconnect request.
    Dreq(CmDreq),
    /// Disconnect reply.
    Drep(CmIds),
    /// Service ID resolution request.
    SidrReq(CmSidrReq),
    /// Service ID resolution reply.
    SidrRep(CmSidrRep),
}

impl CmMessage {
    /// The attribute ID that carries this message.
    pub fn attr_id(&self) -> u16 {
        match self {
            CmMessage::Req(_) => attr::REQ,
            CmMessage::Mra(_) => attr::MRA,
            CmMessage::Rej(_) => attr::REJ,
            CmMessage::Rep(_) => attr::REP,
            CmMessage::Rtu(_) => attr::RTU,
            CmMessage::Dreq(_) => attr::DREQ,
            CmMessage::Drep(_) => attr::DREP,
            CmMessage::SidrReq(_) => attr::SIDR_REQ,
            CmMessage::SidrRep(_) => attr::SIDR_REP,
        }
    }

    /// The message's name.
    pub fn name(&self) -> &'static str {
        attr_name(self.attr_id()).unwrap_or("?")
    }

    /// The communication ID the sender gave itself (the request ID for SIDR).
    pub fn local_comm_id(&self) -> u32 {
        match self {
            CmMessage::Req(m) => m.local_comm_id,
            CmMessage::Mra(m) => m.local_comm_id,
            CmMessage::Rej(m) => m.local_comm_id,
            CmMessage::Rep(m) => m.local_comm_id,
            CmMessage::Rtu(m) | CmMessage::Drep(m) => m.local_comm_id,
            CmMessage::Dreq(m) => m.local_comm_id,
            CmMessage::SidrReq(m) => m.request_id,
            CmMessage::SidrRep(m) => m.request_id,
        }
    }

    /// Parses a whole CM MAD: its header (which must be a CM-class SEND of class version 2)
    /// and the message its attribute ID names.
    pub fn parse(mad: &[u8]) -> Result<(MadRepr, CmMessage)> {
        let hdr = MadRepr::parse(mad)?;
        let unsupported = Error::UnsupportedMad {
            mgmt_class: hdr.mgmt_class,
            class_version: hdr.class_version,
            method: hdr.method,
            attr_id: hdr.attr_id,
        };
        if hdr.base_version != mad::BASE_VERSION
            || hdr.mgmt_class != mad::CLASS_CM
            || hdr.class_version != mad::CM_CLASS_VERSION
            || hdr.method != mad::method::SEND
        {
            return Err(unsupported);
        }
        let m = &mad[..mad::LEN];
        let msg = match hdr.attr_id {
            attr::REQ => CmMessage::Req(CmReq::parse(m)),
            attr::MRA => CmMessage::Mra(CmMra::parse(m)),
            attr::REJ => CmMessage::Rej(CmRej::parse(m)),
            attr::REP => CmMessage::Rep(CmRep::parse(m)),
            attr::RTU => CmMessage::Rtu(CmIds::parse(m)),
            attr::DREQ => CmMessage::Dreq(CmDreq::parse(m)),
            attr::DREP => CmMessage::Drep(CmIds::parse(m)),
            attr::SIDR_REQ => CmMessage::SidrReq(CmSidrReq::parse(m)),
            attr::SIDR_REP => CmMessage::SidrRep(CmSidrRep::parse(m)),
            _ => return Err(unsupported),
        };
        Ok((hdr, msg))
    }

    /// Writes the whole MAD (header with transaction ID `tid`, then the message) into the
    /// front of `mad`, which holds at least [`mad::LEN`] bytes.
    pub fn emit(&self, tid: u64, mad: &mut [u8]) -> Result<()> {
        start(mad, tid, self.attr_id())?;
        let m = &mut mad[..mad::LEN];
        match self {
            CmMessage::Req(x) => x.emit(m),
            CmMessage::Mra(x) => x.emit(m),
            CmMessage::Rej(x) => x.emit(m),
            CmMessage::Rep(x) => x.emit(m),
            CmMessage::Rtu(x) | CmMessage::Drep(x) => x.emit(m),
            CmMessage::Dreq(x) => x.emit(m),
            CmMessage::SidrReq(x) => x.emit(m),
            CmMessage::SidrRep(x) => x.emit(m),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The MADs of tests/data/rxe/rping.pcap (kernel 6.1's CM, `rping -c` on 192.0.2.11 against
    /// `rping -s` on 192.0.2.12): the first 72 data bytes of each; the rest is zero except the
    /// REQ's private data, given separately.
    const TID: u64 = 0x0000_0002_8edc_46a2;
    const REQ_HEAD: &str = "a246dc8e000000000000000001061c06505400fffec0020b000000000000000000001e0100000001000000a09c0b72a7ffff37f0ffffffff00000000000000000000ffffc000020b00000000000000000000ffffc000020c5afb7000004000980000000000000000";
    const REP_HEAD: &str =
        "e0de89dea246dc8e0000000000001e00000000007fdafc00010178e0505400fffec0020c";
    const RTU_HEAD: &str = "a246dc8ee0de89de";
    const DREQ_HEAD: &str = "a246dc8ee0de89de00001e00";
    const DREP_HEAD: &str = "e0de89dea246dc8e";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn mad_with(attr_id: u16, head: &str) -> [u8; mad::LEN] {
        let mut m = [0u8; mad::LEN];
        MadRepr::cm_send(TID, attr_id).emit(&mut m).unwrap();
        let h = hex(head);
        m[mad::HEADER_LEN..mad::HEADER_LEN + h.len()].copy_from_slice(&h);
        m
    }

    fn roundtrip(m: &[u8; mad::LEN]) -> CmMessage {
        let (hdr, msg) = CmMessage::parse(m).unwrap();
        assert_eq!(hdr.tid, TID);
        let mut out = [0xEEu8; mad::LEN];
        msg.emit(TID, &mut out).unwrap();
        assert_eq!(&out[..], &m[..], "{} re-emitted differs", msg.name());
        msg
    }

    #[test]
    fn rxe_req() {
        let m = mad_with(attr::REQ, REQ_HEAD);
        let CmMessage::Req(r) = roundtrip(&m) else {
            panic!("not a REQ")
        };
        assert_eq!(r.local_comm_id, 0xa246dc8e);
        assert_eq!(r.service_id, rdma_tcp_service_id(7174));
        assert_eq!(rdma_service_port(r.service_id), Some(7174));
        assert_eq!(r.local_ca_guid, 0x505400fffec0020b);
        assert_eq!(r.local_qkey, 0);
        assert_eq!(r.local_qpn, 0x1e);
        assert_eq!(r.responder_resources, 1);
        assert_eq!(r.initiator_depth, 1);
        assert_eq!(r.remote_cm_response_timeout, 20);
        assert_eq!(r.transport_service_type, transport_type::RC);
        assert!(!r.end_to_end_flow_control);
        assert_eq!(r.starting_psn, 0x9c0b72);
        assert_eq!(r.local_cm_response_timeout, 20);
        assert_eq!(r.retry_count, 7);
        assert_eq!(r.partition_key, 0xffff);
        assert_eq!(r.path_mtu, 3);
        assert_eq!(r.rnr_retry_count, 7);
        assert_eq!(r.max_cm_retries, 15);
        assert!(!r.srq);
        assert_eq!(r.primary.local_lid, 0xffff);
        assert_eq!(r.primary.remote_lid, 0xffff);
        assert_eq!(r.primary.local_gid[10..], [0xff, 0xff, 192, 0, 2, 11]);
        assert_eq!(r.primary.remote_gid[10..], [0xff, 0xff, 192, 0, 2, 12]);
        assert_eq!(r.primary.flow_label, 0x5afb7);
        assert_eq!(r.primary.hop_limit, 64);
        assert_eq!(r.primary.local_ack_timeout, 19);
        assert_eq!(r.alternate, CmPath::default());
    }

    #[test]
    fn rxe_rep_rtu_dreq_drep() {
        let CmMessage::Rep(r) = roundtrip(&mad_with(attr::REP, REP_HEAD)) else {
            panic!("not a REP")
        };
        assert_eq!(
            (r.local_comm_id, r.remote_comm_id),
            (0xe0de89de, 0xa246dc8e)
        );
        assert_eq!(r.local_qpn, 0x1e);
        assert_eq!(r.starting_psn, 0x7fdafc);
        assert_eq!((r.responder_resources, r.initiator_depth), (1, 1));
        assert_eq!(r.target_ack_delay, 15);
        assert_eq!(r.rnr_retry_count, 7);
        assert!(!r.srq);
        assert_eq!(r.local_ca_guid, 0x505400fffec0020c);

        let CmMessage::Rtu(r) = roundtrip(&mad_with(attr::RTU, RTU_HEAD)) else {
            panic!("not an RTU")
        };
        assert_eq!(
            (r.local_comm_id, r.remote_comm_id),
            (0xa246dc8e, 0xe0de89de)
        );

        let CmMessage::Dreq(d) = roundtrip(&mad_with(attr::DREQ, DREQ_HEAD)) else {
            panic!("not a DREQ")
        };
        assert_eq!(d.remote_qpn, 0x1e);

        let CmMessage::Drep(d) = roundtrip(&mad_with(attr::DREP, DREP_HEAD)) else {
            panic!("not a DREP")
        };
        assert_eq!(
            (d.local_comm_id, d.remote_comm_id),
            (0xe0de89de, 0xa246dc8e)
        );
    }

    #[test]
    fn rej_mra_sidr_roundtrip_through_their_layouts() {
        let rej = CmRej {
            local_comm_id: 1,
            remote_comm_id: 0,
            message_rejected: message_ref::REQ,
            rejected_info_length: 0,
            reason: rej_reason::INVALID_SERVICE_ID,
            ari: [0; REJ_ARI_LEN],
            private_data: [7; REJ_PRIVATE_DATA_LEN],
        };
        let mut m = [0u8; mad::LEN];
        CmMessage::Rej(rej).emit(5, &mut m).unwrap();
        // Reason at data bytes 10-11, private data from data byte 84.
        assert_eq!(m[mad::HEADER_LEN + 10..mad::HEADER_LEN + 12], [0, 8]);
        assert_eq!(m[mad::HEADER_LEN + 83], 0);
        assert_eq!(m[mad::HEADER_LEN + 84], 7);
        assert_eq!(CmMessage::parse(&m).unwrap().1, CmMessage::Rej(rej));
        assert_eq!(rej_reason::name(rej.reason), "invalid service ID");

        let mra = CmMra {
            local_comm_id: 2,
            remote_comm_id: 3,
            message_mraed: message_ref::REP,
            service_timeout: 31,
            private_data: [0; MRA_PRIVATE_DATA_LEN],
        };
        CmMessage::Mra(mra).emit(6, &mut m).unwrap();
        assert_eq!(m[mad::HEADER_LEN + 8], 0x40);
        assert_eq!(m[mad::HEADER_LEN + 9], 0xf8);
        assert_eq!(CmMessage::parse(&m).unwrap().1, CmMessage::Mra(mra));

        let sidr = CmSidrRep {
            request_id: 9,
            status: 0,
            additional_information_length: 0,
            qpn: 0x123456,
            service_id: rdma_tcp_service_id(1),
            qkey: 0x1234_5678,
            additional_information: [0; SIDR_REP_INFO_LEN],
            private_data: [1; SIDR_REP_PRIVATE_DATA_LEN],
        };
        CmMessage::SidrRep(sidr).emit(7, &mut m).unwrap();
        assert_eq!(
            m[mad::HEADER_LEN + 8..mad::HEADER_LEN + 11],
            [0x12, 0x34, 0x56]
        );
        assert_eq!(CmMessage::parse(&m).unwrap().1, CmMessage::SidrRep(sidr));
    }

    #[test]
    fn reserved_bits_are_ignored_on_receipt_and_zero_when_sent() {
        let mut dreq = mad_with(attr::DREQ, DREQ_HEAD);
        dreq[mad::HEADER_LEN + 11] = 0xff; // reserved byte after the 24-bit remote QPN
        let (_, msg) = CmMessage::parse(&dreq).unwrap();
        let CmMessage::Dreq(d) = msg else {
            panic!("not a DREQ")
        };
        assert_eq!(d.remote_qpn, 0x1e);
        let mut out = [0xEEu8; mad::LEN];
        msg.emit(TID, &mut out).unwrap();
        assert_eq!(out[mad::HEADER_LEN + 11], 0);
        assert_eq!(out[..], mad_with(attr::DREQ, DREQ_HEAD)[..]);
    }

    #[test]
    fn other_classes_and_attributes_are_typed_errors() {
        let mut m = mad_with(attr::REQ, REQ_HEAD);
        m[1] = 0x81; // not the CM class
        assert!(matches!(
            CmMessage::parse(&m),
            Err(Error::UnsupportedMad {
                mgmt_class: 0x81,
                ..
            })
        ));
        let mut m = mad_with(0x0042, "");
        assert!(matches!(
            CmMessage::parse(&m),
            Err(Error::UnsupportedMad {
                attr_id: 0x0042,
                ..
            })
        ));
        m[2] = 1; // class version 1
        assert!(CmMessage::parse(&m).is_err());
        assert!(CmMessage::parse(&m[..200]).is_err());
    }
}
