//! 24-bit packet sequence numbers and their serial arithmetic (IBTA vol. 1 §9.7.1: PSNs are
//! compared modulo 2^24 within a window of half the space).

use core::cmp::Ordering;

/// Mask of the 24 PSN bits.
pub const PSN_MASK: u32 = 0x00FF_FFFF;
/// Half the PSN space: the largest forward distance that still counts as "after".
pub const HALF: u32 = 0x0080_0000;

/// A packet sequence number, always kept within 24 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// Makes a PSN from the low 24 bits of `v`.
    #[inline]
    pub const fn new(v: u32) -> Psn {
        Psn(v & PSN_MASK)
    }

    /// The 24-bit value.
    #[inline]
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n` modulo 2^24.
    #[inline]
    pub const fn add(self, n: u32) -> Psn {
        Psn(self.0.wrapping_add(n) & PSN_MASK)
    }

    /// `self - n` modulo 2^24.
    #[inline]
    pub const fn sub(self, n: u32) -> Psn {
        Psn(self.0.wrapping_sub(n) & PSN_MASK)
    }

    /// The next PSN.
    #[inline]
    pub const fn next(self) -> Psn {
        self.add(1)
    }

    /// Forward distance from `earlier` to `self`, modulo 2^24 (0 ..= 2^24 - 1).
    #[inline]
    pub const fn distance_from(self, earlier: Psn) -> u32 {
        self.0.wrapping_sub(earlier.0) & PSN_MASK
    }

    /// Signed difference `self - other` in the serial sense: positive when `self` is after
    /// `other` by less than half the space, negative when before, in -2^23 ..= 2^23 - 1.
    #[inline]
    pub const fn diff(self, other: Psn) -> i32 {
        // Shift the 24-bit difference into the top of an i32 and back to sign-extend it.
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    /// Serial comparison: `Less` when `self` precedes `other`.
    #[inline]
    pub fn cmp_serial(self, other: Psn) -> Ordering {
        self.diff(other).cmp(&0)
    }

    /// Whether `self` comes after `other`.
    #[inline]
    pub const fn is_after(self, other: Psn) -> bool {
        self.diff(other) > 0
    }

    /// Whether `self` comes before `other`.
    #[inline]
    pub const fn is_before(self, other: Psn) -> bool {
        self.diff(other) < 0
    }
}

impl From<Psn> for u32 {
    fn from(p: Psn) -> u32 {
        p.0
    }
}

impl core::fmt::Display for Psn {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Number of PSNs a message of `len` bytes uses at path MTU `mtu` (SEND/WRITE packets, or the
/// PSNs a READ request reserves for its responses): `max(1, ceil(len / mtu))`.
#[inline]
pub const fn packets_for(len: u64, mtu: u32) -> u64 {
    if len == 0 {
        1
    } else {
        len.div_ceil(mtu as u64)
    }
}

/// A starting PSN that differs between runs and processes (as ibv_rc_pingpong's `lrand48()`
/// and rdma_cm's random PSNs do), so that a stale packet from an earlier connection is unlikely
/// to fall in a new one's window: the clock and process ID, mixed by a 64-bit finaliser.
pub fn random_start() -> Psn {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let mut x = t.as_nanos() as u64 ^ ((std::process::id() as u64) << 32);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    Psn::new(x as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_at_24_bits() {
        assert_eq!(Psn::new(0xFF_FFFF).next(), Psn::new(0));
        assert_eq!(Psn::new(0x1_000_005), Psn::new(5));
        assert_eq!(Psn::new(2).sub(3), Psn::new(0xFF_FFFF));
        assert_eq!(Psn::new(0xFF_FFFE).add(5).value(), 3);
    }

    #[test]
    fn serial_comparison_across_the_wrap() {
        let a = Psn::new(0xFF_FFF0);
        let b = Psn::new(0x10);
        assert_eq!(b.diff(a), 0x20);
        assert_eq!(a.diff(b), -0x20);
        assert!(b.is_after(a) && a.is_before(b));
        assert_eq!(b.distance_from(a), 0x20);
        assert_eq!(a.distance_from(b), 0xFF_FFE0);
        assert_eq!(a.cmp_serial(a), Ordering::Equal);
    }

    #[test]
    fn half_window_boundary() {
        let z = Psn::new(0);
        assert_eq!(Psn::new(HALF - 1).diff(z), (HALF - 1) as i32);
        assert!(Psn::new(HALF - 1).is_after(z));
        // Exactly half the space away counts as before (the sign bit of the 24-bit difference).
        assert_eq!(Psn::new(HALF).diff(z), -(HALF as i32));
        assert!(Psn::new(HALF).is_before(z));
    }

    #[test]
    fn packet_counts() {
        assert_eq!(packets_for(0, 1024), 1);
        assert_eq!(packets_for(1, 1024), 1);
        assert_eq!(packets_for(1024, 1024), 1);
        assert_eq!(packets_for(1025, 1024), 2);
        assert_eq!(packets_for(1 << 30, 256), 1 << 22);
    }
}
