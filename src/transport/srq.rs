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
use super::tag_match::{self, Delivery, TagList, TmOpError};
use super::wqe::{LocalData, RecvWqe};
use crate::ib::{
    DeviceLimits, QueueKind, RecvWr, SrqAttr, SrqAttrMask, TmInfo, TmOp, TmOpKind, VerbsError,
};

/// The smallest queue rxe creates (RXE_MIN_SRQ_WR): smaller requests are rounded up.
pub const MIN_SRQ_WR: u32 = 1;

#[derive(Debug)]
struct Inner {
    queue: VecDeque<RecvWqe>,
    attr: SrqAttr,
    /// Limit events raised and not yet taken by [`Srq::take_limit_event`].
    events: u32,
    /// A TM SRQ's tag list (`IBV_SRQT_TM`).
    tm: Option<TagList>,
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
                tm: None,
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
        self.take_locked(&mut self.lock())
    }

    fn take_locked(&self, g: &mut Inner) -> Option<RecvWqe> {
        let w = g.queue.pop_front()?;
        let limit = g.attr.srq_limit;
        if limit != 0 && (g.queue.len() as u32) < limit {
            g.attr.srq_limit = 0;
            g.events += 1;
            Counters::inc(&self.counters.srq_limit_events);
        }
        Some(w)
    }

    /// Makes the SRQ a TM SRQ (`IBV_SRQT_TM`) whose tag list holds up to `max_num_tags`
    /// entries (at most [`tag_match::MAX_NUM_TAGS`]).
    pub fn with_tm(self, max_num_tags: u32) -> Result<Srq, VerbsError> {
        if max_num_tags == 0 || max_num_tags > tag_match::MAX_NUM_TAGS {
            return Err(VerbsError::ExceedsDeviceLimit {
                what: "srq max_num_tags",
                requested: max_num_tags as u64,
                limit: tag_match::MAX_NUM_TAGS as u64,
            });
        }
        self.lock().tm = Some(TagList::new(max_num_tags));
        Ok(self)
    }

    /// Whether this is a TM SRQ.
    pub fn is_tm(&self) -> bool {
        self.lock().tm.is_some()
    }

    /// One `ibv_post_srq_ops` operation: `Err` if it is refused before it runs (not a TM
    /// SRQ, too many SGEs, an SGE that is not a valid local buffer); otherwise the
    /// completion it gives (with `None` as its info when it is unsignaled and succeeded),
    /// its status `Ok` or the list's refusal (`IBV_WC_TM_ERR`), and an ADD's handle.
    pub fn tm_op(
        &self,
        op: &TmOp<'_>,
        mrs: &MrTable,
    ) -> Result<(Result<Option<u32>, TmOpError>, TmInfo), VerbsError> {
        let mut g = self.lock();
        let list = g.tm.as_mut().ok_or(VerbsError::InvalidWr(
            "tag list operations on an SRQ that is not a TM SRQ",
        ))?;
        if let Some(n) = op.sync {
            list.sync(n);
        }
        let r = match &op.kind {
            TmOpKind::Add {
                recv_wr_id,
                sg_list,
                tag,
                mask,
            } => {
                if sg_list.len() > tag_match::MAX_SGE as usize {
                    return Err(VerbsError::TooManySge {
                        given: sg_list.len(),
                        max: tag_match::MAX_SGE,
                    });
                }
                let data = LocalData::resolve_recv(sg_list, mrs)?;
                let wqe = RecvWqe {
                    wr_id: *recv_wr_id,
                    data,
                };
                list.add(*tag, *mask, wqe).map(Some)
            }
            TmOpKind::Del { handle } => list.del(*handle).map(|()| None),
            TmOpKind::Sync => Ok(None),
        };
        let info = TmInfo {
            sync_req: list.sync_required(),
            ..TmInfo::default()
        };
        Ok((r, info))
    }

    /// Where a message that arrives at this TM SRQ goes, its payload starting with `head`
    /// (tag_match.rs `TagList::classify`): the delivery and the receive WQE it fills (the
    /// tag's, or the SRQ's front one). `None` when no receive is there for it (receiver not
    /// ready) or the SRQ is not a TM SRQ.
    pub(crate) fn tm_deliver(&self, head: &[u8]) -> Option<(Delivery, RecvWqe)> {
        let mut g = self.lock();
        let has_recv = !g.queue.is_empty();
        match g.tm.as_mut()?.classify(head, has_recv)? {
            (d, Some(w)) => Some((d, w)),
            (d, None) => Some((d, self.take_locked(&mut g)?)),
        }
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
