//! The completer: matches ACKs, NAKs and READ/atomic responses to send WQEs, completes them in
//! posting order, and decides on retransmission (rxe_comp.c).
//!
//! Rules (spec-notes/rc-transport.md):
//! - An ACK for PSN n acknowledges every request up to n (coalesced ACKs, IBTA 9.7.5.1.1);
//!   stale and duplicate ACKs change nothing.
//! - A READ response or atomic ACK implicitly acknowledges the SEND/WRITE requests before it.
//! - ATOMIC WRITE and FLUSH (IBTA 1.5) are answered by an RDMA READ RESPONSE ONLY without
//!   payload, which acknowledges them as an ACK would; like a WRITE, a later ACK also
//!   completes them (rxe_comp.c check_psn leaves them out of WR_ATOMIC_OR_READ_MASK).
//! - A response or ACK beyond an outstanding READ/atomic whose response has not arrived means
//!   that response was lost: retry from it.
//! - NAK "PSN sequence error" with PSN n: everything before n is acknowledged; Go-Back-N from n.
//! - RNR NAK: wait the encoded RNR time, then resend from the NAKed PSN; `rnr_retry` counts
//!   these (7 = forever).
//! - NAK invalid request / remote access / remote operational: the WQE completes with that
//!   error and the QP moves to ERROR, flushing the rest.
//! - Retransmission timer 4.096 us x 2^timeout: on expiry Go-Back-N from the oldest
//!   unacknowledged PSN. `retry_cnt` counts timeouts and sequence-NAK retries without
//!   progress; progress restores it (rxe treats 7 as unlimited).

use std::time::Duration;

use super::counters::Counters;
use super::qp::QpCore;
use super::requester::read_piece_end;
use super::wqe::SendState;
use crate::ib::{QpState, WcStatus, WrOpcode};
use crate::wire::aeth::rnr_timer_ns;
use crate::wire::{AckSyndrome, NakCode, OpKind, OpcodeInfo, PacketRepr, Position, Psn};

impl QpCore {
    /// Progress was made: restart the timer and restore the retry budgets.
    fn progress(&mut self, now: Duration) {
        self.req.retry_started = false;
        self.req.retry_left = self.attr.retry_cnt;
        self.req.rnr_retry_left = self.attr.rnr_retry;
        self.req.timer = None;
        if self.sq.iter().any(|w| w.state == SendState::InFlight) {
            self.arm_timer(now);
        }
    }

    /// Marks every SEND/WRITE WQE whose last PSN is before or at `psn` as done. Stops at a
    /// READ/atomic still waiting for its response; if that one lies entirely before `psn`,
    /// its response was lost and `Some(its first unanswered PSN)` is returned.
    fn ack_through(&mut self, psn: Psn) -> Option<Psn> {
        let mtu = self.mtu() as u64;
        for w in self.sq.iter_mut() {
            match w.state {
                SendState::Done(_) => continue,
                SendState::Posted => break,
                SendState::InFlight => {}
            }
            if psn.is_before(w.last_psn) {
                break;
            }
            if w.opcode.is_read_or_atomic() {
                // Acknowledged past it without its data: the response was lost.
                let resume = w.first_psn.add((w.read_done / mtu) as u32);
                return Some(resume);
            }
            w.state = SendState::Done(WcStatus::Success);
        }
        None
    }

    /// Moves the completer's position forward to `psn` (the oldest unacknowledged PSN).
    fn advance_comp(&mut self, psn: Psn) {
        // Never past the first PSN of the oldest READ/atomic whose response has not arrived
        // (for a READ: past the bytes received): only that response acknowledges it. A NAK or
        // RNR NAK naming a PSN inside it must not, or the requester, which resends a READ from
        // its missing bytes, would resume behind the completer.
        let mtu = self.mtu() as u64;
        let psn = match self
            .sq
            .iter()
            .find(|w| !matches!(w.state, SendState::Done(_)))
        {
            Some(w) if w.state == SendState::InFlight && w.opcode.is_read_or_atomic() => {
                let resume = w.first_psn.add((w.read_done / mtu) as u32);
                if psn.is_after(resume) {
                    resume
                } else {
                    psn
                }
            }
            _ => psn,
        };
        if psn.is_after(self.req.comp_psn) {
            self.req
                .window
                .on_acked(psn.distance_from(self.req.comp_psn));
            self.req.comp_psn = psn;
        }
        // After a rewind the requester may be resending what has meanwhile been acknowledged:
        // move it up to the first PSN still unacknowledged.
        if self.req.psn.is_before(self.req.comp_psn) {
            let at = self.req.comp_psn;
            self.rewind_to(at);
        }
    }

    /// Starts a Go-Back-N retry at `psn`, charging the retry budget. Returns false (and fails
    /// the oldest WQE) when the budget is exhausted.
    fn retry_from(&mut self, psn: Psn) -> bool {
        if self.req.retry_left == 0 {
            Counters::inc(&self.counters.retry_exceeded_err);
            self.fail_oldest(WcStatus::RetryExcErr);
            return false;
        }
        if self.req.retry_left != 7 {
            self.req.retry_left -= 1;
        }
        Counters::inc(&self.counters.completer_retry_err);
        self.req.retry_started = true;
        self.req.window.on_loss();
        self.rewind_to(psn);
        true
    }

    /// A retry caused by responses that reveal a loss: only one per loss, until progress.
    fn retry_on_loss(&mut self, psn: Psn) {
        if !self.req.retry_started {
            self.retry_from(psn);
        }
    }

    /// Completes the oldest outstanding WQE with `status` and moves the QP to ERROR.
    fn fail_oldest(&mut self, status: WcStatus) {
        if let Some(w) = self
            .sq
            .iter_mut()
            .find(|w| !matches!(w.state, SendState::Done(_)))
        {
            w.state = SendState::Done(status);
        }
        self.enter_error();
    }

    /// The local buffer of the READ or atomic at `idx` failed under its response (the
    /// application took the memory back while the WR was outstanding): the WR completes with
    /// a local protection error and the QP goes to ERROR (rxe_comp.c: copy_data fails,
    /// COMPST_ERROR with IB_WC_LOC_PROT_ERR).
    fn local_buffer_fault(&mut self, idx: usize) {
        Counters::inc(&self.counters.mem_access_err);
        self.sq[idx].state = SendState::Done(WcStatus::LocProtErr);
        self.enter_error();
    }

    /// Handles a response packet (ACK, READ response, ATOMIC ACK).
    pub(super) fn completer_handle(&mut self, now: Duration, pkt: &PacketRepr, info: &OpcodeInfo) {
        if !matches!(self.attr.qp_state, QpState::Rts | QpState::Sqd) {
            return;
        }
        let psn = Psn::new(pkt.bth.psn);
        // The outstanding window is [comp_psn, high_psn): the oldest unacknowledged PSN up to
        // the next PSN never sent. A response outside it is a duplicate, stale or forged, and
        // changes nothing: no ACK, NAK or RNR NAK before comp_psn may rewind the requester, and
        // none for a PSN never sent may acknowledge anything (rxe_comp.c check_psn; rules 19,
        // 23 and 36 of spec-notes/rc-transport.md).
        if psn.is_before(self.req.comp_psn) || !psn.is_before(self.req.high_psn) {
            Counters::inc(&self.counters.stale_resp_pkts);
            return;
        }
        match info.kind {
            OpKind::Ack => self.on_ack(now, pkt, psn),
            OpKind::ReadResponse => self.on_read_response(now, pkt, info, psn),
            OpKind::AtomicAck => self.on_atomic_ack(now, pkt, psn),
            _ => {}
        }
    }

    /// A NAK, RNR or not, for `psn` acknowledges every request before it (IBTA 9.7.5.1.1).
    /// Returns true when that uncovered a READ/atomic whose response was lost: the retry from
    /// it has started and the NAK itself is moot.
    fn acknowledge_before_nak(&mut self, psn: Psn) -> bool {
        if psn.is_after(self.req.comp_psn) {
            if let Some(resume) = self.ack_through(psn.sub(1)) {
                self.advance_comp(resume);
                self.retry_from(resume);
                return true;
            }
            self.advance_comp(psn);
        }
        false
    }

    fn on_ack(&mut self, now: Duration, pkt: &PacketRepr, psn: Psn) {
        let Some(aeth) = pkt.ext.aeth else { return };
        match aeth.kind() {
            AckSyndrome::Ack { .. } => {
                if psn.is_before(self.req.comp_psn) {
                    return; // stale or duplicate
                }
                let lost = self.ack_through(psn);
                match lost {
                    Some(resume) => {
                        // Progress only if something before the READ/atomic was newly
                        // acknowledged: a duplicate of this ACK must not restore the retry
                        // budget or start a second retry for the same loss.
                        if resume.is_after(self.req.comp_psn) {
                            self.advance_comp(resume);
                            self.progress(now);
                        }
                        self.retry_on_loss(resume);
                    }
                    None => {
                        self.advance_comp(psn.next());
                        self.progress(now);
                    }
                }
            }
            AckSyndrome::RnrNak { timer } => {
                Counters::inc(&self.counters.rcvd_rnr_err);
                if psn.is_before(self.req.comp_psn) {
                    return; // stale: rewinding to it would resend what was acknowledged
                }
                if self.acknowledge_before_nak(psn) {
                    return;
                }
                if self.req.rnr_retry_left == 0 {
                    Counters::inc(&self.counters.retry_rnr_exceeded_err);
                    self.fail_oldest(WcStatus::RnrRetryExcErr);
                    return;
                }
                if self.req.rnr_retry_left != 7 {
                    self.req.rnr_retry_left -= 1;
                }
                self.rewind_to(psn);
                self.req.rnr_psn = psn;
                self.req.rnr_until = Some(now + Duration::from_nanos(rnr_timer_ns(timer)));
                self.req.timer = None;
            }
            AckSyndrome::Nak(code) => {
                Counters::inc(&self.counters.rcvd_nak);
                if psn.is_before(self.req.comp_psn) {
                    return; // stale
                }
                if self.acknowledge_before_nak(psn) {
                    return;
                }
                let status = match code {
                    NakCode::PsnSequenceError => {
                        Counters::inc(&self.counters.rcvd_seq_err);
                        // While waiting out an RNR NAK the requester resends from that PSN
                        // anyway; a sequence NAK for it must not cut the wait short.
                        if self.req.rnr_until.is_some() && psn == self.req.rnr_psn {
                            return;
                        }
                        // With the budget spent the QP is in ERROR: no timer then.
                        if self.retry_from(psn) {
                            self.req.timer = None;
                            self.arm_timer(now);
                        }
                        return;
                    }
                    NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                    NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                    NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                    NakCode::InvalidRdRequest | NakCode::Reserved(_) => WcStatus::BadRespErr,
                };
                self.fail_oldest(status);
            }
            AckSyndrome::Reserved(_) => {}
        }
    }

    /// The oldest WQE not yet done, if it is a READ/atomic in flight: its index.
    fn oldest_pending_response(&mut self, psn: Psn) -> Option<usize> {
        // Requests before the response's PSN are implicitly acknowledged.
        match self.ack_through(psn.sub(1)) {
            Some(resume) if resume != psn => {
                // An earlier READ/atomic never got its response: retry it.
                self.advance_comp(resume);
                self.retry_on_loss(resume);
                return None;
            }
            _ => {
                // The WQEs `ack_through` completed are acknowledged: move the completer's
                // position up to the oldest one still pending (never past the response), as
                // an ACK would. Left behind, a requester rewound into a completed WQE would
                // resume inside whatever WQE took its place in the queue.
                let front = self
                    .sq
                    .iter()
                    .find(|w| !matches!(w.state, SendState::Done(_)))
                    .map(|w| (w.state, w.first_psn));
                let to = match front {
                    Some((SendState::InFlight, first)) if first.is_before(psn) => first,
                    _ => psn,
                };
                self.advance_comp(to);
            }
        }
        let idx = self
            .sq
            .iter()
            .position(|w| !matches!(w.state, SendState::Done(_)))?;
        let w = &self.sq[idx];
        if w.state != SendState::InFlight || !w.opcode.is_read_or_atomic() {
            return None;
        }
        Some(idx)
    }

    fn on_read_response(&mut self, now: Duration, pkt: &PacketRepr, info: &OpcodeInfo, psn: Psn) {
        if psn.is_before(self.req.comp_psn) {
            return; // duplicate response
        }
        if let Some(idx) = self.placement_at(psn) {
            return self.on_placement_response(now, pkt, info, psn, idx);
        }
        let Some(idx) = self.oldest_pending_response(psn) else {
            return;
        };
        let mtu = self.mtu() as u64;
        let w = &self.sq[idx];
        if !matches!(w.opcode, WrOpcode::RdmaRead { .. }) {
            Counters::inc(&self.counters.rcvd_nak);
            return self.fail_oldest(WcStatus::BadRespErr);
        }
        let expected = w.first_psn.add((w.read_done / mtu) as u32);
        if psn != expected {
            if psn.is_after(expected) {
                // Earlier response packets were lost.
                self.advance_comp(expected);
                self.retry_on_loss(expected);
            }
            return;
        }
        let n = pkt.payload.len() as u64;
        // The response answers the request for the piece that holds the next byte.
        let remaining = read_piece_end(w.read_done, w.length, mtu) - w.read_done;
        let size_ok = match info.position {
            Position::First | Position::Middle => n == mtu && n < remaining,
            Position::Last | Position::Only => n == remaining,
        };
        // The response starts with FIRST or ONLY at the READ's first PSN. Further on, a packet
        // may start a response (to a retry for the tail) or continue one (to an earlier
        // request, overtaken by a retry or by ACKs): PSN k of every response to this READ
        // carries the same bytes, so either is accepted when its size fits (rxe_comp.c
        // check_ack: "read retries of partial data may restart from read response first").
        let first_ok = psn != w.first_psn || info.position.starts_message();
        if !size_ok || !first_ok {
            if self.req.retry_started {
                // A remnant of the response to the request before the retry: the retried
                // request's own response (FIRST/ONLY at this PSN) is on its way.
                return;
            }
            return self.fail_oldest(WcStatus::BadRespErr);
        }
        let w = &mut self.sq[idx];
        if w.data.write(w.read_done, pkt.payload).is_err() {
            return self.local_buffer_fault(idx);
        }
        w.read_done += n;
        if info.position.ends_message() && w.read_done == w.length {
            w.state = SendState::Done(WcStatus::Success);
        }
        self.advance_comp(psn.next());
        self.progress(now);
    }

    /// The ATOMIC WRITE or FLUSH in flight whose PSN is `psn`, if any. The WQEs in flight are
    /// in PSN order: the walk stops at the one whose range holds `psn` (for a READ response,
    /// its READ, which is at or near the front), so a READ response costs no scan of the queue.
    fn placement_at(&self, psn: Psn) -> Option<usize> {
        for (i, w) in self.sq.iter().enumerate() {
            match w.state {
                SendState::Done(_) => continue,
                SendState::Posted => return None,
                SendState::InFlight => {}
            }
            if psn.is_before(w.first_psn) {
                return None;
            }
            if !psn.is_after(w.last_psn) {
                return w.opcode.is_placement().then_some(i);
            }
        }
        None
    }

    /// The response to an ATOMIC WRITE or FLUSH: an RDMA READ RESPONSE ONLY with an ACK
    /// syndrome and no payload (rxe send_read_response_ack). rxe's check_ack takes it as an
    /// ACK of its PSN (ATOMIC WRITE: COMPST_WRITE_SEND; FLUSH: an empty READ, COMPST_READ):
    /// it completes the WQE and every request before it. Any other READ response at that
    /// PSN (FIRST, LAST, a payload, a NAK syndrome) is no answer to the request: the WQE
    /// completes with a bad response error and the QP goes to ERROR (rxe: COMPST_ERROR).
    fn on_placement_response(
        &mut self,
        now: Duration,
        pkt: &PacketRepr,
        info: &OpcodeInfo,
        psn: Psn,
        idx: usize,
    ) {
        let acked = pkt
            .ext
            .aeth
            .is_some_and(|a| matches!(a.kind(), AckSyndrome::Ack { .. }));
        if info.position == Position::Only && pkt.payload.is_empty() && acked {
            return self.on_ack(now, pkt, psn);
        }
        Counters::inc(&self.counters.rcvd_nak);
        self.sq[idx].state = SendState::Done(WcStatus::BadRespErr);
        self.enter_error();
    }

    fn on_atomic_ack(&mut self, now: Duration, pkt: &PacketRepr, psn: Psn) {
        if psn.is_before(self.req.comp_psn) {
            return; // duplicate
        }
        let Some(idx) = self.oldest_pending_response(psn) else {
            return;
        };
        let w = &mut self.sq[idx];
        if !w.opcode.is_atomic() || w.first_psn != psn {
            if psn.is_after(w.first_psn) {
                let resume = w.first_psn;
                self.retry_on_loss(resume);
            }
            return;
        }
        let Some(ack) = pkt.ext.atomic_ack else {
            return;
        };
        if w.data.write(0, &ack.orig.to_ne_bytes()).is_err() {
            return self.local_buffer_fault(idx);
        }
        w.state = SendState::Done(WcStatus::Success);
        self.advance_comp(psn.next());
        self.progress(now);
    }

    /// Timer expiries: the end of an RNR wait, or a retransmission timeout.
    pub(super) fn completer_timeout(&mut self, now: Duration) {
        if let Some(t) = self.req.rnr_until {
            if now >= t {
                self.req.rnr_until = None;
                self.arm_timer(now);
            }
        }
        if let Some(t) = self.req.timer {
            if now >= t {
                self.req.timer = None;
                if !matches!(self.attr.qp_state, QpState::Rts | QpState::Sqd) {
                    return;
                }
                if !self.sq.iter().any(|w| w.state == SendState::InFlight) {
                    return;
                }
                Counters::inc(&self.counters.timeouts);
                let from = self.req.comp_psn;
                if self.retry_from(from) {
                    // Charged as a loss by retry_from; a timeout cuts deeper.
                    self.req.window.on_timeout();
                    self.arm_timer(now);
                }
            }
        }
    }
}
