//! Fields of fixed-layout headers, declared once.
//!
//! A field is a [`BitField`]: a byte offset, a bit offset from that byte's most significant bit
//! and a width, the way IBTA's tables and Linux's `rxe_hdr.h` state them. `view!` takes one list
//! per header (doc, name, type, place and, for a writable field, its setter) and derives from it
//! the header's checked view (`new_unchecked`, `new_checked`, `into_inner`), a `field` module
//! with one constant per field (named as the field) and the getters and setters that go through
//! those constants, so the constants, the getters and the setters cannot disagree. The CM
//! messages use the same [`BitField`]s through `message!` ([`super::cm`]), the MAD header
//! through `header!` ([`super::mad`]).

use super::be;

/// A field of at most 64 bits inside a header or a MAD: `width` bits starting `bit` bits below
/// the most significant bit of byte `byte`, big-endian, as IBTA's tables give them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BitField {
    /// Offset of the field's first byte from the start of the header (or of the MAD).
    pub byte: usize,
    /// Bits to skip in that byte, counted from its most significant bit.
    pub bit: u8,
    /// Width in bits (1..=64), with `bit + width <= 64`.
    pub width: u8,
}

/// A field of `width` bits at `bit` bits below the most significant bit of byte `byte` of a
/// header.
pub(crate) const fn bits(byte: usize, bit: u8, width: u8) -> BitField {
    BitField { byte, bit, width }
}

impl BitField {
    /// Bytes the field touches.
    const fn span(self) -> usize {
        (self.bit as usize + self.width as usize).div_ceil(8)
    }

    /// Bits below the field in the last byte it touches.
    const fn shift(self) -> u32 {
        (self.span() * 8 - self.bit as usize - self.width as usize) as u32
    }

    const fn mask(self) -> u64 {
        if self.width >= 64 {
            u64::MAX
        } else {
            (1u64 << self.width) - 1
        }
    }

    /// Reads the field from `buf`, which holds at least the bytes the field touches.
    #[inline(always)]
    pub fn get(self, buf: &[u8]) -> u64 {
        // Whole big-endian numbers (every field of the hot headers but the flags) in one load.
        match (self.bit, self.width) {
            (0, 8) => buf[self.byte].into(),
            (0, 16) => be::u16_at(buf, self.byte).into(),
            (0, 24) => be::u24_at(buf, self.byte).into(),
            (0, 32) => be::u32_at(buf, self.byte).into(),
            (0, 64) => be::u64_at(buf, self.byte),
            _ => self.get_bits(buf),
        }
    }

    // Inlined: with the field a constant (every caller's), the span, shift and mask fold and
    // the loop unrolls to the one or two bytes the field touches (a call with a loop per flag
    // made a BTH's emit 785 instructions).
    #[inline(always)]
    fn get_bits(self, buf: &[u8]) -> u64 {
        let mut word = 0u64;
        for &b in &buf[self.byte..self.byte + self.span()] {
            word = (word << 8) | b as u64;
        }
        (word >> self.shift()) & self.mask()
    }

    /// Writes the low `width` bits of `value` into the field, leaving the bits around it alone.
    #[inline(always)]
    pub fn put(self, buf: &mut [u8], value: u64) {
        match (self.bit, self.width) {
            (0, 8) => buf[self.byte] = value as u8,
            (0, 16) => be::put_u16(buf, self.byte, value as u16),
            (0, 24) => be::put_u24(buf, self.byte, value as u32),
            (0, 32) => be::put_u32(buf, self.byte, value as u32),
            (0, 64) => be::put_u64(buf, self.byte, value),
            _ => self.put_bits(buf, value),
        }
    }

    #[inline(always)]
    fn put_bits(self, buf: &mut [u8], value: u64) {
        let span = self.span();
        let bytes = &mut buf[self.byte..self.byte + span];
        let mut word = 0u64;
        for &b in bytes.iter() {
            word = (word << 8) | b as u64;
        }
        let mask = self.mask() << self.shift();
        word = (word & !mask) | ((value << self.shift()) & mask);
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (word >> (8 * (span - 1 - i))) as u8;
        }
    }
}

/// A type a header field holds: how it becomes the field's bits and back. A value wider than
/// its field is truncated to the field's width when written.
pub(crate) trait Value: Copy {
    /// The value of the field's bits (at most as wide as the type).
    fn from_bits(bits: u64) -> Self;
    /// The value's bits.
    fn to_bits(self) -> u64;
}

macro_rules! number_value {
    ($($t:ty),*) => {$(
        impl Value for $t {
            #[inline]
            fn from_bits(bits: u64) -> Self {
                bits as $t
            }
            #[inline]
            fn to_bits(self) -> u64 {
                self.into()
            }
        }
    )*};
}
number_value!(u8, u16, u32, u64);

impl Value for bool {
    #[inline]
    fn from_bits(bits: u64) -> Self {
        bits != 0
    }
    #[inline]
    fn to_bits(self) -> u64 {
        self.into()
    }
}

/// Declares a fixed-layout header's checked view once, one line per field: its doc, name, type
/// and place (`bits(byte, bit, width)`), and for a field the sender writes, `=> setter("doc")`.
/// From that list come the view struct over a buffer `T: AsRef<[u8]>` with `new_unchecked`,
/// `new_checked` (against the header's length, naming the header in the error) and
/// `into_inner`; a `field` module with one [`BitField`] per field, named as the field; a getter
/// per field; and the setters, which leave the bits around their field alone.
macro_rules! view {
    (
        $(#[$meta:meta])*
        pub struct $name:ident($what:literal, $len:expr, $header:expr) {
            $(
                $(#[$doc:meta])*
                $field:ident: $ty:ty = $place:expr $(=> $setter:ident($setdoc:literal))?,
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        /// Where each field lies, from the start of the header.
        #[allow(non_upper_case_globals)]
        mod field {
            use $crate::wire::field::{bits, BitField};
            $(pub const $field: BitField = $place;)*
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wraps a buffer without checking its length; accessors may panic on a short buffer.
            pub const fn new_unchecked(buffer: T) -> Self {
                $name { buffer }
            }

            #[doc = concat!("Wraps a buffer after checking that it holds a whole ", $what, ".")]
            pub fn new_checked(buffer: T) -> $crate::wire::Result<Self> {
                $crate::wire::check_len(buffer.as_ref(), $len, $header)?;
                Ok($name { buffer })
            }

            /// Returns the underlying buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }

            $(
                $(#[$doc])*
                #[inline]
                pub fn $field(&self) -> $ty {
                    <$ty as $crate::wire::field::Value>::from_bits(
                        field::$field.get(self.buffer.as_ref()),
                    )
                }
            )*
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            $($(
                #[doc = $setdoc]
                #[inline]
                pub fn $setter(&mut self, value: $ty) {
                    field::$field.put(
                        self.buffer.as_mut(),
                        $crate::wire::field::Value::to_bits(value),
                    );
                }
            )?)*
        }
    };
}
pub(crate) use view;
