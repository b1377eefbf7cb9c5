//! Datagram Extended Transport Header (IBTA vol. 1 §9.3.2), 8 bytes, carried by every UD packet
//! (SEND ONLY, SEND ONLY WITH IMMEDIATE).
//!
//! ```text
//!  bytes 0-3   4          5-7
//!  Q_Key     | reserved | SrcQP (24 bits)
//! ```

use super::field::view;
use super::{check_emit_len, Header, Result};

/// Size of the DETH on the wire.
pub const LEN: usize = 8;

/// The well-known Q_Key of the General Services Interface (QP1).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// The QP number of the General Services Interface, which receives MADs (IBTA 13.5.1).
pub const GSI_QPN: u32 = 1;

view! {
    /// A checked view of a DETH at the front of a byte buffer.
    pub struct Deth("DETH", LEN, Header::Deth) {
        /// Q_Key the receiving UD QP compares with its own (0x80010000 for QP1).
        qkey: u32 = bits(0, 0, 32) => set_qkey("Sets the Q_Key."),
        /// The reserved byte 4.
        reserved: u8 = bits(4, 0, 8),
        /// The sender's QP number (24 bits), reported in the receiver's completion.
        src_qp: u32 = bits(5, 0, 24)
            => set_src_qp("Sets the source QP number (its low 24 bits), keeping the reserved byte."),
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Deth<T> {
    /// Zeroes the reserved byte, as a sender must.
    pub fn clear_reserved(&mut self) {
        field::reserved.put(self.buffer.as_mut(), 0);
    }
}

/// A parsed DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DethRepr {
    /// Q_Key the receiving UD QP compares with its own (0x80010000 for QP1).
    pub qkey: u32,
    /// The sender's QP number (24 bits), reported in the receiver's completion.
    pub src_qp: u32,
}

impl DethRepr {
    /// Bytes on the wire (8): the next header or the payload starts this far after it.
    pub const LEN: usize = LEN;

    /// Parses the DETH at the front of `buf`; the reserved byte is ignored.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        let v = Deth::new_checked(buf)?;
        Ok(DethRepr {
            qkey: v.qkey(),
            src_qp: v.src_qp(),
        })
    }

    /// Writes the DETH into the front of `buf`; the reserved byte is sent as zero and a source
    /// QPN above 24 bits is truncated.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        check_emit_len(buf, LEN)?;
        let mut v = Deth::new_unchecked(&mut buf[..LEN]);
        v.set_qkey(self.qkey);
        v.clear_reserved();
        v.set_src_qp(self.src_qp);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::Error;
    use super::*;

    // Q_Key 0x80010000 (GSI), SrcQP 1.
    const BYTES: [u8; 8] = [0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01];

    fn repr() -> DethRepr {
        DethRepr {
            qkey: GSI_QKEY,
            src_qp: 1,
        }
    }

    #[test]
    fn deconstruct() {
        let v = Deth::new_checked(&BYTES[..]).unwrap();
        assert_eq!(v.qkey(), 0x8001_0000);
        assert_eq!(v.reserved(), 0);
        assert_eq!(v.src_qp(), 1);
        assert_eq!(v.into_inner(), &BYTES[..]);
    }

    #[test]
    fn parse_and_emit() {
        assert_eq!(DethRepr::parse(&BYTES).unwrap(), repr());
        let mut out = [0u8; 8];
        repr().emit(&mut out).unwrap();
        assert_eq!(out, BYTES);
    }

    #[test]
    fn parse_ignores_trailing_bytes_and_emit_writes_only_len() {
        let long = [0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xEE];
        assert_eq!(DethRepr::parse(&long).unwrap(), repr());
        let mut out = [0xEEu8; 9];
        repr().emit(&mut out).unwrap();
        assert_eq!(out, long);
    }

    #[test]
    fn reserved_byte_ignored_on_parse_and_zero_on_emit() {
        let b = [0x11, 0x11, 0x11, 0x11, 0xFF, 0xAB, 0xCD, 0xEF];
        let v = Deth::new_checked(&b[..]).unwrap();
        assert_eq!(v.reserved(), 0xFF);
        let r = DethRepr::parse(&b).unwrap();
        assert_eq!(
            r,
            DethRepr {
                qkey: 0x1111_1111,
                src_qp: 0xAB_CDEF
            }
        );
        let mut out = [0xEEu8; 8];
        r.emit(&mut out).unwrap();
        assert_eq!(out, [0x11, 0x11, 0x11, 0x11, 0x00, 0xAB, 0xCD, 0xEF]);
    }

    #[test]
    fn emit_truncates_src_qp_to_24_bits() {
        let r = DethRepr {
            qkey: 0,
            src_qp: 0xFF00_0102,
        };
        let mut out = [0xEEu8; 8];
        r.emit(&mut out).unwrap();
        assert_eq!(out, [0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02]);
    }

    #[test]
    fn setters() {
        let mut b = [0x00, 0x00, 0x00, 0x00, 0x5A, 0x00, 0x00, 0x00];
        let mut v = Deth::new_unchecked(&mut b[..]);
        v.set_qkey(0x1234_5678);
        v.set_src_qp(0x7F_AB_CD_EF);
        assert_eq!(b, [0x12, 0x34, 0x56, 0x78, 0x5A, 0xAB, 0xCD, 0xEF]);
    }

    #[test]
    fn truncated() {
        for n in 0..LEN {
            assert_eq!(
                DethRepr::parse(&BYTES[..n]),
                Err(Error::Truncated {
                    header: Header::Deth,
                    need: LEN,
                    got: n
                })
            );
        }
        assert!(DethRepr::parse(&BYTES[..]).is_ok());
        let mut small = [0u8; 7];
        assert_eq!(
            repr().emit(&mut small),
            Err(Error::BufferTooSmall { need: 8, got: 7 })
        );
    }
}
