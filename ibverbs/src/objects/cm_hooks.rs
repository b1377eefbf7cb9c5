//! What the librdmacm shim (`crate::rdmacm`) needs from the verbs objects: the devices, the
//! softroce engine behind a context (so that rdma_cm's QP1 and the application's QPs share one
//! socket), and the softroce QP behind an `ibv_qp` (which rdma_cm moves through its states).

use std::net::SocketAddr;
use std::ptr;
use std::sync::Arc;

use libc::c_int;
use softroce::verbs::{Context, QueuePair};

use super::common::config;
use super::ctx::ctx_of;
pub(crate) use super::device::free_null_terminated;
use super::handle::{self, CMutexGuard};
use super::pd::pd_of;
use super::qp::{state_to_c, Qp};
use crate::ffi::*;

/// How many devices the process has (one per address of `SOFTROCE_BIND`).
pub(crate) fn device_count() -> usize {
    super::common::device_count()
}

/// Device `dev`'s handle, for `ibv_open_device`.
pub(crate) fn device_handle(dev: usize) -> *mut ibv_device {
    super::device::device(dev)
}

/// The address and port device `dev` binds (`SOFTROCE_BIND`'s, or its stand-in).
pub(crate) fn bound_addr(dev: usize) -> SocketAddr {
    config(dev).bind
}

/// The address `SOFTROCE_BIND` names for device `dev`, which stays the device's address to
/// the rdma_cm API when the process stands in at another ([`stand_in`]).
pub(crate) fn nominal_addr(dev: usize) -> SocketAddr {
    super::common::nominal_bind(dev)
}

/// Gives this process's device `dev` the address `a` in place of `SOFTROCE_BIND`'s: true if
/// done (or `a` is already its address), false once its engine has bound another.
pub(crate) fn stand_in(dev: usize, a: SocketAddr) -> bool {
    super::common::stand_in(dev, a)
}

/// The device an open context is of; None for a handle that is not a live context.
pub(crate) fn context_device(c: *mut ibv_context) -> Option<usize> {
    ctx_of(c).map(|ctx| ctx.dev)
}

/// The softroce engine of an open context, started now if needed (binding the UDP socket):
/// EINVAL for a handle that is not a live context, or the errno of the failed bind.
pub(crate) fn engine(c: *mut ibv_context) -> Result<Arc<Context>, c_int> {
    let ctx = ctx_of(c).ok_or(libc::EINVAL)?;
    let g = ctx.open()?;
    g.as_ref().cloned().ok_or(libc::ENODEV)
}

/// The context a live PD belongs to; None for anything but a live PD.
pub(crate) fn pd_context(p: *mut ibv_pd) -> Option<*mut ibv_context> {
    pd_of(p).map(|pd| pd.context())
}

/// The softroce QP behind a live `ibv_qp`, and its context.
pub(crate) fn qp_inner(p: *mut ibv_qp) -> Option<(Arc<QueuePair>, *mut ibv_context)> {
    let q = handle::get::<Qp>(p)?;
    // SAFETY: `q` keeps the QP's C struct alive; `context` is written only at creation.
    let ctx = unsafe { ptr::addr_of!((*q.qp_c()).context).read() };
    Some((Arc::clone(&q.qp), ctx))
}

/// Brings `ibv_qp.state` up to date after rdma_cm moved the QP itself (on a REP, at accept,
/// at disconnection), as the kernel's modify through librdmacm updates it.
pub(crate) fn sync_qp_state(p: *mut ibv_qp) {
    if let Some(q) = handle::get::<Qp>(p) {
        let c = q.qp_c();
        // SAFETY: the referenced QP's C struct is live; `state` is written raw under its
        // mutex, as ibv_modify_qp writes it.
        unsafe {
            let _g = CMutexGuard::lock(ptr::addr_of_mut!((*c).mutex));
            ptr::addr_of_mut!((*c).state).write(state_to_c(q.qp.query().qp_state));
        }
    }
}

/// The XRC domain librdmacm keeps per context for its XRC identifiers (librdmacm's
/// `ucma_get_xrcd`: opened with fd -1 and `O_CREAT` at first use, kept while the process
/// lives).
pub(crate) fn default_xrcd(c: *mut ibv_context) -> Result<*mut ibv_xrcd, c_int> {
    static DOMAINS: std::sync::Mutex<Vec<(usize, usize)>> = std::sync::Mutex::new(Vec::new());
    let mut all = DOMAINS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&(_, x)) = all
        .iter()
        .find(|&&(ctx, x)| ctx == c as usize && super::xrcd::xrcd_of(x as *mut ibv_xrcd).is_some())
    {
        return Ok(x as *mut ibv_xrcd);
    }
    let mut attr = ibv_xrcd_init_attr {
        comp_mask: IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
        fd: -1,
        oflags: libc::O_CREAT,
    };
    // SAFETY: the shim's own op with a local attribute struct.
    let x = unsafe { super::xrcd::op_open_xrcd(c, &mut attr) };
    if x.is_null() {
        return Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO));
    }
    all.retain(|&(ctx, _)| ctx != c as usize);
    all.push((c as usize, x as usize));
    Ok(x)
}

/// rdma_cm's XRC target QP (`IBV_QPT_XRC_RECV`) for an identifier on context `c`, in the
/// context's rdma_cm domain (librdmacm's `rdma_create_qp_ex` for that type).
pub(crate) fn xrc_recv_qp(c: *mut ibv_context, qp_context: *mut libc::c_void) -> *mut ibv_qp {
    match default_xrcd(c) {
        Ok(x) => super::qp::create_xrc_recv_qp(x, qp_context),
        Err(e) => super::common::fail_null(e),
    }
}

/// `ibv_create_srq_ex` on context `c` (the inline's op): NULL and errno on failure.
///
/// # Safety
/// `attr` is a valid, writable `ibv_srq_init_attr_ex`.
pub(crate) unsafe fn create_srq_ex(
    c: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    // SAFETY: forwarded contract; the op checks the context and the attribute's handles.
    unsafe { super::srq_ex::op_create_srq_ex(c, attr) }
}
