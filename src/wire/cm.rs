//! Communication management messages (IBTA vol. 1 §12.6, Tables 106-120): REQ, MRA, REJ, REP,
//! RTU, DREQ, DREP, SIDR_REQ and SIDR_REP, each the 232 data bytes of a CM-class MAD
//! ([`super::mad`]) whose attribute ID names the message.
//!
//! Offsets and widths are IBTA's (the same as Linux's `include/rdma/ibta_vol1_c12.h`): a byte
//! offset into the message data, a bit offset from that byte's most significant bit and a
//! width. Each message is declared once with `message!`, one line per field (doc, name, type,
//! place), from which come its struct, its layout constants and the parse and emit that go
//! through them; `messages!` lists which attribute ID carries which message. Reserved bits are
//! sent as zero and ignored on receipt. Private data has no length on the wire: the whole area
//! travels, zero-filled after what the consumer gave.

use super::mad::{self, BitField, Field, MadRepr};
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

/// The service ID of rdma_cm's UDP port space (RDMA_PS_UDP = 0x0111) for `port`: what a UD
/// identifier's SIDR_REQ asks for (the kernel's cma_get_service_id).
pub const fn rdma_udp_service_id(port: u16) -> u64 {
    (0x0111u64 << 16) | port as u64
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
    /// Extended: the REQ's extended transport type says which (1: XRC, as the kernel's CM
    /// marks an XRC initiator's REQ; `cm_req_set_qp_type`).
    pub const EXTENDED: u8 = 3;
    /// The extended transport type of an XRC connection.
    pub const EXTENDED_XRC: u8 = 1;
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

/// A field `width` bits wide at `bit` bits below the most significant bit of byte
/// `data_byte` of the message (IBTA's offsets, which count from the end of the MAD header).
const fn bits(data_byte: usize, bit: u8, width: u8) -> BitField {
    BitField::data(data_byte, bit, width)
}

/// Where a byte array or a nested layout (a REQ's path) starts: its byte offset in the
/// message. Its length or layout comes from its type.
const fn at(data_byte: usize) -> usize {
    data_byte
}

impl Field for CmPath {
    type Place = usize;
    fn read(at: usize, mad: &[u8], base: usize) -> Self {
        CmPath::parse_at(mad, base + at)
    }
    fn write(&self, at: usize, mad: &mut [u8], base: usize) {
        self.emit_at(mad, base + at);
    }
    #[cfg(test)]
    fn occupies(at: usize, base: usize, out: &mut Vec<(usize, usize, usize)>) {
        CmPath::occupied(base + at, out);
    }
}

/// Declares a CM message (or a part of one) once, as IBTA's table gives it: per field its
/// doc, name, type and place (`bits(byte, bit, width)` or `at(byte)`). From that one list
/// come the struct, a layout module with one constant per field (named as the field), and
/// `parse_at`/`emit_at`, which read and write every field through its constant.
macro_rules! message {
    (
        $(#[$meta:meta])*
        pub struct $name:ident in $layout:ident {
            $(
                $(#[$doc:meta])*
                $field:ident: $ty:ty = $place:expr,
            )*
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $(
                $(#[$doc])*
                pub $field: $ty,
            )*
        }

        /// Where each field lies, relative to the start of the layout.
        #[allow(non_upper_case_globals)]
        mod $layout {
            use super::*;
            $(pub(super) const $field: <$ty as Field>::Place = $place;)*
        }

        impl $name {
            /// Reads the layout starting `base` bytes into the message data of a whole MAD.
            fn parse_at(mad: &[u8], base: usize) -> Self {
                $name {
                    $($field: Field::read($layout::$field, mad, base),)*
                }
            }

            /// Writes the layout starting `base` bytes into the message data of a whole MAD.
            fn emit_at(&self, mad: &mut [u8], base: usize) {
                $(self.$field.write($layout::$field, mad, base);)*
            }

            /// The bits each field takes ([`Field::occupies`]), for the layout test.
            #[cfg(test)]
            fn occupied(base: usize, out: &mut Vec<(usize, usize, usize)>) {
                $(<$ty as Field>::occupies($layout::$field, base, out);)*
            }
        }
    };
}

/// Zeroes the message data of a MAD (so that reserved bits go out as zero) and writes its
/// CM SEND header.
fn start(mad: &mut [u8], tid: u64, attr_id: u16) -> Result<()> {
    check_emit_len(mad, mad::LEN)?;
    mad[mad::HEADER_LEN..mad::LEN].fill(0);
    MadRepr::cm_send(tid, attr_id).emit(mad)
}

message! {
    /// One path of a REQ (the primary or the alternate): on RoCE the GIDs carry the IP addresses
    /// and the LIDs are the permissive 0xFFFF.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct CmPath in path {
        /// The requester's port LID.
        local_lid: u16 = bits(0, 0, 16),
        /// The responder's port LID.
        remote_lid: u16 = bits(2, 0, 16),
        /// The requester's port GID.
        local_gid: [u8; 16] = at(4),
        /// The responder's port GID.
        remote_gid: [u8; 16] = at(20),
        /// Flow label (20 bits).
        flow_label: u32 = bits(36, 0, 20),
        /// Packet rate (6 bits, IBTA encoding).
        packet_rate: u8 = bits(39, 2, 6),
        /// Traffic class.
        traffic_class: u8 = bits(40, 0, 8),
        /// Hop limit.
        hop_limit: u8 = bits(41, 0, 8),
        /// Service level (4 bits).
        sl: u8 = bits(42, 0, 4),
        /// Whether the path stays in the local subnet.
        subnet_local: bool = bits(42, 4, 1),
        /// Local ACK timeout exponent (5 bits: 4.096 us * 2^n).
        local_ack_timeout: u8 = bits(43, 0, 5),
    }
}

/// Bytes of private data a REQ carries.
pub const REQ_PRIVATE_DATA_LEN: usize = 92;

message! {
    /// A connection request (IBTA Table 106).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct CmReq in req {
        /// The requester's communication ID.
        local_comm_id: u32 = bits(0, 0, 32),
        /// The service the requester connects to (rdma_cm: port space and port).
        service_id: u64 = bits(8, 0, 64),
        /// The requester's channel adapter GUID.
        local_ca_guid: u64 = bits(16, 0, 64),
        /// The requester QP's Q_Key (UD/RD only; 0 for RC).
        local_qkey: u32 = bits(28, 0, 32),
        /// The requester's QP number (24 bits).
        local_qpn: u32 = bits(32, 0, 24),
        /// RDMA READ / atomic operations the requester accepts at once as responder.
        responder_resources: u8 = bits(35, 0, 8),
        /// The requester's EE context (RD only; 24 bits).
        local_eecn: u32 = bits(36, 0, 24),
        /// RDMA READ / atomic operations the requester will have outstanding as initiator.
        initiator_depth: u8 = bits(39, 0, 8),
        /// The responder's EE context (RD only; 24 bits).
        remote_eecn: u32 = bits(40, 0, 24),
        /// How long the responder's CM may take to answer (5 bits: 4.096 us * 2^n).
        remote_cm_response_timeout: u8 = bits(43, 0, 5),
        /// Transport service type (2 bits: [`transport_type`]).
        transport_service_type: u8 = bits(43, 5, 2),
        /// End-to-end flow control.
        end_to_end_flow_control: bool = bits(43, 7, 1),
        /// The requester's first PSN (24 bits).
        starting_psn: u32 = bits(44, 0, 24),
        /// How long the requester's CM may take to answer (5 bits).
        local_cm_response_timeout: u8 = bits(47, 0, 5),
        /// Transport retry count (3 bits).
        retry_count: u8 = bits(47, 5, 3),
        /// Partition key.
        partition_key: u16 = bits(48, 0, 16),
        /// Path MTU (4 bits, IBTA encoding: 1 = 256 ... 5 = 4096).
        path_mtu: u8 = bits(50, 0, 4),
        /// RDC exists (RD only).
        rdc_exists: bool = bits(50, 4, 1),
        /// RNR retry count (3 bits; 7 = forever).
        rnr_retry_count: u8 = bits(50, 5, 3),
        /// How many times the CM retransmits a message (4 bits).
        max_cm_retries: u8 = bits(51, 0, 4),
        /// Whether the requester's QP uses a shared receive queue.
        srq: bool = bits(51, 4, 1),
        /// Extended transport type (3 bits; XRC = 1).
        extended_transport_type: u8 = bits(51, 5, 3),
        /// The primary path.
        primary: CmPath = at(52),
        /// The alternate path (all zero when there is none).
        alternate: CmPath = at(96),
        /// Whether the requester supports the SAP.
        sap_supported: bool = bits(139, 5, 1),
        /// Private data (rdma_cm puts its [`super::cma::CmaHeader`] first).
        private_data: [u8; REQ_PRIVATE_DATA_LEN] = at(140),
    }
}

/// Bytes of private data an MRA carries.
pub const MRA_PRIVATE_DATA_LEN: usize = 222;

message! {
    /// Message receipt acknowledgement (IBTA Table 107): "I have your message; give me longer".
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct CmMra in mra {
        /// The sender's communication ID.
        local_comm_id: u32 = bits(0, 0, 32),
        /// The receiver's communication ID (0 when MRAing a REQ whose sender's ID is all we know).
        remote_comm_id: u32 = bits(4, 0, 32),
        /// Which message is acknowledged (2 bits: [`message_ref`]).
        message_mraed: u8 = bits(8, 0, 2),
        /// How much longer the sender needs (5 bits: 4.096 us * 2^n).
        service_timeout: u8 = bits(9, 0, 5),
        /// Private data.
        private_data: [u8; MRA_PRIVATE_DATA_LEN] = at(10),
    }
}

/// Bytes of additional rejection information (ARI) a REJ carries.
pub const REJ_ARI_LEN: usize = 72;
/// Bytes of private data a REJ carries.
pub const REJ_PRIVATE_DATA_LEN: usize = 148;

message! {
    /// Reject (IBTA Table 108).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct CmRej in rej {
        /// The sender's communication ID.
        local_comm_id: u32 = bits(0, 0, 32),
        /// The receiver's communication ID (0 if unknown).
        remote_comm_id: u32 = bits(4, 0, 32),
        /// Which message is rejected (2 bits: [`message_ref`]).
        message_rejected: u8 = bits(8, 0, 2),
        /// Bytes of `ari` that are meaningful (7 bits).
        rejected_info_length: u8 = bits(9, 0, 7),
        /// Why ([`rej_reason`]).
        reason: u16 = bits(10, 0, 16),
        /// Additional rejection information.
        ari: [u8; REJ_ARI_LEN] = at(12),
        /// Private data.
        private_data: [u8; REJ_PRIVATE_DATA_LEN] = at(84),
    }
}

/// Bytes of private data a REP carries.
pub const REP_PRIVATE_DATA_LEN: usize = 196;

message! {
    /// Reply to a request (IBTA Table 110).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct CmRep in rep {
        /// The responder's communication ID.
        local_comm_id: u32 = bits(0, 0, 32),
        /// The requester's communication ID.
        remote_comm_id: u32 = bits(4, 0, 32),
        /// The responder QP's Q_Key (UD/RD only).
        local_qkey: u32 = bits(8, 0, 32),
        /// The responder's QP number (24 bits).
        local_qpn: u32 = bits(12, 0, 24),
        /// The responder's EE context (RD only; 24 bits).
        local_eecn: u32 = bits(16, 0, 24),
        /// The responder's first PSN (24 bits).
        starting_psn: u32 = bits(20, 0, 24),
        /// RDMA READ / atomic operations the responder accepts at once.
        responder_resources: u8 = bits(24, 0, 8),
        /// RDMA READ / atomic operations the responder will have outstanding.
        initiator_depth: u8 = bits(25, 0, 8),
        /// The responder's target ACK delay (5 bits).
        target_ack_delay: u8 = bits(26, 0, 5),
        /// Failover accepted (2 bits).
        failover_accepted: u8 = bits(26, 5, 2),
        /// End-to-end flow control.
        end_to_end_flow_control: bool = bits(26, 7, 1),
        /// RNR retry count (3 bits).
        rnr_retry_count: u8 = bits(27, 0, 3),
        /// Whether the responder's QP uses a shared receive queue.
        srq: bool = bits(27, 3, 1),
        /// The responder's channel adapter GUID.
        local_ca_guid: u64 = bits(28, 0, 64),
        /// Private data.
        private_data: [u8; REP_PRIVATE_DATA_LEN] = at(36),
    }
}

/// Bytes of private data an RTU or a DREP carries.
pub const RTU_PRIVATE_DATA_LEN: usize = 224;

message! {
    /// Ready to use (IBTA Table 111) and disconnect reply (Table 113), which share one layout: the
    /// two communication IDs and private data.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct CmIds in ids {
        /// The sender's communication ID.
        local_comm_id: u32 = bits(0, 0, 32),
        /// The receiver's communication ID.
        remote_comm_id: u32 = bits(4, 0, 32),
        /// Private data.
        private_data: [u8; RTU_PRIVATE_DATA_LEN] = at(8),
    }
}

/// Bytes of private data a DREQ carries.
pub const DREQ_PRIVATE_DATA_LEN: usize = 220;

message! {
    /// Disconnect request (IBTA Table 112).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct CmDreq in dreq {
        /// The sender's communication ID.
        local_comm_id: u32 = bits(0, 0, 32),
        /// The receiver's communication ID.
        remote_comm_id: u32 = bits(4, 0, 32),
        /// The receiver's QP number (24 bits), which it checks against the connection.
        remote_qpn: u32 = bits(8, 0, 24),
        /// Private data.
        private_data: [u8; DREQ_PRIVATE_DATA_LEN] = at(12),
    }
}

/// Bytes of private data a SIDR_REQ carries.
pub const SIDR_REQ_PRIVATE_DATA_LEN: usize = 216;

message! {
    /// Service ID resolution request (IBTA Table 119): which UD QP serves this service?
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct CmSidrReq in sidr_req {
        /// The requester's ID for this resolution.
        request_id: u32 = bits(0, 0, 32),
        /// Partition key.
        partition_key: u16 = bits(4, 0, 16),
        /// The service asked for.
        service_id: u64 = bits(8, 0, 64),
        /// Private data.
        private_data: [u8; SIDR_REQ_PRIVATE_DATA_LEN] = at(16),
    }
}

/// The status of a SIDR_REP (IBTA Table 121; Linux's `enum ib_cm_sidr_status`).
pub mod sidr_status {
    /// The QP in the reply serves the service.
    pub const SUCCESS: u8 = 0;
    /// Nobody serves the service ID here.
    pub const UNSUPPORTED: u8 = 1;
    /// The service refused the request (rdma_reject of a UD connect request).
    pub const REJECT: u8 = 2;
    /// No QP is available for the service.
    pub const NO_QP: u8 = 3;
    /// Ask elsewhere (the additional information says where).
    pub const REDIRECT: u8 = 4;
    /// The request's class version is not supported.
    pub const UNSUPPORTED_VERSION: u8 = 5;
}

/// Bytes of additional information a SIDR_REP carries.
pub const SIDR_REP_INFO_LEN: usize = 72;
/// Bytes of private data a SIDR_REP carries.
pub const SIDR_REP_PRIVATE_DATA_LEN: usize = 136;

message! {
    /// Service ID resolution reply (IBTA Table 120).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct CmSidrRep in sidr_rep {
        /// The request's ID, echoed.
        request_id: u32 = bits(0, 0, 32),
        /// 0 = the QP is valid; otherwise why not (IBTA Table 121).
        status: u8 = bits(4, 0, 8),
        /// Bytes of `additional_information` that are meaningful.
        additional_information_length: u8 = bits(5, 0, 8),
        /// The UD QP that serves the service (24 bits).
        qpn: u32 = bits(8, 0, 24),
        /// The service, echoed.
        service_id: u64 = bits(12, 0, 64),
        /// The Q_Key of that QP.
        qkey: u32 = bits(20, 0, 32),
        /// Additional information.
        additional_information: [u8; SIDR_REP_INFO_LEN] = at(24),
        /// Private data.
        private_data: [u8; SIDR_REP_PRIVATE_DATA_LEN] = at(96),
    }
}

/// Declares [`CmMessage`] from one list: per variant its doc, the message type it holds and
/// the attribute ID that carries it. From that list come the enum, `attr_id`, and the
/// dispatch by attribute ID that `parse` and `emit` go through, so that a message's variant,
/// type and attribute are written down once, side by side.
macro_rules! messages {
    ($($(#[$doc:meta])* $variant:ident($ty:ty) = $attr:path,)*) => {
        /// One CM message, as the attribute ID of its MAD names it.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum CmMessage {
            $($(#[$doc])* $variant($ty),)*
        }

        impl CmMessage {
            /// The attribute ID that carries this message.
            pub fn attr_id(&self) -> u16 {
                match self {
                    $(CmMessage::$variant(_) => $attr,)*
                }
            }

            /// The message attribute `attr_id` names, read from the message data of the whole
            /// MAD `mad`; `None` if the attribute carries none of these messages.
            fn parse_data(attr_id: u16, mad: &[u8]) -> Option<CmMessage> {
                Some(match attr_id {
                    $($attr => CmMessage::$variant(<$ty>::parse_at(mad, 0)),)*
                    _ => return None,
                })
            }

            /// Writes the message into the message data of the whole MAD `mad`.
            fn emit_data(&self, mad: &mut [u8]) {
                match self {
                    $(CmMessage::$variant(m) => m.emit_at(mad, 0),)*
                }
            }
        }
    };
}

messages! {
    /// Connection request.
    Req(CmReq) = attr::REQ,
    /// Message receipt acknowledgement.
    Mra(CmMra) = attr::MRA,
    /// Reject.
    Rej(CmRej) = attr::REJ,
    /// Reply.
    Rep(CmRep) = attr::REP,
    /// Ready to use.
    Rtu(CmIds) = attr::RTU,
    /// Disconnect request.
    Dreq(CmDreq) = attr::DREQ,
    /// Disconnect reply.
    Drep(CmIds) = attr::DREP,
    /// Service ID resolution request.
    SidrReq(CmSidrReq) = attr::SIDR_REQ,
    /// Service ID resolution reply.
    SidrRep(CmSidrRep) = attr::SIDR_REP,
}

impl CmMessage {
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
        let msg = CmMessage::parse_data(hdr.attr_id, &mad[..mad::LEN]).ok_or(unsupported)?;
        Ok((hdr, msg))
    }

    /// Writes the whole MAD (header with transaction ID `tid`, then the message) into the
    /// front of `mad`, which holds at least [`mad::LEN`] bytes.
    pub fn emit(&self, tid: u64, mad: &mut [u8]) -> Result<()> {
        start(mad, tid, self.attr_id())?;
        self.emit_data(&mut mad[..mad::LEN]);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
