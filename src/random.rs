//! Unpredictable numbers from the operating system's random source, for every key and identifier
//! a remote party must present: the variable byte of memory keys, starting PSNs, CM
//! communication and transaction IDs.
//!
//! RoCE authenticates nothing but what a packet names (destination QPN, a PSN in the window, an
//! rkey, the CM's communication IDs), so none of these may be guessable from an earlier one or
//! from the clock. Linux draws the same values from `get_random_bytes`; softroce asks the kernel
//! too, through getrandom(2), and falls back to `/dev/urandom` where that system call is missing
//! (kernels before 3.17, seccomp filters that refuse it).
//!
//! The draws cannot fail for a caller: a process that can open neither source (no getrandom(2)
//! and no `/dev`) gets bytes from a keyed mix of the clock, the process ID, a counter and an
//! address, and [`os_source_failed`] says so. Such values are unique but only as secret as the
//! clock; the fallback exists so that a library inside someone else's process never panics or
//! refuses to connect for it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static FAILED: AtomicBool = AtomicBool::new(false);
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Fills `buf` with bytes from the kernel's random generator.
pub fn fill(buf: &mut [u8]) {
    if getrandom(buf).is_ok() || urandom(buf).is_ok() {
        return;
    }
    FAILED.store(true, Ordering::Relaxed);
    fallback(buf);
}

/// A random `u8`.
pub fn u8() -> u8 {
    let mut b = [0u8; 1];
    fill(&mut b);
    b[0]
}

/// A random `u32`.
pub fn u32() -> u32 {
    let mut b = [0u8; 4];
    fill(&mut b);
    u32::from_ne_bytes(b)
}

/// A random `u64`.
pub fn u64() -> u64 {
    let mut b = [0u8; 8];
    fill(&mut b);
    u64::from_ne_bytes(b)
}

/// Whether a draw found no operating-system source and used the clock-keyed fallback.
pub fn os_source_failed() -> bool {
    FAILED.load(Ordering::Relaxed)
}

fn getrandom(buf: &mut [u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: `rest` is a live, writable slice of `rest.len()` bytes that nothing else
        // aliases during the call; getrandom(2) writes at most that many bytes into it and
        // keeps no pointer after returning. Flags 0: the urandom pool, blocking only until it
        // is first initialised at boot.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        done += n as usize;
    }
    Ok(())
}

fn urandom(buf: &mut [u8]) -> std::io::Result<()> {
    use std::io::Read;
    std::fs::File::open("/dev/urandom")?.read_exact(buf)
}

/// The last resort: SplitMix64 over the clock, the process ID, a per-process counter and an
/// address that ASLR moves, so that values still differ between draws and processes.
fn fallback(buf: &mut [u8]) {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let here = &COUNTER as *const AtomicU64 as u64;
    for chunk in buf.chunks_mut(8) {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let mut x = nanos ^ (u64::from(std::process::id()) << 32) ^ here.rotate_left(17);
        x = x.wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^= x >> 31;
        chunk.copy_from_slice(&x.to_ne_bytes()[..chunk.len()]);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Whether `xs[i + 1] = a * xs[i] + c` holds for every `i` modulo 2^m, for the `a` and `c`
    /// that the first values determine, where 2^m is the largest modulus they determine `a`
    /// in (`bits` less the trailing zero bits of the first nonzero difference). An LCG, a
    /// counter (a = 1) and any fixed stride satisfy it, so their low bits at least are
    /// predictable from the previous value; independent draws do not.
    pub(crate) fn affine(xs: &[u64], bits: u32) -> bool {
        let Some(s) = xs.windows(2).position(|w| w[0] != w[1]) else {
            return true;
        };
        if xs.len() < s + 4 {
            return false;
        }
        let full = if bits == 64 {
            u64::MAX
        } else {
            (1 << bits) - 1
        };
        let (x0, x1, x2) = (xs[s], xs[s + 1], xs[s + 2]);
        let d1 = x1.wrapping_sub(x0) & full;
        let d2 = x2.wrapping_sub(x1) & full;
        let k = d1.trailing_zeros();
        if d1 == 0 || k >= bits {
            return false;
        }
        // a * d1 = d2 (mod 2^bits) needs 2^k | d2; then a = (d2 / 2^k) / (d1 / 2^k) modulo
        // 2^(bits - k).
        if d2 & ((1 << k) - 1) != 0 {
            return false;
        }
        let mask = full >> k;
        let odd = d1 >> k;
        // The inverse of `odd` modulo 2^64 by Newton's iteration (each step doubles the bits).
        let mut inv: u64 = odd;
        for _ in 0..6 {
            inv = inv.wrapping_mul(2u64.wrapping_sub(odd.wrapping_mul(inv)));
        }
        let a = (d2 >> k).wrapping_mul(inv) & mask;
        let c = x1.wrapping_sub(a.wrapping_mul(x0)) & mask;
        xs[s..]
            .windows(2)
            .all(|w| a.wrapping_mul(w[0]).wrapping_add(c) & mask == w[1] & mask)
    }

    #[test]
    fn the_affine_check_finds_lcgs_counters_and_strides() {
        let mut x = 0x1234_5678u64;
        let lcg: Vec<u64> = (0..100)
            .map(|_| {
                x = (x.wrapping_mul(0x9E37_79B1).wrapping_add(0x7F4A_7C15)) & 0xffff_ffff;
                x
            })
            .collect();
        assert!(affine(&lcg, 32));
        let counter: Vec<u64> = (0..100).map(|i| (0x101 + i) & 0xff).collect();
        assert!(affine(&counter, 8));
        let stride: Vec<u64> = (0..100u64).map(|i| (i * 0x1000 + 7) & 0xff_ffff).collect();
        assert!(affine(&stride, 24));
        let draws: Vec<u64> = (0..100).map(|_| u64::from(u32())).collect();
        assert!(!affine(&draws, 32));
    }

    #[test]
    fn draws_come_from_the_os_and_do_not_repeat() {
        let n = 100_000;
        let xs: HashSet<u64> = (0..n).map(|_| u64()).collect();
        // 64-bit draws: a repeat in 10^5 has probability about 3e-10.
        assert_eq!(xs.len(), n);
        assert!(
            !os_source_failed(),
            "getrandom(2) or /dev/urandom must be there"
        );
    }

    #[test]
    fn the_fallback_differs_between_draws() {
        let mut a = [0u8; 12];
        let mut b = [0u8; 12];
        fallback(&mut a);
        fallback(&mut b);
        assert_ne!(a, b);
    }
}
