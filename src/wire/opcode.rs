//! The BTH OpCode space (IBTA vol. 1 §9.2.1, table 38) and what each opcode implies.
//!
//! The top three bits select the transport (RC 000, UC 001, RD 010, UD 011, CNP 100, XRC 101),
//! the low five bits the operation. [`Opcode`] is a transparent wrapper over the byte, so every value is
//! representable; [`Opcode::info`] returns the static description of the opcodes this
//! implementation knows (RC, UC, UD, CNP, XRC, and the IBTA 1.5 FLUSH and ATOMIC WRITE), or
//! `None`.
//! RD is not implemented (neither Linux rxe nor any RoCE device uses it).

use super::{aeth, atomic_ack_eth, atomic_eth, deth, feth, ieth, immdt, reth, xrceth, Header};

/// A BTH OpCode byte. Unknown values are kept as they are.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u8);

/// The transport service an opcode belongs to (its top three bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable Connected.
    Rc,
    /// Unreliable Connected.
    Uc,
    /// Reliable Datagram.
    Rd,
    /// Unreliable Datagram.
    Ud,
    /// Congestion Notification Packet (RoCEv2 annex A17.9.3).
    Cnp,
    /// Extended Reliable Connected (IBTA annex A14): RC's operations, each request with an
    /// XRCETH.
    Xrc,
    /// Top bits 110 (reserved) or 111 (manufacturer specific).
    Reserved,
}

impl Transport {
    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Rc => "RC",
            Transport::Uc => "UC",
            Transport::Rd => "RD",
            Transport::Ud => "UD",
            Transport::Cnp => "CNP",
            Transport::Xrc => "XRC",
            Transport::Reserved => "reserved",
        }
    }
}

/// What an opcode does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// SEND (with or without immediate or invalidate).
    Send,
    /// RDMA WRITE (with or without immediate).
    Write,
    /// RDMA READ request.
    ReadRequest,
    /// RDMA READ response.
    ReadResponse,
    /// ACKNOWLEDGE (ACK, NAK or RNR NAK).
    Ack,
    /// ATOMIC ACKNOWLEDGE.
    AtomicAck,
    /// CmpSwap.
    CompareSwap,
    /// FetchAdd.
    FetchAdd,
    /// FLUSH (IBTA 1.5 memory placement extensions).
    Flush,
    /// ATOMIC WRITE (IBTA 1.5 memory placement extensions).
    AtomicWrite,
    /// Congestion notification.
    Cnp,
}

/// Where a packet stands in its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    /// First packet of a multi-packet message: carries exactly one path MTU of payload.
    First,
    /// Middle packet: exactly one path MTU.
    Middle,
    /// Last packet of a multi-packet message: 1 to path MTU bytes.
    Last,
    /// The only packet of a message: 0 to path MTU bytes.
    Only,
}

impl Position {
    /// Whether the packet starts a message (FIRST or ONLY).
    pub fn starts_message(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }
    /// Whether the packet ends a message (LAST or ONLY).
    pub fn ends_message(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// The set of extended headers that follow the BTH, always in the canonical order of
/// [`HeaderSet::ORDER`]. Bit `i` stands for `ORDER[i]`, so the headers of a set are found in
/// wire order by walking its set bits ([`HeaderSet::in_wire_order`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HeaderSet(u16);

impl HeaderSet {
    /// No extended header.
    pub const NONE: HeaderSet = HeaderSet(0);
    /// DETH (8 bytes): Q_Key and source QP, in every UD packet.
    pub const DETH: HeaderSet = HeaderSet(1 << 0);
    /// FETH (4 bytes): selectivity and placement of a FLUSH.
    pub const FETH: HeaderSet = HeaderSet(1 << 2);
    /// RETH (16 bytes): remote address, R_Key and length of a WRITE FIRST/ONLY, READ request,
    /// FLUSH or ATOMIC WRITE.
    pub const RETH: HeaderSet = HeaderSet(1 << 3);
    /// AtomicETH (28 bytes): remote address, R_Key and operands of a compare-and-swap or
    /// fetch-and-add.
    pub const ATOMIC_ETH: HeaderSet = HeaderSet(1 << 4);
    /// AETH (4 bytes): syndrome and MSN of an ACK, a NAK, and a READ response's
    /// first, last or only packet.
    pub const AETH: HeaderSet = HeaderSet(1 << 5);
    /// AtomicAckETH (8 bytes): the original value an ATOMIC ACKNOWLEDGE returns.
    pub const ATOMIC_ACK_ETH: HeaderSet = HeaderSet(1 << 6);
    /// ImmDt (4 bytes): immediate data of a SEND or WRITE LAST/ONLY with immediate.
    pub const IMMDT: HeaderSet = HeaderSet(1 << 7);
    /// IETH (4 bytes): the R_Key a SEND with invalidate asks the receiver to invalidate.
    pub const IETH: HeaderSet = HeaderSet(1 << 8);
    /// The 16 reserved bytes of a CNP.
    pub const CNP_RESERVED: HeaderSet = HeaderSet(1 << 9);
    /// XRCETH (4 bytes): the XRC SRQ number of every XRC request.
    pub const XRCETH: HeaderSet = HeaderSet(1 << 1);

    /// The order in which extended headers follow the BTH (IBTA §9.2 figure of header
    /// ordering; rxe_opcode.c offsets), with each header's size.
    pub const ORDER: [(HeaderSet, Header, usize); 10] = [
        (HeaderSet::DETH, Header::Deth, deth::LEN),
        (HeaderSet::XRCETH, Header::XrcEth, xrceth::LEN),
        (HeaderSet::FETH, Header::Feth, feth::LEN),
        (HeaderSet::RETH, Header::Reth, reth::LEN),
        (HeaderSet::ATOMIC_ETH, Header::AtomicEth, atomic_eth::LEN),
        (HeaderSet::AETH, Header::Aeth, aeth::LEN),
        (
            HeaderSet::ATOMIC_ACK_ETH,
            Header::AtomicAckEth,
            atomic_ack_eth::LEN,
        ),
        (HeaderSet::IMMDT, Header::ImmDt, immdt::LEN),
        (HeaderSet::IETH, Header::Ieth, ieth::LEN),
        (
            HeaderSet::CNP_RESERVED,
            Header::CnpReserved,
            CNP_RESERVED_LEN,
        ),
    ];

    /// Union of two sets.
    pub const fn union(self, other: HeaderSet) -> HeaderSet {
        HeaderSet(self.0 | other.0)
    }
    /// Whether every header of `other` is in `self`.
    pub const fn contains(self, other: HeaderSet) -> bool {
        self.0 & other.0 == other.0
    }
    /// The headers of `self` that are not in `other`.
    pub const fn without(self, other: HeaderSet) -> HeaderSet {
        HeaderSet(self.0 & !other.0)
    }
    /// The headers of the set, in wire order, with their sizes: one step per header present
    /// rather than a test per header known.
    pub fn in_wire_order(self) -> impl Iterator<Item = (HeaderSet, Header, usize)> {
        let mut bits = self.0;
        std::iter::from_fn(move || {
            let i = bits.trailing_zeros() as usize;
            let entry = WIRE_ORDER.get(i)?;
            bits &= bits - 1;
            Some(*entry)
        })
    }
    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// Total size in bytes of the headers in the set.
    pub const fn byte_len(self) -> usize {
        // One step per header present (bit `i` is `ORDER[i]`).
        let mut n = 0;
        let mut bits = self.0;
        while bits != 0 {
            n += Self::ORDER[bits.trailing_zeros() as usize].2;
            bits &= bits - 1;
        }
        n
    }
}

/// [`HeaderSet::ORDER`] in memory: a loop over the constant itself copies the whole table
/// onto the stack at every use (a `memcpy` per parse and per emit).
pub(super) static WIRE_ORDER: [(HeaderSet, Header, usize); 10] = HeaderSet::ORDER;

// Bit `i` of a set is `ORDER[i]`: `in_wire_order` relies on it.
const _: () = {
    let mut i = 0;
    while i < HeaderSet::ORDER.len() {
        assert!(HeaderSet::ORDER[i].0 .0 == 1 << i);
        i += 1;
    }
};

/// Size of the reserved area that follows the BTH of a CNP.
pub const CNP_RESERVED_LEN: usize = 16;

/// Static description of an opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// Name in the style of Linux rxe (`RC_SEND_FIRST`).
    pub name: &'static str,
    /// Transport service.
    pub transport: Transport,
    /// Operation.
    pub kind: OpKind,
    /// Position in the message.
    pub position: Position,
    /// Extended headers after the BTH.
    pub headers: HeaderSet,
    /// Whether payload bytes may follow the headers.
    pub payload: bool,
}

impl OpcodeInfo {
    /// Whether the packet carries immediate data.
    pub const fn has_imm(&self) -> bool {
        self.headers.contains(HeaderSet::IMMDT)
    }
    /// Whether the opcode is a request (sent by a requester to a responder), as opposed to a
    /// response, an acknowledgement or a CNP.
    pub const fn is_request(&self) -> bool {
        matches!(
            self.kind,
            OpKind::Send
                | OpKind::Write
                | OpKind::ReadRequest
                | OpKind::CompareSwap
                | OpKind::FetchAdd
                | OpKind::Flush
                | OpKind::AtomicWrite
        )
    }
    /// Whether the responder must acknowledge it: every request of the reliable service
    /// (IBTA §9.7.5.1; an ACK may be coalesced, but the request is covered by one).
    pub const fn needs_ack(&self) -> bool {
        matches!(self.transport, Transport::Rc | Transport::Xrc) && self.is_request()
    }
    /// Whether the packet is a response to a request (READ response, ACK, ATOMIC ACK).
    pub const fn is_response(&self) -> bool {
        matches!(
            self.kind,
            OpKind::ReadResponse | OpKind::Ack | OpKind::AtomicAck
        )
    }
    /// Length of the extended headers after the BTH.
    pub const fn header_len(&self) -> usize {
        self.headers.byte_len()
    }
}

const fn info(
    name: &'static str,
    transport: Transport,
    kind: OpKind,
    position: Position,
    headers: HeaderSet,
    payload: bool,
) -> Option<OpcodeInfo> {
    Some(OpcodeInfo {
        name,
        transport,
        kind,
        position,
        headers,
        payload,
    })
}

/// The SEND and WRITE opcodes shared by RC (base 0x00) and UC (base 0x20), by their low 5 bits.
const fn send_write(
    op5: u8,
    transport: Transport,
    names: &[&'static str; 12],
) -> Option<OpcodeInfo> {
    use HeaderSet as H;
    use OpKind::{Send, Write};
    use Position::{First, Last, Middle, Only};
    let n = names[op5 as usize];
    match op5 {
        0x00 => info(n, transport, Send, First, H::NONE, true),
        0x01 => info(n, transport, Send, Middle, H::NONE, true),
        0x02 => info(n, transport, Send, Last, H::NONE, true),
        0x03 => info(n, transport, Send, Last, H::IMMDT, true),
        0x04 => info(n, transport, Send, Only, H::NONE, true),
        0x05 => info(n, transport, Send, Only, H::IMMDT, true),
        0x06 => info(n, transport, Write, First, H::RETH, true),
        0x07 => info(n, transport, Write, Middle, H::NONE, true),
        0x08 => info(n, transport, Write, Last, H::NONE, true),
        0x09 => info(n, transport, Write, Last, H::IMMDT, true),
        0x0A => info(n, transport, Write, Only, H::RETH, true),
        0x0B => info(n, transport, Write, Only, H::RETH.union(H::IMMDT), true),
        _ => None,
    }
}

const RC_NAMES: [&str; 12] = [
    "RC_SEND_FIRST",
    "RC_SEND_MIDDLE",
    "RC_SEND_LAST",
    "RC_SEND_LAST_WITH_IMMEDIATE",
    "RC_SEND_ONLY",
    "RC_SEND_ONLY_WITH_IMMEDIATE",
    "RC_RDMA_WRITE_FIRST",
    "RC_RDMA_WRITE_MIDDLE",
    "RC_RDMA_WRITE_LAST",
    "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
    "RC_RDMA_WRITE_ONLY",
    "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
];

const UC_NAMES: [&str; 12] = [
    "UC_SEND_FIRST",
    "UC_SEND_MIDDLE",
    "UC_SEND_LAST",
    "UC_SEND_LAST_WITH_IMMEDIATE",
    "UC_SEND_ONLY",
    "UC_SEND_ONLY_WITH_IMMEDIATE",
    "UC_RDMA_WRITE_FIRST",
    "UC_RDMA_WRITE_MIDDLE",
    "UC_RDMA_WRITE_LAST",
    "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
    "UC_RDMA_WRITE_ONLY",
    "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
];

const fn describe(op: u8) -> Option<OpcodeInfo> {
    use HeaderSet as H;
    use Position::Only;
    use Transport::{Cnp, Rc, Ud};
    match op {
        0x00..=0x0B => send_write(op, Rc, &RC_NAMES),
        0x0C..=0x10 => rc_read(op),
        0x11..=0x1D => rc_ack_atomic_flush(op),
        0x20..=0x2B => send_write(op - 0x20, Transport::Uc, &UC_NAMES),
        0x64 => info("UD_SEND_ONLY", Ud, OpKind::Send, Only, H::DETH, true),
        0x65 => info(
            "UD_SEND_ONLY_WITH_IMMEDIATE",
            Ud,
            OpKind::Send,
            Only,
            H::DETH.union(H::IMMDT),
            true,
        ),
        0x81 => info("CNP", Cnp, OpKind::Cnp, Only, H::CNP_RESERVED, false),
        0xA0..=0xB7 => xrc(op),
        _ => None,
    }
}

/// The XRC opcodes (IBTA annex A14, table of XRC opcodes; rxe_opcode.c's IB_OPCODE_XRC_*):
/// RC's operations at base 0xA0, each request with an XRCETH after the BTH; the responses
/// (READ responses, ACKNOWLEDGE, ATOMIC ACKNOWLEDGE) carry none. FLUSH and ATOMIC WRITE have
/// no XRC opcode.
const fn xrc(op: u8) -> Option<OpcodeInfo> {
    let Some(rc) = describe(op - 0xA0) else {
        return None;
    };
    let name = XRC_NAMES[(op - 0xA0) as usize];
    if name.is_empty() {
        return None;
    }
    let headers = if rc.is_request() {
        rc.headers.union(HeaderSet::XRCETH)
    } else {
        rc.headers
    };
    info(
        name,
        Transport::Xrc,
        rc.kind,
        rc.position,
        headers,
        rc.payload,
    )
}

/// The XRC opcodes' names by their low five bits ("" where XRC has none).
const XRC_NAMES: [&str; 24] = [
    "XRC_SEND_FIRST",
    "XRC_SEND_MIDDLE",
    "XRC_SEND_LAST",
    "XRC_SEND_LAST_WITH_IMMEDIATE",
    "XRC_SEND_ONLY",
    "XRC_SEND_ONLY_WITH_IMMEDIATE",
    "XRC_RDMA_WRITE_FIRST",
    "XRC_RDMA_WRITE_MIDDLE",
    "XRC_RDMA_WRITE_LAST",
    "XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
    "XRC_RDMA_WRITE_ONLY",
    "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
    "XRC_RDMA_READ_REQUEST",
    "XRC_RDMA_READ_RESPONSE_FIRST",
    "XRC_RDMA_READ_RESPONSE_MIDDLE",
    "XRC_RDMA_READ_RESPONSE_LAST",
    "XRC_RDMA_READ_RESPONSE_ONLY",
    "XRC_ACKNOWLEDGE",
    "XRC_ATOMIC_ACKNOWLEDGE",
    "XRC_COMPARE_SWAP",
    "XRC_FETCH_ADD",
    "",
    "XRC_SEND_LAST_WITH_INVALIDATE",
    "XRC_SEND_ONLY_WITH_INVALIDATE",
];

/// The RC READ request and responses (0x0C-0x10).
const fn rc_read(op: u8) -> Option<OpcodeInfo> {
    use HeaderSet as H;
    use Position::{First, Last, Middle, Only};
    use Transport::Rc;
    match op {
        0x0C => info(
            "RC_RDMA_READ_REQUEST",
            Rc,
            OpKind::ReadRequest,
            Only,
            H::RETH,
            false,
        ),
        0x0D => info(
            "RC_RDMA_READ_RESPONSE_FIRST",
            Rc,
            OpKind::ReadResponse,
            First,
            H::AETH,
            true,
        ),
        0x0E => info(
            "RC_RDMA_READ_RESPONSE_MIDDLE",
            Rc,
            OpKind::ReadResponse,
            Middle,
            H::NONE,
            true,
        ),
        0x0F => info(
            "RC_RDMA_READ_RESPONSE_LAST",
            Rc,
            OpKind::ReadResponse,
            Last,
            H::AETH,
            true,
        ),
        0x10 => info(
            "RC_RDMA_READ_RESPONSE_ONLY",
            Rc,
            OpKind::ReadResponse,
            Only,
            H::AETH,
            true,
        ),
        _ => None,
    }
}

/// The RC acknowledgements, atomics, SENDs with invalidate, FLUSH and ATOMIC WRITE
/// (0x11-0x1D; the codes between them are reserved).
const fn rc_ack_atomic_flush(op: u8) -> Option<OpcodeInfo> {
    use HeaderSet as H;
    use Position::{Last, Only};
    use Transport::Rc;
    match op {
        0x11 => info("RC_ACKNOWLEDGE", Rc, OpKind::Ack, Only, H::AETH, false),
        0x12 => info(
            "RC_ATOMIC_ACKNOWLEDGE",
            Rc,
            OpKind::AtomicAck,
            Only,
            H::AETH.union(H::ATOMIC_ACK_ETH),
            false,
        ),
        0x13 => info(
            "RC_COMPARE_SWAP",
            Rc,
            OpKind::CompareSwap,
            Only,
            H::ATOMIC_ETH,
            false,
        ),
        0x14 => info(
            "RC_FETCH_ADD",
            Rc,
            OpKind::FetchAdd,
            Only,
            H::ATOMIC_ETH,
            false,
        ),
        0x16 => info(
            "RC_SEND_LAST_WITH_INVALIDATE",
            Rc,
            OpKind::Send,
            Last,
            H::IETH,
            true,
        ),
        0x17 => info(
            "RC_SEND_ONLY_WITH_INVALIDATE",
            Rc,
            OpKind::Send,
            Only,
            H::IETH,
            true,
        ),
        0x1C => info(
            "RC_FLUSH",
            Rc,
            OpKind::Flush,
            Only,
            H::FETH.union(H::RETH),
            false,
        ),
        0x1D => info(
            "RC_ATOMIC_WRITE",
            Rc,
            OpKind::AtomicWrite,
            Only,
            H::RETH,
            true,
        ),
        _ => None,
    }
}

static TABLE: [Option<OpcodeInfo>; 256] = {
    let mut t = [None; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = describe(i as u8);
        i += 1;
    }
    t
};

impl Opcode {
    /// RC SEND first.
    pub const RC_SEND_FIRST: Opcode = Opcode(0x00);
    /// RC SEND middle.
    pub const RC_SEND_MIDDLE: Opcode = Opcode(0x01);
    /// RC SEND last.
    pub const RC_SEND_LAST: Opcode = Opcode(0x02);
    /// RC SEND last with immediate.
    pub const RC_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x03);
    /// RC SEND only.
    pub const RC_SEND_ONLY: Opcode = Opcode(0x04);
    /// RC SEND only with immediate.
    pub const RC_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x05);
    /// RC RDMA WRITE first.
    pub const RC_RDMA_WRITE_FIRST: Opcode = Opcode(0x06);
    /// RC RDMA WRITE middle.
    pub const RC_RDMA_WRITE_MIDDLE: Opcode = Opcode(0x07);
    /// RC RDMA WRITE last.
    pub const RC_RDMA_WRITE_LAST: Opcode = Opcode(0x08);
    /// RC RDMA WRITE last with immediate.
    pub const RC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x09);
    /// RC RDMA WRITE only.
    pub const RC_RDMA_WRITE_ONLY: Opcode = Opcode(0x0A);
    /// RC RDMA WRITE only with immediate.
    pub const RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x0B);
    /// RC RDMA READ request.
    pub const RC_RDMA_READ_REQUEST: Opcode = Opcode(0x0C);
    /// RC RDMA READ response first.
    pub const RC_RDMA_READ_RESPONSE_FIRST: Opcode = Opcode(0x0D);
    /// RC RDMA READ response middle.
    pub const RC_RDMA_READ_RESPONSE_MIDDLE: Opcode = Opcode(0x0E);
    /// RC RDMA READ response last.
    pub const RC_RDMA_READ_RESPONSE_LAST: Opcode = Opcode(0x0F);
    /// RC RDMA READ response only.
    pub const RC_RDMA_READ_RESPONSE_ONLY: Opcode = Opcode(0x10);
    /// RC ACKNOWLEDGE.
    pub const RC_ACK: Opcode = Opcode(0x11);
    /// RC ATOMIC ACKNOWLEDGE.
    pub const RC_ATOMIC_ACK: Opcode = Opcode(0x12);
    /// RC CmpSwap.
    pub const RC_COMPARE_SWAP: Opcode = Opcode(0x13);
    /// RC FetchAdd.
    pub const RC_FETCH_ADD: Opcode = Opcode(0x14);
    /// RC SEND last with invalidate.
    pub const RC_SEND_LAST_WITH_INVALIDATE: Opcode = Opcode(0x16);
    /// RC SEND only with invalidate.
    pub const RC_SEND_ONLY_WITH_INVALIDATE: Opcode = Opcode(0x17);
    /// RC FLUSH.
    pub const RC_FLUSH: Opcode = Opcode(0x1C);
    /// RC ATOMIC WRITE.
    pub const RC_ATOMIC_WRITE: Opcode = Opcode(0x1D);
    /// UC SEND first.
    pub const UC_SEND_FIRST: Opcode = Opcode(0x20);
    /// UC SEND middle.
    pub const UC_SEND_MIDDLE: Opcode = Opcode(0x21);
    /// UC SEND last.
    pub const UC_SEND_LAST: Opcode = Opcode(0x22);
    /// UC SEND last with immediate.
    pub const UC_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x23);
    /// UC SEND only.
    pub const UC_SEND_ONLY: Opcode = Opcode(0x24);
    /// UC SEND only with immediate.
    pub const UC_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x25);
    /// UC RDMA WRITE first.
    pub const UC_RDMA_WRITE_FIRST: Opcode = Opcode(0x26);
    /// UC RDMA WRITE middle.
    pub const UC_RDMA_WRITE_MIDDLE: Opcode = Opcode(0x27);
    /// UC RDMA WRITE last.
    pub const UC_RDMA_WRITE_LAST: Opcode = Opcode(0x28);
    /// UC RDMA WRITE last with immediate.
    pub const UC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x29);
    /// UC RDMA WRITE only.
    pub const UC_RDMA_WRITE_ONLY: Opcode = Opcode(0x2A);
    /// UC RDMA WRITE only with immediate.
    pub const UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x2B);
    /// UD SEND only.
    pub const UD_SEND_ONLY: Opcode = Opcode(0x64);
    /// UD SEND only with immediate.
    pub const UD_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x65);
    /// Congestion Notification Packet.
    pub const CNP: Opcode = Opcode(0x81);
    /// The XRC transport's base: an RC opcode ORed with it is the same operation on XRC.
    pub const XRC_BASE: u8 = 0xA0;
    /// XRC SEND only.
    pub const XRC_SEND_ONLY: Opcode = Opcode(0xA4);
    /// XRC RDMA WRITE only.
    pub const XRC_RDMA_WRITE_ONLY: Opcode = Opcode(0xAA);
    /// XRC ACKNOWLEDGE.
    pub const XRC_ACK: Opcode = Opcode(0xB1);

    /// The static description of a known opcode, or `None` for an unknown one.
    #[inline]
    pub fn info(self) -> Option<&'static OpcodeInfo> {
        TABLE[self.0 as usize].as_ref()
    }

    /// The transport named by the top three bits (defined for every value).
    pub fn transport(self) -> Transport {
        match self.0 >> 5 {
            0 => Transport::Rc,
            1 => Transport::Uc,
            2 => Transport::Rd,
            3 => Transport::Ud,
            4 => Transport::Cnp,
            5 => Transport::Xrc,
            _ => Transport::Reserved,
        }
    }

    /// The rxe-style name, or `None` for an unknown opcode.
    pub fn name(self) -> Option<&'static str> {
        self.info().map(|i| i.name)
    }

    /// Iterates over every known opcode.
    pub fn all_known() -> impl Iterator<Item = Opcode> {
        (0..=255u8).map(Opcode).filter(|o| o.info().is_some())
    }
}

/// An opcode is a header field's value (the BTH's, as its one byte).
impl super::field::Value for Opcode {
    #[inline]
    fn from_bits(bits: u64) -> Self {
        Opcode(bits as u8)
    }
    #[inline]
    fn to_bits(self) -> u64 {
        self.0.into()
    }
}

impl core::fmt::Debug for Opcode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(self, f)
    }
}

impl core::fmt::Display for Opcode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "UNKNOWN_0x{:02x}", self.0),
        }
    }
}

impl From<u8> for Opcode {
    fn from(b: u8) -> Self {
        Opcode(b)
    }
}

impl From<Opcode> for u8 {
    fn from(o: Opcode) -> u8 {
        o.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_opcode_count() {
        // RC: 12 send/write + read req + 4 read resp + ack + atomic ack + 2 atomics
        //     + 2 send-with-invalidate + flush + atomic write = 25; UC: 12; UD: 2; CNP: 1;
        //     XRC: RC's but FLUSH and ATOMIC WRITE = 23.
        assert_eq!(Opcode::all_known().count(), 63);
    }

    #[test]
    fn transports_follow_top_bits() {
        for op in Opcode::all_known() {
            assert_eq!(op.info().unwrap().transport, op.transport(), "{op}");
        }
        assert_eq!(Opcode(0x40).transport(), Transport::Rd);
        assert_eq!(Opcode(0xE0).transport(), Transport::Reserved);
        assert_eq!(Opcode(0xA0).transport(), Transport::Xrc);
    }

    #[test]
    fn header_sets_match_the_wire_reference() {
        let h = |op: Opcode| op.info().unwrap().headers;
        assert_eq!(h(Opcode::RC_SEND_ONLY), HeaderSet::NONE);
        assert_eq!(h(Opcode::RC_RDMA_WRITE_FIRST), HeaderSet::RETH);
        assert_eq!(h(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE).byte_len(), 20);
        assert_eq!(h(Opcode::RC_RDMA_READ_REQUEST).byte_len(), 16);
        assert_eq!(h(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE).byte_len(), 0);
        assert_eq!(h(Opcode::RC_RDMA_READ_RESPONSE_FIRST).byte_len(), 4);
        assert_eq!(h(Opcode::RC_ATOMIC_ACK).byte_len(), 12);
        assert_eq!(h(Opcode::RC_COMPARE_SWAP).byte_len(), 28);
        assert_eq!(h(Opcode::RC_FLUSH).byte_len(), 20);
        assert_eq!(h(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE).byte_len(), 12);
        assert_eq!(h(Opcode::CNP).byte_len(), 16);
        assert_eq!(h(Opcode::UC_RDMA_WRITE_ONLY), HeaderSet::RETH);
    }

    #[test]
    fn uc_mirrors_rc_send_and_write() {
        for low in 0..=0x0Bu8 {
            let rc = Opcode(low).info().unwrap();
            let uc = Opcode(0x20 | low).info().unwrap();
            assert_eq!(rc.kind, uc.kind);
            assert_eq!(rc.position, uc.position);
            assert_eq!(rc.headers, uc.headers);
            assert_eq!(&rc.name[3..], &uc.name[3..]);
            assert!(rc.needs_ack() && !uc.needs_ack());
        }
        assert!(Opcode(0x2C).info().is_none(), "UC has no READ");
    }

    #[test]
    fn requests_responses_and_acks() {
        let i = |op: Opcode| *op.info().unwrap();
        assert!(i(Opcode::RC_RDMA_READ_REQUEST).needs_ack());
        assert!(i(Opcode::RC_FETCH_ADD).needs_ack());
        assert!(!i(Opcode::RC_ACK).is_request());
        assert!(i(Opcode::RC_ACK).is_response());
        assert!(i(Opcode::RC_RDMA_READ_RESPONSE_LAST).is_response());
        assert!(!i(Opcode::UD_SEND_ONLY).needs_ack());
        assert!(!i(Opcode::CNP).is_request() && !i(Opcode::CNP).is_response());
        assert!(i(Opcode::RC_SEND_LAST_WITH_IMMEDIATE).has_imm());
        assert!(!i(Opcode::RC_SEND_LAST_WITH_INVALIDATE).has_imm());
        assert!(i(Opcode::RC_ATOMIC_WRITE).payload);
        assert!(!i(Opcode::RC_RDMA_READ_REQUEST).payload);
    }

    #[test]
    fn unknown_opcodes_are_represented() {
        for b in [
            0x15u8, 0x18, 0x1F, 0x2C, 0x40, 0x60, 0x63, 0x66, 0x80, 0x82, 0xFF,
        ] {
            let op = Opcode::from(b);
            assert!(op.info().is_none());
            assert_eq!(op.name(), None);
            assert_eq!(format!("{op}"), format!("UNKNOWN_0x{b:02x}"));
            assert_eq!(u8::from(op), b);
        }
        assert_eq!(
            format!("{}", Opcode::RC_RDMA_WRITE_ONLY),
            "RC_RDMA_WRITE_ONLY"
        );
    }

    #[test]
    fn positions() {
        let p = |op: Opcode| op.info().unwrap().position;
        assert_eq!(p(Opcode::RC_SEND_FIRST), Position::First);
        assert_eq!(p(Opcode::UC_RDMA_WRITE_MIDDLE), Position::Middle);
        assert_eq!(p(Opcode::RC_RDMA_READ_RESPONSE_LAST), Position::Last);
        assert!(p(Opcode::RC_SEND_ONLY).starts_message() && p(Opcode::RC_SEND_ONLY).ends_message());
        assert!(!p(Opcode::RC_SEND_MIDDLE).starts_message());
    }
}
