//! The responder's execution, rxe_resp.c's execute state: a SEND into its receive WQE, a
//! WRITE into its region, a READ, an atomic, an ATOMIC WRITE or a FLUSH, and the resources
//! saved to answer their duplicates.

use super::*;
use crate::ib::TmInfo;
use crate::transport::state::TmLanding;
use crate::transport::tag_match::{is_fin, Delivery, TmhOp, TMH_LEN};
use crate::transport::wqe::{LocalData, RecvWqe};

impl QpCore {
    /// A SEND packet into the receive WQE (RC takes it at the message's first packet; UC and
    /// UD took it in check_resource). A UD receive buffer gets the GRH area (the IP header
    /// the datagram arrived with, `net`) before the payload, and its completion names the
    /// sender's QP from the DETH.
    pub(super) fn execute_send(
        &mut self,
        pkt: &PacketRepr,
        info: &OpcodeInfo,
        psn: Psn,
        net: Option<&NetHeader>,
        inv: Option<(u32, Option<Arc<Mw>>)>,
        mrs: &MrTable,
    ) -> Result<(), Fault> {
        let starts = info.position.starts_message();
        if starts && self.resp.recv.is_none() {
            self.resp.recv = Some(self.take_send_recv(pkt.payload)?);
        }
        self.resp.in_msg = Some(InMsg::Send);
        let ud = self.cfg.qp_type == QpType::Ud;
        let grh = if ud && starts { GRH_AREA } else { 0 };
        // An SRQ's receives are checked against its PD (an XRC target's, the one this
        // request's XRCETH named).
        let pd = self.recv_srq().map_or(self.cfg.pd, |s| s.pd());
        let r = self.resp.recv.as_mut().ok_or(Fault::InvalidRequest)?;
        // The receive's regions are checked again where its data lands, once per message:
        // one deregistered, moved to another PD or given other memory (`ibv_rereg_mr`) since
        // the post fails the WQE as rxe's copy_data would (RESPST_ERR_MALFORMED_WQE).
        if starts && !r.wqe.data.recheck(mrs, pd) {
            return Err(Fault::MalformedWqe);
        }
        // A matched EAGER message's TMH is not landed (it is in the first packet).
        let skip = r.tm.filter(|_| starts).map_or(0, |t| t.skip);
        let payload = pkt.payload.get(skip..).unwrap_or_default();
        let n = payload.len() as u64;
        if r.offset + grh + n > r.wqe.data.len() {
            return Err(Fault::RecvTooSmall);
        }
        if grh > 0 {
            let area = net.map_or([0u8; GRH_AREA as usize], |h| h.grh_area());
            r.wqe
                .data
                .write(0, &area)
                .map_err(|_| Fault::MalformedWqe)?;
            r.offset = GRH_AREA;
        }
        r.wqe
            .data
            .write(r.offset, payload)
            .map_err(|_| Fault::MalformedWqe)?;
        r.offset += n;
        self.resp.psn = psn.next();
        if info.position.ends_message() {
            let r = self.resp.recv.take().expect("checked above");
            let mut wc = self.recv_wc(r.wqe.wr_id, WcStatus::Success, WcOpcode::Recv, r.offset);
            wc.imm_data = pkt.ext.imm.map(|i| i.imm);
            wc.solicited = pkt.bth.solicited;
            if let Some(t) = r.tm {
                // As mlx5's TM completions: the TM opcode and flags, no GRH flag.
                wc.opcode = t.opcode;
                wc.tm = Some(t.info);
                wc.grh = false;
            } else if starts && self.cfg.qp_type == QpType::Rc && is_fin(pkt.payload) {
                // A rendezvous FIN at its sender completes as on mlx5 (tm_rndv.rs).
                wc.grh = false;
            }
            if ud {
                wc.src_qp = pkt.ext.deth.map_or(0, |d| d.src_qp);
                // rxe's UD completions say which L3 header the packet had
                // (IB_WC_WITH_NETWORK_HDR_TYPE).
                wc.network_hdr_type = net.map(NetHeader::network_hdr_type);
            }
            if let Some((rkey, mw)) = inv {
                if self.invalidate_remote(rkey, mw.as_deref()).is_err() {
                    // rxe RESPST_ERR_INVALIDATE_RKEY (class J): the receive WQE completes
                    // with a remote invalid request error and the QP goes to ERROR; softroce
                    // also NAKs "invalid request", so the sender learns it too.
                    wc = self.recv_wc(r.wqe.wr_id, WcStatus::RemInvReqErr, WcOpcode::Recv, 0);
                    self.complete_recv(wc);
                    self.resp.in_msg = None;
                    return Err(Fault::InvalidRequest);
                }
                wc.invalidated_rkey = Some(rkey);
            }
            self.complete_recv(wc);
            self.resp.in_msg = None;
            self.resp.msn = (self.resp.msn + 1) & 0xFF_FFFF;
            Counters::inc(&self.counters.rdma_recvs);
        }
        self.ack_if_asked(pkt, psn);
        Ok(())
    }

    /// The receive WQE a SEND's first packet lands in: at a TM SRQ the matched tag's or an
    /// ordinary one, as the payload's TMH decides (tag_match.rs), else the next receive.
    fn take_send_recv(&mut self, payload: &[u8]) -> Result<RecvProgress, Fault> {
        let Some(srq) = self.recv_srq().filter(|s| s.is_tm()) else {
            let wqe = self.take_recv().ok_or(Fault::NoReceiveWqe)?;
            return Ok(RecvProgress {
                wqe,
                offset: 0,
                tm: None,
            });
        };
        let (d, wqe) = srq.tm_deliver(payload).ok_or(Fault::NoReceiveWqe)?;
        let (opcode, info, skip) = match d {
            Delivery::Matched(tmh) if tmh.op == TmhOp::Rndv => {
                // The data is READ from the sender (tm_rndv.rs); this message lands nothing.
                let recv_wr_id = wqe.wr_id;
                if !self.start_rndv(tmh, payload, wqe) {
                    // No RVH: the consumed tag completes with the error the sender learns.
                    let mut wc =
                        self.recv_wc(recv_wr_id, WcStatus::RemInvReqErr, WcOpcode::TmRecv, 0);
                    wc.grh = false;
                    self.complete_recv(wc);
                    return Err(Fault::InvalidRequest);
                }
                let info = TmInfo {
                    tag: tmh.tag,
                    app_ctx: tmh.app_ctx,
                    matched: true,
                    ..TmInfo::default()
                };
                return Ok(RecvProgress {
                    wqe: RecvWqe {
                        wr_id: recv_wr_id,
                        data: LocalData::default(),
                    },
                    offset: 0,
                    tm: Some(TmLanding {
                        opcode: WcOpcode::TmRecv,
                        info,
                        skip: payload.len(),
                    }),
                });
            }
            Delivery::Matched(tmh) => {
                let info = TmInfo {
                    tag: tmh.tag,
                    app_ctx: tmh.app_ctx,
                    matched: true,
                    data_valid: true,
                    ..TmInfo::default()
                };
                (WcOpcode::TmRecv, info, TMH_LEN)
            }
            Delivery::Unexpected => (WcOpcode::TmRecv, TmInfo::default(), 0),
            Delivery::NoTag => (WcOpcode::TmNoTag, TmInfo::default(), 0),
        };
        Ok(RecvProgress {
            wqe,
            offset: 0,
            tm: Some(TmLanding { opcode, info, skip }),
        })
    }

    /// A SEND with invalidate's R_Key, after its message landed: a type 2 window bound to
    /// this QP (mw.rs `invalidate`); a region key is refused, as rxe_invalidate_mr refuses
    /// every region that is not fast-register.
    pub(super) fn invalidate_remote(&self, rkey: u32, mw: Option<&Mw>) -> Result<(), MwFault> {
        match mw {
            Some(mw) => mw.invalidate(self.resp_pd(), self.cfg.qpn, rkey),
            None if key_is_mw(rkey) => Err(MwFault::UnknownKey),
            None => Err(MwFault::RegionKey),
        }
    }

    /// RC only: an ACK for a request that asks for one (UC and UD acknowledge nothing,
    /// whatever the AckReq bit says).
    pub(super) fn ack_if_asked(&mut self, pkt: &PacketRepr, psn: Psn) {
        if self.cfg.qp_type == QpType::Rc && pkt.bth.ack_req {
            self.queue_ack(psn);
        }
    }

    pub(super) fn execute_write(
        &mut self,
        pkt: &PacketRepr,
        info: &OpcodeInfo,
        psn: Psn,
        start: Option<WriteStart>,
    ) -> Result<(), Fault> {
        if let Some(s) = start {
            self.resp.write = Some(WriteProgress {
                mr: s.mr,
                offset: s.offset,
                remaining: s.len,
                total: s.len,
            });
        }
        self.resp.in_msg = Some(InMsg::Write);
        let w = self.resp.write.as_mut().ok_or(Fault::InvalidRequest)?;
        // check_rkey bounded the payload by what the RETH announced.
        let n = (pkt.payload.len() as u64).min(w.remaining);
        if let Some(mr) = &w.mr {
            // A failure here is the region's memory taken back after check_rkey passed:
            // nothing landed, so nothing is acknowledged (rxe write_data_in ->
            // RESPST_ERR_RKEY_VIOLATION).
            mr.storage
                .write(w.offset, &pkt.payload[..n as usize])
                .map_err(|_| Fault::MemAccess)?;
        }
        w.offset += n;
        w.remaining -= n;
        let total = w.total;
        if info.position.ends_message() {
            self.resp.write = None;
            self.resp.in_msg = None;
            self.resp.msn = (self.resp.msn + 1) & 0xFF_FFFF;
            if info.has_imm() {
                // UC took the WQE in check_resource; RC takes it now (check_resource saw one).
                let wqe = match self.resp.recv.take() {
                    Some(r) => r.wqe,
                    None => self.take_recv().ok_or(Fault::NoReceiveWqe)?,
                };
                let mut wc = self.recv_wc(
                    wqe.wr_id,
                    WcStatus::Success,
                    WcOpcode::RecvRdmaWithImm,
                    total,
                );
                wc.imm_data = pkt.ext.imm.map(|i| i.imm);
                wc.solicited = pkt.bth.solicited;
                self.complete_recv(wc);
            }
        }
        self.resp.psn = psn.next();
        self.ack_if_asked(pkt, psn);
        Ok(())
    }

    /// Remembers a READ or atomic for duplicate replay, in a ring of max_dest_rd_atomic
    /// entries (rxe overwrites the oldest).
    pub(super) fn save_resource(&mut self, r: Resource) {
        let cap = (self.attr.max_dest_rd_atomic as usize).max(1);
        while self.resp.resources.len() >= cap {
            self.resp.resources.pop_front();
        }
        self.resp.resources.push_back(r);
    }

    pub(super) fn execute_read(
        &mut self,
        pkt: &PacketRepr,
        psn: Psn,
        mr: Option<Arc<Mr>>,
        offset: u64,
        len: u64,
        window: Option<(Arc<Mw>, u32)>,
    ) {
        let Some(reth) = pkt.ext.reth else { return };
        let pkts = packets_for(len, self.mtu()) as u32;
        self.save_resource(Resource::Read {
            first: psn,
            last: psn.add(pkts - 1),
            mr: mr.clone(),
            va: reth.va,
            len,
            window: window.clone(),
        });
        self.queue_response(Response::Read(ReadJob {
            mr,
            offset,
            remaining: len,
            req_psn: psn,
            psn,
            first: true,
            window,
        }));
        self.resp.psn = psn.add(pkts);
        self.resp.msn = (self.resp.msn + 1) & 0xFF_FFFF;
    }

    pub(super) fn execute_atomic(
        &mut self,
        pkt: &PacketRepr,
        info: &OpcodeInfo,
        psn: Psn,
        mr: Arc<Mr>,
        off: u64,
    ) -> Result<(), Fault> {
        let a = pkt.ext.atomic.ok_or(Fault::InvalidRequest)?;
        // rxe process_atomic: RESPST_ERR_MISALIGNED_ATOMIC, after the key check. The region's
        // storage is word-aligned from its start; an atomic needs the word boundary in storage
        // too, which holds when the region's iova is 8-byte aligned.
        if a.va % 8 != 0 {
            return Err(Fault::InvalidRequest);
        }
        let result = if info.kind == OpKind::CompareSwap {
            mr.storage.compare_swap(off, a.compare, a.swap_add)
        } else {
            mr.storage.fetch_add(off, a.swap_add)
        };
        // The region's memory taken back (deregistered, or unmapped or protected by the
        // application: memory::guard) after the key check is a remote access error, as for
        // the other operations and as an on-demand-paging device answers one it cannot fault
        // in; rxe's pinned pages are always there.
        let orig = result.map_err(|e| match e {
            AccessError::Misaligned { .. } => Fault::InvalidRequest,
            _ => Fault::MemAccess,
        })?;
        self.save_resource(Resource::Atomic { psn, orig });
        self.queue_response(Response::AtomicAck { psn, orig });
        self.resp.psn = psn.next();
        self.resp.msn = (self.resp.msn + 1) & 0xFF_FFFF;
        Ok(())
    }

    /// ATOMIC WRITE (rxe atomic_write_reply): the 8 bytes of the payload stored in one
    /// release store, after everything the QP executed before it (the responder executes in
    /// PSN order). The address must be 8-byte aligned (IBTA A19.4.2; rxe
    /// RESPST_ERR_MISALIGNED_ATOMIC: invalid request); memory taken back after check_rkey is
    /// a remote access error (oA19-28). Answered by an RDMA READ RESPONSE ONLY without payload.
    pub(super) fn execute_atomic_write(
        &mut self,
        pkt: &PacketRepr,
        psn: Psn,
        mr: Arc<Mr>,
        off: u64,
    ) -> Result<(), Fault> {
        let va = pkt.ext.reth.map_or(0, |r| r.va);
        if va % 8 != 0 {
            return Err(Fault::InvalidRequest);
        }
        let mut word = [0u8; 8];
        word.copy_from_slice(&pkt.payload[..8]);
        mr.storage
            .store_u64(off, u64::from_ne_bytes(word))
            .map_err(|e| match e {
                AccessError::Misaligned { .. } => Fault::InvalidRequest,
                _ => Fault::MemAccess,
            })?;
        self.save_resource(Resource::Placement { psn });
        self.queue_empty_read_response(psn);
        self.resp.psn = psn.next();
        self.resp.msn = (self.resp.msn + 1) & 0xFF_FFFF;
        Ok(())
    }

    /// FLUSH (rxe process_flush): every earlier request of the QP has executed, its bytes
    /// stored in the region, before this one (PSN order); the fence orders those stores
    /// before the response, as rxe's wmb() does for global visibility. Persistence never
    /// arises: no region can have FLUSH_PERSISTENT (registration refuses it, as rxe does for
    /// memory that is not persistent), so check_rkey refused such a FLUSH already.
    pub(super) fn execute_flush(&mut self, psn: Psn) {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        self.save_resource(Resource::Placement { psn });
        self.queue_empty_read_response(psn);
        self.resp.psn = psn.next();
        self.resp.msn = (self.resp.msn + 1) & 0xFF_FFFF;
    }

    /// The answer to an ATOMIC WRITE or FLUSH: an RDMA READ RESPONSE ONLY with an ACK AETH
    /// and no payload (rxe send_read_response_ack), which is a READ response of zero bytes.
    pub(super) fn queue_empty_read_response(&mut self, psn: Psn) {
        self.queue_response(Response::Read(ReadJob {
            mr: None,
            offset: 0,
            remaining: 0,
            req_psn: psn,
            psn,
            first: true,
            window: None,
        }));
    }
}
