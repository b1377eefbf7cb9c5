//! C work-request chains, as the post ops of QPs (`post`) and SRQs (`srq`) read them: walking
//! the linked list, a NULL handle's answer, and a receive WR with its SGE list read in place.

use libc::{c_int, EINVAL};
use softroce::ib::{RecvWr, Sge};

use super::common::fail;
use crate::ffi::*;

/// The most SGEs one WR may carry.
pub(super) const MAX_SGE: usize = 32;

/// A WR's C SGE list, read in place (`struct ibv_sge` and [`Sge`] have one layout, both
/// `Pod`); EINVAL for a negative or too long list, or a misaligned one.
///
/// # Safety
///
/// `list` holds `n` readable SGEs when `n > 0`, unchanged while the result is used (the
/// verbs contract for the post call).
pub(super) unsafe fn sges<'a>(list: *const ibv_sge, n: c_int) -> Result<&'a [Sge], c_int> {
    if n < 0 || n as usize > MAX_SGE || (n > 0 && list.is_null()) {
        return Err(EINVAL);
    }
    if n == 0 {
        return Ok(&[]);
    }
    // SAFETY: the caller's list holds n SGEs for the call.
    let c = unsafe { std::slice::from_raw_parts(list, n as usize) };
    bytemuck::try_cast_slice(c).map_err(|_| EINVAL)
}

/// Walks C's linked list of WRs from `first`, handing each to `post_one`; 0, or the errno of
/// the first WR refused with `*bad_wr` pointing at it (the WRs before it stay posted).
///
/// # Safety
///
/// `first` is NULL or a valid linked list of WRs, which C does not change during the call
/// (the verbs contract); `bad_wr` is NULL or writable.
pub(super) unsafe fn walk<W>(
    first: *mut W,
    bad_wr: *mut *mut W,
    next: fn(&W) -> *mut W,
    mut post_one: impl FnMut(&W) -> Result<(), c_int>,
) -> c_int {
    let mut wr = first;
    while !wr.is_null() {
        // SAFETY: the caller's list (see above).
        let w = unsafe { &*wr };
        if let Err(e) = post_one(w) {
            if !bad_wr.is_null() {
                // SAFETY: the caller passes a writable pointer.
                unsafe { *bad_wr = wr };
            }
            return fail(e);
        }
        wr = next(w);
    }
    0
}

/// A post op called with a NULL handle: EINVAL, with `*bad_wr` the first WR.
///
/// # Safety
///
/// `bad_wr` is NULL or writable.
pub(super) unsafe fn null_handle<W>(first: *mut W, bad_wr: *mut *mut W) -> c_int {
    if !bad_wr.is_null() {
        // SAFETY: the caller passes a writable pointer.
        unsafe { *bad_wr = first };
    }
    fail(EINVAL)
}

/// A C receive WR as softroce's, its SGE list read in place.
///
/// # Safety
///
/// The WR's `sg_list` holds `num_sge` SGEs, unchanged during the post (the verbs contract).
pub(super) unsafe fn recv_wr(w: &ibv_recv_wr) -> Result<RecvWr<'_>, c_int> {
    Ok(RecvWr {
        wr_id: w.wr_id,
        // SAFETY: the caller's promise.
        sg_list: unsafe { sges(w.sg_list, w.num_sge)? },
    })
}
