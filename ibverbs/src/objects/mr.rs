//! Memory regions over the application's memory.

use std::sync::Arc;

use libc::{c_int, c_uint, c_void, EINVAL, EOPNOTSUPP};
use softroce::ib::AccessFlags;
use softroce::verbs::MemoryRegion;

use super::common::{errno_of, fail, fail_null};
use super::handle::{self, Obj, Object};
use super::pd::{pd_of, Pd};
use crate::ffi::*;

/// A memory region; it holds its PD.
pub(super) struct Mr {
    /// Dropped (revoked) with the object, in ibv_dereg_mr.
    _mr: MemoryRegion,
    _pd: Arc<Obj<Pd>>,
}

impl Object for Mr {
    type C = ibv_mr;
    type Handle = ibv_mr;
}

/// Whether `m` is a live MR of the shim (for `ibv_rereg_mr` in absent.rs).
pub(crate) fn mr_is_live(m: *const ibv_mr) -> bool {
    handle::get::<Mr>(m as *mut ibv_mr).is_some()
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
    // The optional range (relaxed ordering...) is ignored as libibverbs ignores it on devices
    // without it.
    let access = access & !IBV_ACCESS_OPTIONAL_RANGE;
    if access & !IBV_ACCESS_BASIC != 0 {
        // MW_BIND, ZERO_BASED, ON_DEMAND, HUGETLB...: not implemented.
        return fail_null(EOPNOTSUPP);
    }
    if addr.is_null() || len == 0 {
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
        Mr { _mr: mr, _pd: pdr },
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

/// `ibv_dereg_mr`: 0 or an errno value. Once it returns, the engine no longer touches the
/// memory (operations still using the region find it gone).
#[no_mangle]
pub unsafe extern "C" fn ibv_dereg_mr(m: *mut ibv_mr) -> c_int {
    match handle::remove::<Mr>(m) {
        Ok(mr) => {
            // The last reference (handle::remove): the region is dropped, and so revoked, here,
            // before the application may free the memory.
            drop(mr);
            0
        }
        Err(e) => fail(e),
    }
}
