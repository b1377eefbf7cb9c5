//! Invalidate Extended Transport Header (IBTA vol. 1 §9.3.8, added in release 1.2.1), 4 bytes,
//! carried by SEND LAST / ONLY WITH INVALIDATE packets.
//!
//! ```text
//!  bytes 0-3
//!  R_Key (to invalidate at the responder)
//! ```

use super::{be, check_emit_len, check_len, Header, Result};

/// Size of the IETH on the wire.
pub const LEN: usize = 4;

mod field {
    pub const RKEY: usize = 0;
}

/// A checked view of an IETH at the front of a byte buffer.
#[derive(Debug, Clone, Copy)]
pub struct Ieth<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ieth<T> {
    /// Wraps a buffer without checking its length; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        Ieth { buffer }
    }

    /// Wraps a buffer after checking that it holds a whole IETH.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len(buffer.as_ref(), LEN, Header::Ieth)?;
        Ok(Ieth { buffer })
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The R_Key to invalidate.
    pub fn rkey(&self) -> u32 {
        be::u32_at(self.buffer.as_ref(), field::RKEY)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ieth<T> {
    /// Sets the R_Key to invalidate.
    pub fn set_rkey(&mut self, rkey: u32) {
        be::put_u32(self.buffer.as_mut(), field::RKEY, rkey);
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
