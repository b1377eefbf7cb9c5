//! XRC Extended Transport Header (IBTA vol. 1 annex A14, XRC: "XRCETH"), 4 bytes, carried by
//! every request packet of the XRC transport (opcodes 0xA0-0xBF but the responses) right
//! after the BTH, before the RETH or AtomicETH. It names the XRC shared receive queue at the
//! target that the request is for: the target QP (BTH DestQP) only carries it there.
//!
//! ```text
//!  byte 0     1-3
//!  reserved | XRC SRQ number (24 bits)
//! ```

use super::field::view;
use super::{check_emit_len, Header, Result};

/// Size of the XRCETH on the wire.
pub const LEN: usize = 4;

view! {
    /// A checked view of an XRCETH at the front of a byte buffer.
    pub struct XrcEth("XRCETH", LEN, Header::XrcEth) {
        /// The reserved byte 0.
        reserved: u8 = bits(0, 0, 8),
        /// The XRC SRQ number (24 bits) the request is for.
        srqn: u32 = bits(1, 0, 24)
            => set_srqn("Sets the XRC SRQ number (its low 24 bits), keeping the reserved byte."),
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> XrcEth<T> {
    /// Zeroes the reserved byte, as a sender must.
    pub fn clear_reserved(&mut self) {
        field::reserved.put(self.buffer.as_mut(), 0);
    }
}

/// A parsed XRCETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct XrcEthRepr {
    /// The XRC SRQ number (24 bits) at the target.
    pub srqn: u32,
}

impl XrcEthRepr {
    /// Bytes on the wire (4).
    pub const LEN: usize = LEN;

    /// Parses the XRCETH at the front of `buf`; the reserved byte is ignored.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        let v = XrcEth::new_checked(buf)?;
        Ok(XrcEthRepr { srqn: v.srqn() })
    }

    /// Writes the XRCETH into the front of `buf`; the reserved byte is sent as zero and an SRQ
    /// number above 24 bits is truncated.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        check_emit_len(buf, LEN)?;
        let mut v = XrcEth::new_unchecked(&mut buf[..LEN]);
        v.clear_reserved();
        v.set_srqn(self.srqn);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::Error;
    use super::*;

    // SRQ number 0x012345, reserved byte 0.
    const BYTES: [u8; 4] = [0x00, 0x01, 0x23, 0x45];

    #[test]
    fn parse_literal() {
        assert_eq!(
            XrcEthRepr::parse(&BYTES).unwrap(),
            XrcEthRepr { srqn: 0x01_2345 }
        );
    }

    #[test]
    fn reserved_byte_is_ignored_on_parse_and_zeroed_on_emit() {
        let mut b = BYTES;
        b[0] = 0xFF;
        assert_eq!(XrcEthRepr::parse(&b).unwrap().srqn, 0x01_2345);
        let mut out = [0xEEu8; 4];
        XrcEthRepr { srqn: 0x01_2345 }.emit(&mut out).unwrap();
        assert_eq!(out, BYTES);
    }

    #[test]
    fn srqn_is_truncated_to_24_bits() {
        let mut out = [0u8; 4];
        XrcEthRepr { srqn: 0xAB12_3456 }.emit(&mut out).unwrap();
        assert_eq!(out, [0x00, 0x12, 0x34, 0x56]);
    }

    #[test]
    fn short_buffers_are_errors() {
        assert!(matches!(
            XrcEthRepr::parse(&BYTES[..3]),
            Err(Error::Truncated {
                header: Header::XrcEth,
                ..
            })
        ));
        assert!(XrcEthRepr { srqn: 1 }.emit(&mut [0u8; 3]).is_err());
    }
}
