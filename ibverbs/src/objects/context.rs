//! Contexts: `ibv_open_device`, which builds a context and its ops table from every object
//! file's `op_*` functions, `ibv_close_device` and `ibv_query_device`. This file sits above the
//! objects; the context object they all take ([`super::ctx::Ctx`]) sits below them.

use std::ptr::null_mut;
use std::sync::Mutex;

use libc::{c_int, c_void, EINVAL};

use super::common::{config, fail_neg, fail_null, mutex_init, EVENTFD_COUNT};
use super::cq::{op_poll_cq, op_req_notify_cq};
use super::ctx::{Ctx, CMD_DEVICE, NUM_COMP_VECTORS};
use super::device::device_index;
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
    ops[VCTX_QUERY_DEVICE_EX] = super::query_device_ex::query_device_ex
        as super::query_device_ex::QueryDeviceExFn as *mut c_void;
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
    ops[VCTX_QUERY_RT_VALUES] = super::query_device_ex::query_rt_values
        as super::query_device_ex::QueryRtValuesFn as *mut c_void;
    ops[VCTX_CREATE_CQ_EX] = super::cq_ex::op_create_cq_ex as CreateCqExFn as *mut c_void;
    ops[VCTX_CREATE_QP_EX] = super::qp_ex::op_create_qp_ex as CreateQpExFn as *mut c_void;
    ops[VCTX_OPEN_XRCD] = super::xrcd::op_open_xrcd as super::xrcd::OpenXrcdFn as *mut c_void;
    ops[VCTX_CLOSE_XRCD] = super::xrcd::op_close_xrcd as super::xrcd::CloseXrcdFn as *mut c_void;
    ops[VCTX_POST_SRQ_OPS] =
        super::srq_ex::op_post_srq_ops as super::srq_ex::PostSrqOpsFn as *mut c_void;
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
