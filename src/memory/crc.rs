//! CRC-32 (the ICRC's polynomial, crc32fast's convention) of bytes as the copy loops of
//! [`super::region`] see them: aligned 8-byte words, each read with one relaxed atomic load.
//!
//! This is what lets the transmit path compute a packet's ICRC over its payload in the
//! registered region itself, in the one pass that reads it, instead of copying the payload into
//! a transmit buffer first and computing the CRC over that copy (BENCHMARKS.md, issue #23):
//! crc32fast only takes byte slices, and a byte slice over words that a peer may be writing is
//! a data race. So the words are copied into a stack buffer that stays in L1, a chunk at a
//! time, and crc32fast hashes each chunk while it is there. The chunk is 2 KiB because that
//! is where crc32fast switches to its widest kernel (VPCLMULQDQ over 512-bit registers, on
//! CPUs that have it).
//!
//! Folding the words straight into a PCLMULQDQ CRC (two atomic loads per 16 bytes moved into
//! a vector register) executes fewer instructions, and callgrind, which runs crc32fast's SSE
//! kernel, counts it cheaper; on the hardware it was slower than this copy (BENCHMARKS.md): the
//! moves from general to vector registers compete with the carry-less multiplies for one
//! execution port, and crc32fast's AVX-512 kernel does 64 bytes per multiply.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering};

/// Words per chunk (4 KiB: a 4096-byte MTU packet's payload in one crc32fast call).
const CHUNK_WORDS: usize = 512;

/// The CRC of the bytes so far (`crc`, crc32fast's value: 0 for none) extended by the bytes of
/// `words` in memory order, each word read with one relaxed atomic load.
pub fn update_words(crc: u32, words: &[AtomicU64]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(crc);
    // Not zeroed first: that was a 4 KiB memset per packet, as much as the copy itself.
    let mut buf = [const { MaybeUninit::<u64>::uninit() }; CHUNK_WORDS];
    for chunk in words.chunks(CHUNK_WORDS) {
        for (b, w) in buf.iter_mut().zip(chunk) {
            b.write(w.load(Ordering::Relaxed));
        }
        // SAFETY: the first `chunk.len()` words of `buf` were written just above; a u64's
        // native-endian bytes are its bytes in memory, in the order the region holds them.
        let bytes =
            unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), chunk.len() * 8) };
        h.update(bytes);
    }
    h.finalize()
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
        // Lengths around a chunk's and a packet's worth, and small ones; several starting
        // CRCs, so that chaining works.
        let data: Vec<u8> = (0..4200u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for words in (0..40).chain([63, 64, 255, 256, 257, 512, 525]) {
            let bytes = &data[..words * 8];
            let w = words_of(bytes);
            for start in [0u32, 0xFFFF_FFFF, crc32fast::hash(b"headers")] {
                let mut h = crc32fast::Hasher::new_with_initial(start);
                h.update(bytes);
                let want = h.finalize();
                assert_eq!(update_words(start, &w), want, "{words} words");
            }
        }
    }
}
