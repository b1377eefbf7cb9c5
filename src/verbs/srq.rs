//! Shared receive queues (`ibv_srq`).

use std::sync::Arc;

use super::cq::CompletionQueue;
use super::qp::PostError;
use crate::driver::device::Device;
use crate::ib::{
    RecvWr, Result, SrqAttr, SrqAttrMask, TmOp, TmOpKind, VerbsError, WcOpcode, WcStatus,
    WorkCompletion,
};
use crate::transport::{Srq, XrcDomain};

/// A shared receive queue (`ibv_srq`): receive WRs that any QP created on it consumes.
#[derive(Debug)]
pub struct SharedReceiveQueue {
    pub(crate) dev: Arc<Device>,
    pub(crate) srq: Arc<Srq>,
    /// An XRC SRQ's domain, which it leaves when dropped.
    pub(crate) xrcd: Option<Arc<XrcDomain>>,
    /// A TM SRQ's CQ, where its tag list operations complete.
    pub(crate) tm_cq: Option<CompletionQueue>,
}

impl SharedReceiveQueue {
    /// `ibv_post_srq_recv`: queues the WRs in order; stops at the first one refused and
    /// returns its index with the error.
    pub fn post_recv(&self, wrs: &[RecvWr]) -> core::result::Result<(), PostError> {
        self.dev
            .check_open()
            .map_err(|error| PostError { bad_wr: 0, error })?;
        let mrs = self.dev.mrs.read().unwrap_or_else(|e| e.into_inner());
        wrs.iter().enumerate().try_for_each(|(i, wr)| {
            self.srq
                .post_recv(wr, &mrs)
                .map_err(|error| PostError { bad_wr: i, error })
        })
    }

    /// `ibv_post_srq_ops` on a TM SRQ: runs the tag list operations in order, each
    /// completing at once on the SRQ's CQ (when signaled, or when it failed: status
    /// `TmErr`, as a concurrently consumed tag gives on mlx5), and pushes to `handles` what
    /// each one that ran returned (an ADD's handle; `None` for the others and for a failed
    /// ADD). Stops at the first one refused before it runs (not a TM SRQ, a bad buffer) and
    /// returns its index with the error.
    pub fn post_ops(
        &self,
        ops: &[TmOp<'_>],
        handles: &mut Vec<Option<u32>>,
    ) -> core::result::Result<(), PostError> {
        self.dev
            .check_open()
            .map_err(|error| PostError { bad_wr: 0, error })?;
        let cq = self.tm_cq.as_ref().ok_or(PostError {
            bad_wr: 0,
            error: VerbsError::InvalidWr("tag list operations on an SRQ that is not a TM SRQ"),
        })?;
        let mrs = self.dev.mrs.read().unwrap_or_else(|e| e.into_inner());
        for (i, op) in ops.iter().enumerate() {
            let (r, info) = self
                .srq
                .tm_op(op, &mrs)
                .map_err(|error| PostError { bad_wr: i, error })?;
            handles.push(r.ok().flatten());
            if r.is_ok() && !op.signaled {
                continue;
            }
            let opcode = match op.kind {
                TmOpKind::Add { .. } => WcOpcode::TmAdd,
                TmOpKind::Del { .. } => WcOpcode::TmDel,
                TmOpKind::Sync => WcOpcode::TmSync,
            };
            cq.inner.push_all([WorkCompletion {
                wr_id: op.wr_id,
                status: if r.is_ok() {
                    WcStatus::Success
                } else {
                    WcStatus::TmErr
                },
                opcode,
                tm: Some(info),
                ..WorkCompletion::default()
            }]);
        }
        Ok(())
    }

    /// Whether this is a TM SRQ (`IBV_SRQT_TM`).
    pub fn is_tm(&self) -> bool {
        self.tm_cq.is_some()
    }

    /// `ibv_modify_srq`: resize (`MAX_WR`) or arm the limit (`LIMIT`).
    pub fn modify(&self, attr: &SrqAttr, mask: SrqAttrMask) -> Result<()> {
        self.srq.modify(attr, mask)
    }

    /// `ibv_query_srq`.
    pub fn query(&self) -> SrqAttr {
        self.srq.query()
    }

    /// Receive WRs queued.
    pub fn len(&self) -> usize {
        self.srq.len()
    }

    /// Whether no receive WR is queued.
    pub fn is_empty(&self) -> bool {
        self.srq.is_empty()
    }

    /// Takes one pending `IBV_EVENT_SRQ_LIMIT_REACHED` asynchronous event, if any.
    pub fn take_limit_event(&self) -> bool {
        self.srq.take_limit_event()
    }

    /// `ibv_get_srq_num`: an XRC SRQ's number, which initiators name in their WRs; `None`
    /// for another SRQ.
    pub fn srq_num(&self) -> Option<u32> {
        self.srq.xrc().map(|(_, n)| n)
    }

    /// `ibv_destroy_srq`: refused (and the SRQ handed back) while a QP uses it.
    pub fn destroy(self) -> core::result::Result<(), (SharedReceiveQueue, VerbsError)> {
        match self.srq.check_destroy() {
            Ok(()) => Ok(()),
            Err(e) => Err((self, e)),
        }
    }
}

impl Drop for SharedReceiveQueue {
    fn drop(&mut self) {
        // An XRC SRQ leaves its domain: later requests naming it are invalid.
        if let (Some(d), Some((_, n))) = (&self.xrcd, self.srq.xrc()) {
            d.remove_srq(n);
            self.dev.remove_xrc_cq(n);
        }
    }
}
