//! Management datagrams (IBTA vol. 1 §13.4): the 256-byte messages that the General Services
//! Interface (QP1) carries in UD SENDs, here for communication management (class 0x07).
//!
//! ```text
//!  byte 0         1            2              3
//!  BaseVersion  | MgmtClass  | ClassVersion | R | Method
//!  Status (16)               | ClassSpecific (16)
//!  TransactionID (64)
//!  AttributeID (16)          | reserved (16)
//!  AttributeModifier (32)
//!  data (232 bytes for the CM class)
//! ```
//!
//! The class layouts (CM messages in [`super::cm`]) are written as [`BitField`]s and
//! [`ByteField`]s: a byte offset into the MAD, a bit offset from that byte's most significant bit
//! and a width, the way IBTA's tables and Linux's `ibta_vol1_c12.h` state them. Each field is
//! declared once, in one list per layout (`header!` here, `message!` in [`super::cm`]), and
//! a `Field` trait reads and writes it by its type, so the struct, the layout, the view and
//! parse/emit cannot disagree.

use super::{check_emit_len, check_len, Header, Result};

/// Size of every MAD on the wire (IBTA §13.4.2): the header plus the class's data, zero-padded.
pub const LEN: usize = 256;
/// Size of the common MAD header.
pub const HEADER_LEN: usize = 24;
/// Bytes of class data after the common header.
pub const DATA_LEN: usize = LEN - HEADER_LEN;

/// BaseVersion of every MAD defined by IBTA vol. 1.
pub const BASE_VERSION: u8 = 1;
/// Management class of communication management (IBTA Table 148).
pub const CLASS_CM: u8 = 0x07;
/// Class version of the CM class that Linux and rxe speak.
pub const CM_CLASS_VERSION: u8 = 2;

/// MAD methods (IBTA Table 147). The high bit (R) marks a response.
pub mod method {
    /// Get an attribute.
    pub const GET: u8 = 0x01;
    /// Set an attribute.
    pub const SET: u8 = 0x02;
    /// Send a datagram that needs no response method (every CM message).
    pub const SEND: u8 = 0x03;
    /// Response to a Get or Set.
    pub const GET_RESP: u8 = 0x81;
    /// The R bit: this method is a response.
    pub const RESPONSE_BIT: u8 = 0x80;
}

pub use super::field::BitField;

impl BitField {
    /// A field of `width` bits at `bit` bits into byte `data_byte` of the class data (the
    /// offsets IBTA's CM tables use, which count from the end of the common header).
    pub const fn data(data_byte: usize, bit: u8, width: u8) -> Self {
        BitField {
            byte: HEADER_LEN + data_byte,
            bit,
            width,
        }
    }
}

/// A run of whole bytes inside a MAD (GIDs, private data, additional rejection information).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteField {
    /// Offset from the start of the MAD.
    pub byte: usize,
    /// Length in bytes.
    pub len: usize,
}

impl ByteField {
    /// `len` bytes at `data_byte` bytes into the class data.
    pub const fn data(data_byte: usize, len: usize) -> Self {
        ByteField {
            byte: HEADER_LEN + data_byte,
            len,
        }
    }

    /// The field's bytes in a whole MAD.
    pub fn get(self, mad: &[u8]) -> &[u8] {
        &mad[self.byte..self.byte + self.len]
    }

    /// Copies the field out into an array of its length.
    pub fn get_array<const N: usize>(self, mad: &[u8]) -> [u8; N] {
        let mut out = [0u8; N];
        out.copy_from_slice(&mad[self.byte..self.byte + N.min(self.len)]);
        out
    }

    /// Writes `value` into the field (`value` is the field's length).
    pub fn put(self, mad: &mut [u8], value: &[u8]) {
        mad[self.byte..self.byte + self.len].copy_from_slice(value);
    }
}

/// A type a MAD field holds, with how it is read from and written to its place in a MAD.
/// `base` is the data offset of the layout the place is relative to (a REQ path's start;
/// 0 for a whole message or the header).
pub(super) trait Field: Sized {
    /// A [`BitField`] for numbers and flags; a data offset (from the end of the header)
    /// for byte arrays and nested layouts.
    type Place: Copy;
    /// Reads the field from a whole MAD.
    fn read(at: Self::Place, mad: &[u8], base: usize) -> Self;
    /// Writes the field into a whole MAD, leaving the bits around it alone.
    fn write(&self, at: Self::Place, mad: &mut [u8], base: usize);
    /// The bits the field takes, for the layout test: (first bit counted from the start of
    /// the message data, width, bits the type holds), one entry per field of a nested layout.
    #[cfg(test)]
    fn occupies(at: Self::Place, base: usize, out: &mut Vec<(usize, usize, usize)>);
}

/// [`Field::occupies`] of a bit field whose type holds `holds` bits.
#[cfg(test)]
pub(super) fn bits_taken(at: BitField, base: usize, holds: u32) -> (usize, usize, usize) {
    let at = moved(at, base);
    let first = (at.byte - HEADER_LEN) * 8 + at.bit as usize;
    (first, at.width.into(), holds as usize)
}

/// `at` moved `base` bytes further into the message.
pub(super) const fn moved(at: BitField, base: usize) -> BitField {
    BitField {
        byte: at.byte + base,
        ..at
    }
}

/// Numbers narrower than 64 bits: the field's bits, which are at most as wide as the type
/// (the CM layout test checks every message field's width; the header's are whole bytes),
/// so the cast drops nothing.
macro_rules! narrow_field {
    ($($t:ty),*) => {$(
        impl Field for $t {
            type Place = BitField;
            fn read(at: BitField, mad: &[u8], base: usize) -> Self {
                moved(at, base).get(mad) as $t
            }
            fn write(&self, at: BitField, mad: &mut [u8], base: usize) {
                moved(at, base).put(mad, u64::from(*self));
            }
            #[cfg(test)]
            fn occupies(at: BitField, base: usize, out: &mut Vec<(usize, usize, usize)>) {
                out.push(bits_taken(at, base, <$t>::BITS));
            }
        }
    )*};
}
narrow_field!(u8, u16, u32);

impl Field for u64 {
    type Place = BitField;
    fn read(at: BitField, mad: &[u8], base: usize) -> Self {
        moved(at, base).get(mad)
    }
    fn write(&self, at: BitField, mad: &mut [u8], base: usize) {
        moved(at, base).put(mad, *self);
    }
    #[cfg(test)]
    fn occupies(at: BitField, base: usize, out: &mut Vec<(usize, usize, usize)>) {
        out.push(bits_taken(at, base, u64::BITS));
    }
}

impl Field for bool {
    type Place = BitField;
    fn read(at: BitField, mad: &[u8], base: usize) -> Self {
        moved(at, base).get(mad) != 0
    }
    fn write(&self, at: BitField, mad: &mut [u8], base: usize) {
        moved(at, base).put(mad, u64::from(*self));
    }
    #[cfg(test)]
    fn occupies(at: BitField, base: usize, out: &mut Vec<(usize, usize, usize)>) {
        out.push(bits_taken(at, base, 1));
    }
}

impl<const N: usize> Field for [u8; N] {
    type Place = usize;
    fn read(at: usize, mad: &[u8], base: usize) -> Self {
        ByteField::data(base + at, N).get_array(mad)
    }
    fn write(&self, at: usize, mad: &mut [u8], base: usize) {
        ByteField::data(base + at, N).put(mad, self);
    }
    #[cfg(test)]
    fn occupies(at: usize, base: usize, out: &mut Vec<(usize, usize, usize)>) {
        out.push(((base + at) * 8, N * 8, N * 8));
    }
}

/// Declares the header's fields once (doc, name, type, byte offset, width; each starts on a
/// byte): from that list come [`MadRepr`], the layout constants, the [`Mad`] view's getters,
/// and [`MadRepr`]'s parse and emit, which go through the constants.
macro_rules! header {
    ($(
        $(#[$doc:meta])*
        $field:ident: $ty:ty = bits($byte:expr, $width:expr),
    )*) => {
        /// The common header of a MAD.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct MadRepr {
            $(
                $(#[$doc])*
                pub $field: $ty,
            )*
        }

        /// Where each header field lies.
        #[allow(non_upper_case_globals)]
        mod field {
            use super::BitField;
            $(pub const $field: BitField = BitField { byte: $byte, bit: 0, width: $width };)*
        }

        impl<T: AsRef<[u8]>> Mad<T> {
            $(
                $(#[$doc])*
                pub fn $field(&self) -> $ty {
                    Field::read(field::$field, self.bytes(), 0)
                }
            )*
        }

        impl MadRepr {
            /// Reads every field from a checked view.
            fn read<T: AsRef<[u8]>>(v: &Mad<T>) -> Self {
                MadRepr {
                    $($field: v.$field(),)*
                }
            }

            /// Writes every field into a whole MAD.
            fn write(&self, mad: &mut [u8]) {
                $(self.$field.write(field::$field, mad, 0);)*
            }
        }
    };
}

header! {
    /// BaseVersion (1 for every IBTA class).
    base_version: u8 = bits(0, 8),
    /// Management class (0x07: CM).
    mgmt_class: u8 = bits(1, 8),
    /// Version of the class's layouts.
    class_version: u8 = bits(2, 8),
    /// Method, with the response bit.
    method: u8 = bits(3, 8),
    /// Status of a response (0 in requests).
    status: u16 = bits(4, 16),
    /// Class-specific header word.
    class_specific: u16 = bits(6, 16),
    /// Transaction ID: a response echoes its request's.
    tid: u64 = bits(8, 64),
    /// Attribute ID: for the CM class, which message this is.
    attr_id: u16 = bits(16, 16),
    /// Attribute modifier.
    attr_mod: u32 = bits(20, 32),
}

/// The 16 reserved bits between the attribute ID and modifier, sent as zero.
const RESERVED: BitField = BitField {
    byte: 18,
    bit: 0,
    width: 16,
};

/// A checked view of a whole MAD (all [`LEN`] bytes) at the front of a buffer.
#[derive(Debug, Clone, Copy)]
pub struct Mad<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Mad<T> {
    /// Wraps a buffer after checking that it holds a whole MAD. Bytes after the first
    /// [`LEN`] are ignored (a UD payload may be padded).
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len(buffer.as_ref(), LEN, Header::Mad)?;
        Ok(Mad { buffer })
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The MAD's bytes (exactly [`LEN`]).
    pub fn bytes(&self) -> &[u8] {
        &self.buffer.as_ref()[..LEN]
    }

    /// Reads a field of this MAD.
    pub fn get(&self, f: BitField) -> u64 {
        f.get(self.bytes())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Mad<T> {
    /// Writes a field of this MAD.
    pub fn set(&mut self, f: BitField, value: u64) {
        f.put(&mut self.buffer.as_mut()[..LEN], value);
    }
}

impl MadRepr {
    /// Bytes of the header on the wire.
    pub const LEN: usize = HEADER_LEN;

    /// A CM-class SEND header (every CM message is one), with `tid` and the message's attribute ID.
    pub fn cm_send(tid: u64, attr_id: u16) -> Self {
        MadRepr {
            base_version: BASE_VERSION,
            mgmt_class: CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: method::SEND,
            status: 0,
            class_specific: 0,
            tid,
            attr_id,
            attr_mod: 0,
        }
    }

    /// Parses the header of the whole MAD at the front of `buf` (at least [`LEN`] bytes: a
    /// shorter datagram is not a MAD).
    pub fn parse(buf: &[u8]) -> Result<Self> {
        Ok(MadRepr::read(&Mad::new_checked(buf)?))
    }

    /// Writes the header into the front of `buf` (at least [`LEN`] bytes), reserved bits zero;
    /// the class data after it is left as it is.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        check_emit_len(buf, LEN)?;
        let mad = &mut buf[..LEN];
        self.write(mad);
        RESERVED.put(mad, 0);
        Ok(())
    }

    /// Whether the method has the response bit set.
    pub fn is_response(&self) -> bool {
        self.method & method::RESPONSE_BIT != 0
    }
}

#[cfg(test)]
mod tests {
    use super::super::Error;
    use super::*;

    // The header of the REQ in tests/data/rxe/rping.pcap (frame 1), as kernel rxe's CM sent it.
    const HEADER: [u8; 24] = [
        0x01, 0x07, 0x02, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x8e, 0xdc, 0x46,
        0xa2, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];

    fn mad() -> [u8; LEN] {
        let mut m = [0u8; LEN];
        m[..24].copy_from_slice(&HEADER);
        m
    }

    #[test]
    fn deconstruct() {
        let m = mad();
        let v = Mad::new_checked(&m[..]).unwrap();
        assert_eq!(v.base_version(), 1);
        assert_eq!(v.mgmt_class(), CLASS_CM);
        assert_eq!(v.class_version(), 2);
        assert_eq!(v.method(), method::SEND);
        assert_eq!(v.status(), 0);
        assert_eq!(v.tid(), 0x0000_0002_8edc_46a2);
        assert_eq!(v.attr_id(), 0x0010);
        assert_eq!(v.attr_mod(), 0);
    }

    #[test]
    fn parse_and_emit() {
        let m = mad();
        let r = MadRepr::parse(&m).unwrap();
        assert_eq!(r, MadRepr::cm_send(0x0000_0002_8edc_46a2, 0x0010));
        assert!(!r.is_response());
        let mut out = [0xAAu8; LEN];
        r.emit(&mut out).unwrap();
        assert_eq!(out[..24], HEADER);
        assert!(
            out[24..].iter().all(|&b| b == 0xAA),
            "emit touches only the header"
        );
    }

    #[test]
    fn short_buffers_are_errors() {
        assert_eq!(
            MadRepr::parse(&[0u8; 255]),
            Err(Error::Truncated {
                header: Header::Mad,
                need: 256,
                got: 255
            })
        );
        assert!(MadRepr::default().emit(&mut [0u8; 100]).is_err());
    }

    #[test]
    fn bit_fields_read_and_write_only_their_bits() {
        // 5 bits at bit 0 and 3 bits at bit 5 of one byte (REQ's local CM response timeout
        // and retry count share byte 47 this way).
        let hi = BitField::data(0, 0, 5);
        let lo = BitField::data(0, 5, 3);
        let mut m = [0u8; LEN];
        hi.put(&mut m, 20);
        lo.put(&mut m, 7);
        assert_eq!(m[HEADER_LEN], 0xa7);
        assert_eq!(hi.get(&m), 20);
        assert_eq!(lo.get(&m), 7);
        // A 20-bit field at the top of a 32-bit word (the flow label) next to a 6-bit one at
        // bit 2 of the word's last byte.
        let flow = BitField::data(4, 0, 20);
        let rate = BitField::data(7, 2, 6);
        flow.put(&mut m, 0x5afb7);
        rate.put(&mut m, 0x3f);
        assert_eq!(m[HEADER_LEN + 4..HEADER_LEN + 8], [0x5a, 0xfb, 0x70, 0x3f]);
        assert_eq!(flow.get(&m), 0x5afb7);
        // Values wider than the field are cut to it.
        rate.put(&mut m, 0xff);
        assert_eq!(m[HEADER_LEN + 7], 0x3f);
        assert_eq!(m[HEADER_LEN + 6], 0x70);
        let wide = BitField::data(8, 0, 64);
        wide.put(&mut m, 0x0102_0304_0506_0708);
        assert_eq!(wide.get(&m), 0x0102_0304_0506_0708);
    }
}
