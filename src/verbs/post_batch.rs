//! A chain of work requests posted as one (`ibv_post_send` / `ibv_post_recv` with a list).
//!
//! libibverbs' post calls take a linked list, and rxe's provider queues the whole list under
//! one lock before it rings the kernel once. [`PostBatch`] is that shape for callers that hold
//! their WRs in another form than a slice (the shim walks C's linked list): the QP's lock and
//! the MR table's read lock are taken once for the chain, each WR is validated and queued as
//! it comes (so an error names the WR it concerns, and the WRs before it stay posted), and
//! the engine hears of the batch once, when it ends: a send batch is sent then, on this
//! thread if no other runs the engine (`Device::posted`).

use std::sync::{MutexGuard, RwLockReadGuard};

use super::qp::{PostError, QueuePair, UdSendWr};
use crate::ib::{QpState, RecvWr, Result, SendWr, UdDest, VerbsError};
use crate::transport::{MrTable, QpCore};

/// WRs of one post call on one QP, queued under one lock and rung once, when dropped.
/// Made by [`QueuePair::send_batch`] or [`QueuePair::recv_batch`].
pub struct PostBatch<'a> {
    qp: &'a QueuePair,
    // Options so that Drop can release both locks before it rings: a busy-poll pass takes
    // the QP's lock again.
    core: Option<MutexGuard<'a, QpCore>>,
    mrs: Option<RwLockReadGuard<'a, MrTable>>,
    posted: usize,
    /// A send batch: what was posted is sent at the end (`Device::posted`).
    send: bool,
    /// The engine must hear of this batch: a send was posted, or a receive to a QP in
    /// ERROR (it completes at once, flushed, and the engine delivers that completion). A
    /// receive posted to a working QP needs nothing from the engine: the next SEND finds it.
    ring: bool,
}

impl core::fmt::Debug for PostBatch<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PostBatch")
            .field("qp", &self.qp.qp_num())
            .field("posted", &self.posted)
            .finish()
    }
}

impl<'a> PostBatch<'a> {
    pub(super) fn new(
        qp: &'a QueuePair,
        core: MutexGuard<'a, QpCore>,
        send: bool,
    ) -> Result<PostBatch<'a>> {
        qp.dev.check_open()?;
        let mrs = qp.dev.mrs.read().unwrap_or_else(|e| e.into_inner());
        Ok(PostBatch {
            qp,
            core: Some(core),
            mrs: Some(mrs),
            posted: 0,
            send,
            ring: false,
        })
    }

    #[inline]
    fn with_core(&mut self, f: impl FnOnce(&mut QpCore, &MrTable) -> Result<()>) -> Result<()> {
        match (self.core.as_deref_mut(), self.mrs.as_deref()) {
            (Some(core), Some(mrs)) => {
                f(core, mrs)?;
                self.posted += 1;
                self.ring |= self.send || core.state() == QpState::Err;
                Ok(())
            }
            // Both are Some until Drop.
            _ => Err(VerbsError::DeviceClosed),
        }
    }

    /// Queues one send WR (an RC or UC QP's); on an error nothing of it is queued, and the
    /// WRs queued before it stay queued.
    #[inline]
    pub fn post_send(&mut self, wr: &SendWr) -> Result<()> {
        self.with_core(|core, mrs| core.post_send(wr, mrs))
    }

    /// Queues one UD send WR; as [`post_send`](Self::post_send).
    #[inline]
    pub fn post_send_ud(&mut self, wr: &UdSendWr) -> Result<()> {
        let pd = self.qp.pd;
        self.with_core(|core, mrs| {
            if wr.ah.pd != pd {
                return Err(VerbsError::ForeignObject("address handle"));
            }
            let dest = UdDest {
                ah: wr.ah.attr,
                remote_qpn: wr.remote_qpn,
                remote_qkey: wr.remote_qkey,
            };
            core.post_send_ud(&wr.wr, &dest, mrs)
        })
    }

    /// Queues one send WR of an XRC initiator QP, for the XRC SRQ numbered `remote_srqn` at
    /// the target (`wr.qp_type.xrc.remote_srqn`); as [`post_send`](Self::post_send).
    #[inline]
    pub fn post_send_xrc(&mut self, wr: &SendWr, remote_srqn: u32) -> Result<()> {
        self.with_core(|core, mrs| core.post_send_xrc(wr, remote_srqn, mrs))
    }

    /// Queues one receive WR; as [`post_send`](Self::post_send).
    #[inline]
    pub fn post_recv(&mut self, wr: &RecvWr) -> Result<()> {
        self.with_core(|core, mrs| core.post_recv(wr, mrs))
    }

    /// How many WRs this batch has queued.
    pub fn posted(&self) -> usize {
        self.posted
    }
}

impl Drop for PostBatch<'_> {
    fn drop(&mut self) {
        self.mrs = None;
        self.core = None;
        // WRs queued before a refused one must go out without waiting for an unrelated
        // event: the engine hears of any queued.
        if self.ring {
            self.qp.dev.posted(self.qp.qp_num(), self.send);
        }
    }
}

/// The posting calls of a QP, each one batch.
impl QueuePair {
    /// `ibv_post_send` on a UD QP: queues the WRs in order; stops at the first one refused
    /// (a message over one MTU is refused with [`VerbsError::UdMessageTooLong`]).
    pub fn post_send_ud(&self, wrs: &[UdSendWr]) -> core::result::Result<(), PostError> {
        self.post(wrs, self.send_batch(), PostBatch::post_send_ud)
    }

    /// `ibv_post_send`: queues the WRs in order; stops at the first one refused.
    pub fn post_send(&self, wrs: &[SendWr]) -> core::result::Result<(), PostError> {
        self.post(wrs, self.send_batch(), PostBatch::post_send)
    }

    /// `ibv_post_recv`: queues the WRs in order; stops at the first one refused.
    ///
    /// The engine is rung as for a send: a post in ERROR completes at once and the engine
    /// delivers that completion.
    pub fn post_recv(&self, wrs: &[RecvWr]) -> core::result::Result<(), PostError> {
        self.post(wrs, self.recv_batch(), PostBatch::post_recv)
    }

    /// A batch of send WRs for this QP: one lock and one doorbell for a chain the caller
    /// holds in another form than a slice (see [`PostBatch`]). With busy-poll, the batch's
    /// end sends what it queued on this thread. DeviceClosed once the device is closed.
    pub fn send_batch(&self) -> Result<PostBatch<'_>> {
        PostBatch::new(self, self.lock(), true)
    }

    /// A batch of receive WRs for this QP, as [`send_batch`](Self::send_batch). Busy-poll:
    /// no pass on this thread at its end. A receive makes no packet, and a pass would send
    /// the ACK a completion left for the application's next send (`pass_for_application`)
    /// on its own: ping-pong programs repost their receive before they send.
    pub fn recv_batch(&self) -> Result<PostBatch<'_>> {
        PostBatch::new(self, self.lock(), false)
    }

    /// Posts `wrs` in order into `batch` with `post_one`; the batch rings the engine for
    /// those posted when it ends, also when a later one is refused (the WRs before it are
    /// queued and must go out without waiting for an unrelated event).
    fn post<'q, W>(
        &'q self,
        wrs: &[W],
        batch: Result<PostBatch<'q>>,
        post_one: impl Fn(&mut PostBatch<'q>, &W) -> Result<()>,
    ) -> core::result::Result<(), PostError> {
        let mut batch = batch.map_err(|error| PostError { bad_wr: 0, error })?;
        wrs.iter().enumerate().try_for_each(|(i, wr)| {
            post_one(&mut batch, wr).map_err(|error| PostError { bad_wr: i, error })
        })
    }
}
