//! Memory regions over the application's own memory (`ibv_reg_mr` as the libibverbs shim
//! implements it), and the completion-event hook of its completion channels.
//!
//! The Rust API keeps its owned regions ([`MemoryRegion`] from
//! [`ProtectionDomain::register_mr`]); only the C shim registers foreign memory, through the
//! unsafe [`ProtectionDomain::register_foreign_mr`] whose contract is that of
//! [`crate::memory::foreign`].

use std::sync::Arc;

use super::{CompletionQueue, MemoryRegion, ProtectionDomain};
use crate::ib::{AccessFlags, Result, VerbsError};
use crate::memory::SharedBytes;

impl ProtectionDomain {
    /// `ibv_reg_mr` / `ibv_reg_mr_iova` on application memory: registers `len` bytes at `ptr`,
    /// addressed by the peer (and by SGEs) as `iova ..`. Dropping the region deregisters it
    /// and waits until the engine no longer touches the memory.
    ///
    /// # Safety
    ///
    /// `ptr .. ptr + len` must stay mapped, readable and writable until the returned region
    /// is dropped, and the application's own accesses to it meanwhile are its business as the
    /// memory model of [`crate::memory`] says (a buffer is the engine's between post and
    /// completion).
    pub unsafe fn register_foreign_mr(
        &self,
        ptr: *mut u8,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MemoryRegion> {
        self.dev.check_open()?;
        if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(VerbsError::InvalidAttribute {
                attr: "access",
                reason: "REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE",
            });
        }
        if ptr.is_null() && len != 0 {
            return Err(VerbsError::InvalidAttribute {
                attr: "addr",
                reason: "null",
            });
        }
        if !is_mapped(ptr as usize, len) {
            return Err(VerbsError::NotMapped {
                addr: ptr as u64,
                len: len as u64,
            });
        }
        // SAFETY: ForeignBytes::new's contract is the caller's (valid until revoked): the
        // region built on this storage revokes it in MemoryRegion's Drop, and the caller keeps
        // the memory valid until that drop.
        let storage = Arc::new(unsafe { SharedBytes::foreign(ptr, len) });
        MemoryRegion::register_storage(&self.dev, self.handle, storage, iova, access)
    }
}

/// Whether every page of `len` bytes at `addr` is mapped in this process, asked of the kernel
/// without touching the memory (mincore's ENOMEM names an unmapped page), a chunk of pages at
/// a time. rxe pins the pages at registration (ib_umem_get) and fails with EFAULT where there
/// are none; softroce touches no page then, so it asks. (A read-only mapping registered for
/// writing is not caught here: rxe's pinning for write refuses it.)
fn is_mapped(addr: usize, len: usize) -> bool {
    if len == 0 {
        return true;
    }
    // SAFETY: sysconf has no preconditions.
    let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        p if p > 0 => p as usize,
        _ => 4096,
    };
    let Some(end) = addr.checked_add(len) else {
        return false;
    };
    let mut at = addr & !(page - 1);
    const CHUNK_PAGES: usize = 4096;
    let mut vec = [0u8; CHUNK_PAGES];
    while at < end {
        let bytes = (end - at).min(CHUNK_PAGES * page);
        // SAFETY: mincore reads no memory of the range; it writes one byte per page of it
        // into `vec`, which holds CHUNK_PAGES, at least bytes / page rounded up.
        let r = unsafe { libc::mincore(at as *mut libc::c_void, bytes, vec.as_mut_ptr()) };
        if r != 0 {
            return false;
        }
        at += bytes;
    }
    true
}

impl CompletionQueue {
    /// Calls `f` from the engine each time completions are added to this queue (after they
    /// are visible to `poll`). The shim arms its completion channel's eventfd with it. Only
    /// the first hook set stays; returns false when one was already set.
    pub fn set_event_hook(&self, f: Box<dyn Fn() + Send + Sync>) -> bool {
        self.inner.set_event_hook(f)
    }
}

#[cfg(test)]
mod tests {
    use super::is_mapped;

    #[test]
    fn a_range_with_a_page_not_mapped_is_refused() {
        // SAFETY: sysconf and an anonymous private mapping of our own, unmapped below.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        // SAFETY: a fresh anonymous mapping, no address asked for.
        let m = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                3 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(m, libc::MAP_FAILED);
        let base = m as usize;
        // SAFETY: the middle page of the mapping made above.
        assert_eq!(unsafe { libc::munmap((base + page) as *mut _, page) }, 0);
        assert!(is_mapped(base, page));
        assert!(is_mapped(base + 10, page - 20));
        assert!(!is_mapped(base, 2 * page));
        assert!(!is_mapped(base + page - 1, 2));
        assert!(is_mapped(base + 2 * page, page));
        assert!(!is_mapped(0xDEAD_0000, 4096));
        assert!(!is_mapped(usize::MAX - 10, 100));
        assert!(is_mapped(base, 0));
        // SAFETY: the two pages of the mapping still mapped.
        unsafe {
            libc::munmap(m, page);
            libc::munmap((base + 2 * page) as *mut _, page);
        }
    }
}
