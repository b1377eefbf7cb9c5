//! The per-QP state of the requester and completer ([`ReqState`]) and of the responder
//! ([`RespState`]), as rxe_verbs.h holds rxe_req_info, rxe_comp_info and rxe_resp_info: below
//! qp.rs, which holds one of each in every [`super::QpCore`], and below requester.rs,
//! completer.rs and responder.rs, which implement the QP's steps on them.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use super::mr::Mr;
use super::mw::Mw;
use super::window::SendWindow;
use super::wqe::RecvWqe;
use crate::wire::Psn;

/// Requester and completer progress.
#[derive(Debug, Default)]
pub struct ReqState {
    /// Next PSN to send.
    pub psn: Psn,
    /// Index in the send queue of the WQE being (or next to be) sent.
    pub next: usize,
    /// Bytes of that WQE already sent (for a READ: bytes already requested).
    pub offset: u64,
    /// Packets sent since the last one with AckReq.
    pub noack_pkts: u32,
    /// READ/atomic WQEs started and not completed.
    pub rd_atomic_outstanding: u32,
    /// Oldest PSN not yet acknowledged (the completer's position).
    pub comp_psn: Psn,
    /// The first PSN never sent: a packet with an earlier PSN is a retransmission.
    pub high_psn: Psn,
    /// Retransmission deadline.
    pub timer: Option<Duration>,
    /// While set, the requester waits after an RNR NAK.
    pub rnr_until: Option<Duration>,
    /// PSN to resume from when the RNR wait ends.
    pub rnr_psn: Psn,
    /// Transport retries left (7 = unlimited, as rxe treats it).
    pub retry_left: u8,
    /// RNR retries left (7 = unlimited, IBTA).
    pub rnr_retry_left: u8,
    /// A retry was started and has not made progress yet: further out-of-order responses
    /// (remnants of what was lost) must not start another one (rxe: `comp.started_retry`).
    pub retry_started: bool,
    /// Outstanding-PSN limit, cut on loss (window.rs).
    pub window: SendWindow,
}

/// What the responder is in the middle of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum InMsg {
    Send,
    Write,
}

#[derive(Debug)]
pub(super) struct RecvProgress {
    pub(super) wqe: RecvWqe,
    pub(super) offset: u64,
    /// A message at a TM SRQ: how it completes, and the header bytes it does not land.
    pub(super) tm: Option<TmLanding>,
}

/// How a message that arrived at a TM SRQ lands (tag_match.rs).
#[derive(Debug, Clone, Copy)]
pub(super) struct TmLanding {
    /// `IBV_WC_TM_RECV` or `IBV_WC_TM_NO_TAG`.
    pub(super) opcode: crate::ib::WcOpcode,
    /// The completion's tag matching part.
    pub(super) info: crate::ib::TmInfo,
    /// Leading payload bytes not written (a matched EAGER message's TMH).
    pub(super) skip: usize,
}

#[derive(Debug)]
pub(super) struct WriteProgress {
    pub(super) mr: Option<Arc<Mr>>,
    pub(super) offset: u64,
    pub(super) remaining: u64,
    pub(super) total: u64,
}

/// A saved READ or atomic, kept for replaying duplicates.
#[derive(Debug)]
pub(super) enum Resource {
    Read {
        first: Psn,
        last: Psn,
        mr: Option<Arc<Mr>>,
        va: u64,
        len: u64,
        /// The window and key the READ went through, rechecked on replay.
        window: Option<(Arc<Mw>, u32)>,
    },
    Atomic {
        psn: Psn,
        orig: u64,
    },
    /// An ATOMIC WRITE or FLUSH: a duplicate is answered again without executing again
    /// (IBTA oA19-14, oA19-15; rxe replays from the resource).
    Placement {
        psn: Psn,
    },
}

/// A READ response being generated, one packet per `poll_transmit`.
#[derive(Debug)]
pub(super) struct ReadJob {
    pub(super) mr: Option<Arc<Mr>>,
    pub(super) offset: u64,
    pub(super) remaining: u64,
    /// The PSN of the READ request (or of its retried tail): a NAK for the READ names it.
    pub(super) req_psn: Psn,
    pub(super) psn: Psn,
    pub(super) first: bool,
    /// The window and key the READ went through: every response packet rechecks that the
    /// window still serves the key (rxe read_reply -> rxe_recheck_mr), so that an
    /// invalidation stops a READ in progress or a replay.
    pub(super) window: Option<(Arc<Mw>, u32)>,
}

#[derive(Debug)]
pub(super) enum Response {
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
    pub(super) nak_sent: bool,
    /// UC: the rest of the current message is dropped until a FIRST or ONLY (rxe
    /// `resp.drop_msg`).
    pub(super) drop_msg: bool,
    /// A fatal NAK is queued: until it is sent and the QP is in ERROR, no request executes
    /// (whatever its PSN: a peer may send any).
    pub(super) fatal: bool,
    pub(super) in_msg: Option<InMsg>,
    pub(super) recv: Option<RecvProgress>,
    pub(super) write: Option<WriteProgress>,
    pub(super) resources: VecDeque<Resource>,
    pub(super) out: VecDeque<Response>,
    /// An XRC target QP: the XRC SRQ the current request's XRCETH named.
    pub(super) xrc_srq: Option<std::sync::Arc<super::srq::Srq>>,
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
        self.drop_msg = false;
        self.in_msg = None;
        self.write = None;
        self.resources.clear();
        self.out.clear();
        self.recv.take().map(|r| r.wqe)
    }
}
