//! The RoCEv2 wire format: one module per header, in the manner of smoltcp's `wire`.
//!
//! Every header module offers the same three things:
//! - a `LEN` constant (the header's fixed size on the wire);
//! - a plain `Repr` struct whose `parse(&[u8])` reads the header from the front of untrusted bytes
//!   (length-checked, never panics) and whose `emit(&mut [u8])` writes it into a caller-provided
//!   buffer of at least `LEN` bytes;
//! - tests on literal byte arrays in the same file.
//!
//! The fixed-layout headers also offer a checked view over a byte buffer (`Bth`, `Reth`, ...)
//! with a getter and a setter per field, declared once per header with `view!` (in `field.rs`).
//!
//! [`packet`] combines the headers into a whole RoCE packet (BTH .. ICRC), [`icrc`] computes the
//! invariant CRC, and [`frame`] handles the Ethernet / IP / UDP encapsulation around it.
//!
//! All multi-byte fields are big-endian, except the ICRC, which is transmitted little-endian
//! (see `spec-notes/icrc.md`).

pub mod aeth;
pub mod atomic_ack_eth;
pub mod atomic_eth;
pub mod bth;
pub mod cm;
pub mod cma;
mod crc_fold;
pub mod deth;
pub mod feth;
mod field;
pub mod frame;
pub mod icrc;
pub mod ieth;
pub mod immdt;
pub mod mad;
pub mod opcode;
pub mod packet;
pub mod psn;
pub mod reth;
pub mod xrceth;

pub use aeth::{AckSyndrome, AethRepr, NakCode};
pub use atomic_ack_eth::AtomicAckEthRepr;
pub use atomic_eth::AtomicEthRepr;
pub use bth::BthRepr;
pub use deth::DethRepr;
pub use feth::FethRepr;
pub use frame::{Frame, FrameBuilder, LinkType};
pub use ieth::IethRepr;
pub use immdt::ImmDtRepr;
pub use opcode::{HeaderSet, OpKind, Opcode, OpcodeInfo, Position, Transport};
pub use packet::{ExtHeaders, PacketRepr};
pub use psn::Psn;
pub use reth::RethRepr;
pub use xrceth::XrcEthRepr;

/// The UDP destination port assigned to RoCEv2 by IANA.
pub const ROCE_V2_UDP_PORT: u16 = 4791;

/// Size of the invariant CRC trailer.
pub const ICRC_LEN: usize = 4;

/// Which part of a packet an error refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Header {
    /// Base Transport Header.
    Bth,
    /// RDMA Extended Transport Header.
    Reth,
    /// ACK Extended Transport Header.
    Aeth,
    /// Atomic Extended Transport Header.
    AtomicEth,
    /// Atomic Acknowledge Extended Transport Header.
    AtomicAckEth,
    /// Immediate data.
    ImmDt,
    /// Invalidate Extended Transport Header.
    Ieth,
    /// Datagram Extended Transport Header.
    Deth,
    /// Flush Extended Transport Header.
    Feth,
    /// XRC Extended Transport Header.
    XrcEth,
    /// The 16 reserved bytes of a CNP.
    CnpReserved,
    /// The invariant CRC trailer.
    Icrc,
    /// Ethernet / VLAN.
    Ethernet,
    /// IPv4 or IPv6.
    Ip,
    /// UDP.
    Udp,
    /// A management datagram (the payload of a QP1 SEND).
    Mad,
    /// rdma_cm's header at the front of a REQ's private data.
    CmaHeader,
}

impl Header {
    /// A short human-readable name.
    pub fn name(self) -> &'static str {
        match self {
            Header::Bth => "BTH",
            Header::Reth => "RETH",
            Header::Aeth => "AETH",
            Header::AtomicEth => "AtomicETH",
            Header::AtomicAckEth => "AtomicAckETH",
            Header::ImmDt => "ImmDt",
            Header::Ieth => "IETH",
            Header::Deth => "DETH",
            Header::Feth => "FETH",
            Header::XrcEth => "XRCETH",
            Header::CnpReserved => "CNP reserved",
            Header::Icrc => "ICRC",
            Header::Ethernet => "Ethernet",
            Header::Ip => "IP",
            Header::Udp => "UDP",
            Header::Mad => "MAD",
            Header::CmaHeader => "rdma_cm header",
        }
    }
}

/// Why bytes could not be parsed (or a packet could not be emitted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The input ends before the named header does.
    Truncated {
        /// The header being read.
        header: Header,
        /// Bytes needed to hold it.
        need: usize,
        /// Bytes that were available.
        got: usize,
    },
    /// The BTH transport header version is not 0 (IBTA 9.2: receivers drop such packets).
    BadTransportVersion(u8),
    /// The opcode is not one this implementation knows, so the headers after the BTH cannot be
    /// delimited.
    UnknownOpcode(u8),
    /// The BTH pad count is larger than the payload it claims to pad.
    PadExceedsPayload {
        /// PadCnt from the BTH.
        pad: u8,
        /// Bytes between the last header and the ICRC.
        payload: usize,
    },
    /// The packet (BTH through ICRC) is not a whole number of 4-byte words, so PadCnt cannot
    /// have aligned it (IBTA §9.2: PadCnt pads the payload to a 4-byte multiple).
    UnalignedLength(usize),
    /// The opcode carries no payload, yet bytes follow its headers.
    UnexpectedPayload {
        /// The opcode.
        opcode: u8,
        /// Bytes found after the headers (including pad).
        len: usize,
    },
    /// The opcode needs a header that the representation being emitted does not have.
    MissingHeader {
        /// The opcode.
        opcode: u8,
        /// The header it needs.
        header: Header,
    },
    /// The representation being emitted has a header that the opcode does not carry.
    ExtraHeader {
        /// The opcode.
        opcode: u8,
        /// The header it does not carry.
        header: Header,
    },
    /// The payload is too large for the lengths of the enclosing headers.
    PayloadTooLarge(usize),
    /// The buffer given to an emit function is too small.
    BufferTooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes given.
        got: usize,
    },
    /// The ICRC does not match the packet's contents.
    IcrcMismatch {
        /// The value computed over the packet.
        computed: u32,
        /// The value found in the packet.
        found: u32,
    },
    /// The enclosing Ethernet/IP/UDP headers are malformed.
    Encapsulation(&'static str),
    /// A MAD of a class, class version, method or attribute this implementation does not
    /// handle (the GSI drops it, as Linux's MAD layer does).
    UnsupportedMad {
        /// Management class.
        mgmt_class: u8,
        /// Class version.
        class_version: u8,
        /// Method.
        method: u8,
        /// Attribute ID.
        attr_id: u16,
    },
    /// rdma_cm's header in a REQ's private data has a version or IP version it does not define.
    BadCmaHeader {
        /// The header's version byte (0 expected).
        version: u8,
        /// The IP version nibble (4 or 6 expected).
        ip_version: u8,
    },
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Error::Truncated { header, need, got } => {
                write!(
                    f,
                    "truncated {}: need {need} bytes, got {got}",
                    header.name()
                )
            }
            Error::BadTransportVersion(v) => write!(f, "BTH transport version {v} (expected 0)"),
            Error::UnknownOpcode(op) => write!(f, "unknown opcode 0x{op:02x}"),
            Error::PadExceedsPayload { pad, payload } => {
                write!(f, "pad count {pad} exceeds the {payload}-byte payload")
            }
            Error::UnalignedLength(len) => {
                write!(f, "packet length {len} is not a multiple of 4")
            }
            Error::UnexpectedPayload { opcode, len } => {
                write!(
                    f,
                    "opcode 0x{opcode:02x} carries no payload but {len} bytes follow"
                )
            }
            Error::MissingHeader { opcode, header } => {
                write!(f, "opcode 0x{opcode:02x} needs a {} header", header.name())
            }
            Error::ExtraHeader { opcode, header } => {
                write!(
                    f,
                    "opcode 0x{opcode:02x} does not carry a {} header",
                    header.name()
                )
            }
            Error::PayloadTooLarge(len) => write!(f, "payload of {len} bytes is too large"),
            Error::BufferTooSmall { need, got } => {
                write!(f, "buffer too small: need {need} bytes, got {got}")
            }
            Error::IcrcMismatch { computed, found } => {
                write!(
                    f,
                    "ICRC mismatch: computed {computed:08x}, found {found:08x}"
                )
            }
            Error::Encapsulation(what) => write!(f, "bad encapsulation: {what}"),
            Error::UnsupportedMad {
                mgmt_class,
                class_version,
                method,
                attr_id,
            } => write!(
                f,
                "unsupported MAD: class 0x{mgmt_class:02x} version {class_version} method 0x{method:02x} attribute 0x{attr_id:04x}"
            ),
            Error::BadCmaHeader {
                version,
                ip_version,
            } => write!(
                f,
                "rdma_cm header version {version}, IP version {ip_version} (expected 0 and 4 or 6)"
            ),
        }
    }
}

impl std::error::Error for Error {}

/// Result type of the wire layer.
pub type Result<T> = core::result::Result<T, Error>;

/// Checks that `buf` holds at least `need` bytes of `header`.
#[inline]
pub(crate) fn check_len(buf: &[u8], need: usize, header: Header) -> Result<()> {
    if buf.len() < need {
        Err(Error::Truncated {
            header,
            need,
            got: buf.len(),
        })
    } else {
        Ok(())
    }
}

/// Checks that an emit buffer holds at least `need` bytes.
#[inline]
pub(crate) fn check_emit_len(buf: &[u8], need: usize) -> Result<()> {
    if buf.len() < need {
        Err(Error::BufferTooSmall {
            need,
            got: buf.len(),
        })
    } else {
        Ok(())
    }
}

/// Big-endian field accessors shared by the header modules. Callers have checked lengths.
pub(crate) mod be {
    #[inline]
    pub fn u16_at(b: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([b[at], b[at + 1]])
    }
    #[inline]
    pub fn u24_at(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
    }
    #[inline]
    pub fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }
    #[inline]
    pub fn u64_at(b: &[u8], at: usize) -> u64 {
        let mut x = [0u8; 8];
        x.copy_from_slice(&b[at..at + 8]);
        u64::from_be_bytes(x)
    }
    #[inline]
    pub fn put_u16(b: &mut [u8], at: usize, v: u16) {
        b[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }
    /// Writes the low 24 bits of `v`.
    #[inline]
    pub fn put_u24(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
    }
    #[inline]
    pub fn put_u32(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }
    #[inline]
    pub fn put_u64(b: &mut [u8], at: usize, v: u64) {
        b[at..at + 8].copy_from_slice(&v.to_be_bytes());
    }
}
