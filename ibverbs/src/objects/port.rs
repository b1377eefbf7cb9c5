//! Port, GID and P_Key queries of a context.

use std::ptr;

use libc::{c_char, c_int, c_uint, EINVAL, ENODATA};
use softroce::ib::{Gid, GID_TABLE_CAPACITY};

use super::common::{fail, fail_neg, set_errno, Config, DEFAULT_PKEY, PORT};
use super::ctx::ctx_of;
use crate::ffi::*;

pub(super) fn port_attr(cfg: &Config) -> ibv_port_attr {
    let l = softroce::ib::DeviceLimits::default();
    ibv_port_attr {
        state: IBV_PORT_ACTIVE,
        max_mtu: l.max_mtu as c_uint,
        active_mtu: cfg.mtu as c_uint,
        // rxe's table length; only the first `gid_table_len` entries are populated.
        gid_tbl_len: c_int::from(GID_TABLE_CAPACITY),
        // As rxe.
        port_cap_flags: IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS,
        // The largest message softroce sends and accepts (IBTA's 2^31); rxe says 0x800000 but
        // carries larger ones as well.
        max_msg_sz: softroce::transport::qp::MAX_MESSAGE as u32,
        bad_pkey_cntr: 0,
        qkey_viol_cntr: 0,
        pkey_tbl_len: l.pkey_table_len,
        lid: 0,
        sm_lid: 0,
        lmc: 0,
        max_vl_num: 1,
        sm_sl: 0,
        subnet_timeout: 0,
        init_type_reply: 0,
        active_width: 1, // 1X
        active_speed: 1, // SDR
        phys_state: 5,   // LINK_UP
        link_layer: IBV_LINK_LAYER_ETHERNET,
        flags: 0,
        port_cap_flags2: 0,
    }
}

/// The `query_port` op of `verbs_context`, which the inline `ibv_query_port` calls: fills
/// `min(len, sizeof)` bytes; 0 or an errno value.
pub(super) unsafe extern "C" fn ext_query_port(
    c: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    len: usize,
) -> c_int {
    let Some(ctx) = ctx_of(c) else {
        return fail(EINVAL);
    };
    if port != PORT || attr.is_null() {
        return fail(EINVAL);
    }
    let a = port_attr(&ctx.cfg);
    let n = len.min(core::mem::size_of::<ibv_port_attr>());
    // SAFETY: the caller's buffer holds `len` bytes; `a` holds at least `n`.
    unsafe { ptr::copy_nonoverlapping(&a as *const _ as *const u8, attr as *mut u8, n) };
    0
}

/// `ibv_query_port` (the exported, legacy entry for old binaries and for contexts without the
/// extended op): fills the `_compat_ibv_port_attr` prefix; 0 or an errno value.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_port(
    c: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    // SAFETY: forwarded with the legacy struct's size.
    unsafe { ext_query_port(c, port, attr, COMPAT_PORT_ATTR_LEN) }
}

/// Device `dev`'s GID at `index`: its address (read live, not from the context's copy of
/// the configuration: a process's rdma_cm may give its device a stand-in address before the
/// engine starts, see `common::stand_in`). `Err(ENODATA)` for an empty entry of the table
/// (`index` below `GID_TABLE_CAPACITY`), `Err(EINVAL)` past its end, as the kernel's
/// `rdma_get_gid_attr` answers on rxe.
fn gid_at(dev: usize, index: c_int) -> Result<[u8; 16], c_int> {
    let populated = c_int::from(softroce::ib::DeviceLimits::default().gid_table_len);
    if (0..populated).contains(&index) {
        Ok(Gid::from_ip(super::common::config(dev).bind.ip()).0)
    } else if (0..c_int::from(GID_TABLE_CAPACITY)).contains(&index) {
        Err(ENODATA)
    } else {
        Err(EINVAL)
    }
}

/// `ibv_query_gid`: 0, or -1 (bad context, port or index). An empty entry reads as the zero
/// GID with 0 (libibverbs' `ibv_query_gid` on ENODATA: "Preserve API behavior for empty
/// GID").
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid(
    c: *mut ibv_context,
    port: u8,
    index: c_int,
    gid: *mut [u8; 16],
) -> c_int {
    let Some(ctx) = ctx_of(c) else {
        return fail_neg(EINVAL);
    };
    if port != PORT || gid.is_null() {
        return fail_neg(EINVAL);
    }
    let g = match gid_at(ctx.dev, index) {
        Ok(g) => g,
        Err(ENODATA) => [0; 16],
        Err(e) => return fail_neg(e),
    };
    // SAFETY: the caller passes a writable union ibv_gid.
    unsafe { gid.write(g) };
    0
}

fn gid_entry(dev: usize, index: c_int) -> Result<ibv_gid_entry, c_int> {
    gid_at(dev, index).map(|gid| ibv_gid_entry {
        gid,
        gid_index: index as u32,
        port_num: 1,
        gid_type: IBV_GID_TYPE_ROCE_V2,
        ndev_ifindex: 0,
    })
}

/// `_ibv_query_gid_ex` (behind the inline `ibv_query_gid_ex`): 0 or an errno value, ENODATA
/// for an empty entry.
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    c: *mut ibv_context,
    port: u32,
    index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    let Some(ctx) = ctx_of(c) else {
        return fail(EINVAL);
    };
    if port != PORT as u32
        || flags != 0
        || entry.is_null()
        || entry_size < core::mem::size_of::<ibv_gid_entry>()
    {
        return fail(EINVAL);
    }
    match gid_entry(ctx.dev, index as c_int) {
        Ok(e) => {
            // SAFETY: the caller's entry holds entry_size >= 32 bytes.
            unsafe { entry.write(e) };
            0
        }
        Err(e) => fail(e),
    }
}

/// `_ibv_query_gid_table`: the populated entries (the empty ones are left out, as the
/// kernel's `rdma_query_gid_table` does); their number, or a negative errno (EINVAL when
/// they do not fit).
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_table(
    c: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    let Some(ctx) = ctx_of(c) else {
        return -(fail(EINVAL) as isize);
    };
    if flags != 0
        || entry_size < core::mem::size_of::<ibv_gid_entry>()
        || (entries.is_null() && max_entries > 0)
    {
        return -(fail(EINVAL) as isize);
    }
    let len = softroce::ib::DeviceLimits::default().gid_table_len as usize;
    if max_entries < len {
        return -(fail(EINVAL) as isize);
    }
    for i in 0..len {
        if let Ok(e) = gid_entry(ctx.dev, i as c_int) {
            // SAFETY: the caller's array holds max_entries >= len entries of entry_size bytes.
            unsafe { ((entries as *mut u8).add(i * entry_size) as *mut ibv_gid_entry).write(e) };
        }
    }
    len as isize
}

/// `ibv_query_gid_type` (IBVERBS_PRIVATE_34, which ibv_devinfo calls): every GID is RoCE v2
/// (`IBV_GID_TYPE_SYSFS_ROCE_V2` = 1); an empty entry answers
/// `IBV_GID_TYPE_SYSFS_IB_ROCE_V1` (0) as libibverbs does on ENODATA. 0, or -1 with errno.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid_type(
    c: *mut ibv_context,
    port: u8,
    index: c_uint,
    ty: *mut c_uint,
) -> c_int {
    let Some(ctx) = ctx_of(c) else {
        return fail_neg(EINVAL);
    };
    if port != PORT || ty.is_null() {
        return fail_neg(EINVAL);
    }
    let t = match gid_at(ctx.dev, index as c_int) {
        Ok(_) => IBV_GID_TYPE_SYSFS_ROCE_V2,
        Err(ENODATA) => 0,
        Err(e) => return fail_neg(e),
    };
    // SAFETY: the caller passes a writable enum.
    unsafe { ty.write(t) };
    0
}

/// `ibv_query_pkey`: index 0 holds the default P_Key 0xFFFF (big-endian); 0, or -1.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_pkey(
    c: *mut ibv_context,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    if ctx_of(c).is_none() || port != PORT || index != 0 || pkey.is_null() {
        return fail_neg(EINVAL);
    }
    // SAFETY: the caller passes a writable __be16.
    unsafe { pkey.write(DEFAULT_PKEY) };
    0
}

/// `ibv_get_pkey_index`: the index of `pkey` (big-endian) in the table, or -1.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_pkey_index(c: *mut ibv_context, port: u8, pkey: u16) -> c_int {
    if ctx_of(c).is_none() || port != PORT || pkey != DEFAULT_PKEY {
        return fail_neg(EINVAL);
    }
    0
}

/// `ibv_read_sysfs_file`: softroce has no sysfs directory; -1 (ENOENT).
#[no_mangle]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    _dir: *const c_char,
    _file: *const c_char,
    _buf: *mut c_char,
    _size: usize,
) -> c_int {
    set_errno(libc::ENOENT);
    -1
}
