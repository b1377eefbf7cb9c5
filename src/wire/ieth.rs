//! Invalidate Extended Transport Header (IBTA vol. 1 §9.3.8, added in release 1.2.1), 4 bytes,
//! carried by SEND LAST / ONLY WITH INVALIDATE packets.
//!
//! ```text
//!  bytes 0-3
//!  R_Key (to invalidate at the responder)
//! ```

use super::field::view;
use super::{check_emit_len, Header, Result};

/// Size of the IETH on the wire.
pub const LEN: usize = 4;

view! {
    /// A checked view of an IETH at the front of a byte buffer.
    pub struct Ieth("IETH", LEN, Header::Ieth) {
        /// The R_Key to invalidate.
        rkey: u32 = bits(0, 0, 32) => set_rkey("Sets the R_Key to invalidate."),
    }
}

/// A parsed IETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct IethRepr {
    /// The R_Key to invalidate.
    pub rkey: u32,
}

impl IethRepr {
    /// Bytes on the wire (4): the next header or the payload starts this far after it.
    pub const LEN: usize = LEN;

    /// Parses the IETH at the front of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        let v = Ieth::new_checked(buf)?;
        Ok(IethRepr { rkey: v.rkey() })
    }

    /// Writes the IETH into the front of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        check_emit_len(buf, LEN)?;
        Ieth::new_unchecked(&mut buf[..LEN]).set_rkey(self.rkey);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::Error;
    use super::*;

    const BYTES: [u8; 4] = [0x00, 0x02, 0x4A, 0x11];

    fn repr() -> IethRepr {
        IethRepr { rkey: 0x0002_4A11 }
    }

    #[test]
    fn deconstruct() {
        let v = Ieth::new_checked(&BYTES[..]).unwrap();
        assert_eq!(v.rkey(), 0x0002_4A11);
        assert_eq!(v.into_inner(), &BYTES[..]);
    }

    #[test]
    fn parse_and_emit() {
        assert_eq!(IethRepr::parse(&BYTES).unwrap(), repr());
        let mut out = [0u8; 4];
        repr().emit(&mut out).unwrap();
        assert_eq!(out, BYTES);
    }

    #[test]
    fn parse_ignores_trailing_bytes_and_emit_writes_only_len() {
        let long = [0x00, 0x02, 0x4A, 0x11, 0xEE];
        assert_eq!(IethRepr::parse(&long).unwrap(), repr());
        let mut out = [0xEEu8; 5];
        repr().emit(&mut out).unwrap();
        assert_eq!(out, long);
    }

    #[test]
    fn setters() {
        let mut b = [0u8; 4];
        Ieth::new_unchecked(&mut b[..]).set_rkey(0xFEDC_BA98);
        assert_eq!(b, [0xFE, 0xDC, 0xBA, 0x98]);
    }

    #[test]
    fn truncated() {
        for n in 0..LEN {
            assert_eq!(
                IethRepr::parse(&BYTES[..n]),
                Err(Error::Truncated {
                    header: Header::Ieth,
                    need: LEN,
                    got: n
                })
            );
        }
        assert!(IethRepr::parse(&BYTES[..]).is_ok());
        let mut small = [0u8; 3];
        assert_eq!(
            repr().emit(&mut small),
            Err(Error::BufferTooSmall { need: 4, got: 3 })
        );
    }
}
