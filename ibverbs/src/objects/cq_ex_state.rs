//! The extended part every CQ has (rdma-core's `verbs_cq` is a union of `ibv_cq` and
//! `ibv_cq_ex`): the extension as `ibv_create_cq` leaves it, and the polling state that
//! `cq_ex`'s `start_poll` and readers use. Below `cq`, which holds it, and `cq_ex`.

use std::cell::UnsafeCell;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};

use softroce::ib::WorkCompletion;
use softroce::verbs::cq::Stamp;

use crate::ffi::*;

/// An `ibv_cq_ex` whose `ibv_cq` part is `cq`, with no extension filled in (a CQ of
/// `ibv_create_cq`, which `ibv_create_cq_ex` completes).
pub(super) fn with_base(cq: ibv_cq) -> ibv_cq_ex {
    ibv_cq_ex {
        cq,
        comp_mask: 0,
        status: 0,
        wr_id: 0,
        start_poll: None,
        next_poll: None,
        end_poll: None,
        read_opcode: None,
        read_vendor_err: None,
        read_byte_len: None,
        read_imm_data: None,
        read_qp_num: None,
        read_src_qp: None,
        read_wc_flags: None,
        read_slid: None,
        read_sl: None,
        read_dlid_path_bits: None,
        read_completion_ts: None,
        read_cvlan: null_mut(),
        read_flow_tag: null_mut(),
        read_tm_info: null_mut(),
        read_completion_wallclock_ns: None,
    }
}

/// A CQ's extended polling state: who holds the poll, and the completion being read.
#[derive(Default)]
pub(super) struct ExPoll {
    /// Held from a successful `start_poll` to `end_poll` (rxe's CQ spinlock).
    pub(super) busy: AtomicBool,
    /// The completion `start_poll`/`next_poll` took; read only by the thread holding `busy`.
    pub(super) cur: UnsafeCell<WorkCompletion>,
    /// When it was added to the CQ (zeroes unless the CQ records it); as `cur`.
    pub(super) stamp: UnsafeCell<Stamp>,
}

// SAFETY: `cur` and `stamp` are written and read only by the thread that holds `busy` (acquired with
// Acquire, released with Release), so no two threads touch it at once; the rest is atomic.
unsafe impl Sync for ExPoll {}

impl ExPoll {
    pub(super) fn lock(&self) {
        while self
            .busy
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
            std::thread::yield_now();
        }
    }

    pub(super) fn unlock(&self) {
        self.busy.store(false, Ordering::Release);
    }
}
