//! RDMA Extended Transport Header (IBTA vol. 1 §9.3.3), 16 bytes, carried by RDMA WRITE FIRST /
//! ONLY and RDMA READ REQUEST packets (and by FLUSH, after the FETH).
//!
//! ```text
//!  bytes 0-7        8-11    12-15
//!  Virtual Address | R_Key | DMA Length
//! ```

use super::field::view;
use super::{check_emit_len, Error, Header, Result};

/// Size of the RETH on the wire.
pub const LEN: usize = 16;

view! {
    /// A checked view of a RETH at the front of a byte buffer.
    pub struct Reth("RETH", LEN, Header::Reth) {
        /// Virtual address of the first byte of the remote buffer.
        va: u64 = bits(0, 0, 64) => set_va("Sets the virtual address."),
        /// Remote key of the memory region.
        rkey: u32 = bits(8, 0, 32) => set_rkey("Sets the R_Key."),
        /// DMA length: bytes of the whole RDMA operation (not just this packet).
        dma_len: u32 = bits(12, 0, 32) => set_dma_len("Sets the DMA length."),
    }
}

/// A parsed RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RethRepr {
    /// Virtual address of the remote buffer.
    pub va: u64,
    /// R_Key of the remote memory region, checked by the responder against the VA range.
    pub rkey: u32,
    /// DMA length of the whole operation.
    pub len: u32,
}

impl RethRepr {
    /// Bytes on the wire (16): the next header or the payload starts this far after it.
    pub const LEN: usize = LEN;

    /// Parses the RETH at the front of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        // The sixteen bytes as one array: one length check (the view's getters, which
        // `parse_and_emit_match_the_view` compares, check per field).
        let Some(&[a0, a1, a2, a3, a4, a5, a6, a7, k0, k1, k2, k3, l0, l1, l2, l3]) =
            buf.first_chunk::<LEN>()
        else {
            return Err(Error::Truncated {
                header: Header::Reth,
                need: LEN,
                got: buf.len(),
            });
        };
        Ok(RethRepr {
            va: u64::from_be_bytes([a0, a1, a2, a3, a4, a5, a6, a7]),
            rkey: u32::from_be_bytes([k0, k1, k2, k3]),
            len: u32::from_be_bytes([l0, l1, l2, l3]),
        })
    }

    /// Writes the RETH into the front of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        check_emit_len(buf, LEN)?;
        let mut bytes = [0u8; LEN];
        bytes[..8].copy_from_slice(&self.va.to_be_bytes());
        bytes[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        bytes[12..].copy_from_slice(&self.len.to_be_bytes());
        buf[..LEN].copy_from_slice(&bytes);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn parse_and_emit_match_the_view(bytes: [u8; LEN]) {
            let v = Reth::new_checked(&bytes[..]).unwrap();
            let r = RethRepr::parse(&bytes).unwrap();
            proptest::prop_assert_eq!((r.va, r.rkey, r.len), (v.va(), v.rkey(), v.dma_len()));
            let mut out = [0u8; LEN];
            let mut w = Reth::new_unchecked(&mut out[..]);
            w.set_va(r.va);
            w.set_rkey(r.rkey);
            w.set_dma_len(r.len);
            let mut emitted = [0xA5u8; LEN];
            r.emit(&mut emitted).unwrap();
            proptest::prop_assert_eq!(emitted, out);
            proptest::prop_assert_eq!(emitted, bytes);
        }
    }

    // VA 0x00007F12_3456_7000, R_Key 0x0000_1234, DMA length 65536.
    const BYTES: [u8; 16] = [
        0x00, 0x00, 0x7F, 0x12, 0x34, 0x56, 0x70, 0x00, 0x00, 0x00, 0x12, 0x34, 0x00, 0x01, 0x00,
        0x00,
    ];

    fn repr() -> RethRepr {
        RethRepr {
            va: 0x0000_7F12_3456_7000,
            rkey: 0x1234,
            len: 65536,
        }
    }

    #[test]
    fn deconstruct() {
        let v = Reth::new_checked(&BYTES[..]).unwrap();
        assert_eq!(v.va(), 0x0000_7F12_3456_7000);
        assert_eq!(v.rkey(), 0x1234);
        assert_eq!(v.dma_len(), 0x10000);
        assert_eq!(v.into_inner(), &BYTES[..]);
    }

    #[test]
    fn parse_and_emit() {
        assert_eq!(RethRepr::parse(&BYTES).unwrap(), repr());
        let mut out = [0u8; 16];
        repr().emit(&mut out).unwrap();
        assert_eq!(out, BYTES);
    }

    #[test]
    fn parse_ignores_trailing_bytes_and_emit_writes_only_len() {
        let mut long = [0xEEu8; 20];
        long[..16].copy_from_slice(&BYTES);
        assert_eq!(RethRepr::parse(&long).unwrap(), repr());
        let mut out = [0xEEu8; 20];
        repr().emit(&mut out).unwrap();
        assert_eq!(out, long);
    }

    #[test]
    fn setters() {
        let mut b = [0u8; 16];
        let mut v = Reth::new_unchecked(&mut b[..]);
        v.set_va(0x0102_0304_0506_0708);
        v.set_rkey(0xA1B2_C3D4);
        v.set_dma_len(0xFFFF_FFFF);
        assert_eq!(
            b,
            [
                0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0xA1, 0xB2, 0xC3, 0xD4, 0xFF, 0xFF,
                0xFF, 0xFF
            ]
        );
    }

    #[test]
    fn truncated() {
        for n in 0..LEN {
            assert_eq!(
                RethRepr::parse(&BYTES[..n]),
                Err(Error::Truncated {
                    header: Header::Reth,
                    need: LEN,
                    got: n
                })
            );
        }
        assert!(RethRepr::parse(&BYTES[..]).is_ok());
        let mut small = [0u8; 15];
        assert_eq!(
            repr().emit(&mut small),
            Err(Error::BufferTooSmall { need: 16, got: 15 })
        );
    }
}
