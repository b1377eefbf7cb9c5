//! Immediate data (ImmDt, IBTA vol. 1 §9.3.7), 4 bytes, carried by the
//! SEND and RDMA WRITE "with immediate" LAST / ONLY packets.
//!
//! ```text
//!  bytes 0-3
//!  Immediate Data
//! ```
//!
//! The value is read big-endian, so it equals what libibverbs users see as
//! `ntohl(wc.imm_data)` (libibverbs hands `imm_data` over in network byte order).

use super::field::view;
use super::{check_emit_len, Header, Result};

/// Size of the ImmDt on the wire.
pub const LEN: usize = 4;

view! {
    /// A checked view of an ImmDt at the front of a byte buffer.
    pub struct ImmDt("ImmDt", LEN, Header::ImmDt) {
        /// The immediate data, read big-endian.
        imm: u32 = bits(0, 0, 32) => set_imm("Sets the immediate data (written big-endian)."),
    }
}

/// A parsed ImmDt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ImmDtRepr {
    /// The immediate data, as a big-endian number (`ntohl(wc.imm_data)` in libibverbs terms).
    pub imm: u32,
}

impl ImmDtRepr {
    /// Bytes on the wire (4): the next header or the payload starts this far after it.
    pub const LEN: usize = LEN;

    /// Parses the ImmDt at the front of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        let v = ImmDt::new_checked(buf)?;
        Ok(ImmDtRepr { imm: v.imm() })
    }

    /// Writes the ImmDt into the front of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        check_emit_len(buf, LEN)?;
        ImmDt::new_unchecked(&mut buf[..LEN]).set_imm(self.imm);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::Error;
    use super::*;

    const BYTES: [u8; 4] = [0x12, 0x34, 0x56, 0x78];

    fn repr() -> ImmDtRepr {
        ImmDtRepr { imm: 0x1234_5678 }
    }

    #[test]
    fn deconstruct() {
        let v = ImmDt::new_checked(&BYTES[..]).unwrap();
        assert_eq!(v.imm(), 0x1234_5678);
        assert_eq!(v.into_inner(), &BYTES[..]);
    }

    #[test]
    fn parse_and_emit() {
        assert_eq!(ImmDtRepr::parse(&BYTES).unwrap(), repr());
        let mut out = [0u8; 4];
        repr().emit(&mut out).unwrap();
        assert_eq!(out, BYTES);
    }

    #[test]
    fn parse_ignores_trailing_bytes_and_emit_writes_only_len() {
        let long = [0x12, 0x34, 0x56, 0x78, 0xEE, 0xEE];
        assert_eq!(ImmDtRepr::parse(&long).unwrap(), repr());
        let mut out = [0xEEu8; 6];
        repr().emit(&mut out).unwrap();
        assert_eq!(out, long);
    }

    #[test]
    fn setters() {
        let mut b = [0u8; 4];
        ImmDt::new_unchecked(&mut b[..]).set_imm(0xA0B0_C0D0);
        assert_eq!(b, [0xA0, 0xB0, 0xC0, 0xD0]);
    }

    #[test]
    fn truncated() {
        for n in 0..LEN {
            assert_eq!(
                ImmDtRepr::parse(&BYTES[..n]),
                Err(Error::Truncated {
                    header: Header::ImmDt,
                    need: LEN,
                    got: n
                })
            );
        }
        assert!(ImmDtRepr::parse(&BYTES[..]).is_ok());
        let mut small = [0u8; 3];
        assert_eq!(
            repr().emit(&mut small),
            Err(Error::BufferTooSmall { need: 4, got: 3 })
        );
    }
}
