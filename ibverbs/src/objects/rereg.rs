//! `ibv_rereg_mr`: a region's translation (memory), PD or access rights changed in place, under
//! the keys it has. rxe's provider has no `rereg_mr` (libibverbs then answers EOPNOTSUPP);
//! spec-notes/beyond-rxe.md rule 5 says what softroce does.

use std::sync::Arc;

use libc::{c_int, c_uint, c_void, EINVAL};
use softroce::ib::AccessFlags;

use super::common::errno_of;
use super::handle::{self, Obj};
use super::mr::{mr_access, Mr};
use super::pd::{pd_of, Pd};
use crate::ffi::{ibv_mr, ibv_pd};

/// `IBV_REREG_MR_CHANGE_TRANSLATION`: new memory (`addr`, `length`).
const CHANGE_TRANSLATION: c_int = 1;
/// `IBV_REREG_MR_CHANGE_PD`: a new protection domain.
const CHANGE_PD: c_int = 2;
/// `IBV_REREG_MR_CHANGE_ACCESS`: new access rights.
const CHANGE_ACCESS: c_int = 4;
/// `IBV_REREG_MR_FLAGS_SUPPORTED`.
const FLAGS_SUPPORTED: c_int = 7;
/// `IBV_REREG_MR_ERR_INPUT`: libibverbs refused the arguments (errno EINVAL).
const ERR_INPUT: c_int = -1;
/// `IBV_REREG_MR_ERR_CMD`: the device refused (errno says why).
const ERR_CMD: c_int = -4;

fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno, always valid to write.
    unsafe { *libc::__errno_location() = e };
}

/// `ibv_rereg_mr`: 0, or a negative `enum ibv_rereg_mr_err_code` with errno.
/// `IBV_REREG_MR_ERR_INPUT` (EINVAL) for libibverbs' argument checks: a handle that is not a
/// live MR, unknown flags, a translation without an address or length, access rights without
/// `IBV_REREG_MR_CHANGE_ACCESS`. `IBV_REREG_MR_ERR_CMD` for what the device refuses: an
/// unusable PD (EINVAL), access flags as `ibv_reg_mr` refuses them (EOPNOTSUPP, EINVAL),
/// memory windows bound to the region (EINVAL), new memory that is not mapped (EFAULT). On any
/// error the region is as it was. Receive WRs posted before the change that name the region
/// fail where their data lands (a local QP operation error, and the sender's remote
/// operational error), as on hardware that resolves keys when it executes.
///
/// # Safety
///
/// With `IBV_REREG_MR_CHANGE_TRANSLATION`, `ibv_reg_mr`'s contract for the new memory.
#[no_mangle]
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    let Some(obj) = handle::get::<Mr>(mr) else {
        set_errno(EINVAL);
        return ERR_INPUT;
    };
    let bad_input = flags & !FLAGS_SUPPORTED != 0
        || (flags & CHANGE_TRANSLATION != 0 && (length == 0 || addr.is_null()))
        || (access != 0 && flags & CHANGE_ACCESS == 0);
    if bad_input {
        set_errno(EINVAL);
        return ERR_INPUT;
    }
    let access = if flags & CHANGE_ACCESS != 0 {
        match mr_access(access as c_uint) {
            Ok(a) => Some(AccessFlags::from_bits_truncate(a)),
            Err(e) => {
                set_errno(e);
                return ERR_CMD;
            }
        }
    } else {
        None
    };
    let new_pd = if flags & CHANGE_PD != 0 {
        match pd_of(pd) {
            Some(p) => Some((p, pd)),
            None => {
                set_errno(EINVAL);
                return ERR_CMD;
            }
        }
    } else {
        None
    };
    let memory = (flags & CHANGE_TRANSLATION != 0).then_some((addr, length));
    // SAFETY: ibv_reg_mr's contract for the new memory is the caller's (this function's).
    match unsafe { rereg(&obj, new_pd, memory, access) } {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            ERR_CMD
        }
    }
}

/// Gives the live region `obj` the PD `pd` (C's handle with it; its own if None), the memory
/// `memory` (its own if None) and the rights `access` (its own if None) under the keys it
/// has, then updates its C struct; an errno value if the device refuses (the region
/// unchanged).
///
/// # Safety
///
/// With `memory`, `ibv_reg_mr`'s contract for it.
unsafe fn rereg(
    obj: &Obj<Mr>,
    pd: Option<(Arc<Obj<Pd>>, *mut ibv_pd)>,
    memory: Option<(*mut c_void, usize)>,
    access: Option<AccessFlags>,
) -> Result<(), c_int> {
    let mut region = obj.region();
    let Some(cur) = region.as_mut() else {
        return Err(EINVAL);
    };
    let access = access.unwrap_or(cur.access());
    let verbs_pd = pd.as_ref().map(|(p, _)| &p.pd);
    match memory {
        // SAFETY: the caller's contract: the application owns `addr .. addr + length` and
        // keeps it until the region is deregistered or given other memory.
        Some((addr, length)) => unsafe {
            cur.modify_translation(verbs_pd, addr as *mut u8, length, access)
        },
        None => cur.modify(verbs_pd, access),
    }
    .map_err(|e| errno_of(&e))?;
    let c = obj.c();
    // SAFETY: the live MR's C struct; C reads these fields only, and the shim writes them
    // only here and at creation, under the region's lock.
    unsafe {
        (*c).lkey = cur.lkey();
        (*c).rkey = cur.rkey();
        if let Some((addr, length)) = memory {
            (*c).addr = addr;
            (*c).length = length;
        }
        if let Some((_, handle)) = &pd {
            (*c).pd = *handle;
        }
    }
    if let Some((p, _)) = pd {
        obj.set_pd(p);
    }
    Ok(())
}
