//! The verbs an rsocket uses, called through the shim's own exports and the context's
//! data-path ops (as libibverbs' inline `ibv_post_send`/`ibv_poll_cq` do): a thin layer so
//! that the stream code holds no raw op-table access of its own.

use std::ptr::null_mut;

use libc::{c_int, c_void};

use crate::ffi::*;

/// `IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE`: what `rdma_reg_write` asks.
pub(super) const ACCESS_WRITE: c_int = 1 | 2;
/// `IBV_ACCESS_LOCAL_WRITE`: what `rdma_reg_msgs` asks for a send buffer.
pub(super) const ACCESS_LOCAL: c_int = 1;

/// One completion: its work request id, status, immediate (host order) and whether it had one.
pub(super) struct Completion {
    pub(super) wr_id: u64,
    pub(super) ok: bool,
    pub(super) imm: Option<u32>,
}

/// Polls at most one completion of `cq`: `Ok(None)` when it is empty, `Err(errno)` on failure.
///
/// # Safety
/// `cq` is a live CQ of the shim.
pub(super) unsafe fn poll_one(cq: *mut ibv_cq) -> Result<Option<Completion>, c_int> {
    // SAFETY: `cq` is live (caller's contract), so its context and op table are.
    let poll = unsafe { (*(*cq).context).ops.poll_cq };
    let Some(poll) = poll else {
        return Err(libc::ENOSYS);
    };
    // SAFETY: ibv_wc is plain data; an all-zero value is valid.
    let mut wc: ibv_wc = unsafe { std::mem::zeroed() };
    // SAFETY: one writable ibv_wc for a count of 1.
    match unsafe { poll(cq, 1, &mut wc) } {
        0 => Ok(None),
        1 => Ok(Some(Completion {
            wr_id: wc.wr_id,
            ok: wc.status == 0,
            imm: (wc.wc_flags & IBV_WC_WITH_IMM != 0).then(|| u32::from_be(wc.imm_data)),
        })),
        _ => Err(super::super::error::errno()),
    }
}

/// What one RDMA WRITE (WITH IMMEDIATE) carries.
pub(super) struct Write {
    /// Local bytes (address, length, lkey); length 0 sends no SGE.
    pub(super) local: (u64, u32, u32),
    /// Remote address and rkey.
    pub(super) remote: (u64, u32),
    /// The immediate, host order; `None` for a plain RDMA WRITE (riowrite's).
    pub(super) imm: Option<u32>,
    /// The work request id its completion carries.
    pub(super) wr_id: u64,
}

/// Posts one signaled RDMA WRITE, with its immediate if it has one; 0 or an errno value.
///
/// # Safety
/// `qp` is a live QP of the shim; the local range lies in a registered region.
pub(super) unsafe fn post_write(qp: *mut ibv_qp, w: &Write) -> c_int {
    let mut sge = ibv_sge {
        addr: w.local.0,
        length: w.local.1,
        lkey: w.local.2,
    };
    // SAFETY: ibv_send_wr is plain data; zero is a valid empty request.
    let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
    wr.wr_id = w.wr_id;
    wr.send_flags = 2; // IBV_SEND_SIGNALED
    match w.imm {
        Some(imm) => {
            wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
            wr.imm_data = imm.to_be();
        }
        None => wr.opcode = IBV_WR_RDMA_WRITE,
    }
    if w.local.1 > 0 {
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
    }
    wr.wr.remote_addr = w.remote.0;
    // rdma.rkey sits where the atomic's compare_add starts (see `rdma_rkey`).
    wr.wr.compare_add = u64::from(w.remote.1);
    let mut bad: *mut ibv_send_wr = null_mut();
    // SAFETY: `qp` is live (caller's contract), so its context and op table are.
    let post = unsafe { (*(*qp).context).ops.post_send };
    match post {
        // SAFETY: one well-formed WR whose SGE outlives the call.
        Some(p) => unsafe { p(qp, &mut wr, &mut bad) },
        None => libc::ENOSYS,
    }
}

/// Posts one receive without buffers (a WRITE WITH IMMEDIATE consumes it); 0 or errno value.
///
/// # Safety
/// `qp` is a live QP of the shim.
pub(super) unsafe fn post_recv(qp: *mut ibv_qp, wr_id: u64) -> c_int {
    // SAFETY: ibv_recv_wr is plain data; zero is a valid empty request.
    let mut wr: ibv_recv_wr = unsafe { std::mem::zeroed() };
    wr.wr_id = wr_id;
    let mut bad: *mut ibv_recv_wr = null_mut();
    // SAFETY: `qp` is live (caller's contract), so its context and op table are.
    let post = unsafe { (*(*qp).context).ops.post_recv };
    match post {
        // SAFETY: one well-formed WR.
        Some(p) => unsafe { p(qp, &mut wr, &mut bad) },
        None => libc::ENOSYS,
    }
}

/// Registers `len` bytes at `addr` on `pd`; the region or errno value.
///
/// # Safety
/// The bytes stay allocated until the region is deregistered.
pub(super) unsafe fn reg(
    pd: *mut ibv_pd,
    addr: *mut u8,
    len: usize,
    access: c_int,
) -> Result<*mut ibv_mr, c_int> {
    // SAFETY: forwarded contract.
    let mr = unsafe { crate::ibv_reg_mr(pd, addr as *mut c_void, len, access) };
    if mr.is_null() {
        Err(super::super::error::errno())
    } else {
        Ok(mr)
    }
}
