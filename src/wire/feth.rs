//! Flush Extended Transport Header, 4 bytes, carried by the RC FLUSH request (before its RETH).
//! It belongs to the Memory Placement Extensions of IBTA vol. 1 release 1.5 (annex A19); for the
//! layout see Linux `drivers/infiniband/sw/rxe/rxe_hdr.h` (FETH).
//!
//! ```text
//!  one big-endian 32-bit word:
//!  bits 31-6  5-4                     3-0
//!  reserved | Selectivity Level (SEL) | Placement Type (PLT)
//! ```

use super::field::{bits, view, BitField};
use super::{check_emit_len, Header, Result};

/// Size of the FETH on the wire.
pub const LEN: usize = 4;

/// Placement type bit: make the flushed range globally visible (`IB_FLUSH_GLOBAL`).
pub const PLACEMENT_GLOBAL: u8 = 0x1;
/// Placement type bit: make the flushed range persistent (`IB_FLUSH_PERSISTENT`).
pub const PLACEMENT_PERSISTENT: u8 = 0x2;
/// Selectivity level: flush the range given by the RETH (`IB_FLUSH_RANGE`).
pub const SELECTIVITY_RANGE: u8 = 0;
/// Selectivity level: flush the whole memory region named by the R_Key (`IB_FLUSH_MR`).
pub const SELECTIVITY_MR: u8 = 1;

view! {
    /// A checked view of a FETH at the front of a byte buffer.
    pub struct Feth("FETH", LEN, Header::Feth) {
        /// Selectivity level (bits 5-4).
        selectivity: u8 = bits(3, 2, 2)
            => set_selectivity("Sets the selectivity level (its low 2 bits), keeping the other bits."),
        /// Placement type (bits 3-0).
        placement: u8 = bits(3, 4, 4)
            => set_placement("Sets the placement type (its low 4 bits), keeping the other bits."),
    }
}

/// The reserved bits 31-6 of the word.
const RESERVED: BitField = bits(0, 0, 26);

impl<T: AsRef<[u8]>> Feth<T> {
    /// The reserved bits 31-6, in place (the low 6 bits are zero).
    pub fn reserved(&self) -> u32 {
        (RESERVED.get(self.buffer.as_ref()) as u32) << 6
    }
}

/// A parsed FETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FethRepr {
    /// Selectivity level (2 bits): [`SELECTIVITY_RANGE`] or [`SELECTIVITY_MR`].
    pub selectivity: u8,
    /// Placement type (4 bits): a combination of [`PLACEMENT_GLOBAL`] and
    /// [`PLACEMENT_PERSISTENT`].
    pub placement: u8,
}

impl FethRepr {
    /// Bytes on the wire (4): the next header or the payload starts this far after it.
    pub const LEN: usize = LEN;

    /// Parses the FETH at the front of `buf`; the reserved bits are ignored.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        let v = Feth::new_checked(buf)?;
        Ok(FethRepr {
            selectivity: v.selectivity(),
            placement: v.placement(),
        })
    }

    /// Writes the FETH into the front of `buf`; reserved bits are sent as zero, and out-of-range
    /// values are truncated to their field (2 bits of selectivity, 4 of placement).
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        check_emit_len(buf, LEN)?;
        // Reserved bits go out as zero; the setters keep them.
        buf[..LEN].fill(0);
        let mut v = Feth::new_unchecked(&mut buf[..LEN]);
        v.set_selectivity(self.selectivity);
        v.set_placement(self.placement);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::Error;
    use super::*;

    // Selectivity 1 (whole MR), placement 3 (global visibility + persistence).
    const BYTES: [u8; 4] = [0x00, 0x00, 0x00, 0x13];

    fn repr() -> FethRepr {
        FethRepr {
            selectivity: SELECTIVITY_MR,
            placement: PLACEMENT_GLOBAL | PLACEMENT_PERSISTENT,
        }
    }

    #[test]
    fn deconstruct() {
        let v = Feth::new_checked(&BYTES[..]).unwrap();
        assert_eq!(v.selectivity(), 1);
        assert_eq!(v.placement(), 3);
        assert_eq!(v.reserved(), 0);
        assert_eq!(v.into_inner(), &BYTES[..]);
    }

    #[test]
    fn parse_and_emit() {
        assert_eq!(FethRepr::parse(&BYTES).unwrap(), repr());
        let mut out = [0u8; 4];
        repr().emit(&mut out).unwrap();
        assert_eq!(out, BYTES);
    }

    #[test]
    fn range_persistent() {
        let b = [0x00, 0x00, 0x00, 0x02];
        let r = FethRepr::parse(&b).unwrap();
        assert_eq!(
            r,
            FethRepr {
                selectivity: SELECTIVITY_RANGE,
                placement: PLACEMENT_PERSISTENT
            }
        );
        let mut out = [0xEEu8; 5];
        r.emit(&mut out).unwrap();
        assert_eq!(out, [0x00, 0x00, 0x00, 0x02, 0xEE]);
    }

    #[test]
    fn reserved_bits_ignored_on_parse_and_zero_on_emit() {
        let b = [0xFF, 0xFF, 0xFF, 0xD3, 0xEE];
        let v = Feth::new_checked(&b[..]).unwrap();
        assert_eq!(v.reserved(), 0xFFFF_FFC0);
        let r = FethRepr::parse(&b).unwrap();
        assert_eq!(r, repr());
        let mut out = [0xEEu8; 4];
        r.emit(&mut out).unwrap();
        assert_eq!(out, BYTES);
    }

    #[test]
    fn emit_truncates_fields() {
        let r = FethRepr {
            selectivity: 0xFF,
            placement: 0xFF,
        };
        let mut out = [0u8; 4];
        r.emit(&mut out).unwrap();
        assert_eq!(out, [0x00, 0x00, 0x00, 0x3F]);
    }

    #[test]
    fn setters_touch_only_their_field() {
        let mut b = [0xAB, 0xCD, 0xEF, 0xC0];
        let mut v = Feth::new_unchecked(&mut b[..]);
        v.set_selectivity(0x06);
        v.set_placement(0x1A);
        assert_eq!(b, [0xAB, 0xCD, 0xEF, 0xEA]);
    }

    #[test]
    fn truncated() {
        for n in 0..LEN {
            assert_eq!(
                FethRepr::parse(&BYTES[..n]),
                Err(Error::Truncated {
                    header: Header::Feth,
                    need: LEN,
                    got: n
                })
            );
        }
        assert!(FethRepr::parse(&BYTES[..]).is_ok());
        let mut small = [0u8; 3];
        assert_eq!(
            repr().emit(&mut small),
            Err(Error::BufferTooSmall { need: 4, got: 3 })
        );
    }
}
