//! Byte storage that the transport and the application may access at the same time without
//! undefined behaviour, following the memory model of [`crate::memory`]: every access is
//! atomic.
//!
//! The storage is either words this module owns (`Box<[AtomicU64]>`), copied with atomic word
//! loads and stores (partial words at the edges of a copy merged with a compare-exchange loop,
//! so no access ever has a mixed size; RDMA atomics are real `AtomicU64` operations), or the
//! application's memory behind the libibverbs shim ([`super::foreign`]), reached through
//! [`super::guard`]'s copies and atomics, which fail instead of faulting when the application
//! has unmapped or protected it. Values are in host byte order, as rxe executes them.
//!
//! Owned copies move 8 bytes per operation; that is the price of soundness compared with
//! `memcpy`, measured in BENCHMARKS.md.

use std::sync::atomic::{AtomicU64, Ordering};

pub use super::error::AccessError;
use super::foreign::ForeignBytes;

const WORD: usize = 8;

/// A fixed-size, zero-initialised byte buffer safe to share between threads.
#[derive(Debug)]
pub struct SharedBytes {
    /// Owned words; empty for application memory.
    words: Box<[AtomicU64]>,
    len: usize,
    /// Application memory registered through the libibverbs shim, in place of `words`.
    foreign: Option<ForeignBytes>,
}

/// `n` words of value 0, from the allocator's zeroed memory; `None` if the allocator has no
/// such block (or `n` words exceed the address space).
fn zeroed_words(n: usize) -> Option<Box<[AtomicU64]>> {
    if n == 0 {
        return Some(Box::new([]));
    }
    let layout = std::alloc::Layout::array::<AtomicU64>(n).ok()?;
    // SAFETY: `layout` has a non-zero size (n > 0). `alloc_zeroed` returns memory of that
    // layout or null (checked). All-zero bytes are a valid `AtomicU64` holding 0 (it has the
    // bit validity of u64), so the n elements are initialised. The pointer comes from the
    // global allocator with `Layout::array::<AtomicU64>(n)`, which is what `Box<[AtomicU64]>`
    // frees it with.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout).cast::<AtomicU64>();
        (!p.is_null()).then(|| Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n)))
    }
}

impl SharedBytes {
    /// Allocates `len` zero bytes. The pages come zeroed from the allocator (for a large
    /// region, fresh anonymous memory) and are touched only when used: registering a large
    /// region costs neither its time to write nor its resident memory up front, as with
    /// ibv_reg_mr of malloc'd memory.
    ///
    /// Aborts as a `Vec` does if the memory is not there; [`try_new`](Self::try_new) says so
    /// instead.
    pub fn new(len: usize) -> SharedBytes {
        SharedBytes::try_new(len).unwrap_or_else(|| {
            std::alloc::handle_alloc_error(
                std::alloc::Layout::from_size_align(len.max(1), WORD)
                    .unwrap_or(std::alloc::Layout::new::<u64>()),
            )
        })
    }

    /// [`new`](Self::new), or `None` if the allocator cannot give `len` bytes.
    pub fn try_new(len: usize) -> Option<SharedBytes> {
        Some(SharedBytes {
            words: zeroed_words(len.div_ceil(WORD))?,
            len,
            foreign: None,
        })
    }

    /// Wraps `len` bytes of application memory at `ptr` (see [`super::foreign`]).
    ///
    /// # Safety
    ///
    /// As [`ForeignBytes::new`]: the memory stays valid until [`revoke`](Self::revoke) has
    /// returned or the value is dropped.
    pub unsafe fn foreign(ptr: *mut u8, len: usize) -> SharedBytes {
        SharedBytes {
            words: Box::new([]),
            len,
            // SAFETY: the caller's contract is ForeignBytes::new's.
            foreign: Some(unsafe { ForeignBytes::new(ptr, len) }),
        }
    }

    /// For application memory: stops all accesses and waits for those in progress (see
    /// [`ForeignBytes::revoke`]). No effect on owned memory.
    pub fn revoke(&self) {
        if let Some(f) = &self.foreign {
            f.revoke();
        }
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The address of the first byte in this process: unique while the buffer lives and
    /// 8-byte aligned, so it serves as the virtual address of a memory region, as a real
    /// user-space buffer address does for libibverbs.
    pub fn addr(&self) -> u64 {
        if let Some(f) = &self.foreign {
            return f.addr();
        }
        self.words.as_ptr() as u64
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Checks that `offset .. offset + len` lies within the buffer, without overflow.
    pub fn check_range(&self, offset: u64, len: u64) -> Result<(), AccessError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len as u64 => Ok(()),
            _ => Err(AccessError::OutOfBounds {
                offset,
                len,
                size: self.len,
            }),
        }
    }

    /// Copies `dst.len()` bytes starting at `offset` into `dst`.
    pub fn read(&self, offset: u64, dst: &mut [u8]) -> Result<(), AccessError> {
        self.check_range(offset, dst.len() as u64)?;
        match &self.foreign {
            Some(f) => f.read(offset as usize, dst),
            None => {
                copy_out(&self.words, offset as usize, dst);
                Ok(())
            }
        }
    }

    /// Copies `src` into the buffer starting at `offset`.
    pub fn write(&self, offset: u64, src: &[u8]) -> Result<(), AccessError> {
        self.check_range(offset, src.len() as u64)?;
        match &self.foreign {
            Some(f) => f.write(offset as usize, src),
            None => {
                copy_in(&self.words, offset as usize, src);
                Ok(())
            }
        }
    }

    /// The CRC-32 of the bytes so far (`crc`, crc32fast's value; 0 for none) extended by bytes
    /// `offset .. offset + len`, read once, word by word ([`super::crc`]): how the transmit
    /// path computes an ICRC over a payload that the kernel then copies out of the region.
    pub fn crc(&self, offset: u64, len: usize, crc: u32) -> Result<u32, AccessError> {
        self.check_range(offset, len as u64)?;
        if let Some(f) = &self.foreign {
            // The application's bytes through the guarded copy, a stack chunk at a time (the
            // gather path only, off by default: the extra copy is its cost).
            let mut chunk = [0u8; 1024];
            let mut crc = crc;
            let mut done = 0;
            while done < len {
                let n = (len - done).min(chunk.len());
                f.read(offset as usize + done, &mut chunk[..n])?;
                crc = update_bytes(crc, &chunk[..n]);
                done += n;
            }
            return Ok(crc);
        }
        let words = &self.words;
        let mut pos = offset as usize;
        let end = pos + len;
        let mut crc = crc;
        let mut edge = [0u8; WORD];
        // A partial first word, then whole words, then a partial last one.
        let head = (WORD - pos % WORD) % WORD;
        if head > 0 {
            let n = head.min(len);
            copy_out(words, pos, &mut edge[..n]);
            crc = update_bytes(crc, &edge[..n]);
            pos += n;
        }
        let whole = (end - pos) / WORD;
        crc = super::crc::update_words(crc, &words[pos / WORD..pos / WORD + whole]);
        pos += whole * WORD;
        if pos < end {
            copy_out(words, pos, &mut edge[..end - pos]);
            crc = update_bytes(crc, &edge[..end - pos]);
        }
        Ok(crc)
    }

    /// Holds the bytes in place for a system call that reads them where they are (the
    /// transmit path's gather, [`Pinned::ptr`]): application memory cannot be taken back
    /// while the value lives, so keep it only across the call. The memory model in
    /// [`crate::memory`] argues why the kernel's plain reads are sound.
    pub fn pin(&self) -> Result<Pinned<'_>, AccessError> {
        match &self.foreign {
            Some(f) => {
                let (guard, base) = f.pin()?;
                Ok(Pinned {
                    base,
                    len: self.len,
                    _guard: Some(guard),
                })
            }
            None => Ok(Pinned {
                base: self.words.as_ptr().cast(),
                len: self.len,
                _guard: None,
            }),
        }
    }

    /// Faults in bytes `offset .. offset + len` of application memory, for writing if
    /// `write` (`ibv_advise_mr`'s prefetch); owned memory is always there.
    pub fn prefetch(&self, offset: u64, len: u64, write: bool) -> Result<(), AccessError> {
        self.check_range(offset, len)?;
        match &self.foreign {
            Some(f) => f.prefetch(offset as usize, len as usize, write),
            None => Ok(()),
        }
    }

    /// Sets `len` bytes from `offset` to `value`.
    pub fn fill(&self, offset: u64, len: u64, value: u8) -> Result<(), AccessError> {
        self.check_range(offset, len)?;
        let chunk = [value; 256];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(chunk.len() as u64) as usize;
            self.write(offset + done, &chunk[..n])?;
            done += n as u64;
        }
        Ok(())
    }

    /// Runs `owned` on the owned aligned word at `offset`, or `foreign` on the address of the
    /// application's, for an 8-byte atomic. The byte's address must be 8-byte aligned: for
    /// owned memory that is the offset, for application memory the application's address.
    fn with_word<R>(
        &self,
        offset: u64,
        owned: impl FnOnce(&AtomicU64) -> R,
        foreign: impl FnOnce(*mut u64) -> Result<R, super::guard::Fault>,
    ) -> Result<R, AccessError> {
        self.check_range(offset, WORD as u64)?;
        if let Some(f) = &self.foreign {
            return f.with_word(offset as usize, foreign);
        }
        if offset % WORD as u64 != 0 {
            return Err(AccessError::Misaligned { offset });
        }
        Ok(owned(&self.words[offset as usize / WORD]))
    }

    /// Atomically: if the 8 bytes at `offset` equal `compare`, replace them with `swap`.
    /// Returns the original value (IBTA CmpSwap).
    pub fn compare_swap(&self, offset: u64, compare: u64, swap: u64) -> Result<u64, AccessError> {
        self.with_word(
            offset,
            |w| match w.compare_exchange(compare, swap, Ordering::AcqRel, Ordering::Acquire) {
                Ok(v) | Err(v) => v,
            },
            // SAFETY: the region's aligned word, the application's while with_word's guard
            // holds off revoke.
            |p| unsafe { super::guard::compare_swap(p, compare, swap) },
        )
    }

    /// Atomically adds `add` (wrapping) to the 8 bytes at `offset`; returns the original value
    /// (IBTA FetchAdd).
    pub fn fetch_add(&self, offset: u64, add: u64) -> Result<u64, AccessError> {
        self.with_word(
            offset,
            |w| w.fetch_add(add, Ordering::AcqRel),
            // SAFETY: as in compare_swap.
            |p| unsafe { super::guard::fetch_add(p, add) },
        )
    }

    /// Atomically loads the 8 bytes at `offset` (aligned).
    pub fn load_u64(&self, offset: u64) -> Result<u64, AccessError> {
        self.with_word(
            offset,
            |w| w.load(Ordering::Acquire),
            // SAFETY: as in compare_swap.
            |p| unsafe { super::guard::load(p) },
        )
    }

    /// Atomically stores the 8 bytes at `offset` (aligned; IBTA 1.5 ATOMIC WRITE).
    pub fn store_u64(&self, offset: u64, value: u64) -> Result<(), AccessError> {
        self.with_word(
            offset,
            |w| w.store(value, Ordering::Release),
            // SAFETY: as in compare_swap.
            |p| unsafe { super::guard::store(p, value) },
        )
    }

    /// Copies `len` bytes at `offset` into a new vector.
    pub fn to_vec(&self, offset: u64, len: usize) -> Result<Vec<u8>, AccessError> {
        let mut v = vec![0u8; len];
        self.read(offset, &mut v)?;
        Ok(v)
    }
}

/// A buffer held in place by [`SharedBytes::pin`].
#[derive(Debug)]
pub struct Pinned<'a> {
    /// Byte 0.
    base: *const u8,
    len: usize,
    /// For application memory: keeps `revoke` waiting.
    _guard: Option<super::foreign::Guard<'a>>,
}

impl Pinned<'_> {
    /// The address of byte `offset`, if `offset .. offset + len` lies within the buffer: valid
    /// for reads of those bytes while `self` lives (by the kernel: see [`crate::memory`]).
    pub fn ptr(&self, offset: u64, len: usize) -> Option<*const u8> {
        let end = offset.checked_add(len as u64)?;
        (end <= self.len as u64).then(|| self.base.wrapping_add(offset as usize))
    }
}

/// crc32fast's CRC of `crc` extended by `bytes`.
fn update_bytes(crc: u32, bytes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(crc);
    h.update(bytes);
    h.finalize()
}

/// Copies bytes `pos .. pos + dst.len()` of `words` (byte `i` is byte `i % 8` of word `i / 8`
/// in memory order) into `dst`, one relaxed atomic load per word.
fn copy_out(words: &[AtomicU64], mut pos: usize, dst: &mut [u8]) {
    let mut out = 0;
    while out < dst.len() {
        let w = pos / WORD;
        let in_word = pos % WORD;
        if in_word == 0 && dst.len() - out >= WORD {
            // The aligned middle in one loop without per-word bounds arithmetic: the
            // per-packet copy of a large message is this loop.
            let whole = (dst.len() - out) / WORD;
            for (chunk, word) in dst[out..out + whole * WORD]
                .chunks_exact_mut(WORD)
                .zip(&words[w..w + whole])
            {
                chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_ne_bytes());
            }
            out += whole * WORD;
            pos += whole * WORD;
            continue;
        }
        let take = (WORD - in_word).min(dst.len() - out);
        let bytes = words[w].load(Ordering::Relaxed).to_ne_bytes();
        dst[out..out + take].copy_from_slice(&bytes[in_word..in_word + take]);
        out += take;
        pos += take;
    }
}

/// Copies `src` into bytes `pos ..` of `words`: relaxed atomic stores of whole words, and a
/// compare-exchange merge for a partial word, whose other bytes another writer (or, for
/// application memory, the application beyond the region's edge) may be updating meanwhile.
fn copy_in(words: &[AtomicU64], mut pos: usize, src: &[u8]) {
    let mut inp = 0;
    while inp < src.len() {
        let w = pos / WORD;
        let in_word = pos % WORD;
        let take = (WORD - in_word).min(src.len() - inp);
        if in_word == 0 && src.len() - inp >= WORD {
            // The aligned middle in one loop (see `copy_out`).
            let whole = (src.len() - inp) / WORD;
            for (chunk, word) in src[inp..inp + whole * WORD]
                .chunks_exact(WORD)
                .zip(&words[w..w + whole])
            {
                let mut b = [0u8; WORD];
                b.copy_from_slice(chunk);
                word.store(u64::from_ne_bytes(b), Ordering::Relaxed);
            }
            inp += whole * WORD;
            pos += whole * WORD;
            continue;
        }
        let word = &words[w];
        if take == WORD {
            let mut b = [0u8; WORD];
            b.copy_from_slice(&src[inp..inp + WORD]);
            word.store(u64::from_ne_bytes(b), Ordering::Relaxed);
        } else {
            let _ = word.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                let mut b = old.to_ne_bytes();
                b[in_word..in_word + take].copy_from_slice(&src[inp..inp + take]);
                Some(u64::from_ne_bytes(b))
            });
        }
        inp += take;
        pos += take;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// This process's resident memory, from /proc/self/status.
    fn resident_bytes() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let kb = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap();
        kb * 1024
    }

    #[test]
    fn a_large_region_costs_memory_only_where_it_is_used() {
        let before = resident_bytes();
        let big = SharedBytes::new(1 << 30);
        let after = resident_bytes();
        // Other tests' threads allocate too: a quarter of the region is the margin.
        assert!(
            after.saturating_sub(before) < 256 << 20,
            "1 GiB region made {} bytes resident",
            after.saturating_sub(before)
        );
        // Still zero wherever it is read, and usable at its far end.
        assert_eq!(big.to_vec((1 << 30) - 16, 16).unwrap(), vec![0u8; 16]);
        big.write((1 << 30) - 8, &[7; 8]).unwrap();
        assert_eq!(big.to_vec((1 << 30) - 8, 8).unwrap(), vec![7u8; 8]);
    }

    #[test]
    fn a_region_beyond_the_address_space_is_refused_not_aborted() {
        assert!(SharedBytes::try_new(usize::MAX).is_none());
        assert!(SharedBytes::try_new(usize::MAX / 2).is_none());
        assert_eq!(SharedBytes::try_new(0).unwrap().len(), 0);
    }

    #[test]
    fn starts_zeroed_and_round_trips_at_every_alignment() {
        let m = SharedBytes::new(67);
        assert_eq!(m.to_vec(0, 67).unwrap(), vec![0; 67]);
        for start in 0..16u64 {
            for len in 0..40usize {
                let data: Vec<u8> = (0..len)
                    .map(|i| (i as u8) ^ (start as u8 * 17) ^ 0x5A)
                    .collect();
                m.write(start, &data).unwrap();
                assert_eq!(
                    m.to_vec(start, len).unwrap(),
                    data,
                    "start {start} len {len}"
                );
            }
        }
    }

    #[test]
    fn crc_reads_the_bytes_it_covers_at_every_alignment() {
        let m = SharedBytes::new(700);
        let data: Vec<u8> = (0..700u32).map(|i| (i * 31 + 5) as u8).collect();
        m.write(0, &data).unwrap();
        for start in 0..17usize {
            for len in [0, 1, 7, 8, 9, 100, 127, 128, 129, 300, 683 - start] {
                let mut h = crc32fast::Hasher::new_with_initial(0x1234_5678);
                h.update(&data[start..start + len]);
                assert_eq!(
                    m.crc(start as u64, len, 0x1234_5678).unwrap(),
                    h.finalize(),
                    "start {start} len {len}"
                );
            }
        }
        assert!(m.crc(690, 11, 0).is_err(), "bounds are checked");
        let p = m.pin().unwrap();
        assert_eq!(
            p.ptr(8, 692),
            Some(m.addr() as *const u8).map(|b| b.wrapping_add(8))
        );
        assert_eq!(p.ptr(8, 693), None);
    }

    #[test]
    fn partial_writes_keep_neighbouring_bytes() {
        let m = SharedBytes::new(24);
        m.fill(0, 24, 0xEE).unwrap();
        m.write(3, &[1, 2, 3]).unwrap();
        m.write(10, &[9; 9]).unwrap();
        let v = m.to_vec(0, 24).unwrap();
        let mut want = vec![0xEE; 24];
        want[3..6].copy_from_slice(&[1, 2, 3]);
        want[10..19].fill(9);
        assert_eq!(v, want);
    }

    #[test]
    fn bounds_are_checked_without_overflow() {
        let m = SharedBytes::new(16);
        let mut b = [0u8; 4];
        assert!(m.read(12, &mut b).is_ok());
        assert_eq!(
            m.read(13, &mut b),
            Err(AccessError::OutOfBounds {
                offset: 13,
                len: 4,
                size: 16
            })
        );
        assert!(m.write(u64::MAX - 1, &[1, 2, 3]).is_err());
        assert!(m.check_range(u64::MAX, 1).is_err());
        assert!(m.check_range(16, 0).is_ok());
        assert!(m.check_range(17, 0).is_err());
        assert!(m.fill(8, 9, 0).is_err());
    }

    #[test]
    fn atomics_need_alignment_and_return_the_original() {
        let m = SharedBytes::new(32);
        assert_eq!(m.fetch_add(8, 5).unwrap(), 0);
        assert_eq!(m.fetch_add(8, u64::MAX).unwrap(), 5); // wraps to 4
        assert_eq!(m.load_u64(8).unwrap(), 4);
        assert_eq!(m.compare_swap(8, 3, 100).unwrap(), 4); // no swap
        assert_eq!(m.compare_swap(8, 4, 100).unwrap(), 4); // swap
        assert_eq!(m.load_u64(8).unwrap(), 100);
        assert_eq!(
            m.fetch_add(4, 1),
            Err(AccessError::Misaligned { offset: 4 })
        );
        assert!(m.fetch_add(32, 1).is_err());
        m.store_u64(24, 0x0102_0304_0506_0708).unwrap();
        let mut b = [0u8; 8];
        m.read(24, &mut b).unwrap();
        assert_eq!(u64::from_ne_bytes(b), 0x0102_0304_0506_0708);
    }

    #[test]
    fn concurrent_writers_of_adjacent_bytes_do_not_clobber_each_other() {
        // Two threads write interleaved single bytes of the same words; every byte must end
        // up as its writer left it (a plain read-modify-write of whole words would lose some).
        let m = Arc::new(SharedBytes::new(64));
        let threads: Vec<_> = (0..2u8)
            .map(|t| {
                let m = Arc::clone(&m);
                std::thread::spawn(move || {
                    for round in 0..2000u32 {
                        for i in (t as u64..64).step_by(2) {
                            m.write(i, &[(round as u8) ^ t]).unwrap();
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let v = m.to_vec(0, 64).unwrap();
        for (i, b) in v.iter().enumerate() {
            assert_eq!(*b, (1999u32 as u8) ^ (i as u8 % 2), "byte {i}");
        }
    }

    #[test]
    fn concurrent_fetch_add_is_exact() {
        let m = Arc::new(SharedBytes::new(8));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let m = Arc::clone(&m);
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        m.fetch_add(0, 1).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(m.load_u64(0).unwrap(), 40_000);
    }
}
