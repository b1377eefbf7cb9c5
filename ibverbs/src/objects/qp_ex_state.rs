//! The extended part every QP has (rdma-core's `verbs_qp` is a union of `ibv_qp` and
//! `ibv_qp_ex`): the extension as `ibv_create_qp` leaves it, and the work-request builder's
//! state that `qp_ex`'s `ibv_wr_*` functions use. Below `qp`, which holds it, and `qp_ex`.

use std::cell::UnsafeCell;
use std::ptr;
use std::sync::atomic::AtomicBool;
use std::sync::OnceLock;

use libc::c_int;
use softroce::ib::{Sge, WrOpcode};

use crate::ffi::*;

/// What a builder needs of its QP, fixed when `ibv_create_qp_ex` makes it.
pub(super) struct Limits {
    pub(super) max_send_wr: usize,
    pub(super) max_send_sge: usize,
    pub(super) max_inline: usize,
}

/// One WR being built.
#[derive(Clone, Copy)]
pub(super) struct Staged {
    pub(super) wr_id: u64,
    pub(super) flags: u32,
    pub(super) opcode: WrOpcode,
    /// Its SGEs: `sges[sge_at..sge_at + sge_n]` (always the list's last ones).
    pub(super) sge_at: usize,
    pub(super) sge_n: usize,
    /// Its inline data: `inline[at..at + len]` of the staging bytes (the last ones).
    pub(super) inline: Option<(usize, usize)>,
    /// UD: the address handle (as an address: the data path trusts it at post), remote QPN
    /// and Q_Key.
    pub(super) ud: Option<(usize, u32, u32)>,
    /// XRC: the remote XRC SRQ number (`ibv_wr_set_xrc_srqn`).
    pub(super) xrc_srqn: u32,
}

/// The batch between `wr_start` and `wr_complete`/`wr_abort`.
#[derive(Default)]
pub(super) struct Staging {
    pub(super) wrs: Vec<Staged>,
    pub(super) sges: Vec<Sge>,
    pub(super) inline: Vec<u8>,
    /// The first error met while building (rxe's `qp->err`), 0 if none.
    pub(super) err: c_int,
    /// Send WRs outstanding when the batch started.
    pub(super) outstanding: usize,
}

/// A QP's work-request builder: set up by `ibv_create_qp_ex`, unused by plain QPs.
#[derive(Default)]
pub(super) struct WrBuilder {
    pub(super) limits: OnceLock<Limits>,
    /// Held from `wr_start` to `wr_complete` or `wr_abort` (rxe's send-queue spinlock).
    pub(super) busy: AtomicBool,
    /// Touched only by the thread holding `busy`.
    pub(super) st: UnsafeCell<Staging>,
}

// SAFETY: `st` is read and written only by the thread holding `busy` (taken with Acquire,
// released with Release: the API's contract is that the ibv_wr_* calls come between
// wr_start and wr_complete/wr_abort on the thread that started); `limits` is a OnceLock.
unsafe impl Sync for WrBuilder {}

impl WrBuilder {
    /// Whether the QP was made by `ibv_create_qp_ex` (rdma-core's `VERBS_QP_EX`).
    pub(super) fn enabled(&self) -> bool {
        self.limits.get().is_some()
    }
}

/// An `ibv_qp_ex` whose `ibv_qp` part is `qp`, with no builder set (a QP of `ibv_create_qp`,
/// which `ibv_create_qp_ex` completes).
pub(super) fn with_base(qp: ibv_qp) -> ibv_qp_ex {
    ibv_qp_ex {
        qp_base: qp,
        comp_mask: 0,
        wr_id: 0,
        wr_flags: 0,
        wr_atomic_cmp_swp: None,
        wr_atomic_fetch_add: None,
        wr_bind_mw: None,
        wr_local_inv: None,
        wr_rdma_read: None,
        wr_rdma_write: None,
        wr_rdma_write_imm: None,
        wr_send: None,
        wr_send_imm: None,
        wr_send_inv: None,
        wr_send_tso: ptr::null_mut(),
        wr_set_ud_addr: None,
        wr_set_xrc_srqn: ptr::null_mut(),
        wr_set_inline_data: None,
        wr_set_inline_data_list: None,
        wr_set_sge: None,
        wr_set_sge_list: None,
        wr_start: None,
        wr_complete: None,
        wr_abort: None,
        wr_atomic_write: None,
    }
}
