//! Atomic Extended Transport Header (IBTA vol. 1 §9.3.4), 28 bytes, carried by the
//! COMPARE & SWAP and FETCH & ADD request packets.
//!
//! ```text
//!  bytes 0-7        8-11    12-19                  20-27
//!  Virtual Address | R_Key | Swap (or Add) Data | Compare Data
//! ```
//!
//! FETCH & ADD puts its addend in the Swap Data field and ignores Compare Data.

use super::field::view;
use super::{check_emit_len, Header, Result};

/// Size of the AtomicETH on the wire.
pub const LEN: usize = 28;

view! {
    /// A checked view of an AtomicETH at the front of a byte buffer.
    pub struct AtomicEth("AtomicETH", LEN, Header::AtomicEth) {
        /// Virtual address of the 8-byte remote operand.
        va: u64 = bits(0, 0, 64) => set_va("Sets the virtual address."),
        /// Remote key of the memory region.
        rkey: u32 = bits(8, 0, 32) => set_rkey("Sets the R_Key."),
        /// Swap data (COMPARE & SWAP) or addend (FETCH & ADD).
        swap_add: u64 = bits(12, 0, 64) => set_swap_add("Sets the swap data / addend."),
        /// Compare data (COMPARE & SWAP only).
        compare: u64 = bits(20, 0, 64) => set_compare("Sets the compare data."),
    }
}

/// A parsed AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicEthRepr {
    /// Virtual address of the remote operand (8-byte aligned).
    pub va: u64,
    /// R_Key of the remote memory region (needs remote-atomic access).
    pub rkey: u32,
    /// Swap data (COMPARE & SWAP) or addend (FETCH & ADD).
    pub swap_add: u64,
    /// Compare data (COMPARE & SWAP; ignored by FETCH & ADD).
    pub compare: u64,
}

impl AtomicEthRepr {
    /// Bytes on the wire (28): the next header or the payload starts this far after it.
    pub const LEN: usize = LEN;

    /// Parses the AtomicETH at the front of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        let v = AtomicEth::new_checked(buf)?;
        Ok(AtomicEthRepr {
            va: v.va(),
            rkey: v.rkey(),
            swap_add: v.swap_add(),
            compare: v.compare(),
        })
    }

    /// Writes the AtomicETH into the front of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        check_emit_len(buf, LEN)?;
        let mut v = AtomicEth::new_unchecked(&mut buf[..LEN]);
        v.set_va(self.va);
        v.set_rkey(self.rkey);
        v.set_swap_add(self.swap_add);
        v.set_compare(self.compare);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::Error;
    use super::*;

    // COMPARE & SWAP: VA 0x0000_5555_0000_1008, R_Key 0xCAFE_0001, swap 0x1111_2222_3333_4444,
    // compare 0x0000_0000_0000_0001.
    const BYTES: [u8; 28] = [
        0x00, 0x00, 0x55, 0x55, 0x00, 0x00, 0x10, 0x08, // VA
        0xCA, 0xFE, 0x00, 0x01, // R_Key
        0x11, 0x11, 0x22, 0x22, 0x33, 0x33, 0x44, 0x44, // swap
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, // compare
    ];

    fn repr() -> AtomicEthRepr {
        AtomicEthRepr {
            va: 0x0000_5555_0000_1008,
            rkey: 0xCAFE_0001,
            swap_add: 0x1111_2222_3333_4444,
            compare: 1,
        }
    }

    #[test]
    fn deconstruct() {
        let v = AtomicEth::new_checked(&BYTES[..]).unwrap();
        assert_eq!(v.va(), 0x0000_5555_0000_1008);
        assert_eq!(v.rkey(), 0xCAFE_0001);
        assert_eq!(v.swap_add(), 0x1111_2222_3333_4444);
        assert_eq!(v.compare(), 1);
        assert_eq!(v.into_inner(), &BYTES[..]);
    }

    #[test]
    fn parse_and_emit() {
        assert_eq!(AtomicEthRepr::parse(&BYTES).unwrap(), repr());
        let mut out = [0u8; 28];
        repr().emit(&mut out).unwrap();
        assert_eq!(out, BYTES);
    }

    #[test]
    fn fetch_add_puts_the_addend_in_swap_data() {
        let r = AtomicEthRepr {
            va: 0x1000,
            rkey: 7,
            swap_add: 5,
            compare: 0,
        };
        let mut out = [0xEEu8; 30];
        r.emit(&mut out).unwrap();
        assert_eq!(
            out,
            [
                0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, // VA
                0x00, 0x00, 0x00, 0x07, // R_Key
                0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, // addend
                0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // compare (unused)
                0xEE, 0xEE, // untouched
            ]
        );
        assert_eq!(AtomicEthRepr::parse(&out).unwrap(), r);
    }

    #[test]
    fn setters() {
        let mut b = [0u8; 28];
        let mut v = AtomicEth::new_unchecked(&mut b[..]);
        v.set_va(0x0000_5555_0000_1008);
        v.set_rkey(0xCAFE_0001);
        v.set_swap_add(0x1111_2222_3333_4444);
        v.set_compare(1);
        assert_eq!(b, BYTES);
    }

    #[test]
    fn truncated() {
        for n in 0..LEN {
            assert_eq!(
                AtomicEthRepr::parse(&BYTES[..n]),
                Err(Error::Truncated {
                    header: Header::AtomicEth,
                    need: LEN,
                    got: n
                })
            );
        }
        assert!(AtomicEthRepr::parse(&BYTES[..]).is_ok());
        let mut small = [0u8; 27];
        assert_eq!(
            repr().emit(&mut small),
            Err(Error::BufferTooSmall { need: 28, got: 27 })
        );
    }
}
