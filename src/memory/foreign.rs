//! Memory that belongs to the application, not to softroce: the buffers a C program hands to
//! `ibv_reg_mr` through the libibverbs shim. The engine reads and writes them through raw
//! pointers, as a NIC does by DMA.
//!
//! This is the only module of the crate that dereferences pointers it did not allocate.
//!
//! # Safety argument
//!
//! A [`ForeignBytes`] is built by the unsafe [`ForeignBytes::new`], whose caller promises that
//! `ptr .. ptr + len` is mapped, readable and writable until [`ForeignBytes::revoke`] returns
//! (the shim's `ibv_dereg_mr` calls it before it returns to the application, which may then
//! free the memory). Every access goes through [`ForeignBytes::enter`], which counts itself in
//! `active` *before* it checks `revoked`; `revoke` sets `revoked` *before* it waits for
//! `active` to drop to zero (both `SeqCst`). So either an access sees `revoked` and touches
//! nothing, or `revoke` sees the access counted and waits for it: no access can start after
//! `revoke` returns, and none is still running then. Bounds are checked by the caller
//! ([`super::SharedBytes`]) against `len` before any access.
//!
//! Concurrency with the application: the memory is outside Rust's abstract machine (the C
//! program allocated it and accesses it with its own, non-atomic loads and stores). The verbs
//! contract says who may touch which bytes when: the application must not write a buffer
//! posted for a send or a receive, or read a receive buffer, before its completion is polled;
//! a completion is pushed under the CQ lock after the copy, which orders the copy before the
//! application's poll. RDMA WRITE and READ into a region the application uses at the same time
//! give torn data on any RDMA device; here as there, that is the application's concern, and
//! the bytes are copied with plain `memcpy`, never read as Rust references. The 8-byte RDMA
//! atomics use `AtomicU64` on the aligned word, so they are atomic with respect to each other
//! and to the application's own atomic instructions on that word, as on an HCA.

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

// SAFETY: the pointer is only dereferenced inside `enter` guards whose validity the constructor's
// contract guarantees for any thread; the struct holds no thread-bound state.
unsafe impl Send for ForeignBytes {}
// SAFETY: as for Send; shared access is what the `active`/`revoked` protocol coordinates.
unsafe impl Sync for ForeignBytes {}

/// An access in progress; keeps `revoke` waiting while it lives.
struct Guard<'a>(&'a AtomicUsize);

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
    /// dropped. `ptr` may be null only when `len` is 0.
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

    /// Copies `dst.len()` bytes at `offset` (already bounds-checked by the caller) into `dst`.
    pub(super) fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), AccessError> {
        debug_assert!(offset + dst.len() <= self.len);
        let _g = self.enter()?;
        if dst.is_empty() {
            return Ok(());
        }
        // SAFETY: in bounds (checked by the caller), live (the guard; module doc), and `dst` is
        // Rust memory that cannot overlap the application's buffer.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(offset), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Copies `src` to `offset` (already bounds-checked by the caller).
    pub(super) fn write(&self, offset: usize, src: &[u8]) -> Result<(), AccessError> {
        debug_assert!(offset + src.len() <= self.len);
        let _g = self.enter()?;
        if src.is_empty() {
            return Ok(());
        }
        // SAFETY: as in `read`, with the roles of the two buffers swapped.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(offset), src.len()) };
        Ok(())
    }

    /// Runs `f` on the 8-byte word at `offset` (bounds-checked by the caller); the word's
    /// address must be 8-byte aligned.
    pub(super) fn with_word<R>(
        &self,
        offset: usize,
        f: impl FnOnce(&AtomicU64) -> R,
    ) -> Result<R, AccessError> {
        debug_assert!(offset + 8 <= self.len);
        let addr = self.ptr.wrapping_add(offset);
        if addr as usize % 8 != 0 {
            return Err(AccessError::Misaligned {
                offset: offset as u64,
            });
        }
        let _g = self.enter()?;
        // SAFETY: aligned (checked above), in bounds and live (guard); AtomicU64 has the size
        // and alignment of u64. The reference does not outlive the guard.
        let word = unsafe { AtomicU64::from_ptr(addr as *mut u64) };
        Ok(f(word))
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
    fn revoke_waits_for_concurrent_accesses_and_stops_new_ones() {
        let mut buf = vec![0u64; 512];
        let ptr = buf.as_mut_ptr() as usize;
        // SAFETY: `buf` lives until after the writer thread has been joined.
        let m = std::sync::Arc::new(unsafe { SharedBytes::foreign(ptr as *mut u8, 4096) });
        let m2 = std::sync::Arc::clone(&m);
        let writer = std::thread::spawn(move || {
            let data = [0xAB; 4096];
            let mut n = 0u32;
            while m2.write(0, &data).is_ok() && n < 1_000_000 {
                n += 1;
            }
            n
        });
        std::thread::sleep(std::time::Duration::from_millis(5));
        m.revoke();
        // After revoke returns nothing writes: clear and check it stays clear.
        buf.iter_mut().for_each(|w| *w = 0);
        let n = writer.join().unwrap();
        assert!(n < 1_000_000, "the writer never saw the revocation");
        assert!(buf.iter().all(|&w| w == 0));
    }
}
