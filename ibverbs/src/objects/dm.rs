//! Device memory: `ibv_alloc_dm`, `ibv_free_dm` and `ibv_memcpy_to_dm`/`_from_dm` (ops of
//! `verbs_context` and of `struct ibv_dm`, which verbs.h's inlines call; `ibv_reg_dm_mr` is in
//! `dm_mr`). A hardware device keeps such memory on the adapter (mlx5's MEMIC); softroce's
//! "device" is the engine in this process, so its memory is pages the shim maps for it, which
//! the application reaches only through the copy verbs and the engine through the regions
//! registered over it (spec-notes/beyond-rxe.md rules 6 to 8).

use std::ptr::null_mut;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;

use libc::{c_int, c_void, EFAULT, EINVAL, ENOMEM};

use super::common::fail_null;
use super::ctx::{ctx_of, Ctx};
use super::handle::{self, Obj, Object};
use crate::ffi::*;

/// The device memory a device offers (`max_dm_size`): 256 KiB, as a ConnectX-5's MEMIC.
pub(crate) const MAX_DM_SIZE: usize = 256 << 10;
/// The largest alignment `ibv_alloc_dm` can give (`log_align_req`): a page's.
const MAX_LOG_ALIGN: u32 = 12;
/// The unit of the copy verbs: offsets and lengths are multiples of 4 bytes, as on mlx5, the
/// one provider with device memory, so that a program that runs here runs there.
const DM_UNIT: u64 = 4;

/// Device memory of the process, all devices together (`max_dm_size` is what remains).
static IN_USE: AtomicUsize = AtomicUsize::new(0);

/// A block of device memory: `len` bytes of pages mapped for it at `ptr`.
pub(super) struct Dm {
    ptr: *mut u8,
    len: usize,
    /// What was mapped (`len` rounded up to pages) and counted in [`IN_USE`].
    mapped: usize,
    _ctx: Arc<Obj<Ctx>>,
}

// SAFETY: the pages are the object's, mapped until Drop; every access copies through raw
// pointers (the verbs' memory model for memory the device shares with the host).
unsafe impl Send for Dm {}
// SAFETY: as for Send.
unsafe impl Sync for Dm {}

impl Object for Dm {
    type C = ibv_dm;
    type Handle = ibv_dm;
}

impl Drop for Dm {
    fn drop(&mut self) {
        // SAFETY: the mapping made by op_alloc_dm; the last reference is gone (the regions
        // over it hold the object), so nothing reaches it any more.
        unsafe { libc::munmap(self.ptr.cast(), self.mapped) };
        IN_USE.fetch_sub(self.mapped, Ordering::SeqCst);
    }
}

impl Dm {
    /// The pointer to bytes `offset .. offset + len`, if they are within the block and both
    /// are multiples of [`DM_UNIT`]; the errno value of mlx5's copies otherwise (EINVAL for
    /// alignment, EFAULT for the range).
    pub(super) fn range(&self, offset: u64, len: usize) -> Result<*mut u8, c_int> {
        let end = offset.checked_add(len as u64).ok_or(EFAULT)?;
        if end > self.len as u64 {
            return Err(EFAULT);
        }
        if offset % DM_UNIT != 0 || len as u64 % DM_UNIT != 0 {
            return Err(EINVAL);
        }
        Ok(self.ptr.wrapping_add(offset as usize))
    }
}

/// The `alloc_dm` op's C type.
pub(crate) type AllocDmFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_alloc_dm_attr) -> *mut ibv_dm;
/// The `free_dm` op's C type.
pub(crate) type FreeDmFn = unsafe extern "C" fn(*mut ibv_dm) -> c_int;

/// `verbs_context.alloc_dm`: NULL and errno on failure: EINVAL for a bad context, a NULL
/// attribute, a `comp_mask`, a length of 0 or an alignment above a page's; ENOMEM beyond what
/// is left of `max_dm_size`.
pub(crate) unsafe extern "C" fn op_alloc_dm(
    c: *mut ibv_context,
    attr: *mut ibv_alloc_dm_attr,
) -> *mut ibv_dm {
    let Some(ctx) = ctx_of(c) else {
        return fail_null(EINVAL);
    };
    if attr.is_null() {
        return fail_null(EINVAL);
    }
    // SAFETY: non-null; the caller's readable attribute.
    let a = unsafe { attr.read() };
    if a.comp_mask != 0 || a.length == 0 || a.log_align_req > MAX_LOG_ALIGN {
        return fail_null(EINVAL);
    }
    let page = softroce::memory::mapping::page_size();
    let Some(mapped) = a.length.checked_next_multiple_of(page) else {
        return fail_null(ENOMEM);
    };
    let reserve = IN_USE.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
        used.checked_add(mapped)
            .filter(|&u| u <= MAX_DM_SIZE.next_multiple_of(page))
    });
    if reserve.is_err() || a.length > MAX_DM_SIZE {
        if reserve.is_ok() {
            IN_USE.fetch_sub(mapped, Ordering::SeqCst);
        }
        return fail_null(ENOMEM);
    }
    // SAFETY: a fresh private anonymous mapping; no memory of ours is affected.
    let ptr = unsafe {
        libc::mmap(
            null_mut(),
            mapped,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        IN_USE.fetch_sub(mapped, Ordering::SeqCst);
        return fail_null(ENOMEM);
    }
    static HANDLES: AtomicU32 = AtomicU32::new(1);
    let obj = Obj::new(
        ibv_dm {
            context: c,
            memcpy_to_dm: Some(memcpy_to_dm),
            memcpy_from_dm: Some(memcpy_from_dm),
            comp_mask: 0,
            handle: HANDLES.fetch_add(1, Ordering::Relaxed),
        },
        Dm {
            ptr: ptr.cast(),
            len: a.length,
            mapped,
            _ctx: ctx,
        },
    );
    handle::publish(&obj)
}

/// `verbs_context.free_dm`: 0 or an errno value (EINVAL for a handle that is not live device
/// memory, EBUSY while regions are registered over it).
pub(crate) unsafe extern "C" fn op_free_dm(dm: *mut ibv_dm) -> c_int {
    match handle::remove::<Dm>(dm) {
        Ok(obj) => {
            drop(obj);
            0
        }
        Err(e) => e,
    }
}

/// `ibv_dm.memcpy_to_dm`: 0 or an errno value (EINVAL for a bad handle or a misaligned
/// offset or length, EFAULT for a range outside the block).
unsafe extern "C" fn memcpy_to_dm(
    dm: *mut ibv_dm,
    offset: u64,
    host: *const c_void,
    len: usize,
) -> c_int {
    let Some(obj) = handle::get::<Dm>(dm) else {
        return EINVAL;
    };
    match obj.range(offset, len) {
        // SAFETY: `len` bytes inside the live block (checked), and the caller's `len`
        // readable bytes at `host`, which cannot overlap pages the shim mapped for itself.
        Ok(p) => unsafe { std::ptr::copy_nonoverlapping(host.cast::<u8>(), p, len) },
        Err(e) => return e,
    }
    0
}

/// `ibv_dm.memcpy_from_dm`: as `memcpy_to_dm`, the other way.
unsafe extern "C" fn memcpy_from_dm(
    host: *mut c_void,
    dm: *mut ibv_dm,
    offset: u64,
    len: usize,
) -> c_int {
    let Some(obj) = handle::get::<Dm>(dm) else {
        return EINVAL;
    };
    match obj.range(offset, len) {
        // SAFETY: as in memcpy_to_dm, into the caller's `len` writable bytes at `host`.
        Ok(p) => unsafe { std::ptr::copy_nonoverlapping(p, host.cast::<u8>(), len) },
        Err(e) => return e,
    }
    0
}
