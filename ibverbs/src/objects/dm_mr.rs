//! `ibv_reg_dm_mr` (an op of `verbs_context`, which verbs.h's inline calls): a memory region
//! over device memory, above both the device memory (`dm`) and the regions (`mr`).

use std::ptr::null_mut;

use libc::{c_uint, EINVAL};
use softroce::ib::AccessFlags;

use super::common::{errno_of, fail_null};
use super::dm::Dm;
use super::handle;
use super::mr::publish_mr;
use super::pd::pd_of;
use crate::ffi::*;

/// The access rights a device-memory region may have (mlx5's `MLX5_DM_ALLOWED_ACCESS`).
const DM_ALLOWED_ACCESS: c_uint = IBV_ACCESS_BASIC | IBV_ACCESS_ZERO_BASED;
/// The `reg_dm_mr` op's C type.
pub(crate) type RegDmMrFn =
    unsafe extern "C" fn(*mut ibv_pd, *mut ibv_dm, u64, usize, c_uint) -> *mut ibv_mr;

/// `verbs_context.reg_dm_mr`: a region over `len` bytes of `dm` from `offset`, addressed from
/// 0; NULL and errno on failure: EINVAL for a bad PD or DM, rights without
/// `IBV_ACCESS_ZERO_BASED` or beyond mlx5's (local and remote read, write, atomic), a range
/// outside the block or not in 4-byte units. The block cannot be freed while the region lives.
pub(crate) unsafe extern "C" fn op_reg_dm_mr(
    pd: *mut ibv_pd,
    dm: *mut ibv_dm,
    offset: u64,
    len: usize,
    access: c_uint,
) -> *mut ibv_mr {
    let (Some(pdr), Some(dmr)) = (pd_of(pd), handle::get::<Dm>(dm)) else {
        return fail_null(EINVAL);
    };
    if access & IBV_ACCESS_ZERO_BASED == 0 || access & !DM_ALLOWED_ACCESS != 0 {
        return fail_null(EINVAL);
    }
    let Ok(ptr) = dmr.range(offset, len) else {
        return fail_null(EINVAL);
    };
    let rights = AccessFlags::from_bits_truncate(access & IBV_ACCESS_BASIC);
    // SAFETY: the block's pages stay mapped while the region's object holds the block (it
    // does, below), and the region is revoked before that object goes.
    let mr = match unsafe { pdr.pd.register_foreign_mr(ptr, len, 0, rights) } {
        Ok(mr) => mr,
        Err(e) => return fail_null(errno_of(&e)),
    };
    publish_mr(pdr, pd, mr, null_mut(), len, Some(dmr))
}
