//! Memory that belongs to the application, not to softroce: the buffers a C program hands to
//! `ibv_reg_mr` through the libibverbs shim. The engine reads and writes them as a NIC does by
//! DMA, through [`super::guard`]: byte-wise copies and single-instruction 8-byte atomics that
//! return an error, never a SIGSEGV, when the application has unmapped or protected the memory
//! since it registered it.
//!
//! This is the only module of the crate that hands out pointers it did not allocate.
//!
//! # Lifetime
//!
//! A [`ForeignBytes`] is built by the unsafe [`ForeignBytes::new`], whose caller promises that
//! `ptr .. ptr + len` is the application's memory until [`ForeignBytes::revoke`] returns (the
//! shim's `ibv_dereg_mr` calls it before it returns to the application, which may then reuse
//! the addresses for anything, Rust objects of the shim included). The memory may stop being
//! mapped, or readable or writable, before that: an access then fails with
//! [`AccessError::Fault`], as on an on-demand-paging device. Every access goes through
//! `ForeignBytes::enter`, which counts itself in `active` *before* it checks `revoked`;
//! `revoke` sets `revoked` *before* it waits for `active` to drop to zero (both `SeqCst`). So
//! either an access sees `revoked` and touches nothing, or `revoke` sees the access counted and
//! waits for it: no access can start after `revoke` returns, and none is still running then.
//! Bounds are checked by the caller ([`super::SharedBytes`]) against `len` before any access.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::error::AccessError;
use super::guard;

/// Application memory registered with the engine (see the module's safety argument).
#[derive(Debug)]
pub struct ForeignBytes {
    ptr: *mut u8,
    len: usize,
    /// Accesses in progress.
    active: AtomicUsize,
    /// Set once the application takes the memory back.
    revoked: AtomicBool,
}

// SAFETY: the pointer is only accessed through `guard` (or lent out by `pin`), under the access
// guard, where the constructor's contract makes it the application's for any thread; the struct holds no thread-bound
// state.
unsafe impl Send for ForeignBytes {}
// SAFETY: as for Send; shared access is what the `active`/`revoked` protocol coordinates.
unsafe impl Sync for ForeignBytes {}

/// An access in progress; keeps `revoke` waiting while it lives.
#[derive(Debug)]
pub(super) struct Guard<'a>(&'a AtomicUsize);

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl ForeignBytes {
    /// Wraps `len` bytes at `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr .. ptr + len` must stay the application's memory (not freed and reused for Rust
    /// objects of this process) until [`revoke`](Self::revoke) has returned or the value is
    /// dropped; it may be unmapped or protected meanwhile (accesses then fail). `ptr` may be
    /// null only when `len` is 0. Concurrent accesses by the application follow the rules of
    /// [`crate::memory`] (the verbs contract).
    pub unsafe fn new(ptr: *mut u8, len: usize) -> ForeignBytes {
        // Before the first access: a fault there must find the handler (guard module doc).
        guard::install();
        ForeignBytes {
            ptr,
            len,
            active: AtomicUsize::new(0),
            revoked: AtomicBool::new(false),
        }
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The application's address of the first byte.
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// Whether the application has taken the memory back.
    pub fn is_revoked(&self) -> bool {
        self.revoked.load(Ordering::SeqCst)
    }

    /// Stops all future accesses and waits for those in progress to finish. After it returns
    /// the memory is never touched again. Each access is one bounded copy, so the wait is short.
    pub fn revoke(&self) {
        self.revoked.store(true, Ordering::SeqCst);
        while self.active.load(Ordering::SeqCst) != 0 {
            std::hint::spin_loop();
            std::thread::yield_now();
        }
    }

    fn enter(&self) -> Result<Guard<'_>, AccessError> {
        self.active.fetch_add(1, Ordering::SeqCst);
        let guard = Guard(&self.active);
        if self.revoked.load(Ordering::SeqCst) {
            return Err(AccessError::Revoked);
        }
        Ok(guard)
    }

    /// Holds off `revoke` while the guard lives and gives the address of the region's first
    /// byte, for a system call that reads the region in place ([`super::SharedBytes::pin`]).
    pub(super) fn pin(&self) -> Result<(Guard<'_>, *const u8), AccessError> {
        let g = self.enter()?;
        Ok((g, self.ptr.cast_const()))
    }

    /// Copies bytes `offset .. offset + dst.len()` (within the region: checked by the caller)
    /// into `dst`.
    pub(super) fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), AccessError> {
        let _g = self.enter()?;
        debug_assert!(offset + dst.len() <= self.len);
        // SAFETY: bytes of the region (bounds checked by the caller), the application's while
        // the guard holds off `revoke` (module doc, Lifetime); a page gone is a Fault.
        unsafe { guard::copy_out(self.ptr.wrapping_add(offset), dst) }
            .map_err(|_| AccessError::Fault)
    }

    /// Copies `src` into the region from `offset` (within the region: checked by the caller).
    pub(super) fn write(&self, offset: usize, src: &[u8]) -> Result<(), AccessError> {
        let _g = self.enter()?;
        debug_assert!(offset + src.len() <= self.len);
        // SAFETY: as in `read`, for writing.
        unsafe { guard::copy_in(self.ptr.wrapping_add(offset), src) }
            .map_err(|_| AccessError::Fault)
    }

    /// Faults in the pages of bytes `offset .. offset + len` (within the region: checked by
    /// the caller), for writing if `write`, as `ibv_advise_mr`'s prefetch asks:
    /// `MADV_POPULATE_READ`/`_WRITE` (Linux 5.14), which fails where a page cannot be had
    /// (unmapped, or protected against the access). On an older kernel, which does not know
    /// the advice, the mappings are checked instead (nothing is faulted in then).
    pub(super) fn prefetch(
        &self,
        offset: usize,
        len: usize,
        write: bool,
    ) -> Result<(), AccessError> {
        /// `MADV_POPULATE_READ` and `MADV_POPULATE_WRITE` (linux/mman.h), absent from libc.
        const MADV_POPULATE_READ: libc::c_int = 22;
        const MADV_POPULATE_WRITE: libc::c_int = 23;
        let _g = self.enter()?;
        if len == 0 {
            return Ok(());
        }
        let page = super::mapping::page_size();
        let first = (self.ptr as usize).wrapping_add(offset);
        let start = first & !(page - 1);
        let end = first
            .checked_add(len)
            .and_then(|e| e.checked_next_multiple_of(page))
            .ok_or(AccessError::Fault)?;
        let advice = if write {
            MADV_POPULATE_WRITE
        } else {
            MADV_POPULATE_READ
        };
        // SAFETY: madvise touches no memory of ours: it asks the kernel to fault in the
        // application's pages of the range (whole pages around it), as its own access would;
        // an unmapped or protected page makes it fail, not crash.
        let r = unsafe { libc::madvise(start as *mut libc::c_void, end - start, advice) };
        if r == 0 {
            return Ok(());
        }
        if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
            return super::mapping::check(first, len, write).map_err(|_| AccessError::Fault);
        }
        Err(AccessError::Fault)
    }

    /// Runs `f` on the address of the region's 8 bytes at `offset` (within it: checked by the
    /// caller), which must be 8-byte aligned, for one of [`guard`]'s atomics.
    pub(super) fn with_word<R>(
        &self,
        offset: usize,
        f: impl FnOnce(*mut u64) -> Result<R, guard::Fault>,
    ) -> Result<R, AccessError> {
        let _g = self.enter()?;
        debug_assert!(offset + 8 <= self.len);
        let p = self.ptr.wrapping_add(offset);
        if p as usize % 8 != 0 {
            return Err(AccessError::Misaligned {
                offset: offset as u64,
            });
        }
        f(p.cast()).map_err(|_| AccessError::Fault)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::SharedBytes;

    #[test]
    fn reads_and_writes_reach_the_application_buffer() {
        let mut buf = vec![0u64; 8]; // 64 aligned bytes
        let ptr = buf.as_mut_ptr() as *mut u8;
        // SAFETY: `buf` outlives `m` (dropped at the end of the test, after `m`).
        let m = unsafe { SharedBytes::foreign(ptr, 61) };
        assert_eq!(m.len(), 61);
        assert_eq!(m.addr(), ptr as u64);
        m.write(3, &[1, 2, 3, 4, 5]).unwrap();
        assert_eq!(m.to_vec(2, 7).unwrap(), vec![0, 1, 2, 3, 4, 5, 0]);
        assert!(m.write(60, &[1, 2]).is_err());
        assert_eq!(m.fetch_add(8, 7).unwrap(), 0);
        assert_eq!(m.compare_swap(8, 7, 9).unwrap(), 7);
        assert_eq!(m.load_u64(8).unwrap(), 9);
        assert_eq!(
            m.fetch_add(4, 1),
            Err(AccessError::Misaligned { offset: 4 })
        );
        m.revoke();
        assert_eq!(m.write(0, &[1]), Err(AccessError::Revoked));
        let mut b = [0u8; 1];
        assert_eq!(m.read(0, &mut b), Err(AccessError::Revoked));
        assert_eq!(m.fetch_add(8, 1), Err(AccessError::Revoked));
        drop(m);
        // The writes landed in the Vec itself.
        assert_eq!(buf[1], 9);
        assert_eq!(buf[0].to_ne_bytes()[3..8], [1, 2, 3, 4, 5]);
    }

    #[test]
    fn prefetch_faults_in_mapped_pages_and_fails_on_missing_or_protected_ones() {
        let page = crate::memory::mapping::page_size();
        // SAFETY: a fresh anonymous mapping of three pages, ours until the munmap below.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                3 * page,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: the mapping outlives `m` (unmapped after the drop below).
        let m = unsafe { SharedBytes::foreign(p.cast(), 3 * page) };
        assert_eq!(
            m.prefetch(0, 8, false),
            Err(AccessError::Fault),
            "PROT_NONE"
        );
        // SAFETY: changes the protection of our own mapping only.
        assert_eq!(unsafe { libc::mprotect(p, page, libc::PROT_READ) }, 0);
        assert_eq!(m.prefetch(0, page as u64, false), Ok(()));
        assert_eq!(m.prefetch(0, 8, true), Err(AccessError::Fault), "read-only");
        assert_eq!(
            m.prefetch(0, page as u64 + 1, false),
            Err(AccessError::Fault)
        );
        assert!(
            m.prefetch(0, 3 * page as u64 + 1, false).is_err(),
            "outside"
        );
        // SAFETY: as above.
        assert_eq!(
            unsafe { libc::mprotect(p, 3 * page, libc::PROT_READ | libc::PROT_WRITE) },
            0
        );
        assert_eq!(m.prefetch(page as u64 - 1, 2 * page as u64, true), Ok(()));
        m.revoke();
        assert_eq!(m.prefetch(0, 8, false), Err(AccessError::Revoked));
        drop(m);
        // SAFETY: our mapping, no longer referenced.
        assert_eq!(unsafe { libc::munmap(p, 3 * page) }, 0);
    }

    #[test]
    fn atomics_check_the_address_alignment_not_the_offset() {
        let mut buf = vec![0u64; 4];
        // SAFETY: `buf` outlives `m`.
        let m = unsafe { SharedBytes::foreign((buf.as_mut_ptr() as *mut u8).add(4), 20) };
        // offset 4 is address 8-aligned.
        assert_eq!(m.fetch_add(4, 5).unwrap(), 0);
        assert!(m.fetch_add(0, 5).is_err());
        drop(m);
        assert_eq!(buf[1], 5);
    }

    #[test]
    fn bytes_beyond_an_unaligned_region_in_its_edge_words_are_untouched() {
        // Bytes 3..13 of two words are the region; 0..3 and 13..16 are the application's.
        let mut buf = [u64::from_ne_bytes([0x11; 8]), u64::from_ne_bytes([0x22; 8])];
        // SAFETY: `buf` outlives `m` (dropped before `buf` is read).
        let m = unsafe { SharedBytes::foreign((buf.as_mut_ptr() as *mut u8).add(3), 10) };
        m.write(0, &[0xEE; 10]).unwrap();
        assert_eq!(m.to_vec(0, 10).unwrap(), vec![0xEE; 10]);
        assert!(m.write(1, &[0; 10]).is_err(), "past the end");
        drop(m);
        let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(&bytes[..3], &[0x11; 3]);
        assert_eq!(&bytes[3..13], &[0xEE; 10]);
        assert_eq!(&bytes[13..], &[0x22; 3]);
    }

    #[test]
    fn revoke_waits_for_concurrent_accesses_and_stops_new_ones() {
        use std::sync::atomic::AtomicU32;
        use std::time::{Duration, Instant};
        let mut buf = vec![0u64; 512];
        let ptr = buf.as_mut_ptr() as usize;
        // SAFETY: `buf` lives until after the writer thread has been joined, and the test reads
        // it only after `revoke` has returned.
        let m = std::sync::Arc::new(unsafe { SharedBytes::foreign(ptr as *mut u8, 4096) });
        let m2 = std::sync::Arc::clone(&m);
        // Writes completed by the writer, read while it runs.
        let done = std::sync::Arc::new(AtomicU32::new(0));
        let done2 = std::sync::Arc::clone(&done);
        let writer = std::thread::spawn(move || {
            let data = [0xAB; 4096];
            let mut n = 0u32;
            while n < 1_000_000 {
                match m2.write(0, &data) {
                    Ok(()) => n += 1,
                    Err(e) => return (n, Some(e)),
                }
                done2.store(n, Ordering::SeqCst);
            }
            (n, None)
        });
        // Revoke only once the writer is demonstrably writing (bounded wait, no fixed sleep).
        let deadline = Instant::now() + Duration::from_secs(10);
        while done.load(Ordering::SeqCst) < 10 && Instant::now() < deadline {
            std::thread::yield_now();
        }
        let before = done.load(Ordering::SeqCst);
        assert!(before >= 10, "the writer never got going");
        m.revoke();
        // After revoke returns nothing writes: clear and check it stays clear.
        buf.iter_mut().for_each(|w| *w = 0);
        let (n, err) = writer.join().unwrap();
        assert_eq!(
            err,
            Some(AccessError::Revoked),
            "the writer stopped because of the revocation, not its bound"
        );
        assert!(
            n >= before,
            "{n} writes, {before} seen before the revocation"
        );
        assert!(buf.iter().all(|&w| w == 0), "a write landed after revoke");
    }
}
