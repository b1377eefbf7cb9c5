//! The requester: turns send WQEs into request packets (rxe_req.c).
//!
//! Rules (spec-notes/rc-transport.md):
//! - PSNs are assigned in order, one per packet; a READ request reserves one PSN per response
//!   packet, `max(1, ceil(len / MTU))` (IBTA 9.7.1).
//! - FIRST and MIDDLE packets carry exactly one path MTU; LAST carries the rest; a message that
//!   fits in one packet is ONLY (IBTA 9.7.2).
//! - AckReq is set on the last packet of every message and, as rxe does, on a packet when more
//!   than 64 have gone without one, so that long messages are acknowledged as they go.
//! - At most `MAX_UNACKED_PSNS` PSNs may be outstanding (rxe's RXE_MAX_UNACKED_PSNS), fewer
//!   while losses occur (window.rs), at most
//!   `max_rd_atomic` READ/atomic requests, and a FENCEd WR waits until every earlier READ and
//!   atomic has completed (IBTA 10.8.3.3).
//! - A READ longer than `READ_PIECE_PKTS` (256) path MTUs is requested in pieces, the next one when
//!   the previous one's response has all arrived: a user-space receiver's socket buffer, not a
//!   NIC, takes the responder's burst, and an 8 MiB burst overruns it on every retry.
//! - Go-Back-N: after a NAK or timeout the requester rewinds to the oldest unacknowledged PSN,
//!   which may lie in the middle of a message; a READ resumes with a new request for the bytes
//!   not yet received (IBTA 9.7.4.1.x; rxe_comp.c/rxe_req.c req_retry).

use std::sync::Arc;
use std::time::Duration;

use super::counters::Counters;
use super::params::ACKREQ_EVERY;
use super::qp::QpCore;
use super::wqe::{SendState, SendWqe};
use crate::ib::{QpState, QpType, WcStatus, WrOpcode};
use crate::wire::packet::finish_payload;
use crate::wire::psn::packets_for;
use crate::wire::{
    AtomicEthRepr, BthRepr, DethRepr, ExtHeaders, FethRepr, IethRepr, ImmDtRepr, Opcode,
    PacketRepr, Psn, RethRepr, XrcEthRepr,
};

/// Response packets one READ request asks for at most: a longer READ is requested in pieces
/// of this many path MTUs, one piece outstanding at a time, so that a responder's burst fits
/// in a socket's receive buffer (see `read_piece_end`).
pub const READ_PIECE_PKTS: u64 = 256;

/// Smallest payload worth gathering from its region instead of copying (two more iovecs
/// cost more than copying a few hundred bytes).
const MIN_GATHER: usize = 512;

/// Where the READ request that covers byte `from` of a READ of `length` bytes ends: the next
/// multiple of `READ_PIECE_PKTS` path MTUs, or the end. The pieces are fixed from the start of
/// the message, so a request resumed after a loss ends where the original one did and its
/// response and any remnant of the original's agree byte for byte.
pub fn read_piece_end(from: u64, length: u64, mtu: u64) -> u64 {
    let piece = READ_PIECE_PKTS * mtu;
    ((from / piece + 1) * piece).min(length)
}

/// A request packet's headers as `init_req_packet` makes them, before its payload.
#[derive(Debug, Clone, Copy)]
struct ReqPacket {
    /// BTH and extended headers, with no payload: emitted from here as they are (a copy
    /// into a `PacketRepr` of its own cost a `memcpy` per packet).
    repr: PacketRepr<'static>,
    /// Payload bytes (0 for a READ request or an atomic).
    payload_len: usize,
    /// PSNs the packet uses: one, or a READ request's response packets.
    psns: u32,
    /// The packet ends the WQE (for a READ: its last piece).
    done: bool,
}

impl QpCore {
    /// The retransmission timeout: 4.096 us x 2^timeout; `None` for timeout 0 (infinite).
    pub(super) fn retransmit_timeout(&self) -> Option<Duration> {
        match self.attr.timeout {
            0 => None,
            t => Some(Duration::from_nanos(4096u64 << t.min(31))),
        }
    }

    /// Arms the retransmission timer if it is not running.
    pub(super) fn arm_timer(&mut self, now: Duration) {
        if self.req.timer.is_none() {
            self.req.timer = self.retransmit_timeout().map(|t| now + t);
        }
    }

    /// Writes the next request packet, if the WQE at `req.next` may go now. The steps are
    /// rxe_req.c's: the next WQE (`next_wqe`, with the fence and SQD rules), the window
    /// (`window_open`), the READ/atomic depth (`check_init_depth`), the packet's headers
    /// (`init_req_packet`, the opcode chosen by `data_opcode` as rxe's next_opcode), its
    /// payload (`finish_packet`) and the state update (`update_state`).
    pub(super) fn requester_poll(&mut self, now: Duration, buf: &mut [u8]) -> Option<usize> {
        // BIND_MW and LOCAL_INV execute here, in order, without a packet (rxe_do_local_ops).
        let idx = loop {
            let idx = self.next_wqe()?;
            if !self.sq[idx].opcode.is_local() {
                break idx;
            }
            self.execute_local(idx);
        };
        if !self.window_open(idx) || !self.check_init_depth(idx) {
            return None;
        }
        let psn = self.req.psn;
        let offset = self.req.offset;
        self.start_wqe(idx, psn);
        let mut pkt = self.init_req_packet(idx, psn, offset);
        pkt.repr.bth.ack_req = self.wants_ack(psn, &pkt);
        let len = self.finish_packet(idx, offset, &pkt, buf)?;
        self.update_state(now, idx, psn, offset, &pkt);
        Some(len)
    }

    /// rxe req_next_wqe: the WQE at `req.next`, if the QP sends and that WQE may go now: not
    /// during an RNR wait, no new WQE in SQD, a FENCEd WQE only once every earlier READ and
    /// atomic has completed.
    fn next_wqe(&self) -> Option<usize> {
        if !matches!(self.attr.qp_state, QpState::Rts | QpState::Sqd) {
            return None;
        }
        if self.req.rnr_until.is_some() {
            return None;
        }
        let idx = self.req.next;
        let wqe = self.sq.get(idx)?;
        if self.starting(idx) {
            // SQD: finish the WQE in progress, start no new one.
            if self.attr.qp_state == QpState::Sqd {
                return None;
            }
            if wqe.fence && self.req.rd_atomic_outstanding > 0 {
                return None;
            }
        }
        Some(idx)
    }

    /// Whether the WQE at `idx` has not sent anything yet.
    fn starting(&self, idx: usize) -> bool {
        self.req.offset == 0 && self.sq[idx].state == SendState::Posted
    }

    /// Room to send (rxe's `psn_compare(qp->req.psn, qp->comp.psn + RXE_MAX_UNACKED_PSNS)`
    /// check, with the loss window): the outstanding PSNs below the window (RC only: UC and UD
    /// have no acknowledgements, hence no window), and the next piece of a READ only once the
    /// previous piece's whole response is in.
    fn window_open(&self, idx: usize) -> bool {
        if self.cfg.qp_type == QpType::Rc
            && self.req.psn.diff(self.req.comp_psn) >= self.req.window.limit() as i32
        {
            return false;
        }
        let wqe = &self.sq[idx];
        !(matches!(wqe.opcode, WrOpcode::RdmaRead { .. })
            && self.req.offset > 0
            && wqe.read_done < self.req.offset)
    }

    /// rxe check_init_depth: a READ, atomic or ATOMIC WRITE starts only while fewer than
    /// `max_rd_atomic` are outstanding.
    fn check_init_depth(&self, idx: usize) -> bool {
        !(self.starting(idx)
            && self.sq[idx].opcode.holds_rd_atomic()
            && self.req.rd_atomic_outstanding >= self.attr.max_rd_atomic as u32)
    }

    /// The first packet of the WQE at `idx` goes out at `psn`: it is in flight, and its PSN
    /// range is known now (every kind uses max(1, ceil(len / MTU)) PSNs, atomics one), so an
    /// ACK short of its last PSN cannot complete it (rxe update_wqe_psn).
    fn start_wqe(&mut self, idx: usize, psn: Psn) {
        let mtu = self.mtu();
        let wqe = &mut self.sq[idx];
        if wqe.state != SendState::Posted {
            return;
        }
        wqe.state = SendState::InFlight;
        wqe.first_psn = psn;
        wqe.last_psn = psn.add(packets_for(wqe.length, mtu) as u32 - 1);
        wqe.started = true;
        if wqe.opcode.holds_rd_atomic() {
            self.req.rd_atomic_outstanding += 1;
        }
    }

    /// rxe init_req_packet: the headers of the packet at `offset` of the WQE at `idx`, sent at
    /// `psn` (AckReq is decided by `wants_ack`).
    fn init_req_packet(&mut self, idx: usize, psn: Psn, offset: u64) -> ReqPacket {
        let mtu = self.mtu() as u64;
        let qpn = self.cfg.qpn;
        // The transport's top three opcode bits: RC 000, UC 001, UD 011 (IBTA 9.2, table 38).
        let xrc_bits = self.xrc_bits();
        let transport_bits = match self.cfg.qp_type {
            QpType::Rc => xrc_bits,
            QpType::Uc => 0x20,
            QpType::Ud => 0x60,
        };
        let mut pkt = ReqPacket {
            repr: PacketRepr {
                bth: BthRepr {
                    dest_qp: self.attr.dest_qp_num,
                    psn: psn.value(),
                    ..BthRepr::default()
                },
                ext: ExtHeaders::default(),
                payload: &[],
            },
            payload_len: 0,
            psns: 1,
            done: true,
        };
        let wqe = &mut self.sq[idx];
        // XRC (annex A14): every request carries the target's SRQ number after the BTH.
        pkt.repr.ext.xrceth = wqe.xrc_srqn.map(|srqn| XrcEthRepr { srqn });
        if rd_atomic_headers(wqe, psn, offset, mtu, &mut pkt) {
            pkt.repr.bth.opcode = Opcode(pkt.repr.bth.opcode.0 | xrc_bits);
        } else {
            data_headers(wqe, offset, mtu, &mut pkt);
            pkt.repr.bth.opcode = Opcode(pkt.repr.bth.opcode.0 | transport_bits);
            if let Some(ud) = wqe.ud {
                pkt.repr.bth.dest_qp = ud.remote_qpn;
                pkt.repr.ext.deth = Some(DethRepr {
                    qkey: ud.qkey,
                    src_qp: qpn,
                });
            }
        }
        pkt
    }

    /// AckReq (RC only): at the end of a message, every ACKREQ_EVERY packets (rxe), and when
    /// this packet fills the window: nothing more can be sent until an ACK comes back, and the
    /// responder only ACKs packets that ask.
    fn wants_ack(&self, psn: Psn, pkt: &ReqPacket) -> bool {
        let fills_window =
            psn.add(pkt.psns).diff(self.req.comp_psn) >= self.req.window.limit() as i32;
        self.cfg.qp_type == QpType::Rc
            && (pkt.done
                || self.req.noack_pkts >= ACKREQ_EVERY
                || fills_window
                || self.req.noack_pkts + 1 >= self.req.window.ack_every())
    }

    /// rxe finish_packet: writes the headers and the payload (message bytes `offset ..` of
    /// the WQE at `idx`) into `buf`; returns the packet's length, ICRC room included. If the
    /// send buffer's memory was taken back while the WR was outstanding, nothing is sent from
    /// it: the WR completes with a local protection error and the QP goes to ERROR (rxe:
    /// copy_data fails, IB_WC_LOC_PROT_ERR, req_error).
    fn finish_packet(
        &mut self,
        idx: usize,
        offset: u64,
        pkt: &ReqPacket,
        buf: &mut [u8],
    ) -> Option<usize> {
        let n = pkt.payload_len;
        let at = pkt.repr.emit_headers(buf, n).ok()?;
        if self.gather.is_some() && n >= MIN_GATHER {
            // Left in the region for the caller to gather (QpCore::poll_transmit_gather): the
            // pad and the ICRC's room follow the headers. A region taken back meanwhile fails
            // as the copy below would.
            if let Some((bytes, off)) = self.sq[idx].data.locate(offset, n) {
                if bytes.pin().is_err() {
                    Counters::inc(&self.counters.mem_access_err);
                    self.sq[idx].state = SendState::Done(WcStatus::LocProtErr);
                    self.enter_error();
                    return None;
                }
                let g = super::qp::Gather {
                    bytes: Arc::clone(bytes),
                    offset: off,
                    len: n,
                    at,
                };
                let tail = finish_payload(buf, at, n) - at - n;
                buf[at..at + tail].fill(0);
                self.gather = Some(Some(g));
                return Some(at + n + tail);
            }
        }
        if self.sq[idx]
            .data
            .read(offset, &mut buf[at..at + n])
            .is_err()
        {
            Counters::inc(&self.counters.mem_access_err);
            self.sq[idx].state = SendState::Done(WcStatus::LocProtErr);
            self.enter_error();
            return None;
        }
        Some(finish_payload(buf, at, n))
    }

    /// rxe update_state / update_wqe_state: the packet at `offset` of the WQE at `idx`, sent
    /// at `psn`, is out: the next PSN, the AckReq count, the WQE's progress (a UC or UD WQE is
    /// done once its last packet is out: nothing will acknowledge it) and the timer.
    fn update_state(&mut self, now: Duration, idx: usize, psn: Psn, offset: u64, pkt: &ReqPacket) {
        let reliable = self.cfg.qp_type == QpType::Rc;
        if pkt.repr.bth.ack_req {
            self.req.noack_pkts = 0;
        } else {
            self.req.noack_pkts += 1;
        }
        if psn.is_before(self.req.high_psn) {
            Counters::inc(&self.counters.retransmit_pkts);
        }
        self.req.psn = psn.add(pkt.psns);
        if self.req.psn.is_after(self.req.high_psn) {
            self.req.high_psn = self.req.psn;
        }
        let wqe = &mut self.sq[idx];
        if pkt.done {
            if matches!(
                wqe.opcode,
                WrOpcode::Send | WrOpcode::SendWithImm { .. } | WrOpcode::SendWithInv { .. }
            ) {
                Counters::inc(&self.counters.rdma_sends);
            }
            if !reliable {
                wqe.state = SendState::Done(WcStatus::Success);
            }
            self.req.next += 1;
            self.req.offset = 0;
        } else if matches!(wqe.opcode, WrOpcode::RdmaRead { .. }) {
            self.req.offset = read_piece_end(offset, wqe.length, self.mtu() as u64);
        } else {
            self.req.offset += pkt.payload_len as u64;
        }
        if reliable {
            self.arm_timer(now);
        } else {
            self.req.comp_psn = self.req.psn;
        }
    }

    /// Go-Back-N: resume sending at `psn`, which must lie within an outstanding WQE (else the
    /// requester resumes with the first WQE not fully sent).
    pub(super) fn rewind_to(&mut self, psn: Psn) {
        let mtu = self.mtu() as u64;
        for (i, w) in self.sq.iter().enumerate() {
            if w.state != SendState::InFlight {
                continue;
            }
            if psn.is_before(w.first_psn) || psn.is_after(w.last_psn) {
                continue;
            }
            let (offset, at) = match w.opcode {
                // A READ resumes after the bytes already received, with a new request.
                WrOpcode::RdmaRead { .. } => {
                    let done = w.read_done;
                    (done, w.first_psn.add((done / mtu) as u32))
                }
                op if op.is_atomic() => (0, w.first_psn),
                _ => {
                    let pkts = psn.distance_from(w.first_psn) as u64;
                    (pkts * mtu, psn)
                }
            };
            self.req.next = i;
            self.req.offset = offset;
            self.req.psn = at;
            self.req.noack_pkts = 0;
            return;
        }
        // No WQE in flight contains the PSN: everything before it is acknowledged, so the
        // requester continues at the first WQE not yet started, with that PSN.
        let i = self
            .sq
            .iter()
            .position(|w| w.state == SendState::Posted)
            .unwrap_or(self.sq.len());
        self.req.next = i;
        self.req.offset = 0;
        self.req.psn = psn;
        self.req.noack_pkts = 0;
    }
}

/// Opcode of a SEND or WRITE packet.
fn data_opcode(write: bool, first: bool, last: bool, imm: bool) -> Opcode {
    match (write, first, last, imm) {
        (false, true, true, false) => Opcode::RC_SEND_ONLY,
        (false, true, true, true) => Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
        (false, true, false, _) => Opcode::RC_SEND_FIRST,
        (false, false, false, _) => Opcode::RC_SEND_MIDDLE,
        (false, false, true, false) => Opcode::RC_SEND_LAST,
        (false, false, true, true) => Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
        (true, true, true, false) => Opcode::RC_RDMA_WRITE_ONLY,
        (true, true, true, true) => Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        (true, true, false, _) => Opcode::RC_RDMA_WRITE_FIRST,
        (true, false, false, _) => Opcode::RC_RDMA_WRITE_MIDDLE,
        (true, false, true, false) => Opcode::RC_RDMA_WRITE_LAST,
        (true, false, true, true) => Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
    }
}

/// The headers of a READ request, an atomic, an ATOMIC WRITE or a FLUSH (RC only) at `offset`
/// of `wqe`, sent at `psn`; false, touching nothing, for a SEND or WRITE (`data_headers`).
fn rd_atomic_headers(
    wqe: &mut SendWqe,
    psn: Psn,
    offset: u64,
    mtu: u64,
    pkt: &mut ReqPacket,
) -> bool {
    let (bth, ext) = (&mut pkt.repr.bth, &mut pkt.repr.ext);
    match wqe.opcode {
        WrOpcode::RdmaRead { remote_addr, rkey } => {
            let end = read_piece_end(offset, wqe.length, mtu);
            let len = end - offset;
            wqe.read_req_psn = psn;
            bth.opcode = Opcode::RC_RDMA_READ_REQUEST;
            ext.reth = Some(RethRepr {
                va: remote_addr.wrapping_add(offset),
                rkey,
                len: len as u32,
            });
            pkt.psns = packets_for(len, mtu as u32) as u32;
            pkt.done = end == wqe.length;
        }
        WrOpcode::AtomicCmpSwap {
            remote_addr,
            rkey,
            compare,
            swap,
        } => {
            bth.opcode = Opcode::RC_COMPARE_SWAP;
            ext.atomic = Some(AtomicEthRepr {
                va: remote_addr,
                rkey,
                swap_add: swap,
                compare,
            });
        }
        WrOpcode::AtomicFetchAdd {
            remote_addr,
            rkey,
            add,
        } => {
            bth.opcode = Opcode::RC_FETCH_ADD;
            ext.atomic = Some(AtomicEthRepr {
                va: remote_addr,
                rkey,
                swap_add: add,
                compare: 0,
            });
        }
        // IBTA 1.5 ATOMIC WRITE (rxe init_req_packet): a RETH for the 8 bytes, which are
        // the payload (the WQE's inline data); one PSN.
        WrOpcode::AtomicWrite {
            remote_addr, rkey, ..
        } => {
            bth.opcode = Opcode::RC_ATOMIC_WRITE;
            ext.reth = Some(RethRepr {
                va: remote_addr,
                rkey,
                len: wqe.length as u32,
            });
            pkt.payload_len = wqe.length as usize;
        }
        // IBTA 1.5 FLUSH: FETH and RETH, no payload (oA19-2), one PSN whatever the length
        // (rxe finish_packet zeroes the residue before update_wqe_psn counts PSNs).
        WrOpcode::Flush {
            remote_addr,
            rkey,
            len,
            placement,
            selectivity,
        } => {
            bth.opcode = Opcode::RC_FLUSH;
            ext.feth = Some(FethRepr {
                selectivity,
                placement,
            });
            ext.reth = Some(RethRepr {
                va: remote_addr,
                rkey,
                len,
            });
        }
        _ => return false,
    }
    true
}

/// The headers of the SEND or WRITE packet at `offset` of `wqe` (one path MTU at most), but
/// the transport's opcode bits and a UD destination's DETH, which `init_req_packet` adds.
fn data_headers(wqe: &SendWqe, offset: u64, mtu: u64, pkt: &mut ReqPacket) {
    let (bth, ext) = (&mut pkt.repr.bth, &mut pkt.repr.ext);
    let op = wqe.opcode;
    let remaining = wqe.length - offset;
    let pay = remaining.min(mtu);
    let first = offset == 0;
    let last = pay == remaining;
    let (write, imm) = match op {
        WrOpcode::Send => (None, None),
        WrOpcode::SendWithImm { imm } => (None, Some(imm)),
        WrOpcode::RdmaWrite { remote_addr, rkey } => (Some((remote_addr, rkey)), None),
        WrOpcode::RdmaWriteWithImm {
            remote_addr,
            rkey,
            imm,
        } => (Some((remote_addr, rkey)), Some(imm)),
        // The IETH goes on the last packet, below.
        WrOpcode::SendWithInv { .. } => (None, None),
        _ => unreachable!("READ, atomics handled above; local WRs send nothing"),
    };
    bth.opcode = data_opcode(write.is_some(), first, last, imm.is_some());
    if let (WrOpcode::SendWithInv { rkey }, true) = (op, last) {
        bth.opcode = if first {
            Opcode::RC_SEND_ONLY_WITH_INVALIDATE
        } else {
            Opcode::RC_SEND_LAST_WITH_INVALIDATE
        };
        ext.ieth = Some(IethRepr { rkey });
    }
    if let (Some((va, rkey)), true) = (write, first) {
        ext.reth = Some(RethRepr {
            va,
            rkey,
            len: wqe.length as u32,
        });
    }
    if last {
        ext.imm = imm.map(|imm| ImmDtRepr { imm });
        bth.solicited = wqe.solicited;
    }
    pkt.payload_len = pay as usize;
    pkt.done = last;
}
