//! Memory that belongs to the application, not to softroce: the buffers a C program hands to
//! `ibv_reg_mr` through the libibverbs shim. The engine reads and writes them as a NIC does by
//! DMA, following the memory model of [`crate::memory`] (atomic word accesses only, as for
//! owned memory; the copy loops are [`super::region`]'s).
//!
//! This is the only module of the crate that dereferences pointers it did not allocate.
//!
//! # Lifetime
//!
//! A [`ForeignBytes`] is built by the unsafe [`ForeignBytes::new`], whose caller promises that
//! `ptr .. ptr + len` is mapped, readable and writable until [`ForeignBytes::revoke`] returns
//! (the shim's `ibv_dereg_mr` calls it before it returns to the application, which may then
//! free the memory). Every access goes through [`ForeignBytes::with_words`], which counts
//! itself in `active` *before* it checks `revoked`; `revoke` sets `revoked` *before* it waits
//! for `active` to drop to zero (both `SeqCst`). So either an access sees `revoked` and
//! touches nothing, or `revoke` sees the access counted and waits for it: no access can start
//! after `revoke` returns, and none is still running then. Bounds are checked by the caller
//! ([`super::SharedBytes`]) against `len` before any access.
//!
//! # The words
//!
//! The bytes are reached as the `AtomicU64`s of the aligned 8-byte words that cover
//! `ptr .. ptr + len`. The first and last of them may hold up to 7 bytes of the application's
//! beyond the region: an aligned word never straddles a page, so those bytes are as mapped,
//! readable and writable as the region's own byte in the same word. The engine reads them
//! (and discards them) and writes them back unchanged inside a compare-exchange, which never
//! loses a store the application makes to them meanwhile.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use super::region::AccessError;

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

// SAFETY: the pointer is only dereferenced inside `with_words`, under the access guard, where
// the constructor's contract makes it valid for any thread; the struct holds no thread-bound
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
    /// `ptr .. ptr + len` must stay mapped, readable and writable (and not be unmapped, freed or
    /// reused for something else) until [`revoke`](Self::revoke) has returned or the value is
    /// dropped. `ptr` may be null only when `len` is 0. Concurrent accesses by the
    /// application follow the rules of [`crate::memory`] (the verbs contract).
    pub unsafe fn new(ptr: *mut u8, len: usize) -> ForeignBytes {
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

    /// Runs `f` on the aligned words that cover the region and the index in them of the
    /// region's first byte, unless the application has taken the memory back. The slice lives
    /// only for the call, inside the access guard.
    pub(super) fn with_words<R>(
        &self,
        f: impl FnOnce(&[AtomicU64], usize) -> R,
    ) -> Result<R, AccessError> {
        let _g = self.enter()?;
        if self.len == 0 {
            return Ok(f(&[], 0));
        }
        let first = self.ptr as usize % 8;
        let n = (first + self.len).div_ceil(8);
        // SAFETY: `ptr - first .. ptr - first + 8n` is the aligned words covering the region,
        // which are mapped, readable and writable while the guard holds off `revoke` (module
        // doc, Lifetime and The words); `AtomicU64` has the size of `u64` and its alignment,
        // which the start has. A shared slice of atomics lets the application keep writing the
        // memory (AtomicU64 is an UnsafeCell); that every access the engine makes through it is
        // atomic is the memory model of `crate::memory`. The slice does not outlive the guard.
        let words = unsafe {
            std::slice::from_raw_parts(self.ptr.wrapping_sub(first) as *const AtomicU64, n)
        };
        Ok(f(words, first))
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
