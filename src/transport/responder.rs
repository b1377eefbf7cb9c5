//! The responder: executes incoming requests and produces ACKs, NAKs and READ/atomic responses
//! (rxe_resp.c). Each request passes, in order: the PSN check, the opcode-sequence check, the
//! length check, the resource check (a receive WQE for SEND and WRITE with immediate), the
//! rkey/access check, execution, completion and acknowledgement.
//!
//! Rules (spec-notes/rc-transport.md):
//! - PSN == expected: execute. Ahead: one NAK "PSN sequence error" carrying the expected PSN
//!   per gap, then silence until the expected PSN arrives. Behind: a duplicate; SEND/WRITE are
//!   re-acknowledged, READs replayed from the saved responder resources (whole or a sub-range),
//!   atomics answered with the saved original value without executing again (IBTA 9.7.5.1.x).
//! - SEND with no receive WQE posted: RNR NAK with the QP's min_rnr_timer; the PSN is not
//!   consumed (IBTA 9.7.5.2.8).
//! - Errors: a bad opcode sequence, a bad length or a disallowed operation is NAK "invalid
//!   request"; a bad rkey, range or right is NAK "remote access error"; a receive buffer too
//!   small is NAK "invalid request" with a local length error on the receive WQE. After such a
//!   NAK the QP moves to ERROR (rxe: do_class_d1e_error / goto_error).
//! - MSN counts completed messages; a READ counts when accepted.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use super::counters::Counters;
use super::mr::{Mr, MrFault, MrTable};
use super::qp::{CqSide, QpCore};
use super::wqe::RecvWqe;
use crate::ib::{AccessFlags, QpState, WcOpcode, WcStatus, WorkCompletion};
use crate::wire::packet::finish_payload;
use crate::wire::psn::packets_for;
use crate::wire::{
    AethRepr, AtomicAckEthRepr, BthRepr, ExtHeaders, NakCode, OpKind, Opcode, OpcodeInfo,
    PacketRepr, Position, Psn,
};

/// Most responses queued at once; beyond it duplicate requests are dropped (bounded memory
/// under a flood of duplicates).
pub const MAX_QUEUED_RESPONSES: usize = 256;

/// What the responder is in the middle of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InMsg {
    Send,
    Write,
}

#[derive(Debug)]
struct RecvProgress {
    wqe: RecvWqe,
    offset: u64,
}

#[derive(Debug)]
struct WriteProgress {
    mr: Option<Arc<Mr>>,
    offset: u64,
    remaining: u64,
    total: u64,
}

/// A saved READ or atomic, kept for replaying duplicates.
#[derive(Debug)]
enum Resource {
    Read {
        first: Psn,
        last: Psn,
        mr: Option<Arc<Mr>>,
        va: u64,
        len: u64,
    },
    Atomic {
        psn: Psn,
        orig: u64,
    },
}

/// A READ response being generated, one packet per `poll_transmit`.
#[derive(Debug)]
struct ReadJob {
    mr: Option<Arc<Mr>>,
    offset: u64,
    remaining: u64,
    psn: Psn,
    first: bool,
}

#[derive(Debug)]
enum Response {
    /// ACK or NAK; `then_error` moves the QP to ERROR once it is sent.
    Ack {
        psn: Psn,
        aeth_syndrome: u8,
        then_error: bool,
    },
    AtomicAck {
        psn: Psn,
        orig: u64,
    },
    Read(ReadJob),
}

/// Responder state.
#[derive(Debug, Default)]
pub struct RespState {
    /// Expected PSN.
    pub psn: Psn,
    /// Message sequence number.
    pub msn: u32,
    nak_sent: bool,
    /// A fatal NAK is queued: until it is sent and the QP is in ERROR, no request executes
    /// (whatever its PSN: a peer may send any).
    fatal: bool,
    in_msg: Option<InMsg>,
    recv: Option<RecvProgress>,
    write: Option<WriteProgress>,
    resources: VecDeque<Resource>,
    out: VecDeque<Response>,
}

impl RespState {
    /// Saved READ/atomic resources and queued responses: the two queues whose bounds the
    /// simulation and the fuzz targets check.
    pub(super) fn queue_lens(&self) -> (usize, usize) {
        (self.resources.len(), self.out.len())
    }

    /// Drops everything in progress (QP to ERROR or RESET). The receive WQE being filled, if
    /// any, is returned so that it can be completed as flushed.
    pub(super) fn flush(&mut self) -> Option<RecvWqe> {
        self.fatal = false;
        self.in_msg = None;
        self.write = None;
        self.resources.clear();
        self.out.clear();
        self.recv.take().map(|r| r.wqe)
    }
}

fn fault_nak(f: MrFault) -> NakCode {
    match f {
        MrFault::UnknownKey | MrFault::WrongPd | MrFault::AccessDenied | MrFault::OutOfRange => {
            NakCode::RemoteAccessError
        }
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

    fn complete_recv(&mut self, wc: WorkCompletion) {
        self.completions.push_back((CqSide::Recv, wc));
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
        }
    }

    /// Handles a request packet.
    pub(super) fn responder_handle(
        &mut self,
        _now: Duration,
        pkt: &PacketRepr,
        info: &OpcodeInfo,
        mrs: &MrTable,
    ) {
        if !matches!(
            self.attr.qp_state,
            QpState::Rtr | QpState::Rts | QpState::Sqd
        ) || self.resp.fatal
        {
            return;
        }
        let psn = Psn::new(pkt.bth.psn);
        let d = psn.diff(self.resp.psn);
        if d > 0 {
            Counters::inc(&self.counters.out_of_seq_request);
            if !self.resp.nak_sent {
                self.resp.nak_sent = true;
                Counters::inc(&self.counters.send_nak);
                let epsn = self.resp.psn;
                self.queue_response(Response::Ack {
                    psn: epsn,
                    aeth_syndrome: AethRepr::nak(NakCode::PsnSequenceError, 0).syndrome,
                    then_error: false,
                });
            }
            return;
        }
        if d < 0 {
            Counters::inc(&self.counters.duplicate_request);
            self.responder_duplicate(pkt, info, psn);
            return;
        }
        self.resp.nak_sent = false;

        // Opcode sequence (IBTA 9.7.5.1.3 / rxe check_op_seq).
        let in_seq = matches!(
            (self.resp.in_msg, info.kind, info.position),
            (None, _, Position::First | Position::Only)
                | (
                    Some(InMsg::Send),
                    OpKind::Send,
                    Position::Middle | Position::Last
                )
                | (
                    Some(InMsg::Write),
                    OpKind::Write,
                    Position::Middle | Position::Last
                )
        );
        if !in_seq {
            return self.nak_fatal(psn, NakCode::InvalidRequest);
        }
        // Length (IBTA 9.7.5.1.4 / rxe check_length).
        let mtu = self.mtu() as usize;
        let n = pkt.payload.len();
        let len_ok = match info.position {
            Position::First | Position::Middle => n == mtu,
            Position::Last => (1..=mtu).contains(&n),
            Position::Only => n <= mtu,
        };
        if !len_ok {
            return self.nak_fatal(psn, NakCode::InvalidRequest);
        }
        match info.kind {
            OpKind::Send => self.execute_send(pkt, info, psn),
            OpKind::Write => self.execute_write(pkt, info, psn, mrs),
            OpKind::ReadRequest => self.execute_read(pkt, psn, mrs),
            OpKind::CompareSwap | OpKind::FetchAdd => self.execute_atomic(pkt, info, psn, mrs),
            // FLUSH and ATOMIC WRITE are not supported yet: invalid request, as rxe answers an
            // opcode the QP does not allow.
            _ => self.nak_fatal(psn, NakCode::InvalidRequest),
        }
    }

    fn execute_send(&mut self, pkt: &PacketRepr, info: &OpcodeInfo, psn: Psn) {
        if info.position.starts_message() {
            let Some(wqe) = self.rq.pop_front() else {
                return self.rnr_nak(psn);
            };
            self.resp.recv = Some(RecvProgress { wqe, offset: 0 });
            self.resp.in_msg = Some(InMsg::Send);
        }
        let Some(r) = self.resp.recv.as_mut() else {
            return self.nak_fatal(psn, NakCode::InvalidRequest);
        };
        let n = pkt.payload.len() as u64;
        if r.offset + n > r.wqe.data.len() {
            let r = self.resp.recv.take().expect("checked above");
            let wc = self.recv_wc(r.wqe.wr_id, WcStatus::LocLenErr, WcOpcode::Recv, 0);
            self.complete_recv(wc);
            return self.nak_fatal(psn, NakCode::InvalidRequest);
        }
        r.wqe.data.write(r.offset, pkt.payload);
        r.offset += n;
        self.resp.psn = psn.next();
        if info.position.ends_message() {
            let r = self.resp.recv.take().expect("checked above");
            let mut wc = self.recv_wc(r.wqe.wr_id, WcStatus::Success, WcOpcode::Recv, r.offset);
            wc.imm_data = pkt.ext.imm.map(|i| i.imm);
            wc.solicited = pkt.bth.solicited;
            self.complete_recv(wc);
            self.resp.in_msg = None;
            self.resp.msn = (self.resp.msn + 1) & 0xFF_FFFF;
            Counters::inc(&self.counters.rdma_recvs);
        }
        if pkt.bth.ack_req {
            self.queue_ack(psn);
        }
    }

    fn execute_write(&mut self, pkt: &PacketRepr, info: &OpcodeInfo, psn: Psn, mrs: &MrTable) {
        // A WRITE with immediate consumes a receive WQE: check for one before touching memory.
        if info.has_imm() && info.position.ends_message() && self.rq.is_empty() {
            return self.rnr_nak(psn);
        }
        if info.position.starts_message() {
            if !self
                .attr
                .qp_access_flags
                .contains(AccessFlags::REMOTE_WRITE)
            {
                return self.nak_fatal(psn, NakCode::InvalidRequest);
            }
            let Some((mr, offset, len)) =
                self.resolve_reth(pkt, psn, mrs, AccessFlags::REMOTE_WRITE)
            else {
                return;
            };
            self.resp.write = Some(WriteProgress {
                mr,
                offset,
                remaining: len,
                total: len,
            });
            self.resp.in_msg = Some(InMsg::Write);
        }
        let Some(w) = self.resp.write.as_mut() else {
            return self.nak_fatal(psn, NakCode::InvalidRequest);
        };
        let n = pkt.payload.len() as u64;
        if n > w.remaining {
            return self.nak_fatal(psn, NakCode::InvalidRequest);
        }
        if let Some(mr) = &w.mr {
            let _ = mr.storage.write(w.offset, pkt.payload);
        }
        w.offset += n;
        w.remaining -= n;
        let (remaining, total) = (w.remaining, w.total);
        if info.position.ends_message() {
            if remaining != 0 {
                return self.nak_fatal(psn, NakCode::InvalidRequest);
            }
            self.resp.write = None;
            self.resp.in_msg = None;
            self.resp.msn = (self.resp.msn + 1) & 0xFF_FFFF;
            if info.has_imm() {
                let wqe = self.rq.pop_front().expect("checked at entry");
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
        if pkt.bth.ack_req {
            self.queue_ack(psn);
        }
    }

    /// The region and offset a WRITE or READ's RETH names, with `need` rights over its whole
    /// range; a zero-length operation checks no key (IBTA C9-88). On failure the request is
    /// NAKed (invalid request without a RETH, remote access error for a bad key or range) and
    /// `None` returned.
    fn resolve_reth(
        &mut self,
        pkt: &PacketRepr,
        psn: Psn,
        mrs: &MrTable,
        need: AccessFlags,
    ) -> Option<(Option<Arc<Mr>>, u64, u64)> {
        let Some(reth) = pkt.ext.reth else {
            self.nak_fatal(psn, NakCode::InvalidRequest);
            return None;
        };
        let len = reth.len as u64;
        if len == 0 {
            return Some((None, 0, 0));
        }
        match mrs.resolve_remote(self.cfg.pd, reth.rkey, reth.va, len, need) {
            Ok((mr, off)) => Some((Some(Arc::clone(mr)), off, len)),
            Err(f) => {
                self.nak_fatal(psn, fault_nak(f));
                None
            }
        }
    }

    /// Remembers a READ or atomic for duplicate replay, in a ring of max_dest_rd_atomic
    /// entries (rxe overwrites the oldest).
    fn save_resource(&mut self, r: Resource) {
        let cap = (self.attr.max_dest_rd_atomic as usize).max(1);
        while self.resp.resources.len() >= cap {
            self.resp.resources.pop_front();
        }
        self.resp.resources.push_back(r);
    }

    fn execute_read(&mut self, pkt: &PacketRepr, psn: Psn, mrs: &MrTable) {
        if !self.attr.qp_access_flags.contains(AccessFlags::REMOTE_READ)
            || self.attr.max_dest_rd_atomic == 0
        {
            return self.nak_fatal(psn, NakCode::InvalidRequest);
        }
        let Some((mr, offset, len)) = self.resolve_reth(pkt, psn, mrs, AccessFlags::REMOTE_READ)
        else {
            return;
        };
        let Some(reth) = pkt.ext.reth else { return };
        let pkts = packets_for(len, self.mtu()) as u32;
        self.save_resource(Resource::Read {
            first: psn,
            last: psn.add(pkts - 1),
            mr: mr.clone(),
            va: reth.va,
            len,
        });
        self.queue_response(Response::Read(ReadJob {
            mr,
            offset,
            remaining: len,
            psn,
            first: true,
        }));
        self.resp.psn = psn.add(pkts);
        self.resp.msn = (self.resp.msn + 1) & 0xFF_FFFF;
    }

    fn execute_atomic(&mut self, pkt: &PacketRepr, info: &OpcodeInfo, psn: Psn, mrs: &MrTable) {
        if !self
            .attr
            .qp_access_flags
            .contains(AccessFlags::REMOTE_ATOMIC)
            || self.attr.max_dest_rd_atomic == 0
        {
            return self.nak_fatal(psn, NakCode::InvalidRequest);
        }
        let Some(a) = pkt.ext.atomic else {
            return self.nak_fatal(psn, NakCode::InvalidRequest);
        };
        if a.va % 8 != 0 {
            return self.nak_fatal(psn, NakCode::InvalidRequest);
        }
        let (mr, off) =
            match mrs.resolve_remote(self.cfg.pd, a.rkey, a.va, 8, AccessFlags::REMOTE_ATOMIC) {
                Ok((mr, off)) => (Arc::clone(mr), off),
                Err(f) => return self.nak_fatal(psn, fault_nak(f)),
            };
        // The region's storage is word-aligned from its start; an atomic needs the word
        // boundary in storage too, which holds when the region's iova is 8-byte aligned.
        let result = if info.kind == OpKind::CompareSwap {
            mr.storage.compare_swap(off, a.compare, a.swap_add)
        } else {
            mr.storage.fetch_add(off, a.swap_add)
        };
        let Ok(orig) = result else {
            return self.nak_fatal(psn, NakCode::InvalidRequest);
        };
        self.save_resource(Resource::Atomic { psn, orig });
        self.queue_response(Response::AtomicAck { psn, orig });
        self.resp.psn = psn.next();
        self.resp.msn = (self.resp.msn + 1) & 0xFF_FFFF;
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
                    } if !psn.is_before(*first) && !psn.is_after(*last) => {
                        Some((*first, mr.clone(), *va, *len))
                    }
                    _ => None,
                });
                let Some((first, mr, va, len)) = found else {
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
                    psn,
                    first: true,
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
            _ => {
                if pkt.bth.ack_req {
                    // Re-acknowledge up to the last PSN received (rxe: prev_psn).
                    let last = self.resp.psn.sub(1);
                    self.queue_ack(last);
                }
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
                job.offset += n;
                job.remaining -= n;
                job.psn = job.psn.next();
                job.first = false;
                pop = last;
            }
        }
        let repr = PacketRepr {
            bth,
            ext,
            payload: &[],
        };
        let n = payload.as_ref().map_or(0, |p| p.2);
        let at = repr.emit_headers(buf, n).ok()?;
        if let Some((Some(mr), off, n)) = &payload {
            let _ = mr.storage.read(*off, &mut buf[at..at + n]);
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
