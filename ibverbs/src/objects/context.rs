//! Contexts: `ibv_open_device`, which builds a context and its ops table from every object
//! file's `op_*` functions, `ibv_close_device` and `ibv_query_device`. This file sits above the
//! objects; the context object they all take ([`super::ctx::Ctx`]) sits below them.

use std::ptr::null_mut;
use std::sync::Mutex;

use libc::{c_int, c_void, EINVAL};

use super::common::{config, fail, fail_neg, fail_null, mutex_init, EVENTFD_COUNT};
use super::cq::{op_poll_cq, op_req_notify_cq};
use super::ctx::{ctx_of, Ctx, CMD_DEVICE, NUM_COMP_VECTORS};
use super::device::{device_index, node_guid};
use super::handle::{self, Obj};
use super::port::ext_query_port;
use super::post::{op_post_recv, op_post_send};
use super::srq::op_post_srq_recv;
use crate::ffi::*;

/// `ibv_open_device`: NULL and errno on failure.
#[no_mangle]
pub unsafe extern "C" fn ibv_open_device(dev: *mut ibv_device) -> *mut ibv_context {
    let Some(index) = device_index(dev) else {
        return fail_null(EINVAL);
    };
    if config(index).cc.is_none() {
        // SOFTROCE_CC or SOFTROCE_CC_PARAMS is not usable (said on stderr once).
        return fail_null(EINVAL);
    }
    // SAFETY: eventfd has no memory-safety preconditions.
    let async_fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if async_fd < 0 {
        return null_mut(); // errno from eventfd
    }
    // SAFETY: a NUL-terminated path; no other preconditions.
    let cmd_fd = unsafe { libc::open(CMD_DEVICE.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    let mut ops: [*mut c_void; VERBS_CONTEXT_SLOTS] = [null_mut(); VERBS_CONTEXT_SLOTS];
    ops[VCTX_QUERY_PORT] = ext_query_port as QueryPortFn as *mut c_void;
    ops[VCTX_QUERY_DEVICE_EX] = crate::query_device_ex::query_device_ex
        as crate::query_device_ex::QueryDeviceExFn as *mut c_void;
    ops[VCTX_ADVISE_MR] = super::odp::op_advise_mr as super::odp::AdviseMrFn as *mut c_void;
    ops[VCTX_ALLOC_DM] = super::dm::op_alloc_dm as super::dm::AllocDmFn as *mut c_void;
    ops[VCTX_FREE_DM] = super::dm::op_free_dm as super::dm::FreeDmFn as *mut c_void;
    ops[VCTX_REG_DM_MR] = super::dm_mr::op_reg_dm_mr as super::dm_mr::RegDmMrFn as *mut c_void;
    ops[VCTX_ALLOC_TD] =
        super::parent_domain::op_alloc_td as super::parent_domain::AllocTdFn as *mut c_void;
    ops[VCTX_DEALLOC_TD] =
        super::parent_domain::op_dealloc_td as super::parent_domain::DeallocTdFn as *mut c_void;
    ops[VCTX_ALLOC_PARENT_DOMAIN] = super::parent_domain::op_alloc_parent_domain
        as super::parent_domain::AllocParentDomainFn
        as *mut c_void;
    ops[VCTX_QUERY_RT_VALUES] = crate::query_device_ex::query_rt_values
        as crate::query_device_ex::QueryRtValuesFn as *mut c_void;
    ops[VCTX_CREATE_CQ_EX] = super::cq_ex::op_create_cq_ex as CreateCqExFn as *mut c_void;
    ops[VCTX_CREATE_QP_EX] = super::qp_ex::op_create_qp_ex as CreateQpExFn as *mut c_void;
    ops[VCTX_OPEN_XRCD] = super::xrcd::op_open_xrcd as super::xrcd::OpenXrcdFn as *mut c_void;
    ops[VCTX_CLOSE_XRCD] = super::xrcd::op_close_xrcd as super::xrcd::CloseXrcdFn as *mut c_void;
    ops[VCTX_CREATE_SRQ_EX] =
        super::srq_ex::op_create_srq_ex as super::srq_ex::CreateSrqExFn as *mut c_void;
    ops[VCTX_GET_SRQ_NUM] =
        super::srq_ex::op_get_srq_num as super::srq_ex::GetSrqNumFn as *mut c_void;
    let vctx = verbs_context {
        ops,
        sz: core::mem::size_of::<verbs_context>(),
        context: ibv_context {
            device: dev,
            ops: ibv_context_ops {
                _compat: [null_mut(); 7],
                alloc_mw: Some(super::mw::op_alloc_mw),
                bind_mw: Some(super::mw::op_bind_mw),
                dealloc_mw: Some(super::mw::op_dealloc_mw),
                _compat_create_cq: null_mut(),
                poll_cq: Some(op_poll_cq),
                req_notify_cq: Some(op_req_notify_cq),
                _compat2: [null_mut(); 7],
                post_srq_recv: Some(op_post_srq_recv),
                _compat3: [null_mut(); 4],
                post_send: Some(op_post_send),
                post_recv: Some(op_post_recv),
                _compat4: [null_mut(); 5],
            },
            cmd_fd,
            async_fd,
            num_comp_vectors: NUM_COMP_VECTORS,
            mutex: mutex_init(),
            abi_compat: VERBS_ABI_IS_EXTENDED as *mut c_void,
        },
    };
    let ctx = Obj::new(
        vctx,
        Ctx {
            dev: index,
            cfg: config(index),
            inner: Mutex::new(None),
            async_fd,
            cmd_fd,
        },
    );
    handle::publish(&ctx)
}

/// `ibv_close_device`: 0, or -1 and errno (EINVAL for a bad handle).
///
/// As with the kernel, which frees what a process leaves behind when it closes the device,
/// closing does not need every object destroyed first (perftest leaves a CQ): the engine stops,
/// objects still held fail with ENODEV from then on, and the context's memory stays allocated
/// until the last of them is destroyed, so that their `context` pointers never dangle.
#[no_mangle]
pub unsafe extern "C" fn ibv_close_device(c: *mut ibv_context) -> c_int {
    let Some(ctx) = handle::remove_in_use::<Ctx>(c) else {
        return fail_neg(EINVAL);
    };
    // Let the engine go (it stops with the process's last context).
    drop(ctx.inner.lock().unwrap_or_else(|e| e.into_inner()).take());
    // Wake a thread blocked in ibv_get_async_event on this context (it fails ENODEV).
    let one: u64 = 1;
    // SAFETY: writing 8 bytes from a local to the eventfd, which `ctx` keeps open.
    unsafe {
        libc::write(
            ctx.async_fd,
            &one as *const u64 as *const c_void,
            EVENTFD_COUNT,
        )
    };
    0
}

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
