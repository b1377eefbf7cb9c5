//! CRC-32 of a short message laid out for carry-less folding, for the ICRC.
//!
//! crc32fast's `Hasher::new` detects the CPU's features at every call, and its PCLMULQDQ kernel
//! prepares a partial last block (the RoCE part of a packet is rarely a multiple of 16 bytes).
//! The ICRC's caller builds the masked pseudo-header in a buffer anyway, so it lays the message
//! out such that no partial block exists: zero bytes before the message (a CRC register at zero
//! stays at zero through zeros) and the first `rest.len() % 16` bytes of the rest copied after
//! the pseudo-header. This module then folds whole 16-byte blocks, one carry-less multiply pair
//! each (Gopal et al., "Fast CRC computation for generic polynomials using PCLMULQDQ
//! instruction", Intel 2009; the same constants and final reduction as crc32fast's kernel), and
//! the answer is crc32fast's, bit for bit (tests below and in `icrc.rs`).

/// Above this many bytes after the staged blocks, crc32fast folds the rest (its four
/// interleaved streams are faster in time than one serial chain; the instruction count is the
/// same).
const SERIAL_MAX: usize = 256;

/// The standard CRC-32 (crc32fast's value) of a message of which `stage[pad..]` is the start
/// and `rest` the remainder; `stage[..pad]` must be zero (the caller's buffer starts zeroed).
/// Folded here when `stage.len()` and `rest.len()` are multiples of 16, `pad + 4 <=
/// stage.len()` and the CPU has PCLMULQDQ, else by crc32fast. `stage` may be changed (the
/// initial register is folded into the message's first four bytes).
#[inline]
pub(super) fn crc32(stage: &mut [u8], pad: usize, rest: &[u8]) -> u32 {
    debug_assert!(stage.iter().take(pad).all(|&b| b == 0), "nonzero padding");
    #[cfg(target_arch = "x86_64")]
    if stage.len() % 16 == 0
        && rest.len() % 16 == 0
        && pad + 4 <= stage.len()
        && std::arch::is_x86_feature_detected!("pclmulqdq")
    {
        // A CRC with initial register 0xFFFFFFFF is the zero-register CRC of the message with
        // its first four bytes inverted (the register is XORed into the first 32 input bits).
        for b in &mut stage[pad..pad + 4] {
            *b ^= 0xFF;
        }
        let serial = if rest.len() <= SERIAL_MAX { rest } else { &[] };
        // SAFETY: `fold` needs only the PCLMULQDQ instructions (SSE2 is part of x86_64),
        // which the CPU was just found to have.
        let crc = unsafe { x86_64::fold(stage, serial) };
        if serial.len() == rest.len() {
            return crc;
        }
        let mut h = crc32fast::Hasher::new_with_initial(crc);
        h.update(rest);
        return h.finalize();
    }
    portable(stage, pad, rest)
}

/// [`crc32`] by crc32fast alone: the path of a CPU without PCLMULQDQ.
fn portable(stage: &[u8], pad: usize, rest: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&stage[pad..]);
    h.update(rest);
    h.finalize()
}

#[cfg(target_arch = "x86_64")]
// The intrinsics are `unsafe` to call before Rust 1.87 (the crate's rust-version is 1.80) and
// safe inside a `target_feature` function after: the blocks below are needed on one, not the
// other.
#[allow(unused_unsafe)]
mod x86_64 {
    use std::arch::x86_64::{
        __m128i, _mm_and_si128, _mm_clmulepi64_si128, _mm_cvtsi128_si32, _mm_loadu_si128,
        _mm_set_epi32, _mm_set_epi64x, _mm_srli_si128, _mm_xor_si128,
    };

    /// x^(128+32) and x^(128-32) modulo the polynomial, bit-reflected: folding by 16 bytes.
    const K3: i64 = 0x1_7519_97d0;
    const K4: i64 = 0x0_ccaa_009e;
    /// x^64 modulo the polynomial, bit-reflected: from 96 to 64 bits.
    const K5: i64 = 0x1_63cd_6124;
    /// The polynomial and its Barrett constant (floor(x^64 / P)), bit-reflected.
    const P_X: i64 = 0x1_DB71_0641;
    const U_PRIME: i64 = 0x1_F701_1641;

    /// The first 16 bytes of `block` as a vector.
    #[inline]
    fn load(block: &[u8]) -> __m128i {
        let block = &block[..16];
        // SAFETY: `block` is 16 readable bytes; `_mm_loadu_si128` needs no alignment, and
        // SSE2 is part of every x86_64 CPU.
        unsafe { _mm_loadu_si128(block.as_ptr().cast()) }
    }

    /// Folds `acc` forward by 16 bytes onto `next`.
    ///
    /// # Safety
    /// The CPU must have PCLMULQDQ.
    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    unsafe fn fold16(acc: __m128i, next: __m128i, k3k4: __m128i) -> __m128i {
        // SAFETY: the caller's CPU has PCLMULQDQ; the rest is SSE2.
        unsafe {
            let lo = _mm_clmulepi64_si128(acc, k3k4, 0x00);
            let hi = _mm_clmulepi64_si128(acc, k3k4, 0x11);
            _mm_xor_si128(_mm_xor_si128(next, lo), hi)
        }
    }

    /// The CRC (final inversion included) of the whole blocks of `stage` then `rest`, with the
    /// register starting at zero; a partial block at the end of either is not read.
    ///
    /// # Safety
    /// The CPU must have PCLMULQDQ.
    #[target_feature(enable = "pclmulqdq")]
    pub(super) unsafe fn fold(stage: &[u8], rest: &[u8]) -> u32 {
        if stage.len() < 16 {
            return !0;
        }
        // SAFETY: the caller's CPU has PCLMULQDQ (`fold16` and the multiplies below); the
        // rest is SSE2.
        unsafe {
            let k3k4 = _mm_set_epi64x(K4, K3);
            let mut x = load(stage);
            for block in stage[16..].chunks_exact(16) {
                x = fold16(x, load(block), k3k4);
            }
            for block in rest.chunks_exact(16) {
                x = fold16(x, load(block), k3k4);
            }
            // 128 -> 96 -> 64 bits, then Barrett reduction to 32 (the reflected variant: the
            // result is the upper half of the low 64 bits).
            let x = _mm_xor_si128(_mm_clmulepi64_si128(x, k3k4, 0x10), _mm_srli_si128(x, 8));
            let low32 = _mm_set_epi32(0, 0, 0, !0);
            let x = _mm_xor_si128(
                _mm_clmulepi64_si128(_mm_and_si128(x, low32), _mm_set_epi64x(0, K5), 0x00),
                _mm_srli_si128(x, 4),
            );
            let pu = _mm_set_epi64x(U_PRIME, P_X);
            let t1 = _mm_clmulepi64_si128(_mm_and_si128(x, low32), pu, 0x10);
            let t2 = _mm_clmulepi64_si128(_mm_and_si128(t1, low32), pu, 0x00);
            !(_mm_cvtsi128_si32(_mm_srli_si128(_mm_xor_si128(x, t2), 4)) as u32)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn plain(msg: &[u8]) -> u32 {
        let mut h = crc32fast::Hasher::new();
        h.update(msg);
        h.finalize()
    }

    /// `msg` laid out as the ICRC lays it out: `head` bytes in the stage behind zero padding,
    /// then whole blocks, with the bytes beyond a whole block staged too.
    fn staged(msg: &[u8], head: usize) -> u32 {
        let (first, rest) = msg.split_at(head.min(msg.len()));
        let k = rest.len() % 16;
        let m = first.len() + k;
        let pad = (16 - m % 16) % 16;
        let mut stage = vec![0u8; pad];
        stage.extend_from_slice(first);
        stage.extend_from_slice(&rest[..k]);
        let portable = portable(&stage, pad, &rest[k..]);
        let folded = crc32(&mut stage, pad, &rest[k..]);
        assert_eq!(folded, portable, "the two paths disagree");
        folded
    }

    #[test]
    fn known_values() {
        // The CRC-32 check value, and the empty-register edge cases.
        assert_eq!(staged(b"123456789", 9), 0xCBF4_3926);
        assert_eq!(staged(&[0u8; 32], 4), plain(&[0u8; 32]));
        assert_eq!(staged(&[0xFFu8; 64], 48), plain(&[0xFFu8; 64]));
    }

    proptest! {
        #[test]
        fn matches_crc32fast(
            msg in proptest::collection::vec(any::<u8>(), 4..700),
            head in 4usize..120,
        ) {
            prop_assert_eq!(staged(&msg, head), plain(&msg));
        }
    }
}
