//! ACK Extended Transport Header (IBTA vol. 1 §9.3.5), 4 bytes, carried by RC ACKNOWLEDGE, ATOMIC
//! ACKNOWLEDGE and the RDMA READ RESPONSE FIRST / LAST / ONLY packets.
//!
//! ```text
//!  byte 0      1-3
//!  Syndrome | MSN (24 bits)
//! ```
//!
//! The syndrome's bits 7-5 say what kind of acknowledgement this is, and bits 4-0 carry a
//! kind-specific value:
//!
//! ```text
//!  bits 7-5   meaning          bits 4-0
//!  000        ACK              credit count code (31 = invalid / unlimited)
//!  001        RNR NAK          RNR timer code
//!  011        NAK              NAK code
//!  010, 1xx   reserved
//! ```

use super::field::view;
use super::{check_emit_len, Header, Result};

/// Size of the AETH on the wire.
pub const LEN: usize = 4;

/// The syndrome byte's parts.
mod syndrome_bits {
    pub const TYPE_MASK: u8 = 0xE0;
    pub const VALUE_MASK: u8 = 0x1F;
    pub const TYPE_ACK: u8 = 0x00;
    pub const TYPE_RNR_NAK: u8 = 0x20;
    pub const TYPE_NAK: u8 = 0x60;
    /// Credit code 31: "invalid", i.e. end-to-end flow control is not in use.
    pub const CREDIT_INVALID: u8 = 0x1F;
}

/// Credit count for each credit code 0-30; code 31 means "invalid".
const CREDIT_COUNTS: [u32; 31] = [
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
    2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
];

/// RNR NAK timer for each timer code 0-31, in nanoseconds. Code 0 is the longest.
const RNR_TIMER_NS: [u64; 32] = [
    655_360_000, // 0: 655.36 ms
    10_000,      // 1: 0.01 ms
    20_000,
    30_000,
    40_000,
    60_000,
    80_000,
    120_000,
    160_000,
    240_000,
    320_000,
    480_000,
    640_000,
    960_000,   // 13: 0.96 ms
    1_280_000, // 14: 1.28 ms
    1_920_000,
    2_560_000,
    3_840_000,
    5_120_000,
    7_680_000,
    10_240_000,
    15_360_000,
    20_480_000, // 22: 20.48 ms
    30_720_000, // 23: 30.72 ms
    40_960_000,
    61_440_000,
    81_920_000,
    122_880_000,
    163_840_000,
    245_760_000,
    327_680_000,
    491_520_000, // 31: 491.52 ms
];

/// The minimum RNR NAK delay, in nanoseconds, that a 5-bit RNR timer code (`code & 0x1F`) stands
/// for. Code 0 is 655.36 ms; codes 1-31 grow from 0.01 ms to 491.52 ms.
pub fn rnr_timer_ns(code: u8) -> u64 {
    RNR_TIMER_NS[usize::from(code & syndrome_bits::VALUE_MASK)]
}

/// The number of messages a 5-bit credit code (`code & 0x1F`) grants, or `None`
/// for code 31, which means "invalid": the responder does not do end-to-end flow control, so the
/// requester may treat its credit as unlimited.
pub fn credit_count(code: u8) -> Option<u32> {
    CREDIT_COUNTS
        .get(usize::from(code & syndrome_bits::VALUE_MASK))
        .copied()
}

/// The reason code of a NAK (syndrome `011xxxxx`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// PSN sequence error: a request arrived out of order; the NAK's BTH carries the PSN the
    /// responder expected, from which the requester resends.
    PsnSequenceError,
    /// Invalid request (unsupported opcode, bad length, ...).
    InvalidRequest,
    /// Remote access error (R_Key / address / permission violation).
    RemoteAccessError,
    /// Remote operational error (the responder could not complete the request).
    RemoteOperationalError,
    /// Invalid RD request (reliable datagram only).
    InvalidRdRequest,
    /// Any other (reserved) code, kept as received.
    Reserved(u8),
}

impl NakCode {
    /// Decodes a NAK code (the syndrome's bits 4-0); values other than 0-4 are `Reserved`.
    pub fn from_u8(code: u8) -> Self {
        match code {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            other => NakCode::Reserved(other),
        }
    }

    /// The numeric NAK code.
    pub fn to_u8(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(code) => code,
        }
    }

    /// A short human-readable name.
    pub fn name(self) -> &'static str {
        match self {
            NakCode::PsnSequenceError => "PSN sequence error",
            NakCode::InvalidRequest => "invalid request",
            NakCode::RemoteAccessError => "remote access error",
            NakCode::RemoteOperationalError => "remote operational error",
            NakCode::InvalidRdRequest => "invalid RD request",
            NakCode::Reserved(_) => "reserved NAK code",
        }
    }
}

/// The decoded AETH syndrome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AckSyndrome {
    /// Positive acknowledgement (`000` + credit code; see [`credit_count`]).
    Ack {
        /// Credit count code (0-31).
        credit: u8,
    },
    /// Receiver Not Ready NAK (`001` + timer code; see [`rnr_timer_ns`]).
    RnrNak {
        /// RNR NAK timer code (0-31).
        timer: u8,
    },
    /// NAK (`011` + NAK code).
    Nak(NakCode),
    /// A reserved syndrome (`010xxxxx` or `1xxxxxxx`), kept as the raw byte.
    Reserved(u8),
}

impl AckSyndrome {
    /// Encodes the syndrome byte. Credit and timer codes are truncated to 5 bits, as are NAK
    /// codes; a `Reserved` value is returned as-is.
    pub fn to_u8(self) -> u8 {
        match self {
            AckSyndrome::Ack { credit } => {
                syndrome_bits::TYPE_ACK | (credit & syndrome_bits::VALUE_MASK)
            }
            AckSyndrome::RnrNak { timer } => {
                syndrome_bits::TYPE_RNR_NAK | (timer & syndrome_bits::VALUE_MASK)
            }
            AckSyndrome::Nak(code) => {
                syndrome_bits::TYPE_NAK | (code.to_u8() & syndrome_bits::VALUE_MASK)
            }
            AckSyndrome::Reserved(raw) => raw,
        }
    }
}

impl From<u8> for AckSyndrome {
    /// Decodes a syndrome byte; every value maps to exactly one `AckSyndrome`.
    fn from(syndrome: u8) -> Self {
        let value = syndrome & syndrome_bits::VALUE_MASK;
        match syndrome & syndrome_bits::TYPE_MASK {
            syndrome_bits::TYPE_ACK => AckSyndrome::Ack { credit: value },
            syndrome_bits::TYPE_RNR_NAK => AckSyndrome::RnrNak { timer: value },
            syndrome_bits::TYPE_NAK => AckSyndrome::Nak(NakCode::from_u8(value)),
            _ => AckSyndrome::Reserved(syndrome),
        }
    }
}

view! {
    /// A checked view of an AETH at the front of a byte buffer.
    pub struct Aeth("AETH", LEN, Header::Aeth) {
        /// The raw syndrome byte.
        syndrome: u8 = bits(0, 0, 8) => set_syndrome("Sets the raw syndrome byte."),
        /// Message sequence number (24 bits).
        msn: u32 = bits(1, 0, 24) => set_msn("Sets the MSN (its low 24 bits)."),
    }
}

/// A parsed AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AethRepr {
    /// The raw syndrome byte; see [`AethRepr::kind`].
    pub syndrome: u8,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

impl AethRepr {
    /// Bytes on the wire (4): the next header or the payload starts this far after it.
    pub const LEN: usize = LEN;

    /// A positive ACK with credit code 31 ("invalid", i.e. unlimited), which is what Linux rxe
    /// always sends.
    pub fn ack(msn: u32) -> Self {
        AethRepr {
            syndrome: syndrome_bits::TYPE_ACK | syndrome_bits::CREDIT_INVALID,
            msn,
        }
    }

    /// A NAK with the given code (truncated to 5 bits).
    pub fn nak(code: NakCode, msn: u32) -> Self {
        AethRepr {
            syndrome: syndrome_bits::TYPE_NAK | (code.to_u8() & syndrome_bits::VALUE_MASK),
            msn,
        }
    }

    /// An RNR NAK with the given timer code (truncated to 5 bits; see [`rnr_timer_ns`]).
    pub fn rnr_nak(timer: u8, msn: u32) -> Self {
        AethRepr {
            syndrome: syndrome_bits::TYPE_RNR_NAK | (timer & syndrome_bits::VALUE_MASK),
            msn,
        }
    }

    /// The decoded syndrome.
    pub fn kind(&self) -> AckSyndrome {
        AckSyndrome::from(self.syndrome)
    }

    /// Parses the AETH at the front of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        let v = Aeth::new_checked(buf)?;
        Ok(AethRepr {
            syndrome: v.syndrome(),
            msn: v.msn(),
        })
    }

    /// Writes the AETH into the front of `buf`; an MSN above 24 bits is truncated.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        check_emit_len(buf, LEN)?;
        let mut v = Aeth::new_unchecked(&mut buf[..LEN]);
        v.set_syndrome(self.syndrome);
        v.set_msn(self.msn);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::Error;
    use super::*;

    // ACK, credit code 31 (unlimited), MSN 0x012345.
    const BYTES: [u8; 4] = [0x1F, 0x01, 0x23, 0x45];

    fn repr() -> AethRepr {
        AethRepr {
            syndrome: 0x1F,
            msn: 0x012345,
        }
    }

    #[test]
    fn deconstruct() {
        let v = Aeth::new_checked(&BYTES[..]).unwrap();
        assert_eq!(v.syndrome(), 0x1F);
        assert_eq!(v.msn(), 0x012345);
        assert_eq!(v.into_inner(), &BYTES[..]);
    }

    #[test]
    fn parse_and_emit() {
        let r = AethRepr::parse(&BYTES).unwrap();
        assert_eq!(r, repr());
        assert_eq!(r, AethRepr::ack(0x012345));
        assert_eq!(r.kind(), AckSyndrome::Ack { credit: 31 });
        let mut out = [0u8; 4];
        repr().emit(&mut out).unwrap();
        assert_eq!(out, BYTES);
    }

    #[test]
    fn parse_ignores_trailing_bytes_and_emit_writes_only_len() {
        let long = [0x1F, 0x01, 0x23, 0x45, 0xEE];
        assert_eq!(AethRepr::parse(&long).unwrap(), repr());
        let mut out = [0xEEu8; 5];
        repr().emit(&mut out).unwrap();
        assert_eq!(out, long);
    }

    #[test]
    fn nak_and_rnr_nak_bytes() {
        // PSN sequence error NAK, MSN 7.
        let b = [0x60, 0x00, 0x00, 0x07];
        let r = AethRepr::parse(&b).unwrap();
        assert_eq!(r, AethRepr::nak(NakCode::PsnSequenceError, 7));
        assert_eq!(r.kind(), AckSyndrome::Nak(NakCode::PsnSequenceError));
        let mut out = [0u8; 4];
        r.emit(&mut out).unwrap();
        assert_eq!(out, b);

        // Remote access error NAK, MSN 0xFFFFFF.
        let b = [0x62, 0xFF, 0xFF, 0xFF];
        let r = AethRepr::parse(&b).unwrap();
        assert_eq!(r, AethRepr::nak(NakCode::RemoteAccessError, 0xFF_FFFF));
        assert_eq!(r.kind(), AckSyndrome::Nak(NakCode::RemoteAccessError));

        // RNR NAK, timer code 14 (1.28 ms), MSN 0x000100.
        let b = [0x2E, 0x00, 0x01, 0x00];
        let r = AethRepr::parse(&b).unwrap();
        assert_eq!(r, AethRepr::rnr_nak(14, 0x100));
        assert_eq!(r.kind(), AckSyndrome::RnrNak { timer: 14 });
        r.emit(&mut out).unwrap();
        assert_eq!(out, b);
    }

    #[test]
    fn constructors_truncate() {
        assert_eq!(AethRepr::rnr_nak(0xFF, 0).syndrome, 0x3F);
        assert_eq!(AethRepr::nak(NakCode::Reserved(0x25), 0).syndrome, 0x65);
        let mut out = [0u8; 4];
        AethRepr::ack(0x1234_5678).emit(&mut out).unwrap();
        assert_eq!(out, [0x1F, 0x34, 0x56, 0x78]);
    }

    #[test]
    fn syndrome_decoding() {
        assert_eq!(AckSyndrome::from(0x00), AckSyndrome::Ack { credit: 0 });
        assert_eq!(AckSyndrome::from(0x0A), AckSyndrome::Ack { credit: 10 });
        assert_eq!(AckSyndrome::from(0x20), AckSyndrome::RnrNak { timer: 0 });
        assert_eq!(AckSyndrome::from(0x3F), AckSyndrome::RnrNak { timer: 31 });
        assert_eq!(AckSyndrome::from(0x40), AckSyndrome::Reserved(0x40));
        assert_eq!(AckSyndrome::from(0x5F), AckSyndrome::Reserved(0x5F));
        assert_eq!(
            AckSyndrome::from(0x61),
            AckSyndrome::Nak(NakCode::InvalidRequest)
        );
        assert_eq!(
            AckSyndrome::from(0x63),
            AckSyndrome::Nak(NakCode::RemoteOperationalError)
        );
        assert_eq!(
            AckSyndrome::from(0x64),
            AckSyndrome::Nak(NakCode::InvalidRdRequest)
        );
        assert_eq!(
            AckSyndrome::from(0x65),
            AckSyndrome::Nak(NakCode::Reserved(5))
        );
        assert_eq!(
            AckSyndrome::from(0x7F),
            AckSyndrome::Nak(NakCode::Reserved(31))
        );
        assert_eq!(AckSyndrome::from(0x80), AckSyndrome::Reserved(0x80));
        assert_eq!(AckSyndrome::from(0xFF), AckSyndrome::Reserved(0xFF));
    }

    #[test]
    fn syndrome_round_trip_all_values() {
        for s in 0..=255u8 {
            let k = AckSyndrome::from(s);
            assert_eq!(k.to_u8(), s, "syndrome {s:#04x}");
            assert_eq!(AckSyndrome::from(k.to_u8()), k);
            assert_eq!(
                AethRepr {
                    syndrome: s,
                    msn: 0
                }
                .kind(),
                k
            );
        }
    }

    #[test]
    fn nak_code_round_trip_and_names() {
        for c in 0..=255u8 {
            assert_eq!(NakCode::from_u8(c).to_u8(), c);
        }
        assert_eq!(NakCode::from_u8(0).name(), "PSN sequence error");
        assert_eq!(NakCode::from_u8(1).name(), "invalid request");
        assert_eq!(NakCode::from_u8(2).name(), "remote access error");
        assert_eq!(NakCode::from_u8(3).name(), "remote operational error");
        assert_eq!(NakCode::from_u8(4).name(), "invalid RD request");
        assert_eq!(NakCode::from_u8(9), NakCode::Reserved(9));
        assert_eq!(NakCode::Reserved(9).name(), "reserved NAK code");
    }

    #[test]
    fn rnr_timer_table() {
        assert_eq!(rnr_timer_ns(0), 655_360_000);
        assert_eq!(rnr_timer_ns(1), 10_000);
        assert_eq!(rnr_timer_ns(5), 60_000);
        assert_eq!(rnr_timer_ns(12), 640_000);
        assert_eq!(rnr_timer_ns(13), 960_000);
        assert_eq!(rnr_timer_ns(14), 1_280_000);
        assert_eq!(rnr_timer_ns(18), 5_120_000);
        assert_eq!(rnr_timer_ns(22), 20_480_000);
        assert_eq!(rnr_timer_ns(23), 30_720_000);
        assert_eq!(rnr_timer_ns(27), 122_880_000);
        assert_eq!(rnr_timer_ns(31), 491_520_000);
        // Only the low 5 bits count.
        assert_eq!(rnr_timer_ns(0x20 | 14), 1_280_000);
        assert_eq!(rnr_timer_ns(0xFF), 491_520_000);
        // Codes 1..31 are strictly increasing.
        for c in 1..31u8 {
            assert!(rnr_timer_ns(c) < rnr_timer_ns(c + 1));
        }
    }

    #[test]
    fn credit_table() {
        assert_eq!(credit_count(0), Some(0));
        assert_eq!(credit_count(1), Some(1));
        assert_eq!(credit_count(4), Some(4));
        assert_eq!(credit_count(5), Some(6));
        assert_eq!(credit_count(10), Some(32));
        assert_eq!(credit_count(15), Some(192));
        assert_eq!(credit_count(20), Some(1024));
        assert_eq!(credit_count(29), Some(24576));
        assert_eq!(credit_count(30), Some(32768));
        assert_eq!(credit_count(31), None);
        assert_eq!(credit_count(0x20 | 3), Some(3));
        assert_eq!(credit_count(0xFF), None);
    }

    #[test]
    fn setters() {
        let mut b = BYTES;
        let mut v = Aeth::new_unchecked(&mut b[..]);
        v.set_syndrome(0x61);
        v.set_msn(0xAB_CDEF01);
        assert_eq!(b, [0x61, 0xCD, 0xEF, 0x01]);
    }

    #[test]
    fn truncated() {
        for n in 0..LEN {
            assert_eq!(
                AethRepr::parse(&BYTES[..n]),
                Err(Error::Truncated {
                    header: Header::Aeth,
                    need: LEN,
                    got: n
                })
            );
        }
        assert!(AethRepr::parse(&BYTES[..]).is_ok());
        let mut small = [0u8; 3];
        assert_eq!(
            repr().emit(&mut small),
            Err(Error::BufferTooSmall { need: 4, got: 3 })
        );
    }
}
