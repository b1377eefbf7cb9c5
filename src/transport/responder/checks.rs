//! The responder's checks, rxe_resp.c's states before execution: the PSN (check_psn), the
//! opcode sequence (check_op_seq), the operation the QP allows (check_op_valid), the READ and
//! atomic resources (check_resource), the length (check_length) and the R_Key with its region
//! or window (check_rkey).

use super::*;

impl QpCore {
    /// Step 1 (rxe check_psn). RC: the expected PSN executes; ahead is a sequence error (one
    /// NAK per gap), behind a duplicate, answered by [`Self::responder_duplicate`]. UC: a gap,
    /// or a message being dropped, drops everything up to the next FIRST or ONLY, which
    /// resynchronises the expected PSN. UD: no PSN check.
    pub(super) fn check_psn(&mut self, info: &OpcodeInfo, psn: Psn) -> Result<(), Fault> {
        let d = psn.diff(self.resp.psn);
        match self.cfg.qp_type {
            QpType::Rc => {
                if d > 0 {
                    Counters::inc(&self.counters.out_of_seq_request);
                    return Err(Fault::PsnOutOfSeq);
                }
                if d < 0 {
                    Counters::inc(&self.counters.duplicate_request);
                    return Err(Fault::Duplicate);
                }
                self.resp.nak_sent = false;
            }
            QpType::Uc => {
                if d != 0 {
                    Counters::inc(&self.counters.out_of_seq_request);
                }
                if self.resp.drop_msg || d != 0 {
                    if !info.position.starts_message() {
                        return Err(Fault::PsnOutOfSeq);
                    }
                    self.resp.drop_msg = false;
                }
            }
            QpType::Ud => {}
        }
        Ok(())
    }

    /// XRC (IBTA annex A14; spec-notes/xrc.md): an XRC target QP delivers each request to
    /// the XRC SRQ its XRCETH names, which must be one of the QP's domain; a missing XRCETH,
    /// a number of no SRQ or of another domain's SRQ is an invalid request (NAK, counted
    /// `xrc_srq_errors`). Other QPs pass.
    pub(super) fn check_xrc_srq(&mut self, pkt: &PacketRepr) -> Result<(), Fault> {
        let Some(XrcRole::Recv(domain)) = &self.cfg.xrc else {
            return Ok(());
        };
        match pkt.ext.xrceth.and_then(|x| domain.srq(x.srqn)) {
            Some(srq) => {
                self.resp.xrc_srq = Some(srq);
                Ok(())
            }
            None => {
                Counters::inc(&self.counters.xrc_srq_errors);
                Err(Fault::InvalidRequest)
            }
        }
    }

    /// The NAK of a PSN sequence error, carrying the expected PSN: one per gap, then silence
    /// until the expected PSN arrives.
    pub(super) fn nak_sequence_error(&mut self) {
        if self.resp.nak_sent {
            return;
        }
        self.resp.nak_sent = true;
        Counters::inc(&self.counters.send_nak);
        let epsn = self.resp.psn;
        self.queue_response(Response::Ack {
            psn: epsn,
            aeth_syndrome: AethRepr::nak(NakCode::PsnSequenceError, 0).syndrome,
            then_error: false,
        });
    }

    /// Step 2 (IBTA 9.7.5.1.3 / rxe check_op_seq): a FIRST or ONLY outside a message, a
    /// MIDDLE or LAST of the message in progress. On UC a FIRST or ONLY inside a message
    /// abandons it (class D1/E) and starts the next one (UD messages are single ONLY packets,
    /// so UD never is inside one).
    pub(super) fn check_op_seq(&mut self, info: &OpcodeInfo) -> Result<(), Fault> {
        let continues = matches!(
            (self.resp.in_msg, info.kind, info.position),
            (
                Some(InMsg::Send),
                OpKind::Send,
                Position::Middle | Position::Last
            ) | (
                Some(InMsg::Write),
                OpKind::Write,
                Position::Middle | Position::Last
            )
        );
        let starts = info.position.starts_message();
        match self.resp.in_msg {
            _ if continues => Ok(()),
            None if starts => Ok(()),
            Some(_) if starts && self.cfg.qp_type == QpType::Uc => {
                self.abandon_msg(WcStatus::RemInvReqErr);
                Ok(())
            }
            _ => Err(Fault::InvalidRequest),
        }
    }

    /// Step 3 (rxe check_op_valid, check_qp_attr_access): an operation softroce executes,
    /// allowed by the QP's access flags: an ATOMIC WRITE needs REMOTE_WRITE, a FLUSH the
    /// FLUSH_GLOBAL and/or FLUSH_PERSISTENT rights its placement type names. (UC has only
    /// SENDs and WRITEs, UD only SENDs.)
    pub(super) fn check_op_valid(&self, pkt: &PacketRepr, info: &OpcodeInfo) -> Result<(), Fault> {
        let need = match info.kind {
            OpKind::Send => return Ok(()),
            OpKind::Write | OpKind::AtomicWrite => AccessFlags::REMOTE_WRITE,
            OpKind::ReadRequest => AccessFlags::REMOTE_READ,
            OpKind::CompareSwap | OpKind::FetchAdd => AccessFlags::REMOTE_ATOMIC,
            OpKind::Flush => flush_rights(pkt.ext.feth.map_or(0, |f| f.placement)),
            _ => return Err(Fault::InvalidRequest),
        };
        if self.attr.qp_access_flags.contains(need) {
            Ok(())
        } else {
            Err(Fault::InvalidRequest)
        }
    }

    /// Step 4 (rxe check_resource): a receive WQE for a SEND and for the packet of a WRITE
    /// with immediate that ends it (else RNR NAK on RC, the PSN not consumed; a drop on UC and
    /// UD); responder resources for a READ, atomic or ATOMIC WRITE (max_dest_rd_atomic > 0,
    /// else invalid request; rxe asks none for a FLUSH although it saves one). RC only
    /// looks: it takes the WQE when the request executes, so that a fatal error before that
    /// leaves it queued, to be flushed. UC and UD take it now, so that a later check that
    /// fails gives it back or, with an SRQ, completes it with the error.
    pub(super) fn check_resource(&mut self, info: &OpcodeInfo) -> Result<(), Fault> {
        let rd_atomic = matches!(
            info.kind,
            OpKind::ReadRequest | OpKind::CompareSwap | OpKind::FetchAdd | OpKind::AtomicWrite
        );
        // A SEND's MIDDLE or LAST fills the WQE its FIRST took (check_op_seq ensured one).
        let takes_wqe = match info.kind {
            OpKind::Send => info.position.starts_message(),
            OpKind::Write => info.has_imm() && info.position.ends_message(),
            _ => false,
        };
        if rd_atomic && self.attr.max_dest_rd_atomic == 0 {
            return Err(Fault::InvalidRequest);
        }
        if !takes_wqe {
            return Ok(());
        }
        if self.cfg.qp_type == QpType::Rc {
            // A SEND at a TM SRQ may match a tag instead: execute_send decides.
            let tm_send = info.kind == OpKind::Send && self.recv_srq().is_some_and(|s| s.is_tm());
            return if tm_send || self.has_recv() {
                Ok(())
            } else {
                Err(Fault::NoReceiveWqe)
            };
        }
        if self.resp.recv.is_none() {
            let wqe = self.take_recv().ok_or(Fault::NoReceiveWqe)?;
            self.resp.recv = Some(RecvProgress {
                wqe,
                offset: 0,
                tm: None,
            });
        }
        Ok(())
    }

    /// Step 5 (IBTA 9.7.5.1.4 / rxe check_length): a FIRST or MIDDLE carries exactly one
    /// MTU, a LAST 1 to MTU bytes, an ONLY at most one MTU; a RETH (WRITE, READ, ATOMIC
    /// WRITE, FLUSH) announces at most 2^31 bytes (rxe since 6.2: every RETH, IBTA C9-94).
    pub(super) fn check_length(&self, pkt: &PacketRepr, info: &OpcodeInfo) -> Result<(), Fault> {
        let mtu = self.mtu() as usize;
        let n = pkt.payload.len();
        let fits = match info.position {
            Position::First | Position::Middle => n == mtu,
            Position::Last => (1..=mtu).contains(&n),
            Position::Only => n <= mtu,
        };
        let dma_ok = pkt.ext.reth.map_or(true, |r| r.len as u64 <= MAX_MESSAGE);
        if fits && dma_ok {
            Ok(())
        } else {
            Err(Fault::InvalidRequest)
        }
    }

    /// Step 6 (rxe check_rkey): the memory a WRITE, READ or atomic names, with the rights it
    /// needs over its whole range (remote access error otherwise; a zero-length WRITE or READ
    /// checks no key, IBTA C9-88), and a WRITE packet's payload against what its RETH
    /// announced (invalid request, rxe's RESPST_ERR_LENGTH).
    pub(super) fn check_rkey(
        &self,
        pkt: &PacketRepr,
        info: &OpcodeInfo,
        mrs: &MrTable,
    ) -> Result<Target, Fault> {
        let n = pkt.payload.len() as u64;
        match info.kind {
            // The key of a SEND with invalidate is looked up here and acted on once the
            // message has landed (rxe execute -> invalidate_rkey).
            OpKind::Send => Ok(Target::Send(pkt.ext.ieth.map(|i| {
                let mw = key_is_mw(i.rkey)
                    .then(|| mrs.mw_by_index(i.rkey).cloned())
                    .flatten();
                (i.rkey, mw)
            }))),
            OpKind::Write => {
                let (start, remaining) = if info.position.starts_message() {
                    let (mr, offset, len) =
                        self.resolve_reth(pkt, mrs, AccessFlags::REMOTE_WRITE)?;
                    (Some(WriteStart { mr, offset, len }), len)
                } else {
                    let w = self.resp.write.as_ref().ok_or(Fault::InvalidRequest)?;
                    (None, w.remaining)
                };
                if n > remaining || (info.position.ends_message() && n != remaining) {
                    return Err(Fault::InvalidRequest);
                }
                Ok(Target::Write(start))
            }
            OpKind::ReadRequest => {
                let (mr, offset, len) = self.resolve_reth(pkt, mrs, AccessFlags::REMOTE_READ)?;
                // A READ through a window keeps it, for rechecks (see ReadJob).
                let window = pkt.ext.reth.and_then(|r| {
                    let mw = key_is_mw(r.rkey).then(|| mrs.mw_by_index(r.rkey))??;
                    Some((Arc::clone(mw), r.rkey))
                });
                Ok(Target::Read {
                    mr,
                    offset,
                    len,
                    window: window.filter(|_| len > 0),
                })
            }
            OpKind::CompareSwap | OpKind::FetchAdd => {
                let a = pkt.ext.atomic.ok_or(Fault::InvalidRequest)?;
                let (mr, offset) = mrs
                    .resolve_remote_qp(
                        self.resp_pd(),
                        self.cfg.qpn,
                        a.rkey,
                        a.va,
                        8,
                        AccessFlags::REMOTE_ATOMIC,
                    )
                    .map_err(rkey_fault)?;
                Ok(Target::Atomic { mr, offset })
            }
            OpKind::AtomicWrite => {
                // rxe check_rkey: REMOTE_WRITE over the RETH's range, whose length the
                // payload must match (RESPST_ERR_LENGTH); the operation is 8 bytes (IBTA
                // A19.4.2), so any other length is an invalid request too.
                let reth = pkt.ext.reth.ok_or(Fault::InvalidRequest)?;
                let (mr, offset) = mrs
                    .resolve_remote_qp(
                        self.resp_pd(),
                        self.cfg.qpn,
                        reth.rkey,
                        reth.va,
                        reth.len as u64,
                        AccessFlags::REMOTE_WRITE,
                    )
                    .map_err(rkey_fault)?;
                if reth.len != 8 || n != 8 {
                    return Err(Fault::InvalidRequest);
                }
                Ok(Target::AtomicWrite { mr, offset })
            }
            OpKind::Flush => {
                self.check_flush_rkey(pkt, mrs)?;
                Ok(Target::Flush)
            }
            _ => Err(Fault::InvalidRequest),
        }
    }

    /// A FLUSH's key (rxe check_rkey): the FLUSH rights its placement type names on the region
    /// (or window) and, for selectivity "range", the RETH's range within it; selectivity
    /// "memory region" flushes the whole region and checks no range (a zero-length RETH is
    /// checked too: only a READ's or WRITE's is exempt, C9-88). Failures are remote access
    /// errors.
    pub(super) fn check_flush_rkey(&self, pkt: &PacketRepr, mrs: &MrTable) -> Result<(), Fault> {
        let reth = pkt.ext.reth.ok_or(Fault::InvalidRequest)?;
        let feth = pkt.ext.feth.ok_or(Fault::InvalidRequest)?;
        let need = flush_rights(feth.placement);
        if feth.selectivity == feth::SELECTIVITY_MR && !key_is_mw(reth.rkey) {
            let mr = mrs.by_rkey(reth.rkey).ok_or(Fault::RkeyViolation)?;
            if mr.pd != self.resp_pd() || !mr.access.contains(need) {
                return Err(Fault::RkeyViolation);
            }
            return Ok(());
        }
        mrs.resolve_remote_qp(
            self.resp_pd(),
            self.cfg.qpn,
            reth.rkey,
            reth.va,
            reth.len as u64,
            need,
        )
        .map_err(rkey_fault)?;
        Ok(())
    }

    /// The region and offset a WRITE or READ's RETH names, with `need` rights over its whole
    /// range; a zero-length operation checks no key (IBTA C9-88). Without a RETH: invalid
    /// request; a bad key, right or range: remote access error.
    pub(super) fn resolve_reth(
        &self,
        pkt: &PacketRepr,
        mrs: &MrTable,
        need: AccessFlags,
    ) -> Result<(Option<Arc<Mr>>, u64, u64), Fault> {
        let reth = pkt.ext.reth.ok_or(Fault::InvalidRequest)?;
        let len = reth.len as u64;
        if len == 0 {
            return Ok((None, 0, 0));
        }
        let (mr, off) = mrs
            .resolve_remote_qp(self.resp_pd(), self.cfg.qpn, reth.rkey, reth.va, len, need)
            .map_err(rkey_fault)?;
        Ok((Some(mr), off, len))
    }
}
