//! Local operations on the send queue: BIND_MW and LOCAL_INV (rxe_req.c rxe_do_local_ops).
//! The requester executes one when it reaches it, in posting order with the WRs around it
//! (so a window bound after a SEND is bound only once the requester is past that SEND, and
//! FENCE and SQD hold it back as they hold any WR); no packet is sent and no acknowledgement
//! awaited. Its completion still comes in posting order (`generate_send_completions`). A
//! failure completes the WR with `IBV_WC_MW_BIND_ERR` (bind) or `IBV_WC_LOC_QP_OP_ERR`
//! (invalidate) and moves the QP to ERROR, flushing what follows (rxe: `req_error`).

use super::mw::MwFault;
use super::qp::QpCore;
use super::wqe::SendState;
use crate::ib::{WcStatus, WrOpcode};

impl QpCore {
    /// Executes the local WR at `idx` of the send queue (already executed: after a Go-Back-N
    /// rewind, just passes it) and moves the requester past it.
    pub(super) fn execute_local(&mut self, idx: usize) {
        let (pd, qpn) = (self.cfg.pd, self.cfg.qpn);
        let wqe = &mut self.sq[idx];
        if wqe.state != SendState::Posted {
            self.req.next = idx + 1;
            return;
        }
        let local = wqe.local.clone();
        let result = match wqe.opcode {
            WrOpcode::BindMw {
                mw_rkey,
                new_rkey,
                bind,
            } => local
                .as_ref()
                .and_then(|l| l.mw.as_ref())
                .ok_or(MwFault::UnknownKey)
                .and_then(|mw| {
                    let mr = local.as_ref().and_then(|l| l.mr.as_ref());
                    mw.bind(pd, qpn, mw_rkey, new_rkey, &bind, mr)
                })
                .map(|_| ())
                .map_err(|_| WcStatus::MwBindErr),
            WrOpcode::LocalInv { rkey } => {
                let mw = local.as_ref().and_then(|l| l.mw.as_ref());
                match mw {
                    Some(mw) => mw.invalidate(pd, qpn, rkey),
                    None if super::mw::key_is_mw(rkey) => Err(MwFault::UnknownKey),
                    None => Err(MwFault::RegionKey),
                }
                .map_err(|_| WcStatus::LocQpOpErr)
            }
            _ => Err(WcStatus::LocQpOpErr),
        };
        wqe.started = true;
        self.req.next = idx + 1;
        match result {
            Ok(()) => {
                wqe.state = SendState::Done(WcStatus::Success);
                self.generate_send_completions();
            }
            Err(status) => {
                wqe.state = SendState::Done(status);
                self.enter_error();
            }
        }
    }
}
