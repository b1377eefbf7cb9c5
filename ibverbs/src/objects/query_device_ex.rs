//! The device queries: `ibv_query_device` and the `query_device_ex` op of `verbs_context`,
//! which the inline `ibv_query_device_ex` of verbs.h calls (without it, verbs.h falls back to `ibv_query_device` and leaves every
//! extended field 0, `phys_port_cnt_ex` included). Filled as rxe's provider fills it from the
//! kernel's answer (`ibv_cmd_query_device_any`): the whole buffer zeroed, the legacy
//! attributes, `device_cap_flags_ex` (the kernel passes its 64-bit device capability flags:
//! the legacy ones and, from Linux 6.2, rxe's ATOMIC WRITE and FLUSH bits) and
//! `phys_port_cnt_ex`; beyond rxe 6.1, on-demand paging (`odp_caps`, spec-notes/beyond-rxe.md
//! rule 1), device memory (`max_dm_size`, rule 6) and completion timestamps
//! (`hca_core_clock`, `completion_timestamp_mask`, rule 11); tag matching (`tm_caps`, rule 13); no TSO, RSS or CQ moderation, so those stay 0, and `comp_mask`
//! stays 0 as libibverbs leaves it. Each extended field is written only if the caller's struct (`attr_size`) holds it whole.

use core::mem::{offset_of, size_of};

use libc::{c_int, EINVAL};
use softroce::transport::tag_match;

use super::common::fail;
use super::ctx::ctx_of;
use super::device::node_guid;
use crate::ffi::*;

/// The device's attributes as rxe reports them (`ibv_query_device`).
fn device_attr(dev: usize) -> ibv_device_attr {
    let l = softroce::ib::DeviceLimits::default();
    ibv_device_attr {
        fw_ver: [0; 64],
        node_guid: node_guid(dev),
        sys_image_guid: node_guid(dev),
        max_mr_size: u64::MAX,
        page_size_cap: 0xffff_f000,
        vendor_id: 0xffffff,
        vendor_part_id: 0,
        hw_ver: 0,
        max_qp: 0x10000,
        max_qp_wr: l.max_qp_wr as c_int,
        // An SRQ's max_wr changes through ibv_modify_srq (IBV_DEVICE_SRQ_RESIZE), as on rxe;
        // memory windows of type 1 and 2B, as rxe's RXE_DEVICE_CAP_FLAGS; and, beyond rxe,
        // XRC (spec-notes/xrc.md).
        device_cap_flags: IBV_DEVICE_SYS_IMAGE_GUID
            | IBV_DEVICE_XRC
            | IBV_DEVICE_RC_RNR_NAK_GEN
            | IBV_DEVICE_SRQ_RESIZE
            | IBV_DEVICE_MEM_WINDOW
            | IBV_DEVICE_MEM_WINDOW_TYPE_2B,
        max_sge: l.max_sge as c_int,
        max_sge_rd: l.max_sge as c_int,
        max_cq: 0x4000,
        max_cqe: l.max_cqe as c_int,
        max_mr: 0x40000,
        max_pd: 0x10000,
        max_qp_rd_atom: l.max_qp_rd_atom as c_int,
        max_ee_rd_atom: 0,
        max_res_rd_atom: 0x3f000, // RXE_MAX_RES_RD_ATOM
        max_qp_init_rd_atom: l.max_qp_init_rd_atom as c_int,
        max_ee_init_rd_atom: 0,
        atomic_cap: IBV_ATOMIC_HCA,
        max_ee: 0,
        max_rdd: 0,
        // The windows softroce's key table holds.
        max_mw: softroce::transport::mr::MAX_MW as c_int,
        max_raw_ipv6_qp: 0,
        max_raw_ethy_qp: 0,
        max_mcast_grp: l.max_mcast_grp as c_int,
        max_mcast_qp_attach: l.max_mcast_qp_attach as c_int,
        max_total_mcast_qp_attach: l.max_total_mcast_qp_attach as c_int,
        // Address handles and SRQs: no count limit of softroce's own, so rxe's (Linux 6.1,
        // RXE_MAX_AH and RXE_MAX_SRQ); an SRQ's WRs and SGEs: the limits it enforces.
        max_ah: 0x7fff,
        max_fmr: 0,
        max_map_per_fmr: 0,
        max_srq: 0xd_ffff,
        max_srq_wr: l.max_qp_wr as c_int,
        max_srq_sge: l.max_sge as c_int,
        max_pkeys: l.pkey_table_len,
        local_ca_ack_delay: 15,
        phys_port_cnt: 1,
    }
}

/// `ibv_query_device`: 0 or an errno value.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_device(
    c: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    let Some(ctx) = ctx_of(c) else {
        return fail(EINVAL);
    };
    if attr.is_null() {
        return fail(EINVAL);
    }
    // SAFETY: non-null, and the caller passes a writable ibv_device_attr.
    unsafe { attr.write(device_attr(ctx.dev)) };
    0
}

/// `IB_UVERBS_DEVICE_FLUSH_GLOBAL`: FLUSH to global visibility (IBTA 1.5). rdma-core 44's
/// headers lack the name; its libibverbs passes the kernel's 64-bit flags on as they are, so a
/// program built against a later header sees the bit, as on rxe since Linux 6.2.
const DEVICE_FLUSH_GLOBAL: u64 = 1 << 38;
/// `IB_UVERBS_DEVICE_ATOMIC_WRITE` (IBTA 1.5 ATOMIC WRITE), likewise.
const DEVICE_ATOMIC_WRITE: u64 = 1 << 40;
/// The extended capabilities softroce has: rxe's `RXE_DEVICE_CAP_FLAGS` less
/// `IB_DEVICE_FLUSH_PERSISTENT` (1 << 39), since softroce has no persistent memory to flush
/// to (spec-notes/memory-placement.md rule 13).
const DEVICE_CAP_FLAGS_EX: u64 = DEVICE_FLUSH_GLOBAL | DEVICE_ATOMIC_WRITE;

/// `IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT`: on-demand regions, explicit and implicit.
const ODP_GENERAL_CAPS: u64 = 1 | 2;
/// `IBV_ODP_SUPPORT_SEND | _RECV | _WRITE | _READ | _ATOMIC | _SRQ_RECV`: every operation of
/// an RC QP may use on-demand regions (rxe's ODP, Linux 6.10 and later, reports the same for
/// RC); softroce's engine reaches every region through the same checked copies.
const ODP_RC_CAPS: u32 = 0x3f;
/// `IBV_ODP_SUPPORT_SEND | _RECV | _WRITE`, and SRQ receives: what a UC QP does.
const ODP_UC_CAPS: u32 = 0x1 | 0x2 | 0x4 | 0x20;
/// `IBV_ODP_SUPPORT_SEND | _WRITE | _READ | _ATOMIC | _SRQ_RECV`: what an XRC QP does (an
/// XRC target receives through its SRQs only; spec-notes/xrc.md).
const ODP_XRC_CAPS: u32 = 0x1 | 0x4 | 0x8 | 0x10 | 0x20;
/// `IBV_ODP_SUPPORT_SEND | _RECV`, and SRQ receives: what a UD QP does.
const ODP_UD_CAPS: u32 = 0x1 | 0x2 | 0x20;

/// `hca_core_clock`, in kHz: the free-running clock of completion timestamps and of
/// `ibv_query_rt_values_ex` counts nanoseconds of `CLOCK_MONOTONIC` (1 GHz), all 64 bits of
/// it valid (`completion_timestamp_mask`); spec-notes/beyond-rxe.md rule 11.
const HCA_CORE_CLOCK_KHZ: u64 = 1_000_000;
/// `IBV_VALUES_MASK_RAW_CLOCK`.
const VALUES_MASK_RAW_CLOCK: u32 = 1;

/// The `query_rt_values` op's C type.
pub(crate) type QueryRtValuesFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_values_ex) -> c_int;

/// `verbs_context.query_rt_values`: the device's clock now. For `IBV_VALUES_MASK_RAW_CLOCK`,
/// `raw_clock` is the free-running clock (`CLOCK_MONOTONIC`) as a timespec; `comp_mask`
/// comes back holding the values filled in. 0, or EINVAL for a bad context or a NULL
/// `values`.
pub(crate) unsafe extern "C" fn query_rt_values(
    c: *mut ibv_context,
    values: *mut ibv_values_ex,
) -> c_int {
    if !super::ctx::is_context(c) || values.is_null() {
        return EINVAL;
    }
    // SAFETY: non-null; the caller's writable struct.
    let v = unsafe { &mut *values };
    let mut done = 0;
    if v.comp_mask & VALUES_MASK_RAW_CLOCK != 0 {
        let ns = softroce::verbs::cq::clock_ns(libc::CLOCK_MONOTONIC);
        v.raw_clock = libc::timespec {
            tv_sec: (ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (ns % 1_000_000_000) as libc::c_long,
        };
        done |= VALUES_MASK_RAW_CLOCK;
    }
    v.comp_mask = done;
    0
}

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
    let r = unsafe { ibv_query_device(c, &mut orig) };
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
            &(u64::from(orig.device_cap_flags) | DEVICE_CAP_FLAGS_EX).to_ne_bytes(),
        );
        put(
            offset_of!(ibv_device_attr_ex, odp_caps.general_caps),
            &ODP_GENERAL_CAPS.to_ne_bytes(),
        );
        let transport = offset_of!(ibv_device_attr_ex, odp_caps.per_transport_caps);
        for (off, caps) in [
            (
                offset_of!(ibv_odp_per_transport_caps, rc_odp_caps),
                ODP_RC_CAPS,
            ),
            (
                offset_of!(ibv_odp_per_transport_caps, uc_odp_caps),
                ODP_UC_CAPS,
            ),
            (
                offset_of!(ibv_odp_per_transport_caps, ud_odp_caps),
                ODP_UD_CAPS,
            ),
        ] {
            put(transport + off, &caps.to_ne_bytes());
        }
        put(
            offset_of!(ibv_device_attr_ex, xrc_odp_caps),
            &ODP_XRC_CAPS.to_ne_bytes(),
        );
        put(
            offset_of!(ibv_device_attr_ex, completion_timestamp_mask),
            &u64::MAX.to_ne_bytes(),
        );
        put(
            offset_of!(ibv_device_attr_ex, hca_core_clock),
            &HCA_CORE_CLOCK_KHZ.to_ne_bytes(),
        );
        put(
            offset_of!(ibv_device_attr_ex, max_dm_size),
            &(super::dm::MAX_DM_SIZE as u64).to_ne_bytes(),
        );
        // Tag matching in software on RC QPs (spec-notes/beyond-rxe.md rule 13).
        let tm = offset_of!(ibv_device_attr_ex, tm_caps);
        for (off, v) in [
            (
                offset_of!(ibv_tm_caps, max_rndv_hdr_size),
                tag_match::MAX_RNDV_HDR_SIZE,
            ),
            (
                offset_of!(ibv_tm_caps, max_num_tags),
                tag_match::MAX_NUM_TAGS,
            ),
            (offset_of!(ibv_tm_caps, flags), IBV_TM_CAP_RC),
            (offset_of!(ibv_tm_caps, max_ops), tag_match::MAX_OPS),
            (offset_of!(ibv_tm_caps, max_sge), tag_match::MAX_SGE),
        ] {
            put(tm + off, &v.to_ne_bytes());
        }
        put(
            offset_of!(ibv_device_attr_ex, phys_port_cnt_ex),
            &u32::from(orig.phys_port_cnt).to_ne_bytes(),
        );
    }
    0
}
