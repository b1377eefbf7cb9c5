//! Tag matching's rendezvous (`IBV_TMH_RNDV`) at the receiving QP, as mlx5's hardware does
//! it: a matched RNDV message completes at once (`IBV_WC_TM_RECV` with `IBV_WC_TM_MATCH`,
//! the tag and `app_ctx`), the QP READs the data its RVH describes from the sender into the
//! tag's buffer, and when the READ completes the data is reported (`IBV_WC_TM_RECV` with
//! `IBV_WC_TM_DATA_VALID`) and a SEND of a FIN TMH tells the sender its buffer is free
//! (spec-notes/beyond-rxe.md rule 13). Both are internal WQEs on the send queue: they take
//! no room of `max_send_wr` and give no send completion.

use super::qp::QpCore;
use super::tag_match::{Rvh, Tmh, TmhOp};
use super::wqe::{LocalData, RecvWqe, SendWqe};
use crate::ib::{TmInfo, WcOpcode, WcStatus, WorkCompletion, WrOpcode};

/// Why an internal send WQE of tag matching is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RndvRole {
    /// The READ of a matched rendezvous: the tag's `recv_wr_id`, and the FIN's header.
    Read {
        /// The tag entry's `recv_wr_id`.
        recv_wr_id: u64,
        /// The RNDV message's TMH (its tag and `app_ctx` go back in the FIN).
        tmh: Tmh,
    },
    /// The FIN SEND back to the sender.
    Fin,
}

impl QpCore {
    /// A matched RNDV message: queues the READ of the data its RVH (after the TMH in
    /// `payload`) describes into `tag`'s buffer, at most the buffer's length. `false` when
    /// the RVH is missing (the message is then refused as an invalid request).
    pub(super) fn start_rndv(&mut self, tmh: Tmh, payload: &[u8], tag: RecvWqe) -> bool {
        let Some(rvh) = payload
            .get(super::tag_match::TMH_LEN..)
            .and_then(Rvh::parse)
        else {
            return false;
        };
        let length = u64::from(rvh.len).min(tag.data.len());
        let opcode = WrOpcode::RdmaRead {
            remote_addr: rvh.va,
            rkey: rvh.rkey,
        };
        let read = self.new_wqe(opcode, tag.data, length);
        self.sq.push_back(SendWqe {
            tm_rndv: Some(RndvRole::Read {
                recv_wr_id: tag.wr_id,
                tmh,
            }),
            ..read
        });
        true
    }

    /// An internal WQE is done: a rendezvous READ completes its tag (the data valid, or the
    /// READ's error) and sends the FIN; a FIN completes nothing.
    pub(super) fn finish_rndv(&mut self, role: RndvRole, status: WcStatus, length: u64) {
        let RndvRole::Read { recv_wr_id, tmh } = role else {
            return;
        };
        let wc = WorkCompletion {
            wr_id: recv_wr_id,
            status,
            opcode: WcOpcode::TmRecv,
            byte_len: length as u32,
            qp_num: self.cfg.qpn,
            src_qp: self.attr.dest_qp_num,
            tm: Some(TmInfo {
                data_valid: status == WcStatus::Success,
                ..TmInfo::default()
            }),
            ..WorkCompletion::default()
        };
        let side = self.recv_side();
        self.completions.push_back((side, wc));
        if status != WcStatus::Success {
            return;
        }
        let fin = Tmh {
            op: TmhOp::Fin,
            ..tmh
        };
        let mut v = self.inline_buffer(super::tag_match::TMH_LEN);
        v.copy_from_slice(&fin.emit());
        let send = self.new_wqe(
            WrOpcode::Send,
            LocalData::Inline(v),
            fin.emit().len() as u64,
        );
        self.sq.push_back(SendWqe {
            tm_rndv: Some(RndvRole::Fin),
            ..send
        });
    }
}
