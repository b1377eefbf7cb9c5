//! Datagram Extended Transport Header (IBTA vol. 1 §9.3.2), 8 bytes, carried by every UD packet
//! (SEND ONLY, SEND ONLY WITH IMMEDIATE).
//!
//! ```text
//!  bytes 0-3   4          5-7
//!  Q_Key     | reserved | SrcQP (24 bits)
//! ```

use super::{be, check_emit_len, check_len, Header, Result};

/// Size of the DETH on the wire.
pub const LEN: usize = 8;

/// The well-known Q_Key of the General Services Interface (QP1).
pub const GSI_QKEY: u32 = 0x8001_0000;

mod field {
    pub const QKEY: usize = 0;
    pub const RESV: usize = 4;
    pub const SRC_QP: usize = 5;
}

/// A checked view of a DETH at the front of a byte buffer.
#[derive(Debug, Clone, Copy)]
pub struct Deth<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Deth<T> {
    /// Wraps a buffer without checking its length; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        Deth { buffer }
    }

    /// Wraps a buffer after checking that it holds a whole DETH.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len(buffer.as_ref(), LEN, Header::Deth)?;
        Ok(Deth { buffer })
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Q_Key the receiving UD QP compares with its own (0x80010000 for QP1).
    pub fn qkey(&self) -> u32 {
        be::u32_at(self.buffer.as_ref(), field::QKEY)
    }
    /// The reserved byte 4.
    pub fn reserved(&self) -> u8 {
        self.buffer.as_ref()[field::RESV]
    }
    /// The sender's QP number (24 bits), reported in the receiver's completion.
    pub fn src_qp(&self) -> u32 {
        be::u24_at(self.buffer.as_ref(), field::SRC_QP)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Deth<T> {
    /// Sets the Q_Key.
    pub fn set_qkey(&mut self, qkey: u32) {
        be::put_u32(self.buffer.as_mut(), field::QKEY, qkey);
    }
    /// Sets the source QP number (low 24 bits of `qpn`), keeping the reserved byte.
    pub fn set_src_qp(&mut self, qpn: u32) {
        be::put_u24(self.buffer.as_mut(), field::SRC_QP, qpn);
    }
    /// Zeroes the reserved byte, as a sender must.
    pub fn clear_reserved(&mut self) {
        self.buffer.as_mut()[field::RESV] = 0;
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
