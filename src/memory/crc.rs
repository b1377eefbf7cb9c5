//! CRC-32 (the ICRC's polynomial, crc32fast's convention) of bytes as the copy loops of
//! [`super::region`] see them: aligned 8-byte words, each read with one relaxed atomic load.
//!
//! This is what lets the transmit path compute a packet's ICRC over its payload in the
//! registered region itself, in the one pass that reads it, instead of copying the payload into
//! a transmit buffer first and computing the CRC over that copy (BENCHMARKS.md, issue #23):
//! crc32fast only takes byte slices, and a byte slice over words that a peer may be writing is
//! a data race. The words are folded 16 bytes at a time with PCLMULQDQ, fold by 4 (Gopal et
//! al., "Fast CRC computation for generic polynomials using PCLMULQDQ instruction", Intel
//! 2009; the constants and the fold are crc32fast's), from two atomic loads per 16 bytes. The
//! fold leaves a 16-byte remainder block that has the CRC of everything folded so far; it
//! and the words left over go through crc32fast (which does the final reduction), as the
//! bytes of a message that starts with a zero CRC register.
//!
//! Without PCLMULQDQ (or off x86_64) the words are copied into a small stack buffer, a chunk
//! at a time, and crc32fast hashes that.

use std::sync::atomic::{AtomicU64, Ordering};

/// Fewest words worth folding: the fold by 4 starts with four 16-byte blocks and needs a
/// fifth to fold in.
#[cfg(target_arch = "x86_64")]
const FOLD_MIN_WORDS: usize = 16;
/// Words per chunk of the portable path (256 bytes, well inside L1).
const CHUNK_WORDS: usize = 32;

/// The CRC of the bytes so far (`crc`, crc32fast's value: 0 for none) extended by the bytes of
/// `words` in memory order.
pub fn update_words(crc: u32, words: &[AtomicU64]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if words.len() >= FOLD_MIN_WORDS
        && std::arch::is_x86_feature_detected!("pclmulqdq")
        && std::arch::is_x86_feature_detected!("sse4.1")
    {
        // SAFETY: the CPU has the instructions `fold` is compiled for (checked just above).
        let (block, done) = unsafe { fold(crc, words) };
        // The block stands for everything folded: hashed from a zero register (crc32fast's
        // initial value !0), the CRC continues from it over the rest.
        let mut h = crc32fast::Hasher::new_with_initial(!0);
        h.update(&block);
        return update_portable(h.finalize(), &words[done..]);
    }
    update_portable(crc, words)
}

/// [`update_words`] through a stack buffer and crc32fast.
fn update_portable(crc: u32, words: &[AtomicU64]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(crc);
    let mut buf = [0u8; CHUNK_WORDS * 8];
    for chunk in words.chunks(CHUNK_WORDS) {
        for (b, w) in buf.chunks_exact_mut(8).zip(chunk) {
            b.copy_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
        }
        h.update(&buf[..chunk.len() * 8]);
    }
    h.finalize()
}

/// Folds the whole 16-byte blocks of `words` (at least [`FOLD_MIN_WORDS`]) into one block,
/// starting from `crc`; returns that block and the number of words consumed (all but an odd
/// last one).
///
/// # Safety
/// The CPU must have PCLMULQDQ and SSE4.1.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "pclmulqdq", enable = "sse2", enable = "sse4.1")]
unsafe fn fold(crc: u32, words: &[AtomicU64]) -> ([u8; 16], usize) {
    use std::arch::x86_64 as arch;
    // The constants of the fold by 512 bits (K1, K2) and by 128 bits (K3, K4) for the
    // reflected polynomial 0xEDB88320 (crc32fast's, from the paper).
    const K1: i64 = 0x1_5444_2bd4;
    const K2: i64 = 0x1_c6e4_1596;
    const K3: i64 = 0x1_7519_97d0;
    const K4: i64 = 0x0_ccaa_009e;
    debug_assert!(words.len() >= FOLD_MIN_WORDS);
    let k1k2 = arch::_mm_set_epi64x(K2, K1);
    let k3k4 = arch::_mm_set_epi64x(K4, K3);
    let (groups, rest) = words.split_at(words.len() / 8 * 8);
    let mut groups = groups.chunks_exact(8);
    // At least two groups of 64 bytes (FOLD_MIN_WORDS): the first starts the four lanes.
    let g = groups.next().unwrap_or(&[]);
    // SAFETY (this and every call below): the CPU has the features (the caller's contract).
    let mut x3 = arch::_mm_xor_si128(
        unsafe { block(&g[0..2]) },
        arch::_mm_cvtsi32_si128(!crc as i32),
    );
    let mut x2 = unsafe { block(&g[2..4]) };
    let mut x1 = unsafe { block(&g[4..6]) };
    let mut x0 = unsafe { block(&g[6..8]) };
    for g in groups {
        x3 = unsafe { fold_in(x3, block(&g[0..2]), k1k2) };
        x2 = unsafe { fold_in(x2, block(&g[2..4]), k1k2) };
        x1 = unsafe { fold_in(x1, block(&g[4..6]), k1k2) };
        x0 = unsafe { fold_in(x0, block(&g[6..8]), k1k2) };
    }
    let mut x = unsafe { fold_in(x3, x2, k3k4) };
    x = unsafe { fold_in(x, x1, k3k4) };
    x = unsafe { fold_in(x, x0, k3k4) };
    let mut pairs = rest.chunks_exact(2);
    for p in &mut pairs {
        x = unsafe { fold_in(x, block(p), k3k4) };
    }
    let done = words.len() - pairs.remainder().len();
    let mut out = [0u8; 16];
    // SAFETY: `out` is 16 writable bytes; the store needs no alignment.
    unsafe { arch::_mm_storeu_si128(out.as_mut_ptr().cast(), x) };
    (out, done)
}

/// Bytes 0 .. 16 of `w` (two words) as an unaligned vector load of them would give them (the
/// low half holds the first eight on this little-endian machine), from two atomic loads.
///
/// # Safety
/// The CPU must have SSE2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
#[inline]
unsafe fn block(w: &[AtomicU64]) -> std::arch::x86_64::__m128i {
    let lo = w[0].load(Ordering::Relaxed);
    let hi = w[1].load(Ordering::Relaxed);
    std::arch::x86_64::_mm_set_epi64x(hi as i64, lo as i64)
}

/// `a` carried over the fold distance whose constants are `k`, plus `b`, reduced to 128 bits.
///
/// # Safety
/// The CPU must have PCLMULQDQ.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "pclmulqdq", enable = "sse2")]
#[inline]
unsafe fn fold_in(
    a: std::arch::x86_64::__m128i,
    b: std::arch::x86_64::__m128i,
    k: std::arch::x86_64::__m128i,
) -> std::arch::x86_64::__m128i {
    use std::arch::x86_64 as arch;
    let t1 = arch::_mm_clmulepi64_si128(a, k, 0x00);
    let t2 = arch::_mm_clmulepi64_si128(a, k, 0x11);
    arch::_mm_xor_si128(arch::_mm_xor_si128(b, t1), t2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words_of(bytes: &[u8]) -> Vec<AtomicU64> {
        bytes
            .chunks(8)
            .map(|c| {
                let mut b = [0u8; 8];
                b[..c.len()].copy_from_slice(c);
                AtomicU64::new(u64::from_ne_bytes(b))
            })
            .collect()
    }

    #[test]
    fn agrees_with_crc32fast_for_every_length_and_start() {
        // Lengths around the fold's thresholds (16 words, groups of 8 words, an odd last
        // word) and a packet's worth; several starting CRCs, so that chaining works.
        let data: Vec<u8> = (0..4200u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for words in (0..40).chain([63, 64, 65, 127, 128, 129, 512, 525]) {
            let bytes = &data[..words * 8];
            let w = words_of(bytes);
            for start in [0u32, 0xFFFF_FFFF, crc32fast::hash(b"headers")] {
                let mut h = crc32fast::Hasher::new_with_initial(start);
                h.update(bytes);
                let want = h.finalize();
                assert_eq!(update_words(start, &w), want, "{words} words");
                assert_eq!(update_portable(start, &w), want, "{words} words");
            }
        }
    }
}
