//! Shared receive queues (`ibv_srq`).

use std::sync::Arc;

use super::qp::PostError;
use crate::driver::device::Device;
use crate::ib::{RecvWr, Result, SrqAttr, SrqAttrMask, VerbsError};
use crate::transport::{Srq, XrcDomain};

/// A shared receive queue (`ibv_srq`): receive WRs that any QP created on it consumes.
#[derive(Debug)]
pub struct SharedReceiveQueue {
    pub(crate) dev: Arc<Device>,
    pub(crate) srq: Arc<Srq>,
    /// An XRC SRQ's domain, which it leaves when dropped.
    pub(crate) xrcd: Option<Arc<XrcDomain>>,
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
