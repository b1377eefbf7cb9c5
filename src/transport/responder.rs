//! The responder: executes incoming requests and produces ACKs, NAKs and READ/atomic responses
//! (rxe_resp.c). Each request passes rxe's chain of checks, in rxe's order, one function per
//! step: the PSN (check_psn), the opcode sequence (check_op_seq), the operation against the
//! QP's access flags (check_op_valid), the resources: a receive WQE or responder resources
//! (check_resource), the packet length (check_length), the rkey, access and range, and a
//! WRITE's payload against its RETH (check_rkey), then execution, completion and
//! acknowledgement. The first failing check decides the reply, so a peer sees the NAK rxe
//! would send (spec-notes/rc-transport.md rule 35). UC and UD requests go through the same
//! checks and executions; only the verdict on a failure differs by transport, as in rxe's
//! error states: RC answers, UC and UD drop (spec-notes/uc-ud-srq.md).
//!
//! Rules (spec-notes/rc-transport.md):
//! - PSN == expected: execute. Ahead: one NAK "PSN sequence error" carrying the expected PSN
//!   per gap, then silence until the expected PSN arrives. Behind: a duplicate; SEND/WRITE are
//!   re-acknowledged (whatever their AckReq bit), READs replayed from the saved responder
//!   resources (whole or a sub-range), atomics answered with the saved original value without
//!   executing again (IBTA 9.7.5.1.x).
//! - SEND with no receive WQE posted: RNR NAK with the QP's min_rnr_timer; the PSN is not
//!   consumed (IBTA 9.7.5.2.8).
//! - Errors: a bad opcode sequence, a bad length, a disallowed operation or a misaligned
//!   atomic is NAK "invalid request"; a bad rkey, range or right is NAK "remote access error";
//!   a receive buffer too small is NAK "invalid request" with a local length error on the
//!   receive WQE. After such a NAK the QP moves to ERROR (rxe: do_class_ac_error sets
//!   goto_error).
//! - MSN counts completed messages; a READ counts when accepted.
//! - ATOMIC WRITE and FLUSH (IBTA 1.5 memory placement extensions, rxe since Linux 6.2):
//!   an ATOMIC WRITE needs REMOTE_WRITE on the QP and the region, an 8-byte RETH and
//!   payload and an aligned address; a FLUSH the FLUSH_* rights its placement type names.
//!   Both are answered by an RDMA READ RESPONSE ONLY without payload, and a duplicate is
//!   answered again without executing again (spec-notes/memory-placement.md).
//! - A key naming a memory window is checked against the window (state, PD, type 2 QP,
//!   rights, range), a READ through one rechecks it for every response packet, and a SEND
//!   with invalidate invalidates its IETH key once the message has landed
//!   (spec-notes/memory-windows.md).

use std::sync::Arc;

use super::counters::Counters;
use super::keys::MrTable;
use super::mr::{Mr, MrFault};
use super::mw::{key_is_mw, Mw, MwFault};
use super::params::{MAX_MESSAGE, MAX_QUEUED_RESPONSES};
use super::qp::{NetHeader, QpCore};
use super::state::{InMsg, ReadJob, RecvProgress, Resource, Response, WriteProgress};
use super::xrc::XrcRole;
use crate::ib::{AccessFlags, QpState, QpType, WcOpcode, WcStatus, WorkCompletion};
use crate::memory::AccessError;
use crate::wire::packet::finish_payload;
use crate::wire::psn::packets_for;
use crate::wire::{
    feth, AethRepr, AtomicAckEthRepr, BthRepr, ExtHeaders, NakCode, OpKind, Opcode, OpcodeInfo,
    PacketRepr, Position, Psn,
};

mod checks;
mod execute;

/// Why a request was not executed: the error states of rxe_resp.c that softroce has, which
/// [`QpCore::verdict`] turns into each transport's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// RESPST_ERR_PSN_OUT_OF_SEQ: ahead of the expected PSN (UC: a gap, or the rest of a
    /// message being dropped).
    PsnOutOfSeq,
    /// RESPST_DUPLICATE_REQUEST (RC): a PSN already seen.
    Duplicate,
    /// A bad opcode sequence, an operation the QP does not allow, no responder resources, a
    /// bad length, a WRITE's payload against its RETH, a misaligned atomic: rxe's
    /// RESPST_ERR_MISSING_OPCODE_*, _UNSUPPORTED_OPCODE, _TOO_MANY_RDMA_ATM_REQ, _LENGTH and
    /// _MISALIGNED_ATOMIC.
    InvalidRequest,
    /// RESPST_ERR_RNR: no receive WQE.
    NoReceiveWqe,
    /// RESPST_ERR_RKEY_VIOLATION: a bad rkey, right or range.
    RkeyViolation,
    /// The receive WQE's buffer is too small for the SEND (send_data_in: RESPST_ERR_LENGTH).
    RecvTooSmall,
    /// A WRITE's region failed after check_rkey passed (its memory was taken back): rxe's
    /// write_data_in, RESPST_ERR_RKEY_VIOLATION.
    MemAccess,
    /// The receive WQE's buffer failed (its memory was taken back): rxe's send_data_in,
    /// RESPST_ERR_MALFORMED_WQE.
    MalformedWqe,
}

/// The region a WRITE's first packet names: `len` bytes at `offset` of `mr` (none for a
/// zero-length WRITE).
#[derive(Debug)]
struct WriteStart {
    mr: Option<Arc<Mr>>,
    offset: u64,
    len: u64,
}

/// What step 6 (check_rkey) resolved a request to.
#[derive(Debug)]
enum Target {
    /// With the R_Key a SEND with invalidate names, and the window it names if any.
    Send(Option<(u32, Option<Arc<Mw>>)>),
    /// `Some` on the packet that starts the WRITE.
    Write(Option<WriteStart>),
    Read {
        mr: Option<Arc<Mr>>,
        offset: u64,
        len: u64,
        window: Option<(Arc<Mw>, u32)>,
    },
    Atomic {
        mr: Arc<Mr>,
        offset: u64,
    },
    /// ATOMIC WRITE: the word at `offset` of `mr`.
    AtomicWrite {
        mr: Arc<Mr>,
        offset: u64,
    },
    /// FLUSH: the key, rights and (for a range) range checked; nothing to touch.
    Flush,
}

/// The region rights a FLUSH of placement type `placement` needs (rxe check_rkey).
fn flush_rights(placement: u8) -> AccessFlags {
    let mut need = AccessFlags::EMPTY;
    if placement & feth::PLACEMENT_GLOBAL != 0 {
        need |= AccessFlags::FLUSH_GLOBAL;
    }
    if placement & feth::PLACEMENT_PERSISTENT != 0 {
        need |= AccessFlags::FLUSH_PERSISTENT;
    }
    need
}

/// Every refusal of the memory-region table is a remote access error (rxe check_rkey).
fn rkey_fault(f: MrFault) -> Fault {
    match f {
        MrFault::UnknownKey
        | MrFault::WrongPd
        | MrFault::WrongQp
        | MrFault::Invalidated
        | MrFault::AccessDenied
        | MrFault::OutOfRange => Fault::RkeyViolation,
    }
}

impl QpCore {
    fn queue_response(&mut self, r: Response) -> bool {
        if self.resp.out.len() >= MAX_QUEUED_RESPONSES {
            return false;
        }
        self.resp.out.push_back(r);
        true
    }

    /// Queues an ACK for `psn`, coalescing with a queued ACK (not a NAK) that would go first.
    fn queue_ack(&mut self, psn: Psn) {
        if let Some(Response::Ack {
            psn: p,
            aeth_syndrome,
            then_error: false,
        }) = self.resp.out.back_mut()
        {
            if *aeth_syndrome == AethRepr::ack(0).syndrome {
                *p = psn;
                Counters::inc(&self.counters.ack_deferred);
                return;
            }
        }
        self.queue_response(Response::Ack {
            psn,
            aeth_syndrome: AethRepr::ack(0).syndrome,
            then_error: false,
        });
    }

    /// NAKs a request with a fatal code; the QP goes to ERROR once the NAK is sent.
    fn nak_fatal(&mut self, psn: Psn, code: NakCode) {
        Counters::inc(&self.counters.send_nak);
        self.resp.out.push_back(Response::Ack {
            psn,
            aeth_syndrome: AethRepr::nak(code, 0).syndrome,
            then_error: true,
        });
        // Stop accepting requests now.
        self.resp.in_msg = None;
        self.resp.write = None;
        self.resp.nak_sent = true;
        self.resp.fatal = true;
        self.resp.psn = psn.add(0x40_0000); // no later PSN can match before ERROR
    }

    fn rnr_nak(&mut self, psn: Psn) {
        Counters::inc(&self.counters.send_rnr_err);
        // Suppress the PSN-sequence NAK the rest of the burst would otherwise draw.
        self.resp.nak_sent = true;
        let timer = self.attr.min_rnr_timer;
        self.queue_response(Response::Ack {
            psn,
            aeth_syndrome: AethRepr::rnr_nak(timer, 0).syndrome,
            then_error: false,
        });
    }

    /// The receive buffer's memory failed under a SEND (the application took it back,
    /// `ibv_dereg_mr`, while the WQE was posted): the data did not land. As rxe send_data_in
    /// -> RESPST_ERR_MALFORMED_WQE (class A, every transport): the receive WQE completes with
    /// a local QP operation error, RC NAKs "remote operational error", and the QP goes to
    /// ERROR.
    fn recv_buffer_fault(&mut self, psn: Psn) {
        Counters::inc(&self.counters.mem_access_err);
        if let Some(r) = self.resp.recv.take() {
            let wc = self.recv_wc(r.wqe.wr_id, WcStatus::LocQpOpErr, WcOpcode::Recv, 0);
            self.complete_recv(wc);
        }
        match self.cfg.qp_type {
            QpType::Rc => self.nak_fatal(psn, NakCode::RemoteOperationalError),
            _ => self.enter_error(),
        }
    }

    fn complete_recv(&mut self, wc: WorkCompletion) {
        let side = self.recv_side();
        self.completions.push_back((side, wc));
    }

    fn recv_wc(&self, wr_id: u64, status: WcStatus, opcode: WcOpcode, len: u64) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status,
            opcode,
            byte_len: len as u32,
            imm_data: None,
            qp_num: self.cfg.qpn,
            src_qp: self.attr.dest_qp_num,
            solicited: false,
            grh: status == WcStatus::Success,
            invalidated_rkey: None,
            network_hdr_type: None,
            tm: None,
        }
    }

    /// Handles a request packet of any transport (RC, UC, UD). The checks run as the steps of
    /// rxe_resp.c's state machine, in its order, each a function shared by the three
    /// transports (with rxe's per-transport branches inside, where rxe has them); the first
    /// that fails names the fault, and [`Self::verdict`] decides what the transport does about
    /// it: an RC QP NAKs (or RNR-NAKs, or replays a duplicate), a UC or UD QP drops the packet
    /// (UC: the rest of its message too).
    pub(super) fn responder_handle(
        &mut self,
        pkt: &PacketRepr,
        info: &OpcodeInfo,
        mrs: &MrTable,
        net: Option<&NetHeader>,
    ) {
        if !matches!(
            self.attr.qp_state,
            QpState::Rtr | QpState::Rts | QpState::Sqd
        ) || self.resp.fatal
        {
            return;
        }
        let psn = Psn::new(pkt.bth.psn);
        let done = self
            .check_chain(pkt, info, psn, mrs)
            .and_then(|target| self.execute(pkt, info, psn, target, net, mrs));
        if let Err(fault) = done {
            self.verdict(pkt, info, psn, fault);
        }
    }

    /// Steps 1 to 6; on success, what the request resolved to.
    fn check_chain(
        &mut self,
        pkt: &PacketRepr,
        info: &OpcodeInfo,
        psn: Psn,
        mrs: &MrTable,
    ) -> Result<Target, Fault> {
        // 1. RESPST_CHK_PSN.
        self.check_psn(info, psn)?;
        // 2. RESPST_CHK_OP_SEQ.
        self.check_op_seq(info)?;
        // XRC: the SRQ the XRCETH names, in the target QP's domain.
        self.check_xrc_srq(pkt)?;
        // 3. RESPST_CHK_OP_VALID.
        self.check_op_valid(pkt, info)?;
        // 4. RESPST_CHK_RESOURCE.
        self.check_resource(info)?;
        // 5. RESPST_CHK_LENGTH.
        self.check_length(pkt, info)?;
        // 6. RESPST_CHK_RKEY.
        self.check_rkey(pkt, info, mrs)
    }

    /// 7. RESPST_EXECUTE (then COMPLETE and ACKNOWLEDGE).
    fn execute(
        &mut self,
        pkt: &PacketRepr,
        info: &OpcodeInfo,
        psn: Psn,
        target: Target,
        net: Option<&NetHeader>,
        mrs: &MrTable,
    ) -> Result<(), Fault> {
        match target {
            Target::Send(inv) => self.execute_send(pkt, info, psn, net, inv, mrs),
            Target::Write(start) => self.execute_write(pkt, info, psn, start),
            Target::Read {
                mr,
                offset,
                len,
                window,
            } => {
                self.execute_read(pkt, psn, mr, offset, len, window);
                Ok(())
            }
            Target::Atomic { mr, offset } => self.execute_atomic(pkt, info, psn, mr, offset),
            Target::AtomicWrite { mr, offset } => self.execute_atomic_write(pkt, psn, mr, offset),
            Target::Flush => {
                self.execute_flush(psn);
                Ok(())
            }
        }
    }

    /// What the QP does about a request that failed a check or its execution: rxe_resp.c's
    /// error states, whose branches differ by transport. RC answers (class A/C errors NAK and
    /// move the QP to ERROR; RNR and sequence errors NAK and keep it); UC and UD answer nothing:
    /// the packet is dropped and counted, and the message in progress abandoned (classes D1
    /// and E), its receive WQE given back or, with an SRQ, completed with the error's status.
    fn verdict(&mut self, pkt: &PacketRepr, info: &OpcodeInfo, psn: Psn, fault: Fault) {
        if fault == Fault::MemAccess {
            Counters::inc(&self.counters.mem_access_err);
        }
        if fault == Fault::MalformedWqe {
            return self.recv_buffer_fault(psn);
        }
        if self.cfg.qp_type == QpType::Rc {
            return match fault {
                Fault::PsnOutOfSeq => self.nak_sequence_error(),
                Fault::Duplicate => self.responder_duplicate(pkt, info, psn),
                Fault::NoReceiveWqe => self.rnr_nak(psn),
                Fault::InvalidRequest => self.nak_fatal(psn, NakCode::InvalidRequest),
                Fault::RkeyViolation | Fault::MemAccess => {
                    self.nak_fatal(psn, NakCode::RemoteAccessError)
                }
                Fault::RecvTooSmall => {
                    // rxe send_data_in: copy_data fails, RESPST_ERR_LENGTH: the receive WQE
                    // completes with a local length error.
                    if let Some(r) = self.resp.recv.take() {
                        let wc = self.recv_wc(r.wqe.wr_id, WcStatus::LocLenErr, WcOpcode::Recv, 0);
                        self.complete_recv(wc);
                    }
                    self.nak_fatal(psn, NakCode::InvalidRequest)
                }
                Fault::MalformedWqe => {}
            };
        }
        let status = match fault {
            // A gap, or a message being dropped: nothing is abandoned until the next FIRST or
            // ONLY (check_op_seq), which may still complete the message's receive WQE.
            Fault::PsnOutOfSeq | Fault::Duplicate => None,
            Fault::RkeyViolation | Fault::MemAccess => Some(WcStatus::RemAccessErr),
            _ => Some(WcStatus::RemInvReqErr),
        };
        if let Some(status) = status {
            self.abandon_msg(status);
        }
        self.drop_msg();
    }

    /// A request with a PSN already seen.
    fn responder_duplicate(&mut self, pkt: &PacketRepr, info: &OpcodeInfo, psn: Psn) {
        match info.kind {
            OpKind::ReadRequest => {
                let Some(reth) = pkt.ext.reth else { return };
                let mtu = self.mtu() as u64;
                let found = self.resp.resources.iter().find_map(|r| match r {
                    Resource::Read {
                        first,
                        last,
                        mr,
                        va,
                        len,
                        window,
                    } if !psn.is_before(*first) && !psn.is_after(*last) => {
                        Some((*first, mr.clone(), *va, *len, window.clone()))
                    }
                    _ => None,
                });
                let Some((first, mr, va, len, window)) = found else {
                    return; // resources recycled: drop (rxe: class D, silently)
                };
                // The retried request must ask for the tail of the original, starting at the
                // packet its PSN names.
                let skip = psn.distance_from(first) as u64 * mtu;
                let want_va = va.wrapping_add(skip);
                if reth.va != want_va || reth.len as u64 != len.saturating_sub(skip) {
                    return;
                }
                let offset = match &mr {
                    Some(m) => reth.va.wrapping_sub(m.iova),
                    None => 0,
                };
                // The replay supersedes a reply to the same READ still being sent: the
                // requester will only accept the new one (rxe restarts the resource).
                let last = first.add(packets_for(len, self.mtu()) as u32 - 1);
                self.resp.out.retain(|r| match r {
                    Response::Read(j) => j.psn.is_before(first) || j.psn.is_after(last),
                    _ => true,
                });
                self.queue_response(Response::Read(ReadJob {
                    mr,
                    offset,
                    remaining: reth.len as u64,
                    req_psn: psn,
                    psn,
                    first: true,
                    window,
                }));
            }
            OpKind::CompareSwap | OpKind::FetchAdd => {
                let orig = self.resp.resources.iter().find_map(|r| match r {
                    Resource::Atomic { psn: p, orig } if *p == psn => Some(*orig),
                    _ => None,
                });
                if let Some(orig) = orig {
                    self.queue_response(Response::AtomicAck { psn, orig });
                }
            }
            OpKind::AtomicWrite | OpKind::Flush => {
                // Answered again, not executed again (rxe duplicate_request -> replay ->
                // ACKNOWLEDGE); a resource recycled meanwhile: dropped (class D).
                let saved = self
                    .resp
                    .resources
                    .iter()
                    .any(|r| matches!(r, Resource::Placement { psn: p } if *p == psn));
                if saved {
                    self.queue_empty_read_response(psn);
                }
            }
            _ => {
                // A duplicate SEND or WRITE is re-acknowledged whatever its AckReq bit, up to
                // the last PSN received (rxe 6.1 duplicate_request: send_ack(prev_psn) for
                // RXE_SEND_MASK | RXE_WRITE_MASK; IBTA C9-105). A flood of them costs one
                // queued ACK: queue_ack coalesces.
                let last = self.resp.psn.sub(1);
                self.queue_ack(last);
            }
        }
    }

    /// Writes the next response packet, if any.
    pub(super) fn responder_poll(&mut self, buf: &mut [u8]) -> Option<usize> {
        let mtu = self.mtu() as u64;
        let msn = self.resp.msn;
        let dqpn = self.attr.dest_qp_num;
        let front = self.resp.out.front_mut()?;
        let mut bth = BthRepr {
            dest_qp: dqpn,
            ..BthRepr::default()
        };
        let mut ext = ExtHeaders::default();
        let mut payload: Option<(Option<Arc<Mr>>, u64, usize)> = None;
        let mut read_req_psn = Psn::default();
        let mut window_gone = false;
        let mut pop = true;
        let mut then_err = false;
        match front {
            Response::Ack {
                psn,
                aeth_syndrome,
                then_error,
            } => {
                bth.opcode = Opcode::RC_ACK;
                bth.psn = psn.value();
                ext.aeth = Some(AethRepr {
                    syndrome: *aeth_syndrome,
                    msn,
                });
                then_err = *then_error;
            }
            Response::AtomicAck { psn, orig } => {
                bth.opcode = Opcode::RC_ATOMIC_ACK;
                bth.psn = psn.value();
                ext.aeth = Some(AethRepr::ack(msn));
                ext.atomic_ack = Some(AtomicAckEthRepr { orig: *orig });
            }
            Response::Read(job) => {
                let n = job.remaining.min(mtu);
                let last = n == job.remaining;
                bth.opcode = match (job.first, last) {
                    (true, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                    (true, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                    (false, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                    (false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
                };
                bth.psn = job.psn.value();
                if job.first || last {
                    ext.aeth = Some(AethRepr::ack(msn));
                }
                payload = Some((job.mr.clone(), job.offset, n as usize));
                read_req_psn = job.req_psn;
                window_gone = job
                    .window
                    .as_ref()
                    .is_some_and(|(mw, rkey)| !mw.serves(*rkey));
                job.offset += n;
                job.remaining -= n;
                job.psn = job.psn.next();
                job.first = false;
                pop = last;
            }
        }
        bth.opcode = Opcode(bth.opcode.0 | self.xrc_bits());
        let repr = PacketRepr {
            bth,
            ext,
            payload: &[],
        };
        let n = payload.as_ref().map_or(0, |p| p.2);
        let at = repr.emit_headers(buf, n).ok()?;
        if let Some((Some(mr), off, n)) = &payload {
            if window_gone || mr.storage.read(*off, &mut buf[at..at + n]).is_err() {
                // The region failed after check_rkey passed, or the window the READ went
                // through no longer serves its key (invalidated, rebound, deallocated): no
                // response carries bytes that were never read or are no longer granted.
                // rxe read_reply (rxe_recheck_mr) -> RESPST_ERR_RKEY_VIOLATION: a remote
                // access error NAK for the READ, then ERROR; what was queued behind the READ
                // is superseded (an ACK past it would acknowledge the READ).
                Counters::inc(&self.counters.mem_access_err);
                self.resp.out.clear();
                self.nak_fatal(read_req_psn, NakCode::RemoteAccessError);
                return self.responder_poll(buf);
            }
        }
        let len = finish_payload(buf, at, n);
        if pop {
            self.resp.out.pop_front();
        }
        if then_err {
            self.enter_error();
        }
        Some(len)
    }
}

/// The UC and UD verdicts (rxe_resp.c for `IB_QPT_UC` and `IB_QPT_UD`): nothing is
/// acknowledged and nothing is retried. A packet that fails a check is dropped and counted
/// (`dropped_msg_pkts`); the message it belongs to is never completed.
impl QpCore {
    /// Drops a UC/UD request packet; for UC the rest of its message too (rxe `drop_msg`).
    fn drop_msg(&mut self) {
        self.resp.drop_msg = self.cfg.qp_type == QpType::Uc;
        Counters::inc(&self.counters.dropped_msg_pkts);
    }

    /// Abandons the message in progress (IBTA classes D1 and E; rxe do_class_d1e_error and
    /// the UC/UD branches of its error states). Without an SRQ the receive WQE it was filling
    /// goes back to the front of the receive queue, as if untouched (rxe resets its DMA
    /// state); with an SRQ it cannot go back and completes with `status`.
    fn abandon_msg(&mut self, status: WcStatus) {
        self.resp.in_msg = None;
        self.resp.write = None;
        if let Some(r) = self.resp.recv.take() {
            if self.cfg.srq.is_some() {
                let wc = self.recv_wc(r.wqe.wr_id, status, WcOpcode::Recv, 0);
                self.complete_recv(wc);
            } else {
                self.rq.push_front(r.wqe);
            }
        }
    }
}

/// Bytes at the start of a UD receive buffer that hold the GRH area.
pub const GRH_AREA: u64 = 40;
