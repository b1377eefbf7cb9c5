//! Posting work requests (rxe_verbs.c's post_send and post_recv, with rxe's checks): a send
//! WR becomes a send WQE, its data resolved or copied now, and a receive WR a receive WQE.

use super::keys::MrTable;
use super::params::MAX_MESSAGE;
use super::qp::QpCore;
use super::wqe::{LocalData, LocalOp, RecvWqe, SendState, SendWqe, SgeList, UdTarget};
use super::xrc::XrcRole;
use crate::ib::{
    AccessFlags, QpState, QpType, QueueKind, RecvWr, SendFlags, SendWr, SgeFault, UdDest,
    VerbsError, WcStatus, WrOpcode,
};

impl QpCore {
    /// `ibv_post_send` for one WR on an RC or UC QP. On error nothing is queued.
    pub fn post_send(&mut self, wr: &SendWr, mrs: &MrTable) -> Result<(), VerbsError> {
        if self.cfg.qp_type == QpType::Ud {
            return Err(VerbsError::InvalidWr(
                "a UD send needs a destination (post_send_ud)",
            ));
        }
        if self.cfg.xrc.is_some() {
            return Err(VerbsError::InvalidWr(
                "an XRC send names the remote XRC SRQ (post_send_xrc)",
            ));
        }
        self.post_send_inner(wr, None, None, mrs)
    }

    /// `ibv_post_send` for one WR on an XRC initiator QP (`IBV_QPT_XRC_SEND`): as an RC
    /// send, to the XRC SRQ numbered `remote_srqn` at the target (`wr.qp_type.xrc`), which
    /// every packet of the message carries in its XRCETH. An XRC target QP has no send queue.
    pub fn post_send_xrc(
        &mut self,
        wr: &SendWr,
        remote_srqn: u32,
        mrs: &MrTable,
    ) -> Result<(), VerbsError> {
        match self.cfg.xrc {
            Some(XrcRole::Send) => {}
            Some(XrcRole::Recv(_)) => {
                return Err(VerbsError::InvalidWr("an XRC target QP has no send queue"))
            }
            None => return Err(VerbsError::InvalidWr("a remote SRQ is for XRC QPs only")),
        }
        if matches!(
            wr.opcode,
            WrOpcode::Flush { .. } | WrOpcode::AtomicWrite { .. }
        ) {
            // The XRC transport has no FLUSH or ATOMIC WRITE opcode.
            return Err(VerbsError::InvalidWr(
                "XRC carries no FLUSH or ATOMIC WRITE",
            ));
        }
        self.post_send_inner(wr, None, Some(remote_srqn & 0xFF_FFFF), mrs)
    }

    /// `ibv_post_send` for one WR on a UD QP: a SEND or SEND with immediate of at most one
    /// MTU to the QP `dest` names. A Q_Key with bit 31 set means the QP's own Q_Key (IBTA
    /// 10.2.5). On error nothing is queued.
    pub fn post_send_ud(
        &mut self,
        wr: &SendWr,
        dest: &UdDest,
        mrs: &MrTable,
    ) -> Result<(), VerbsError> {
        if self.cfg.qp_type != QpType::Ud {
            return Err(VerbsError::InvalidWr("a destination is for UD QPs only"));
        }
        let qkey = if dest.remote_qkey & 0x8000_0000 != 0 {
            self.attr.qkey
        } else {
            dest.remote_qkey
        };
        let target = UdTarget {
            ip: dest.ah.dgid.to_ip(),
            remote_qpn: dest.remote_qpn & 0xFF_FFFF,
            qkey,
            hop_limit: dest.ah.hop_limit,
            traffic_class: dest.ah.traffic_class,
        };
        self.post_send_inner(wr, Some(target), None, mrs)
    }

    fn post_send_inner(
        &mut self,
        wr: &SendWr,
        ud: Option<UdTarget>,
        xrc_srqn: Option<u32>,
        mrs: &MrTable,
    ) -> Result<(), VerbsError> {
        let state = self.attr.qp_state;
        let (need, length) = self.check_send_wr(wr)?;
        let data = self.send_wr_data(wr, mrs, need)?;
        let data_len = data.len();
        self.check_send_length(data_len, length)?;
        let mut wqe = SendWqe {
            wr_id: wr.wr_id,
            signaled: wr.send_flags.contains(SendFlags::SIGNALED),
            fence: wr.send_flags.contains(SendFlags::FENCE),
            solicited: wr.send_flags.contains(SendFlags::SOLICITED),
            ud,
            xrc_srqn,
            local: LocalOp::resolve(wr.opcode, mrs, self.cfg.pd),
            ..self.new_wqe(wr.opcode, data, data_len)
        };
        if state == QpState::Err {
            wqe.state = SendState::Done(WcStatus::WrFlushErr);
            self.sq.push_back(wqe);
            self.generate_send_completions();
            return Ok(());
        }
        self.sq.push_back(wqe);
        Ok(())
    }

    /// The checks of a send WR before its data is looked at: the opcode against the QP type,
    /// the QP state, room in the send queue, the SGE count, an atomic's alignment, inline
    /// only for SEND and WRITE, READ and atomics only with `max_rd_atomic`. Returns the right
    /// the local buffers need and the exact length an atomic's must have.
    /// A send WQE not yet begun, its PSNs at the send queue's next: unsignaled, with no
    /// fence, datagram target, XRC SRQ or local operation. What a posted WR sets besides, it
    /// sets over this; the QP's own rendezvous WQEs (tag matching) are this.
    pub(super) fn new_wqe(&self, opcode: WrOpcode, data: LocalData, length: u64) -> SendWqe {
        SendWqe {
            wr_id: 0,
            opcode,
            signaled: false,
            fence: false,
            solicited: false,
            data,
            length,
            state: SendState::Posted,
            first_psn: self.req.psn,
            last_psn: self.req.psn,
            read_done: 0,
            read_req_psn: self.req.psn,
            started: false,
            ud: None,
            xrc_srqn: None,
            local: None,
            tm_rndv: None,
        }
    }

    fn check_send_wr(&self, wr: &SendWr) -> Result<(AccessFlags, Option<u64>), VerbsError> {
        let state = self.attr.qp_state;
        let allowed = match self.cfg.qp_type {
            QpType::Rc => true,
            QpType::Uc => matches!(
                wr.opcode,
                WrOpcode::Send
                    | WrOpcode::SendWithImm { .. }
                    | WrOpcode::RdmaWrite { .. }
                    | WrOpcode::RdmaWriteWithImm { .. }
                    | WrOpcode::BindMw { .. }
                    | WrOpcode::LocalInv { .. }
            ),
            QpType::Ud => matches!(wr.opcode, WrOpcode::Send | WrOpcode::SendWithImm { .. }),
        };
        if !allowed {
            return Err(VerbsError::InvalidWr(match self.cfg.qp_type {
                QpType::Ud => "UD carries SEND and SEND with immediate only",
                _ => "UC carries SEND, RDMA WRITE and the local BIND_MW and LOCAL_INV only",
            }));
        }
        if !matches!(state, QpState::Rts | QpState::Sqd | QpState::Err) {
            return Err(VerbsError::InvalidState {
                state,
                call: "post_send",
            });
        }
        if self.sq.len() >= self.cfg.cap.max_send_wr as usize {
            return Err(VerbsError::QueueFull {
                queue: QueueKind::Send,
                depth: self.cfg.cap.max_send_wr,
            });
        }
        if wr.sg_list.len() > self.cfg.cap.max_send_sge as usize {
            return Err(VerbsError::TooManySge {
                given: wr.sg_list.len(),
                max: self.cfg.cap.max_send_sge,
            });
        }
        let (need, length) = match wr.opcode {
            WrOpcode::RdmaRead { .. } => (AccessFlags::LOCAL_WRITE, None),
            WrOpcode::AtomicCmpSwap { remote_addr, .. }
            | WrOpcode::AtomicFetchAdd { remote_addr, .. } => {
                if remote_addr % 8 != 0 {
                    return Err(VerbsError::InvalidWr(
                        "atomic remote address not 8-byte aligned",
                    ));
                }
                (AccessFlags::LOCAL_WRITE, Some(8))
            }
            _ => (AccessFlags::EMPTY, None),
        };
        if wr.send_flags.contains(SendFlags::INLINE) && need != AccessFlags::EMPTY {
            return Err(VerbsError::InvalidWr(
                "inline applies to SEND and WRITE only",
            ));
        }
        if wr.opcode.holds_rd_atomic() && self.attr.max_rd_atomic == 0 {
            return Err(VerbsError::InvalidWr(
                "READ, atomic or ATOMIC WRITE on a QP whose max_rd_atomic is 0",
            ));
        }
        Ok((need, length))
    }

    /// A send WR's data: copied now (ATOMIC WRITE's 8 bytes, inline data), none (FLUSH and
    /// the local operations), or its SGEs resolved against `mrs` with the right `need`.
    fn send_wr_data(
        &mut self,
        wr: &SendWr,
        mrs: &MrTable,
        need: AccessFlags,
    ) -> Result<LocalData, VerbsError> {
        Ok(if let WrOpcode::AtomicWrite { data, .. } = wr.opcode {
            // ATOMIC WRITE's 8 bytes travel in the WR (`atomic_wr` of ibv_wr_atomic_write,
            // copied at post time as rxe's provider does); its SGEs are not looked at.
            let mut v = self.inline_buffer(data.len());
            v.copy_from_slice(&data);
            LocalData::Inline(v)
        } else if matches!(wr.opcode, WrOpcode::Flush { .. }) || wr.opcode.is_local() {
            // FLUSH carries no payload (IBTA oA19-2); BIND_MW and LOCAL_INV move no data:
            // their SGEs are not looked at (as rxe).
            LocalData::Sges(SgeList::Empty)
        } else if wr.send_flags.contains(SendFlags::INLINE) {
            let total: u64 = wr.sg_list.iter().map(|s| s.length as u64).sum();
            if total > self.cfg.cap.max_inline_data as u64 {
                return Err(VerbsError::InlineTooLarge {
                    given: total,
                    max: self.cfg.cap.max_inline_data,
                });
            }
            // Inline data is read from the regions now; the lkeys are still resolved to find
            // the bytes (softroce has no raw pointers), but no access right is needed.
            let resolved = LocalData::resolve(wr.sg_list, mrs, self.cfg.pd, AccessFlags::EMPTY)?;
            let mut v = self.inline_buffer(total as usize);
            resolved.read(0, &mut v).map_err(|_| {
                VerbsError::InvalidWr("an inline SGE's memory was deregistered during the post")
            })?;
            LocalData::Inline(v)
        } else {
            LocalData::resolve(wr.sg_list, mrs, self.cfg.pd, need)?
        })
    }

    /// A send WR's length: an atomic's exactly `length`, every message at most
    /// [`MAX_MESSAGE`], a UD message at most one path MTU.
    fn check_send_length(&self, data_len: u64, length: Option<u64>) -> Result<(), VerbsError> {
        if let Some(n) = length {
            if data_len != n {
                return Err(VerbsError::BadSge {
                    index: 0,
                    fault: SgeFault::AtomicLength,
                });
            }
        }
        if data_len > MAX_MESSAGE {
            return Err(VerbsError::MessageTooLong(data_len));
        }
        if self.cfg.qp_type == QpType::Ud && data_len > self.mtu() as u64 {
            return Err(VerbsError::UdMessageTooLong {
                len: data_len,
                mtu: self.mtu(),
            });
        }
        Ok(())
    }

    /// `ibv_post_recv` for one WR. On error nothing is queued.
    pub fn post_recv(&mut self, wr: &RecvWr, mrs: &MrTable) -> Result<(), VerbsError> {
        let state = self.attr.qp_state;
        if self.cfg.srq.is_some() {
            return Err(VerbsError::InvalidWr(
                "the QP takes its receive WRs from a shared receive queue",
            ));
        }
        if self.cfg.xrc.is_some() {
            return Err(VerbsError::InvalidWr(
                "an XRC QP has no receive queue (an XRC SRQ receives)",
            ));
        }
        if state == QpState::Reset {
            return Err(VerbsError::InvalidState {
                state,
                call: "post_recv",
            });
        }
        if self.rq.len() >= self.cfg.cap.max_recv_wr as usize {
            return Err(VerbsError::QueueFull {
                queue: QueueKind::Recv,
                depth: self.cfg.cap.max_recv_wr,
            });
        }
        if wr.sg_list.len() > self.cfg.cap.max_recv_sge as usize {
            return Err(VerbsError::TooManySge {
                given: wr.sg_list.len(),
                max: self.cfg.cap.max_recv_sge,
            });
        }
        // The PD is checked where the data lands (LocalData::resolve_recv).
        let data = LocalData::resolve_recv(wr.sg_list, mrs)?;
        if state == QpState::Err {
            self.push_flush_recv(wr.wr_id);
            return Ok(());
        }
        self.rq.push_back(RecvWqe {
            wr_id: wr.wr_id,
            data,
        });
        Ok(())
    }
}
