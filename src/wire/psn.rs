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

/// A starting PSN drawn from the kernel's random generator, as rdma_cm's (the kernel's
/// `get_random_u32() & 0xffffff` in cma.c) and rxe's are: a PSN inside a connection's window is
/// one of the few things a forged packet must name, so an off-path sender must not be able to
/// derive it from the clock or an earlier connection's PSN, and a stale packet from an earlier
/// connection is unlikely to fall in a new one's window. Applications that choose their own
/// starting PSN keep that choice; this is only the library's default.
pub fn random_start() -> Psn {
    Psn::new(crate::random::u32())
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

    #[test]
    fn random_starts_are_unpredictable() {
        let n = 100_000;
        let xs: Vec<u64> = (0..n).map(|_| u64::from(random_start().value())).collect();
        assert!(xs.iter().all(|&x| x <= u64::from(PSN_MASK)));
        assert!(
            !crate::random::tests::affine(&xs, 24),
            "PSNs follow x' = a x + c"
        );
        // Repeats among 10^5 uniform 24-bit draws: n(n-1)/2 / 2^24 = 298 expected (a Poisson
        // count, standard deviation 17). A clock-derived sequence has none, a narrow or
        // patterned one many more.
        let distinct = xs.iter().collect::<std::collections::HashSet<_>>().len();
        let repeats = n - distinct;
        assert!((200..=400).contains(&repeats), "{repeats} repeats");
        // Every bit is set in about half the draws (10^5 / 2, standard deviation 158).
        for bit in 0..24 {
            let ones = xs.iter().filter(|&&x| x >> bit & 1 == 1).count();
            assert!((48_500..=51_500).contains(&ones), "bit {bit}: {ones}");
        }
    }
}
