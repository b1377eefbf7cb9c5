//! On-demand paging: `ibv_advise_mr` (the `advise_mr` op of `verbs_context`, which verbs.h's
//! inline calls). Registration of on-demand regions is `ibv_reg_mr` with
//! `IBV_ACCESS_ON_DEMAND` (mr.rs); their capabilities are in query_device_ex.rs.
//! spec-notes/beyond-rxe.md rules 1 to 4.

use libc::{c_int, c_uint, EFAULT, EINVAL, EPERM};
use softroce::verbs::foreign_mr::{Advice, AdviseFault};

use super::pd::pd_of;
use crate::ffi::{ibv_pd, ibv_sge};

/// `IBV_ADVISE_MR_FLAG_FLUSH`: return once the pages are in (softroce's prefetch always is
/// synchronous, so the flag changes nothing).
const ADVISE_MR_FLAG_FLUSH: u32 = 1;

/// The op's C type.
pub(crate) type AdviseMrFn =
    unsafe extern "C" fn(*mut ibv_pd, c_uint, u32, *mut ibv_sge, u32) -> c_int;

/// `verbs_context.advise_mr`: 0 or an errno value, as the man page lists them: EINVAL for a
/// bad PD, advice or flags, or no SGE; EFAULT for an lkey that names no on-demand region of
/// the PD, a range outside its region, or a page that cannot be faulted in; EPERM for a write
/// prefetch of a region without local write. The SGEs are done in order, up to the first
/// that fails.
pub(crate) unsafe extern "C" fn op_advise_mr(
    pd: *mut ibv_pd,
    advice: c_uint,
    flags: u32,
    sg_list: *mut ibv_sge,
    num_sge: u32,
) -> c_int {
    let Some(pdr) = pd_of(pd) else {
        return EINVAL;
    };
    let advice = match advice {
        0 => Advice::Prefetch,
        1 => Advice::PrefetchWrite,
        2 => Advice::PrefetchNoFault,
        _ => return EINVAL,
    };
    if flags & !ADVISE_MR_FLAG_FLUSH != 0 || num_sge == 0 || sg_list.is_null() {
        return EINVAL;
    }
    // SAFETY: the caller passes `num_sge` readable SGEs at `sg_list` (non-null, checked).
    let sges = unsafe { core::slice::from_raw_parts(sg_list, num_sge as usize) };
    for sge in sges {
        match pdr.pd.advise_mr(sge.lkey, sge.addr, sge.length, advice) {
            Ok(()) => {}
            Err(AdviseFault::NotWritable) => return EPERM,
            Err(AdviseFault::UnknownKey | AdviseFault::OutOfRange | AdviseFault::Fault) => {
                return EFAULT
            }
        }
    }
    0
}
