//! Atomic Acknowledge Extended Transport Header (IBTA vol. 1 §9.3.6), 8 bytes, carried by the
//! ATOMIC ACKNOWLEDGE packet after its AETH.
//!
//! ```text
//!  bytes 0-7
//!  Original Remote Data
//! ```

use super::field::view;
use super::{check_emit_len, Header, Result};

/// Size of the AtomicAckETH on the wire.
pub const LEN: usize = 8;

view! {
    /// A checked view of an AtomicAckETH at the front of a byte buffer.
    pub struct AtomicAckEth("AtomicAckETH", LEN, Header::AtomicAckEth) {
        /// The remote operand's value before the atomic operation.
        orig: u64 = bits(0, 0, 64) => set_orig("Sets the original remote data."),
    }
}

/// A parsed AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicAckEthRepr {
    /// The remote operand's value before the atomic operation.
    pub orig: u64,
}

impl AtomicAckEthRepr {
    /// Bytes on the wire (8): the next header or the payload starts this far after it.
    pub const LEN: usize = LEN;

    /// Parses the AtomicAckETH at the front of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        let v = AtomicAckEth::new_checked(buf)?;
        Ok(AtomicAckEthRepr { orig: v.orig() })
    }

    /// Writes the AtomicAckETH into the front of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        check_emit_len(buf, LEN)?;
        AtomicAckEth::new_unchecked(&mut buf[..LEN]).set_orig(self.orig);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::Error;
    use super::*;

    const BYTES: [u8; 8] = [0xDE, 0xAD, 0xBE, 0xEF, 0x00, 0x00, 0x00, 0x2A];

    fn repr() -> AtomicAckEthRepr {
        AtomicAckEthRepr {
            orig: 0xDEAD_BEEF_0000_002A,
        }
    }

    #[test]
    fn deconstruct() {
        let v = AtomicAckEth::new_checked(&BYTES[..]).unwrap();
        assert_eq!(v.orig(), 0xDEAD_BEEF_0000_002A);
        assert_eq!(v.into_inner(), &BYTES[..]);
    }

    #[test]
    fn parse_and_emit() {
        assert_eq!(AtomicAckEthRepr::parse(&BYTES).unwrap(), repr());
        let mut out = [0u8; 8];
        repr().emit(&mut out).unwrap();
        assert_eq!(out, BYTES);
    }

    #[test]
    fn parse_ignores_trailing_bytes_and_emit_writes_only_len() {
        let long = [0xDE, 0xAD, 0xBE, 0xEF, 0x00, 0x00, 0x00, 0x2A, 0xEE];
        assert_eq!(AtomicAckEthRepr::parse(&long).unwrap(), repr());
        let mut out = [0xEEu8; 9];
        repr().emit(&mut out).unwrap();
        assert_eq!(out, long);
    }

    #[test]
    fn setters() {
        let mut b = [0u8; 8];
        AtomicAckEth::new_unchecked(&mut b[..]).set_orig(0x0102_0304_0506_0708);
        assert_eq!(b, [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08]);
    }

    #[test]
    fn truncated() {
        for n in 0..LEN {
            assert_eq!(
                AtomicAckEthRepr::parse(&BYTES[..n]),
                Err(Error::Truncated {
                    header: Header::AtomicAckEth,
                    need: LEN,
                    got: n
                })
            );
        }
        assert!(AtomicAckEthRepr::parse(&BYTES[..]).is_ok());
        let mut small = [0u8; 7];
        assert_eq!(
            repr().emit(&mut small),
            Err(Error::BufferTooSmall { need: 8, got: 7 })
        );
    }
}
