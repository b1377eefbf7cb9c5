//! Shared receive queues (rxe_srq.c): one pool of receive WQEs that several QPs (RC, UC, UD)
//! of a protection domain draw on.
//!
//! Rules (spec-notes/uc-ud-srq.md):
//! - `max_wr` and `max_sge` are checked against the device limits at creation, and `max_wr`
//!   again on resize; the limit must be below `max_wr` (rxe_srq_chk_init / rxe_srq_chk_attr).
//! - A responder takes a WQE from the front when a message needs one (rxe get_srq_wqe); if
//!   the queue then holds fewer WQEs than an armed limit, one limit event is raised and the
//!   limit disarmed (`srq->limit = 0`), until `modify(LIMIT)` arms it again.
//! - Destroy is refused while a QP uses the SRQ (rxe: the SRQ is referenced by its QPs).
//!
//! The queue sits behind a mutex: the QPs that share it may be fed by different threads. A
//! QP without an SRQ never touches it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::counters::Counters;
use super::keys::MrTable;
use super::wqe::{LocalData, RecvWqe};
use crate::ib::{DeviceLimits, QueueKind, RecvWr, SrqAttr, SrqAttrMask, VerbsError};

/// The smallest queue rxe creates (RXE_MIN_SRQ_WR): smaller requests are rounded up.
pub const MIN_SRQ_WR: u32 = 1;

#[derive(Debug)]
struct Inner {
    queue: VecDeque<RecvWqe>,
    attr: SrqAttr,
    /// Limit events raised and not yet taken by [`Srq::take_limit_event`].
    events: u32,
}

/// A shared receive queue.
#[derive(Debug)]
pub struct Srq {
    pd: u32,
    /// The device's `max_srq_wr`, which a resize may not exceed.
    max_wr_limit: u32,
    inner: Mutex<Inner>,
    users: AtomicU32,
    counters: Arc<Counters>,
    /// An XRC SRQ's domain and number (`IBV_SRQT_XRC`).
    xrc: Option<(u32, u32)>,
}

impl Srq {
    /// `ibv_create_srq`: checks the attributes against the device's limits as rxe does.
    pub fn new(
        pd: u32,
        attr: SrqAttr,
        limits: &DeviceLimits,
        counters: Arc<Counters>,
    ) -> Result<Srq, VerbsError> {
        if attr.max_wr > limits.max_qp_wr {
            return Err(VerbsError::ExceedsDeviceLimit {
                what: "srq max_wr",
                requested: attr.max_wr as u64,
                limit: limits.max_qp_wr as u64,
            });
        }
        if attr.max_sge > limits.max_sge {
            return Err(VerbsError::ExceedsDeviceLimit {
                what: "srq max_sge",
                requested: attr.max_sge as u64,
                limit: limits.max_sge as u64,
            });
        }
        if attr.srq_limit != 0 {
            // rxe_srq_chk_init: the limit cannot be set at creation (IBTA 11.2.3.1: it is
            // armed through modify).
            return Err(VerbsError::InvalidAttribute {
                attr: "srq_limit",
                reason: "the limit is armed with modify_srq, not at creation",
            });
        }
        let attr = SrqAttr {
            max_wr: attr.max_wr.max(MIN_SRQ_WR),
            ..attr
        };
        Ok(Srq {
            pd,
            max_wr_limit: limits.max_qp_wr,
            inner: Mutex::new(Inner {
                queue: VecDeque::new(),
                attr,
                events: 0,
            }),
            users: AtomicU32::new(0),
            counters,
            xrc: None,
        })
    }

    /// Makes the SRQ an XRC SRQ of domain `xrcd`, numbered `srqn` (24 bits) on the device.
    pub fn with_xrc(self, xrcd: u32, srqn: u32) -> Srq {
        Srq {
            xrc: Some((xrcd, srqn & 0xFF_FFFF)),
            ..self
        }
    }

    /// An XRC SRQ's domain and number.
    pub fn xrc(&self) -> Option<(u32, u32)> {
        self.xrc
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The protection domain.
    pub fn pd(&self) -> u32 {
        self.pd
    }

    /// `ibv_post_srq_recv` for one WR. On error nothing is queued.
    pub fn post_recv(&self, wr: &RecvWr, mrs: &MrTable) -> Result<(), VerbsError> {
        let mut g = self.lock();
        if g.queue.len() >= g.attr.max_wr as usize {
            return Err(VerbsError::QueueFull {
                queue: QueueKind::Recv,
                depth: g.attr.max_wr,
            });
        }
        if wr.sg_list.len() > g.attr.max_sge as usize {
            return Err(VerbsError::TooManySge {
                given: wr.sg_list.len(),
                max: g.attr.max_sge,
            });
        }
        // The PD is checked where the data lands (LocalData::resolve_recv).
        let data = LocalData::resolve_recv(wr.sg_list, mrs)?;
        g.queue.push_back(RecvWqe {
            wr_id: wr.wr_id,
            data,
        });
        Ok(())
    }

    /// `ibv_modify_srq`: resize (`MAX_WR`, not below the WQEs queued nor below an armed
    /// limit) and arm the limit (`LIMIT`, below `max_wr`), as rxe_srq_chk_attr checks.
    pub fn modify(&self, attr: &SrqAttr, mask: SrqAttrMask) -> Result<(), VerbsError> {
        let mut g = self.lock();
        let mut max_wr = g.attr.max_wr;
        if mask.contains(SrqAttrMask::MAX_WR) {
            if attr.max_wr == 0 {
                return Err(VerbsError::InvalidAttribute {
                    attr: "max_wr",
                    reason: "must be at least 1",
                });
            }
            if attr.max_wr > self.max_wr_limit {
                return Err(VerbsError::ExceedsDeviceLimit {
                    what: "srq max_wr",
                    requested: attr.max_wr as u64,
                    limit: self.max_wr_limit as u64,
                });
            }
            if attr.max_wr < g.queue.len() as u32 {
                return Err(VerbsError::InvalidAttribute {
                    attr: "max_wr",
                    reason: "fewer than the receive WRs queued",
                });
            }
            let limit = if mask.contains(SrqAttrMask::LIMIT) {
                attr.srq_limit
            } else {
                g.attr.srq_limit
            };
            if limit != 0 && attr.max_wr < limit {
                return Err(VerbsError::InvalidAttribute {
                    attr: "max_wr",
                    reason: "below the armed limit",
                });
            }
            max_wr = attr.max_wr.max(MIN_SRQ_WR);
        }
        if mask.contains(SrqAttrMask::LIMIT) && attr.srq_limit >= max_wr {
            return Err(VerbsError::InvalidAttribute {
                attr: "srq_limit",
                reason: "must be below max_wr",
            });
        }
        g.attr.max_wr = max_wr;
        if mask.contains(SrqAttrMask::LIMIT) {
            g.attr.srq_limit = attr.srq_limit;
        }
        Ok(())
    }

    /// `ibv_query_srq`: the attributes, with the limit as it stands (0 once an event fired).
    pub fn query(&self) -> SrqAttr {
        self.lock().attr
    }

    /// Receive WRs queued.
    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    /// Whether no receive WR is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes the WQE at the front for a message (rxe get_srq_wqe), raising the limit event
    /// if the queue fell below an armed limit.
    pub(crate) fn take(&self) -> Option<RecvWqe> {
        let mut g = self.lock();
        let w = g.queue.pop_front()?;
        let limit = g.attr.srq_limit;
        if limit != 0 && (g.queue.len() as u32) < limit {
            g.attr.srq_limit = 0;
            g.events += 1;
            Counters::inc(&self.counters.srq_limit_events);
        }
        Some(w)
    }

    /// Takes one pending limit event (`IBV_EVENT_SRQ_LIMIT_REACHED`), if any.
    pub fn take_limit_event(&self) -> bool {
        let mut g = self.lock();
        if g.events > 0 {
            g.events -= 1;
            true
        } else {
            false
        }
    }

    /// Records a QP created on this SRQ.
    pub fn attach(&self) {
        self.users.fetch_add(1, Ordering::AcqRel);
    }

    /// Records a QP that used this SRQ destroyed.
    pub fn detach(&self) {
        let _ = self
            .users
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// `ibv_destroy_srq`'s check: refused while a QP uses the SRQ.
    pub fn check_destroy(&self) -> Result<(), VerbsError> {
        if self.users.load(Ordering::Acquire) > 0 {
            return Err(VerbsError::Busy("shared receive queue (a QP uses it)"));
        }
        Ok(())
    }
}
