//! The `query_device_ex` op of `verbs_context`, which the inline `ibv_query_device_ex` of
//! verbs.h calls (without it, verbs.h falls back to `ibv_query_device` and leaves every
//! extended field 0, `phys_port_cnt_ex` included). Filled as rxe's provider fills it from the
//! kernel's answer (`ibv_cmd_query_device_any`): the whole buffer zeroed, the legacy
//! attributes, `device_cap_flags_ex` (the kernel passes its 64-bit device capability flags)
//! and `phys_port_cnt_ex`; no on-demand paging, timestamps, TSO, RSS, tag matching, CQ
//! moderation or device memory, so those stay 0, and `comp_mask` stays 0 as libibverbs leaves
//! it. Each extended field is written only if the caller's struct (`attr_size`) holds it whole.

use core::mem::{offset_of, size_of};

use libc::{c_int, EINVAL};

use crate::ffi::{ibv_context, ibv_device_attr, ibv_device_attr_ex, ibv_query_device_ex_input};

/// The op's C type.
pub(crate) type QueryDeviceExFn = unsafe extern "C" fn(
    *mut ibv_context,
    *const ibv_query_device_ex_input,
    *mut ibv_device_attr_ex,
    usize,
) -> c_int;

/// `verbs_context.query_device_ex`: 0 or an errno value (EINVAL for a bad context, input
/// with a `comp_mask`, a NULL `attr` or one smaller than `ibv_device_attr`).
pub(crate) unsafe extern "C" fn query_device_ex(
    c: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    // SAFETY: a non-NULL input is the caller's readable struct.
    if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
        return EINVAL;
    }
    if attr.is_null() || attr_size < size_of::<ibv_device_attr>() {
        return EINVAL;
    }
    // SAFETY: zeroed is a valid ibv_device_attr (integers and a char array).
    let mut orig: ibv_device_attr = unsafe { core::mem::zeroed() };
    // SAFETY: the context is checked by ibv_query_device through the registry; `orig` is ours.
    let r = unsafe { crate::ibv_query_device(c, &mut orig) };
    if r != 0 {
        return r;
    }
    let dst = attr as *mut u8;
    // SAFETY: the caller's buffer holds `attr_size` bytes (the verbs.h contract), of which
    // the first `size_of::<ibv_device_attr>()` are checked above; every write below stays
    // within `attr_size` and at the field's offset in the C struct (tests/layout.rs).
    unsafe {
        core::ptr::write_bytes(dst, 0, attr_size);
        (dst as *mut ibv_device_attr).write_unaligned(orig);
        let put = |off: usize, bytes: &[u8]| {
            if off + bytes.len() <= attr_size {
                core::ptr::copy_nonoverlapping(bytes.as_ptr(), dst.add(off), bytes.len());
            }
        };
        put(
            offset_of!(ibv_device_attr_ex, device_cap_flags_ex),
            &u64::from(orig.device_cap_flags).to_ne_bytes(),
        );
        put(
            offset_of!(ibv_device_attr_ex, phys_port_cnt_ex),
            &u32::from(orig.phys_port_cnt).to_ne_bytes(),
        );
    }
    0
}
