//! The XRC side of a QP (IBTA vol. 1 annex A14; spec-notes/xrc.md): an XRC QP is an RC QP
//! whose packets are of the XRC transport (opcodes 0xA0-0xB7), whose initiator names the
//! target's XRC SRQ in every request and whose target takes receive WQEs from that SRQ, checks
//! memory against the SRQ's protection domain and completes receives on the SRQ's CQ.

use super::qp::{CqSide, QpCore};
use super::xrc::XrcRole;
use crate::ib::{QpAttr, QpAttrMask, QpState};
use crate::wire::Opcode;

impl QpCore {
    /// An XRC QP's role, `None` for other QPs.
    pub fn xrc(&self) -> Option<&XrcRole> {
        self.cfg.xrc.as_ref()
    }

    /// Where receive completions go: the receive CQ, or for an XRC target QP the CQ of the
    /// XRC SRQ its current request named (IBTA annex A14: completions are the SRQ's).
    pub(super) fn recv_side(&self) -> CqSide {
        match (&self.cfg.xrc, &self.resp.xrc_srq) {
            (Some(_), Some(s)) => s.xrc().map_or(CqSide::Recv, |(_, n)| CqSide::Srq(n)),
            _ => CqSide::Recv,
        }
    }

    /// The protection domain a request's memory is checked against: the QP's, or for an XRC
    /// target QP (which has none) the XRC SRQ's.
    pub(super) fn resp_pd(&self) -> u32 {
        match (&self.cfg.xrc, &self.resp.xrc_srq) {
            (Some(_), Some(s)) => s.pd(),
            _ => self.cfg.pd,
        }
    }

    /// The opcode bits of the QP's transport above RC's: 0xA0 for XRC, else 0.
    pub(super) fn xrc_bits(&self) -> u8 {
        if self.cfg.xrc.is_some() {
            Opcode::XRC_BASE
        } else {
            0
        }
    }

    /// The modify-QP rows of the kernel's table for the XRC types (verbs.c `qp_state_table`,
    /// `IB_QPT_XRC_INI` and `IB_QPT_XRC_TGT`), expressed over RC's: an initiator's INIT->RTR
    /// does not require `MAX_DEST_RD_ATOMIC` and `MIN_RNR_TIMER` (it has no responder), a
    /// target's RTR->RTS requires only `TIMEOUT` and `SQ_PSN` (it has no requester). The
    /// attributes the XRC row does not require and RC's does are filled in from the QP's
    /// current ones, so that RC's check passes; `None` when nothing is filled in.
    pub(super) fn xrc_modify_defaults(
        &self,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> (Option<QpAttr>, QpAttrMask) {
        let (Some(role), true) = (&self.cfg.xrc, mask.contains(QpAttrMask::STATE)) else {
            return (None, mask);
        };
        let from = self.attr.qp_state;
        let fill = match (role, from, attr.qp_state) {
            (XrcRole::Send, QpState::Init, QpState::Rtr) => {
                QpAttrMask(QpAttrMask::MAX_DEST_RD_ATOMIC.0 | QpAttrMask::MIN_RNR_TIMER.0)
            }
            (XrcRole::Recv(_), QpState::Rtr, QpState::Rts) => QpAttrMask(
                QpAttrMask::RETRY_CNT.0 | QpAttrMask::RNR_RETRY.0 | QpAttrMask::MAX_QP_RD_ATOMIC.0,
            ),
            _ => return (None, mask),
        };
        let missing = QpAttrMask(fill.0 & !mask.0);
        if missing.0 == 0 {
            return (None, mask);
        }
        let mut a = *attr;
        let cur = &self.attr;
        if missing.contains(QpAttrMask::MAX_DEST_RD_ATOMIC) {
            a.max_dest_rd_atomic = cur.max_dest_rd_atomic;
        }
        if missing.contains(QpAttrMask::MIN_RNR_TIMER) {
            a.min_rnr_timer = cur.min_rnr_timer;
        }
        if missing.contains(QpAttrMask::RETRY_CNT) {
            a.retry_cnt = cur.retry_cnt;
        }
        if missing.contains(QpAttrMask::RNR_RETRY) {
            a.rnr_retry = cur.rnr_retry;
        }
        if missing.contains(QpAttrMask::MAX_QP_RD_ATOMIC) {
            a.max_rd_atomic = cur.max_rd_atomic;
        }
        (Some(a), QpAttrMask(mask.0 | missing.0))
    }
}
