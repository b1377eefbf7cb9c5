//! `ibv_rereg_mr`: a region's translation (memory), PD or access rights changed in place, under
//! the keys it has (for now the access rights only). rxe's provider has no `rereg_mr` (libibverbs then answers EOPNOTSUPP);
//! spec-notes/beyond-rxe.md rule 5 says what softroce does.

use libc::{c_int, c_uint, c_void, EINVAL, EOPNOTSUPP};
use softroce::ib::AccessFlags;

use super::common::errno_of;
use super::handle::{self, Obj};
use super::mr::{mr_access, Mr};
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
/// error the region is as it was.
///
/// # Safety
///
/// With `IBV_REREG_MR_CHANGE_TRANSLATION`, `ibv_reg_mr`'s contract for the new memory.
#[no_mangle]
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    _pd: *mut ibv_pd,
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
    if flags & (CHANGE_TRANSLATION | CHANGE_PD) != 0 {
        // Not yet: softroce resolves a WR's SGEs against the regions when it is posted, not
        // when it runs as rxe and mlx5 do, so a WR queued before the change would keep the
        // old memory or PD (spec-notes/beyond-rxe.md rule 5).
        set_errno(EOPNOTSUPP);
        return ERR_CMD;
    }
    match rereg(&obj, access) {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            ERR_CMD
        }
    }
}

/// Gives the live region `obj` the rights `access` (its own if None) under the keys it has,
/// then updates its C struct; an errno value if the device refuses (the region unchanged).
fn rereg(obj: &Obj<Mr>, access: Option<AccessFlags>) -> Result<(), c_int> {
    let mut region = obj.region();
    let Some(cur) = region.as_mut() else {
        return Err(EINVAL);
    };
    let access = access.unwrap_or(cur.access());
    cur.modify(None, access).map_err(|e| errno_of(&e))?;
    let c = obj.c();
    // SAFETY: the live MR's C struct; C reads these fields only, and the shim writes them
    // only here and at creation, under the region's lock.
    unsafe {
        (*c).lkey = cur.lkey();
        (*c).rkey = cur.rkey();
    }
    Ok(())
}
