//! Memory regions over the application's memory.

use std::sync::{Arc, Mutex, MutexGuard};

use libc::{c_int, c_uint, c_void, EINVAL, EOPNOTSUPP};
use softroce::ib::AccessFlags;
use softroce::verbs::MemoryRegion;

use super::common::{errno_of, fail, fail_null};
use super::dm::Dm;
use super::handle::{self, Obj, Object};
use super::pd::{pd_of, Pd};
use crate::ffi::*;

/// A memory region; it holds its PD.
pub(super) struct Mr {
    /// Taken out and deregistered by ibv_dereg_mr (put back if windows are bound to it);
    /// otherwise dropped (revoked) with the object. None only within ibv_dereg_mr.
    mr: Mutex<Option<MemoryRegion>>,
    /// Its PD, which `ibv_rereg_mr` may change (so that the PD it left can be deallocated
    /// and the one it joined cannot).
    pd: Mutex<Arc<Obj<Pd>>>,
    /// The device memory it is over, if it is (`ibv_reg_dm_mr`): kept while the region lives.
    _dm: Option<Arc<Obj<Dm>>>,
}

impl Mr {
    /// The region, locked (a window bind reads its key under the lock).
    pub(super) fn region(&self) -> MutexGuard<'_, Option<MemoryRegion>> {
        self.mr.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes `pd` the PD the region holds (`ibv_rereg_mr` with `IBV_REREG_MR_CHANGE_PD`).
    pub(super) fn set_pd(&self, pd: Arc<Obj<Pd>>) {
        *self.pd.lock().unwrap_or_else(|e| e.into_inner()) = pd;
    }
}

impl Object for Mr {
    type C = ibv_mr;
    type Handle = ibv_mr;
}

/// The access flags of `ibv_reg_mr` (and of `ibv_rereg_mr`'s new ones) that softroce keeps, or
/// EOPNOTSUPP: the optional range (relaxed ordering...) is ignored as libibverbs ignores it on
/// devices without it, and HUGETLB is a hint (how the application backs the memory) that
/// changes nothing here; ZERO_BASED is for device memory only (`ibv_reg_dm_mr`).
pub(super) fn mr_access(access: c_uint) -> Result<c_uint, c_int> {
    let access = access & !(IBV_ACCESS_OPTIONAL_RANGE | IBV_ACCESS_HUGETLB);
    if access & !(IBV_ACCESS_BASIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ON_DEMAND) != 0 {
        return Err(EOPNOTSUPP);
    }
    Ok(access)
}

/// Registers `len` bytes at `addr` in the PD `pd`; NULL and errno on failure.
///
/// # Safety
///
/// The verbs contract for `ibv_reg_mr`: `addr .. addr + len` is memory the application owns
/// and keeps mapped until `ibv_dereg_mr` of the region returns.
unsafe fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    // Looked up and referenced under the registry lock: from here on a concurrent
    // ibv_dealloc_pd sees the PD in use (EBUSY) instead of freeing it under us.
    let Some(pdr) = pd_of(pd) else {
        return fail_null(EINVAL);
    };
    let access = match mr_access(access) {
        Ok(a) => a,
        Err(e) => return fail_null(e),
    };
    // The implicit on-demand region: the whole address space (spec-notes/beyond-rxe.md R2).
    let implicit = access & IBV_ACCESS_ON_DEMAND != 0 && addr.is_null() && len == usize::MAX;
    if (addr.is_null() && !implicit) || len == 0 {
        return fail_null(EINVAL);
    }
    // SAFETY: the application registers memory it owns and keeps it until ibv_dereg_mr,
    // which drops the region (and so revokes the engine's access) before it returns: the
    // contract of register_foreign_mr, as of a NIC's DMA.
    let mr = match unsafe {
        pdr.pd.register_foreign_mr(
            addr as *mut u8,
            len,
            iova,
            AccessFlags::from_bits_truncate(access),
        )
    } {
        Ok(mr) => mr,
        Err(e) => return fail_null(errno_of(&e)),
    };
    publish_mr(pdr, pd, mr, addr, len, None)
}

/// Publishes a new region `mr` of the PD `pdr` (C's `pd`) over `len` bytes at `addr`; it
/// holds `dm` if it is over device memory. The handle C gets.
pub(super) fn publish_mr(
    pdr: Arc<Obj<Pd>>,
    pd: *mut ibv_pd,
    mr: MemoryRegion,
    addr: *mut c_void,
    len: usize,
    dm: Option<Arc<Obj<Dm>>>,
) -> *mut ibv_mr {
    let obj = Obj::new(
        ibv_mr {
            context: pdr.context(),
            pd,
            addr,
            length: len,
            handle: mr.lkey(),
            lkey: mr.lkey(),
            rkey: mr.rkey(),
        },
        Mr {
            mr: Mutex::new(Some(mr)),
            pd: Mutex::new(pdr),
            _dm: dm,
        },
    );
    handle::publish(&obj)
}

/// `ibv_reg_mr`: registers the application's `len` bytes at `addr`; NULL and errno on failure.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: the caller's contract is reg_mr's (the verbs contract for registered memory).
    unsafe { reg_mr(pd, addr, len, addr as u64, access as c_uint) }
}

/// `ibv_reg_mr_iova`: as `ibv_reg_mr`, the peer addressing the region from `iova`.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: the caller's contract is reg_mr's (the verbs contract for registered memory).
    unsafe { reg_mr(pd, addr, len, iova, access as c_uint) }
}

/// `ibv_reg_mr_iova2`: what the inline `ibv_reg_mr` calls with optional access flags.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    // SAFETY: the caller's contract is reg_mr's (the verbs contract for registered memory).
    unsafe { reg_mr(pd, addr, len, iova, access) }
}

/// `ibv_dereg_mr`: 0 or an errno value (EINVAL while memory windows are bound to the region,
/// as rxe, the region then staying registered). Once it returns 0, the engine no longer
/// touches the memory (operations still using the region find it gone).
#[no_mangle]
pub unsafe extern "C" fn ibv_dereg_mr(m: *mut ibv_mr) -> c_int {
    let obj = match handle::remove::<Mr>(m) {
        Ok(obj) => obj,
        Err(e) => return fail(e),
    };
    // The last reference (handle::remove): nothing else can reach the region now.
    let taken = obj.region().take();
    let Some(mr) = taken else {
        return 0;
    };
    // The region is deregistered, and so revoked, here, before the application may free the
    // memory; refused while windows are bound to it.
    match mr.deregister() {
        Ok(()) => 0,
        Err((mr, e)) => {
            // Put back and published again under the same handle: the region stays usable.
            *obj.region() = Some(mr);
            handle::publish(&obj);
            fail(errno_of(&e))
        }
    }
}
