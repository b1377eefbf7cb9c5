//! Queue pairs (`ibv_qp`).
//!
//! The QP's transport state ([`QpCore`]) sits behind a mutex shared with the engine thread: a
//! post validates synchronously (so every error is returned to the caller, typed) and the
//! engine sends the packets. The engine also takes the lock to feed received packets; the lock
//! is per QP and held for microseconds, so contention is limited to one QP's application
//! thread and the engine.

use std::sync::{Arc, Mutex, MutexGuard};

use super::cq::CompletionQueue;
use super::device::Device;
use super::{QpAttr, QpAttrMask, QpCap, QpType, RecvWr, Result, SendWr, VerbsError};
use crate::transport::QpCore;

/// Creation attributes (`struct ibv_qp_init_attr`).
#[derive(Debug, Clone)]
pub struct QpInitAttr<'a> {
    /// Completion queue of send WRs.
    pub send_cq: &'a CompletionQueue,
    /// Completion queue of receive WRs.
    pub recv_cq: &'a CompletionQueue,
    /// Capacities.
    pub cap: QpCap,
    /// Transport (RC only for now).
    pub qp_type: QpType,
    /// Whether every send WR generates a completion.
    pub sq_sig_all: bool,
}

/// A failed post: WRs before `bad_wr` were posted, `bad_wr` and those after were not
/// (libibverbs returns the same split through its `bad_wr` pointer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostError {
    /// Index of the first WR not posted.
    pub bad_wr: usize,
    /// Why.
    pub error: VerbsError,
}

impl core::fmt::Display for PostError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "work request {}: {}", self.bad_wr, self.error)
    }
}

impl std::error::Error for PostError {}

/// A queue pair. Destroyed when dropped.
#[derive(Debug)]
pub struct QueuePair {
    pub(crate) dev: Arc<Device>,
    pub(crate) core: Arc<Mutex<QpCore>>,
    qpn: u32,
}

impl QueuePair {
    pub(crate) fn new(dev: Arc<Device>, core: Arc<Mutex<QpCore>>, qpn: u32) -> QueuePair {
        QueuePair { dev, core, qpn }
    }

    fn lock(&self) -> MutexGuard<'_, QpCore> {
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// QP number.
    pub fn qp_num(&self) -> u32 {
        self.qpn
    }

    /// `ibv_modify_qp`: checks the transition and attributes as the kernel does.
    pub fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        self.dev.check_open()?;
        self.lock().modify(attr, mask)?;
        self.dev.ring(self.qpn);
        Ok(())
    }

    /// `ibv_query_qp`: the current attributes.
    pub fn query(&self) -> QpAttr {
        self.lock().query()
    }

    /// `ibv_post_send`: queues the WRs in order; stops at the first one refused.
    pub fn post_send(&self, wrs: &[SendWr]) -> core::result::Result<(), PostError> {
        self.dev
            .check_open()
            .map_err(|error| PostError { bad_wr: 0, error })?;
        {
            let mut core = self.lock();
            let mrs = self.dev.mrs.read().unwrap_or_else(|e| e.into_inner());
            for (i, wr) in wrs.iter().enumerate() {
                core.post_send(wr, &mrs)
                    .map_err(|error| PostError { bad_wr: i, error })?;
            }
        }
        self.dev.ring(self.qpn);
        Ok(())
    }

    /// `ibv_post_recv`: queues the WRs in order; stops at the first one refused.
    pub fn post_recv(&self, wrs: &[RecvWr]) -> core::result::Result<(), PostError> {
        self.dev
            .check_open()
            .map_err(|error| PostError { bad_wr: 0, error })?;
        let mut core = self.lock();
        let mrs = self.dev.mrs.read().unwrap_or_else(|e| e.into_inner());
        for (i, wr) in wrs.iter().enumerate() {
            core.post_recv(wr, &mrs)
                .map_err(|error| PostError { bad_wr: i, error })?;
        }
        drop(mrs);
        drop(core);
        // A receive may unblock a peer waiting after an RNR NAK; nothing to send here, but the
        // engine may have completions to deliver (a post in ERROR completes at once).
        self.dev.ring(self.qpn);
        Ok(())
    }

    /// Send WRs posted and not yet completed.
    pub fn send_queue_len(&self) -> usize {
        self.lock().send_queue_len()
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        self.dev.remove_qp(self.qpn);
    }
}
