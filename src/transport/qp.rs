//! One queue pair (RC, UC or UD) as a state machine without I/O and without a clock.
//!
//! Inputs: verbs calls (`modify`, and `post_send`, `post_send_ud`, `post_recv` in `post.rs`), received packets
//! (`handle_packet`) and the time (`handle_timeout(now)`). Outputs: packets to send
//! (`poll_transmit`), work completions (`poll_completion`) and the next deadline
//! (`poll_timeout`). The driver calls them; tests call them with virtual time. Time is a
//! `Duration` since an arbitrary origin chosen by the caller.
//!
//! The work is split as in Linux rxe: the requester turns send WQEs into request packets
//! (`requester.rs`), the responder executes incoming requests and produces ACKs and READ or
//! atomic responses (`responder.rs`), and the completer matches responses to WQEs, generates
//! completions and decides on retransmission (`completer.rs`).

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use super::cc::{self, CcConfig, NotificationPoint, ReactionPoint};
use super::counters::Counters;
use super::keys::MrTable;
use super::srq::Srq;
use super::state::{ReqState, RespState};
use super::wqe::{LocalData, RecvWqe, SendState, SendWqe};
use super::xrc::XrcRole;
use crate::ib::{apply_modify, check_modify, check_sqd_exit, DeviceLimits};
use crate::ib::{
    Gid, NetworkHdrType, QpAttr, QpAttrMask, QpCap, QpState, QpType, VerbsError, WcOpcode,
    WcStatus, WorkCompletion, WrOpcode,
};
use crate::memory::SharedBytes;
use crate::wire::icrc;

pub use super::params::MAX_MESSAGE;

/// Static configuration of a QP, fixed at creation.
#[derive(Debug, Clone)]
pub struct QpConfig {
    /// QP number.
    pub qpn: u32,
    /// Protection domain handle.
    pub pd: u32,
    /// Capacities.
    pub cap: QpCap,
    /// Whether every send WR generates a completion (`sq_sig_all`).
    pub sq_sig_all: bool,
    /// The device's address and RoCEv2 UDP port.
    pub local: SocketAddr,
    /// The UDP port peers receive on (4791, like ours, unless configured otherwise).
    pub remote_port: u16,
    /// Transport service.
    pub qp_type: QpType,
    /// The shared receive queue the QP takes its receive WQEs from, if any (then
    /// `post_recv` on the QP is refused).
    pub srq: Option<Arc<Srq>>,
    /// An XRC QP's role (`qp_type` is then `Rc`): its packets are of the XRC transport.
    pub xrc: Option<XrcRole>,
}

/// The IP header a packet arrived with, which a UD receive buffer's first 40 bytes (the GRH
/// area) hold as rxe fills them: for IPv4, 20 zero bytes and then the IPv4 header; for IPv6,
/// the IPv6 header (rxe_resp.c execute).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetHeader {
    /// An IPv4 header without options.
    V4([u8; 20]),
    /// An IPv6 header.
    V6([u8; 40]),
}

impl NetHeader {
    /// The header a datagram from `src` to `dst` with `udp_len` bytes of UDP (header
    /// included) carried, with the TTL or hop limit and the traffic class given, as a Linux
    /// socket sends it (IPv4: identification 0, DF set, header checksum computed).
    pub fn from_addrs(src: IpAddr, dst: IpAddr, udp_len: u16, ttl: u8, tos: u8) -> NetHeader {
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let mut h = icrc::ipv4_header_for_socket(s, d, udp_len, true);
                h[1] = tos;
                h[8] = ttl;
                let mut sum: u32 = h
                    .chunks(2)
                    .map(|c| u16::from_be_bytes([c[0], c[1]]) as u32)
                    .sum();
                while sum > 0xFFFF {
                    sum = (sum & 0xFFFF) + (sum >> 16);
                }
                h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
                NetHeader::V4(h)
            }
            (s, d) => {
                let to6 = |a: IpAddr| match a {
                    IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                    IpAddr::V6(v6) => v6,
                };
                let mut h = icrc::ipv6_header_for_socket(to6(s), to6(d), udp_len);
                h[0] = 0x60 | (tos >> 4);
                h[1] = tos << 4;
                h[7] = ttl;
                NetHeader::V6(h)
            }
        }
    }

    /// The 40-byte GRH area of a UD receive buffer.
    pub fn grh_area(&self) -> [u8; 40] {
        match self {
            NetHeader::V4(h) => {
                let mut a = [0u8; 40];
                a[20..].copy_from_slice(h);
                a
            }
            NetHeader::V6(h) => *h,
        }
    }

    /// Which L3 header it is, for the completion.
    pub fn network_hdr_type(&self) -> NetworkHdrType {
        match self {
            NetHeader::V4(_) => NetworkHdrType::Ipv4,
            NetHeader::V6(_) => NetworkHdrType::Ipv6,
        }
    }
}

/// Which completion queue a completion goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CqSide {
    /// The send CQ.
    Send,
    /// The receive CQ.
    Recv,
    /// The CQ of the XRC SRQ with this number (an XRC target QP's receive completions).
    Srq(u32),
}

/// A packet the QP wants sent: `len` bytes at the start of the caller's buffer (a whole RoCE
/// UDP payload, ICRC included), from UDP port `src_port` to `dst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Bytes written.
    pub len: usize,
    /// Destination address and UDP port.
    pub dst: SocketAddr,
    /// UDP source port.
    pub src_port: u16,
    /// IPv4 TTL or IPv6 hop limit to send with (0: the route's, which the kernel fills in;
    /// see [`wire_hop_limit`]).
    pub hop_limit: u8,
    /// IPv4 TOS or IPv6 traffic class to send with: the address vector's traffic class (DSCP
    /// and ECN bits), as rxe puts it in the IP header.
    pub traffic_class: u8,
}

/// The TTL / hop limit a packet to `dst` leaves with, given its address vector's hop limit
/// (0: the route's, which the kernel fills in). On RoCE the kernel replaces an address
/// vector's hop limit with its route's (ib_resolve_eth_dmac at modify_qp and create_ah: 64 by
/// default, ip_default_ttl), except towards multicast GIDs (IPv6, or IPv4-mapped IPv4) and
/// IPv6 link-local ones, whose address vectors keep their own: rxe then writes that into the
/// IP header.
pub fn wire_hop_limit(dst: IpAddr, av_hop_limit: u8) -> u8 {
    match dst {
        IpAddr::V4(a) if a.is_multicast() => av_hop_limit,
        IpAddr::V6(a) if a.is_multicast() || (a.segments()[0] & 0xffc0) == 0xfe80 => av_hop_limit,
        _ => 0,
    }
}

/// Size a transmit buffer must have: the largest packet (MTU 4096 plus headers).
pub const MAX_PACKET: usize = 4096 + 64;

/// Lengths of a QP's internal queues ([`QpCore::queue_depths`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueDepths {
    /// Send WQEs not yet retired.
    pub send: usize,
    /// Receive WQEs not yet consumed.
    pub recv: usize,
    /// Completions waiting to be polled.
    pub completions: usize,
    /// Saved READ/atomic responder resources (bounded by `max_dest_rd_atomic`).
    pub resp_resources: usize,
    /// Responses queued for sending (bounded by `MAX_QUEUED_RESPONSES`).
    pub resp_queued: usize,
    /// PSNs sent and not yet acknowledged.
    pub outstanding_psns: i32,
    /// PSNs spanned by the largest send WQE queued (a READ reserves one per response packet).
    pub largest_wqe_psns: i32,
}

/// One RC queue pair.
#[derive(Debug)]
pub struct QpCore {
    pub(super) cfg: QpConfig,
    pub(super) attr: QpAttr,
    pub(super) limits: DeviceLimits,
    pub(super) src_port: u16,
    pub(super) sq: VecDeque<SendWqe>,
    pub(super) rq: VecDeque<RecvWqe>,
    pub(super) completions: VecDeque<(CqSide, WorkCompletion)>,
    /// Buffers of completed inline WRs, for the next ones: an inline post does not allocate
    /// once the QP is warm. At most `max_send_wr` are kept.
    inline_spare: Vec<Vec<u8>>,
    pub(super) req: ReqState,
    pub(super) resp: RespState,
    pub(super) counters: Arc<Counters>,
    pub(super) cc: QpCc,
    /// While [`QpCore::poll_transmit_gather`] runs: `Some`, and the payload the requester
    /// left in the region for the caller to gather, if it did.
    pub(super) gather: Option<Option<Gather>>,
}

/// A packet's payload left where it is, in a registered region, for the caller to send from
/// there (an iovec of sendmmsg) instead of a copy in the packet buffer. The buffer then holds
/// the headers (`..at`) and, right after them, the pad and the ICRC's room (`at..`); the
/// payload goes between the two.
#[derive(Debug, Clone)]
pub struct Gather {
    /// The region.
    pub bytes: Arc<SharedBytes>,
    /// First payload byte in it.
    pub offset: u64,
    /// Payload bytes.
    pub len: usize,
    /// Where the payload goes in the datagram (the headers' length).
    pub at: usize,
}

/// A QP's congestion control state (spec-notes/congestion.md): its notification point, its
/// reaction point once a CNP arrived, a CNP waiting to go and the pacing deadline it waits
/// for.
#[derive(Debug, Default)]
pub(super) struct QpCc {
    np: NotificationPoint,
    rp: Option<ReactionPoint>,
    cnp_due: bool,
    pace_until: Option<Duration>,
}

impl QpCore {
    /// A new QP in the RESET state.
    pub fn new(cfg: QpConfig, limits: DeviceLimits, counters: Arc<Counters>) -> QpCore {
        let attr = QpAttr {
            cap: cfg.cap,
            port_num: 1,
            ..QpAttr::default()
        };
        QpCore {
            src_port: rxe_hash_port(cfg.qpn),
            cfg,
            attr,
            limits,
            sq: VecDeque::new(),
            rq: VecDeque::new(),
            completions: VecDeque::new(),
            inline_spare: Vec::new(),
            req: ReqState::default(),
            resp: RespState::default(),
            counters,
            cc: QpCc::default(),
            gather: None,
        }
    }

    /// QP number.
    pub fn qpn(&self) -> u32 {
        self.cfg.qpn
    }

    /// Current state.
    pub fn state(&self) -> QpState {
        self.attr.qp_state
    }

    /// The current attributes (`ibv_query_qp`).
    pub fn query(&self) -> QpAttr {
        let mut a = self.attr;
        a.cap = self.cfg.cap;
        a.sq_draining = a.qp_state == QpState::Sqd && self.req.next < self.sq.len();
        a.sq_psn = self.req.psn.value();
        a.rq_psn = self.resp.psn.value();
        a
    }

    /// The UDP source port of outgoing packets.
    pub fn src_port(&self) -> u16 {
        self.src_port
    }

    /// Overrides the UDP source port (when the driver could not bind the one the QP chose).
    pub fn set_src_port(&mut self, port: u16) {
        self.src_port = port;
    }

    /// The peer's address, once the QP has one (RTR and later).
    pub fn peer(&self) -> Option<SocketAddr> {
        if self.cfg.qp_type == QpType::Ud {
            return None;
        }
        match self.attr.qp_state {
            QpState::Reset | QpState::Init => None,
            _ => Some(SocketAddr::new(
                self.attr.ah_attr.dgid.to_ip(),
                self.cfg.remote_port,
            )),
        }
    }

    /// The transport service.
    pub fn qp_type(&self) -> QpType {
        self.cfg.qp_type
    }

    /// The shared receive queue, if the QP has one.
    pub fn srq(&self) -> Option<&Arc<Srq>> {
        self.cfg.srq.as_ref()
    }

    /// Whether the QP may have packets to send: a connected QP once it has a peer, a UD QP
    /// in RTS or SQD (each WR names its destination).
    pub fn sends(&self) -> bool {
        match self.cfg.qp_type {
            QpType::Ud => matches!(self.attr.qp_state, QpState::Rts | QpState::Sqd),
            _ => self.peer().is_some(),
        }
    }

    /// Whether a packet from `src` may reach this QP: a connected QP hears only its peer
    /// (rxe check_addr), a UD QP anyone.
    pub fn accepts_from(&self, src: IpAddr) -> bool {
        match (self.cfg.qp_type, self.attr.qp_state) {
            (QpType::Ud, _) => true,
            (_, QpState::Reset | QpState::Init) => false,
            // The peer's GID is its address (IPv4-mapped for IPv4): compared as 16 bytes, not
            // turned into an address for every packet.
            _ => self.attr.ah_attr.dgid == Gid::from_ip(src),
        }
    }

    /// Bytes per packet: the path MTU of a connected QP; for UD the port's MTU (rxe
    /// get_mtu), which is softroce's largest, `DeviceLimits::max_mtu`.
    pub(super) fn mtu(&self) -> u32 {
        match self.cfg.qp_type {
            QpType::Ud => self.limits.max_mtu.bytes(),
            _ => self.attr.path_mtu.bytes(),
        }
    }

    /// The SRQ receive WQEs come from: an XRC target QP's is the one the current request's
    /// XRCETH named, others' the one they were created with.
    pub(super) fn recv_srq(&self) -> Option<&Arc<Srq>> {
        self.resp.xrc_srq.as_ref().or(self.cfg.srq.as_ref())
    }

    /// Whether a receive WQE is available (from the SRQ if the QP has one).
    pub(super) fn has_recv(&self) -> bool {
        match self.recv_srq() {
            Some(s) => !s.is_empty(),
            None => !self.rq.is_empty(),
        }
    }

    /// Takes the next receive WQE (from the SRQ if the QP has one).
    pub(super) fn take_recv(&mut self) -> Option<RecvWqe> {
        match self.recv_srq() {
            Some(s) => s.take(),
            None => self.rq.pop_front(),
        }
    }

    /// `ibv_modify_qp`: validates as the kernel does, then applies.
    pub fn modify(&mut self, attr: &QpAttr, mask: QpAttrMask) -> Result<(), VerbsError> {
        let from = self.attr.qp_state;
        let (xrc_attr, mask) = self.xrc_modify_defaults(attr, mask);
        let attr = xrc_attr.as_ref().unwrap_or(attr);
        let to = check_modify(self.cfg.qp_type, from, attr, mask, &self.limits)?;
        // Leaving SQD (but for ERROR) waits until the send queue has drained (rxe).
        let draining = from == QpState::Sqd && self.req.next < self.sq.len();
        check_sqd_exit(from, to, draining)?;
        apply_modify(&mut self.attr, attr, mask);
        self.attr.qp_state = to;
        if mask.contains(QpAttrMask::SQ_PSN) {
            let psn = crate::wire::Psn::new(attr.sq_psn);
            self.req.psn = psn;
            self.req.comp_psn = psn;
            self.req.high_psn = psn;
        }
        if mask.contains(QpAttrMask::RQ_PSN) {
            self.resp.psn = crate::wire::Psn::new(attr.rq_psn);
        }
        if mask.contains(QpAttrMask::RETRY_CNT) {
            self.req.retry_left = attr.retry_cnt;
        }
        if mask.contains(QpAttrMask::RNR_RETRY) {
            self.req.rnr_retry_left = attr.rnr_retry;
        }
        if mask.contains(QpAttrMask::AV) && mask.contains(QpAttrMask::DEST_QPN) {
            self.src_port = rdma_udp_sport(attr.ah_attr.flow_label, self.cfg.qpn, attr.dest_qp_num);
        }
        match to {
            QpState::Reset if from != QpState::Reset => self.reset(),
            QpState::Err if from != QpState::Err => self.enter_error(),
            _ => {}
        }
        Ok(())
    }

    /// Back to RESET: queues emptied without completions, transport state cleared.
    fn reset(&mut self) {
        self.sq.clear();
        self.rq.clear();
        self.completions.clear();
        self.req = ReqState::default();
        self.resp = RespState::default();
        let cap = self.cfg.cap;
        self.attr = QpAttr {
            cap,
            port_num: 1,
            ..QpAttr::default()
        };
    }

    /// Enters ERROR: every outstanding WR completes with "flushed" (a WR that failed already
    /// keeps its own status), in posting order.
    pub(super) fn enter_error(&mut self) {
        self.attr.qp_state = QpState::Err;
        for w in self.sq.iter_mut() {
            if !matches!(w.state, SendState::Done(_)) {
                w.state = SendState::Done(WcStatus::WrFlushErr);
            }
        }
        self.generate_send_completions();
        // The receive WQE a SEND was filling is older than those still queued.
        if let Some(w) = self.resp.flush() {
            self.push_flush_recv(w.wr_id);
        }
        while let Some(r) = self.rq.pop_front() {
            self.push_flush_recv(r.wr_id);
        }
        self.req.timer = None;
        self.req.rnr_until = None;
    }

    pub(super) fn push_flush_recv(&mut self, wr_id: u64) {
        let side = self.recv_side();
        self.completions.push_back((
            side,
            WorkCompletion {
                wr_id,
                status: WcStatus::WrFlushErr,
                opcode: WcOpcode::Recv,
                byte_len: 0,
                imm_data: None,
                qp_num: self.cfg.qpn,
                src_qp: 0,
                solicited: false,
                grh: false,
                invalidated_rkey: None,
                network_hdr_type: None,
                tm: None,
            },
        ));
    }

    /// Keeps an inline WR's buffer for a later inline post.
    fn spare_inline(&mut self, v: Vec<u8>) {
        if self.inline_spare.len() < self.cfg.cap.max_send_wr as usize {
            self.inline_spare.push(v);
        }
    }

    /// A buffer of `len` zero bytes for an inline WR's data, a spare one if there is one.
    pub(super) fn inline_buffer(&mut self, len: usize) -> Vec<u8> {
        let mut v = self.inline_spare.pop().unwrap_or_default();
        v.clear();
        v.resize(len, 0);
        v
    }

    /// Completes, in posting order, the send WQEs at the front of the queue that are done.
    pub(super) fn generate_send_completions(&mut self) {
        while let Some(SendState::Done(status)) = self.sq.front().map(|w| w.state) {
            let mut w = self.sq.pop_front().expect("front exists");
            if let LocalData::Inline(v) = std::mem::take(&mut w.data) {
                self.spare_inline(v);
            }
            self.req.next = self.req.next.saturating_sub(1);
            if w.opcode.holds_rd_atomic() && w.started {
                self.req.rd_atomic_outstanding -= 1;
            }
            if let Some(role) = w.tm_rndv {
                self.finish_rndv(role, status, w.length);
                continue;
            }
            if status == WcStatus::Success && !(w.signaled || self.cfg.sq_sig_all) {
                continue;
            }
            self.completions.push_back((
                CqSide::Send,
                WorkCompletion {
                    wr_id: w.wr_id,
                    status,
                    opcode: w.opcode.wc_opcode(),
                    byte_len: if matches!(w.opcode, WrOpcode::RdmaRead { .. }) {
                        w.length as u32
                    } else {
                        0
                    },
                    imm_data: None,
                    qp_num: self.cfg.qpn,
                    src_qp: self.attr.dest_qp_num,
                    solicited: false,
                    grh: false,
                    invalidated_rkey: None,
                    network_hdr_type: None,
                    tm: None,
                },
            ));
        }
    }

    /// Outstanding send WRs (posted, not yet completed).
    pub fn send_queue_len(&self) -> usize {
        self.sq.len()
    }

    /// Posted receive WRs not yet consumed.
    pub fn recv_queue_len(&self) -> usize {
        self.rq.len()
    }

    /// The lengths of the internal queues, for the bound checks of the simulation and the fuzz
    /// targets (src/fuzzing), which see the core only through its public API.
    pub fn queue_depths(&self) -> QueueDepths {
        let (resp_resources, resp_queued) = self.resp.queue_lens();
        QueueDepths {
            send: self.sq.len(),
            recv: self.rq.len(),
            completions: self.completions.len(),
            resp_resources,
            resp_queued,
            outstanding_psns: self.req.psn.diff(self.req.comp_psn),
            largest_wqe_psns: self
                .sq
                .iter()
                .map(|w| w.last_psn.distance_from(w.first_psn) as i32 + 1)
                .max()
                .unwrap_or(0),
        }
    }

    /// The next work completion, if any.
    pub fn poll_completion(&mut self) -> Option<(CqSide, WorkCompletion)> {
        self.completions.pop_front()
    }

    /// Handles a received packet (ICRC already verified by the caller, destination QP = this
    /// QP, sender = this QP's peer). The header checks of rxe_recv.c hdr_check come first, in
    /// rxe's order: the opcode's transport against the QP's and the QP's state
    /// (check_type_state), then the P_Key (check_keys); a packet failing one is dropped without
    /// a reply and counted. Then requests go to the responder, responses to the completer.
    pub fn handle_packet(&mut self, now: Duration, pkt: &crate::wire::PacketRepr, mrs: &MrTable) {
        self.handle_datagram(now, pkt, None, mrs);
    }

    /// [`Self::handle_packet`] with the IP header the packet arrived with, which a UD QP
    /// copies into the GRH area of the receive buffer (without it that area is zero). The
    /// checks are those of handle_packet, with the transport of the QP's type, and for UD
    /// the DETH Q_Key against the QP's (rxe check_keys; a mismatch counts
    /// `qkey_viol_cntr`).
    pub fn handle_datagram(
        &mut self,
        now: Duration,
        pkt: &crate::wire::PacketRepr,
        net: Option<&NetHeader>,
        mrs: &MrTable,
    ) {
        Counters::inc(&self.counters.rcvd_pkts);
        let Some(info) = pkt.info() else {
            Counters::inc(&self.counters.malformed_pkts);
            return;
        };
        // check_type_state: a QP takes its own transport's opcodes only (a UC WRITE or a UD
        // SEND must not touch an RC QP's memory or its receive queue).
        let own = match self.cfg.qp_type {
            QpType::Rc if self.cfg.xrc.is_some() => crate::wire::Transport::Xrc,
            QpType::Rc => crate::wire::Transport::Rc,
            QpType::Uc => crate::wire::Transport::Uc,
            QpType::Ud => crate::wire::Transport::Ud,
        };
        // An XRC initiator takes responses only, an XRC target requests only (annex A14).
        let wrong_role = match &self.cfg.xrc {
            Some(XrcRole::Send) => info.is_request(),
            Some(XrcRole::Recv(_)) => !info.is_request(),
            None => false,
        };
        if info.transport != own || wrong_role {
            Counters::inc(&self.counters.wrong_transport_pkts);
            return;
        }
        // check_type_state: requests need a responder that is ready (RTR, RTS, SQD), responses
        // a requester that is (RTS, SQD).
        let state_ok = if info.is_request() {
            matches!(
                self.attr.qp_state,
                QpState::Rtr | QpState::Rts | QpState::Sqd
            )
        } else {
            matches!(self.attr.qp_state, QpState::Rts | QpState::Sqd)
        };
        if !state_ok {
            Counters::inc(&self.counters.bad_state_pkts);
            return;
        }
        // check_keys: the P_Key must match the one at the QP's P_Key index (index 0 holds the
        // default 0xFFFF, the only one softroce has).
        if !pkey_match(pkt.bth.pkey, crate::wire::bth::DEFAULT_PKEY) {
            Counters::inc(&self.counters.bad_pkey_cntr);
            return;
        }
        if self.cfg.qp_type == QpType::Ud {
            let Some(deth) = pkt.ext.deth else {
                Counters::inc(&self.counters.malformed_pkts);
                return;
            };
            if deth.qkey != self.attr.qkey {
                Counters::inc(&self.counters.qkey_viol_cntr);
                return;
            }
        }
        match self.cfg.qp_type {
            _ if info.is_request() => self.responder_handle(pkt, info, mrs, net),
            QpType::Rc if info.is_response() => self.completer_handle(now, pkt, info),
            _ => {}
        }
        self.generate_send_completions();
    }

    /// Handles the passage of time: retransmission timer and RNR wait.
    pub fn handle_timeout(&mut self, now: Duration) {
        if let Some(rp) = &mut self.cc.rp {
            if rp.poll_timeout().is_some_and(|t| t <= now) {
                rp.handle_timeout(now);
            }
        }
        if self.cc.pace_until.is_some_and(|t| t <= now) {
            self.cc.pace_until = None;
        }
        self.completer_timeout(now);
        self.generate_send_completions();
    }

    /// The earliest instant at which `handle_timeout` has work to do.
    pub fn poll_timeout(&self) -> Option<Duration> {
        [
            self.req.timer,
            self.req.rnr_until,
            self.cc.rp.as_ref().and_then(ReactionPoint::poll_timeout),
            self.cc.pace_until,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The notification point: a packet for this QP arrived with ECN CE at `now`. Counts it
    /// and, for a connected QP with congestion control on, schedules a CNP to the peer QP
    /// unless one went less than `min_time_between_cnps` ago.
    pub(super) fn cc_on_ce(&mut self, now: Duration, cfg: &CcConfig) {
        if self.cfg.qp_type == QpType::Ud {
            return;
        }
        Counters::inc(&self.counters.np_ecn_marked_roce_packets);
        if cfg.enabled && self.cc.np.on_ce(now, cfg.min_time_between_cnps) {
            self.cc.cnp_due = true;
        }
    }

    /// The reaction point: a CNP for this QP arrived at `now` (from its peer; the endpoint
    /// checked the sender). Acted on by a connected QP with congestion control on.
    pub(super) fn cc_on_cnp(&mut self, now: Duration, cfg: &CcConfig) {
        if !cfg.enabled || self.cfg.qp_type == QpType::Ud {
            Counters::inc(&self.counters.rp_cnp_ignored);
            return;
        }
        Counters::inc(&self.counters.rp_cnp_handled);
        self.cc
            .rp
            .get_or_insert_with(|| ReactionPoint::new(cfg.rp))
            .on_cnp(now);
    }

    /// The reaction point's current rate in Mb/s, if a CNP ever limited this QP and it has not
    /// recovered to the line rate.
    pub fn cc_rate_mbps(&self) -> Option<f64> {
        self.cc
            .rp
            .as_ref()
            .filter(|rp| rp.is_limited())
            .map(ReactionPoint::rate_mbps)
    }

    /// Writes the CNP this QP owes its peer, if one is due: BTH opcode 0x81 to the peer's QP
    /// with the default P_Key, BECN set, PSN 0, and the 16 reserved bytes (IBTA A17.9), without
    /// its ICRC. CNPs are not paced.
    pub(super) fn poll_cnp(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        if !self.cc.cnp_due {
            return None;
        }
        self.cc.cnp_due = false;
        let dst = self.peer()?;
        let pkt = crate::wire::PacketRepr {
            bth: crate::wire::BthRepr {
                opcode: crate::wire::Opcode::CNP,
                pkey: crate::wire::bth::DEFAULT_PKEY,
                becn: true,
                dest_qp: self.attr.dest_qp_num,
                ..crate::wire::BthRepr::default()
            },
            ext: crate::wire::ExtHeaders::default(),
            payload: &[],
        };
        let len = pkt.emit(buf).ok()?;
        Counters::inc(&self.counters.np_cnp_sent);
        Counters::inc(&self.counters.sent_pkts);
        Some(Transmit {
            len,
            dst,
            src_port: self.src_port,
            hop_limit: wire_hop_limit(dst.ip(), self.attr.ah_attr.hop_limit),
            traffic_class: cc::with_ect0(self.attr.ah_attr.traffic_class),
        })
    }

    /// The reaction point's transmit budget: whether the QP may send at `now`. When it may
    /// not, the instant it may becomes a deadline of [`Self::poll_timeout`].
    pub(super) fn cc_may_send(&mut self, now: Duration) -> bool {
        let Some(at) = self.cc.rp.as_ref().map(ReactionPoint::send_at) else {
            return true;
        };
        if at <= now {
            return true;
        }
        self.cc.pace_until = Some(at);
        false
    }

    /// A packet of `len` bytes of this QP left at `now`: charged to the reaction point.
    pub(super) fn cc_on_sent(&mut self, now: Duration, len: usize) {
        if let Some(rp) = &mut self.cc.rp {
            rp.on_sent(now, len);
        }
    }

    /// As [`QpCore::poll_transmit`], but an RC request's payload that lies in one region is
    /// not copied: it is left there ([`Gather`]) and the packet is `len` bytes of which the
    /// buffer holds all but the payload. Only RC gathers: its sends complete on an
    /// acknowledgement, after the packet has left, so the caller reads the payload while it
    /// is still the engine's (the memory model of [`crate::memory`]); a UC or UD send
    /// completes as its last packet is built.
    pub fn poll_transmit_gather(
        &mut self,
        now: Duration,
        buf: &mut [u8],
    ) -> Option<(Transmit, Option<Gather>)> {
        self.gather = (self.cfg.qp_type == QpType::Rc).then_some(None);
        let t = self.poll_transmit(now, buf);
        let g = self.gather.take().flatten();
        t.map(|t| (t, g))
    }

    /// Writes the next packet to send into `buf` (at least [`MAX_PACKET`] bytes), without its
    /// ICRC: [`super::Endpoint::poll_transmit`] seals it, the one place every packet is sealed.
    /// Responses (ACKs, READ and atomic responses) go before new requests.
    pub fn poll_transmit(&mut self, now: Duration, buf: &mut [u8]) -> Option<Transmit> {
        let (dst, av_hop_limit, traffic_class) = match self.cfg.qp_type {
            QpType::Ud => {
                if !self.sends() {
                    return None;
                }
                let ud = self.sq.get(self.req.next)?.ud?;
                (
                    SocketAddr::new(ud.ip, self.cfg.remote_port),
                    ud.hop_limit,
                    ud.traffic_class,
                )
            }
            // Requests and responses alike leave with the QP's primary address vector, as
            // rxe's do (rxe_net.c prepare4/prepare6 take the TTL and TOS from the AV, whose hop
            // limit the kernel set from the route: `wire_hop_limit`).
            _ => (
                self.peer()?,
                self.attr.ah_attr.hop_limit,
                self.attr.ah_attr.traffic_class,
            ),
        };
        let hop_limit = wire_hop_limit(dst.ip(), av_hop_limit);
        let len = match self.responder_poll(buf) {
            Some(n) => Some(n),
            None => self.requester_poll(now, buf),
        }?;
        if self.cfg.qp_type != QpType::Rc {
            // UC and UD sends complete once their last packet is out (rxe_req.c).
            self.generate_send_completions();
        }
        Counters::inc(&self.counters.sent_pkts);
        Some(Transmit {
            len,
            dst,
            src_port: self.src_port,
            hop_limit,
            traffic_class,
        })
    }
}

/// IBTA 10.9.3 / rxe `pkey_match`: the low 15 bits are equal and not zero, and at least one
/// of the two keys is a full member (bit 15).
pub fn pkey_match(a: u16, b: u16) -> bool {
    let (ka, kb) = (a & 0x7FFF, b & 0x7FFF);
    ka != 0 && ka == kb && (a & 0x8000 != 0 || b & 0x8000 != 0)
}

/// rxe's source port at QP creation: `0xC000 | hash_32(qpn, 14)` (rxe_qp.c).
pub fn rxe_hash_port(qpn: u32) -> u16 {
    0xC000 | (qpn.wrapping_mul(0x61C8_8647) >> 18) as u16
}

/// The source port for a connected QP, as `rdma_get_udp_sport` computes it (flow label from
/// the QPN product when none is given). Both ends of a connection get the same port.
pub fn rdma_udp_sport(flow_label: u32, lqpn: u32, rqpn: u32) -> u16 {
    let fl = if flow_label & 0xF_FFFF != 0 {
        flow_label & 0xF_FFFF
    } else {
        let mut v = lqpn as u64 * rqpn as u64;
        v ^= v >> 20;
        v ^= v >> 40;
        (v & 0xF_FFFF) as u32
    };
    0xC000 | (((fl & 0x3FFF) ^ ((fl >> 14) & 0x3F)) as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_ports_follow_rxe() {
        // Worked examples in spec-notes/framing.md R4.
        assert_eq!(rxe_hash_port(0x11), 0xDF94);
        assert_eq!(rxe_hash_port(0x12), 0xF806);
        assert_eq!(rdma_udp_sport(0, 0x11, 0x12), 0xC132);
        assert_eq!(rdma_udp_sport(0, 0x1234, 0x5678), 0xC01A);
        assert_eq!(rdma_udp_sport(0, 0x12, 0x11), 0xC132, "same at both ends");
    }

    #[test]
    fn pkey_match_follows_rxe() {
        assert!(pkey_match(0xFFFF, 0xFFFF));
        assert!(
            pkey_match(0x7FFF, 0xFFFF),
            "limited member against a full member"
        );
        assert!(!pkey_match(0x7FFF, 0x7FFF), "two limited members");
        assert!(!pkey_match(0x1234, 0xFFFF));
        assert!(!pkey_match(0x8000, 0x8000), "the invalid P_Key");
    }
}
