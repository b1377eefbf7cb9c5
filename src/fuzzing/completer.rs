//! Fuzz target `completer`: a requester with posted work of every kind, fed arbitrary
//! responses (ACKs, NAKs, RNR NAKs, READ responses and atomic ACKs, aimed at the PSNs it sent
//! or anywhere), interleaved with more posts, transmits and timer expiries.
//!
//! Invariants checked after every step:
//! - send completions only for posted WRs, in posting order, never twice; a WR passed over
//!   without a completion was unsignaled; a successful READ reports its length;
//! - no write outside the READ and atomic targets in local memory, and none to the sources;
//! - bounded queues ([`check_bounds`]); every packet sent parses, is a request to the peer's
//!   QP and carries a valid ICRC;
//! - no loop without progress: a timer expiry never leaves a deadline at or before now, and
//!   without responses at most `retry_cnt + 2` expiries (one RNR wait, the retries, the last
//!   one failing) pass before the QP is in ERROR, after which no timer is armed.
//!
//! At the end of the input the peer goes silent: within the retry budget every posted WR must
//! have completed (with an error status at the latest when the budget runs out).

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};

use super::harness::{
    bth, check_bounds, connect, emit, ext_headers, icrc_ok, new_qp, next_step, pattern, read_head,
    tracing, HeaderFields, Link, Step, ALL_ACCESS, CAP, IOVA, RESPONSE_OPCODES,
};
use crate::ib::{Mtu, QpState, SendFlags, SendWr, Sge, WcOpcode, WcStatus, WrOpcode};
use crate::memory::SharedBytes;
use crate::transport::{Counters, CqSide, Endpoint, Mr, MrTable, QpCore, MAX_PACKET};
use crate::wire::{Opcode, PacketRepr, Psn};

/// Our QP number.
pub const QPN: u32 = 0x21;
/// The (simulated) responder's QP number.
pub const PEER_QPN: u32 = 0x22;
const LOCAL_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const PEER_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
/// Local region size: sources in the first half, READ and atomic targets in the second.
const REGION: usize = 16 * 1024;
const HALF: usize = REGION / 2;

/// The first bytes of an input: the connection.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    /// Path MTU selector (256, 512, 1024).
    pub mtu: u8,
    /// First PSN sent.
    pub sq_psn: u32,
    /// Timeout exponent selector (1 .. 18).
    pub timeout: u8,
    /// Transport retries (0 .. 6: a finite budget).
    pub retry_cnt: u8,
    /// RNR retries (0 .. 6).
    pub rnr_retry: u8,
    /// `max_rd_atomic` (1 .. 4).
    pub rd_atomic: u8,
}

impl Setup {
    /// Bytes of an input that hold the setup.
    pub const LEN: usize = 8;

    /// Reads the setup from the first [`Setup::LEN`] bytes (missing bytes read as zero).
    pub fn read(u: &mut Unstructured) -> Setup {
        let b = read_head::<{ Setup::LEN }>(u);
        Setup {
            mtu: b[0],
            sq_psn: u32::from_le_bytes([b[1], b[2], b[3], 0]),
            timeout: b[4],
            retry_cnt: b[5],
            rnr_retry: b[6],
            rd_atomic: b[7],
        }
    }

    /// The bytes [`Setup::read`] reads back as `self`.
    pub fn encode(&self) -> [u8; Setup::LEN] {
        let p = self.sq_psn.to_le_bytes();
        [
            self.mtu,
            p[0],
            p[1],
            p[2],
            self.timeout,
            self.retry_cnt,
            self.rnr_retry,
            self.rd_atomic,
        ]
    }
}

/// A work request shaped from fuzz input.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub struct Post {
    /// Operation selector: SEND, SEND with immediate, WRITE, WRITE with immediate, READ,
    /// compare-and-swap, fetch-and-add, inline SEND.
    pub kind: u8,
    /// Length (modulo half the region; 8 for atomics).
    pub len: u16,
    /// Offset of the local buffer in its half of the region.
    pub offset: u16,
    /// IBV_SEND_SIGNALED.
    pub signaled: bool,
    /// IBV_SEND_FENCE.
    pub fence: bool,
    /// Remote address offset.
    pub remote: u32,
}

/// Which PSN a shaped response carries.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum RespPsn {
    /// The n-th most recent PSN sent (a READ counts all the PSNs it reserves).
    Sent(u8),
    /// This many after the latest PSN sent.
    Ahead(u8),
    /// Any PSN.
    Any(u32),
}

/// The AETH a shaped response carries.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum AckKind {
    /// ACK.
    Ack,
    /// RNR NAK with this timer code.
    Rnr(u8),
    /// NAK with this code (modulo 5: sequence error, invalid request, remote access, remote
    /// operational, invalid RD request).
    Nak(u8),
    /// Any syndrome.
    Raw(u8),
}

/// A response packet shaped from fuzz input.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub struct Response {
    /// Index into [`RESPONSE_OPCODES`].
    pub op: u8,
    /// PSN.
    pub psn: RespPsn,
    /// AETH syndrome.
    pub ack: AckKind,
    /// READ response payload length (modulo MTU + 1).
    pub len: u16,
    /// Payload pattern seed.
    pub fill: u8,
    /// Other header fields.
    pub h: HeaderFields,
}

/// How time passes.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum Wait {
    /// To the next deadline the QP asked for.
    Deadline,
    /// This many microseconds.
    Micros(u16),
}

/// A structured step.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum ReqStep {
    /// `ibv_post_send`.
    Post(Post),
    /// Sends up to this many request packets.
    Transmit(u8),
    /// A response packet from the peer.
    Respond(Response),
    /// Time passes.
    Wait(Wait),
}

/// A posted send WR as the harness remembers it.
#[derive(Debug)]
struct Posted {
    wr_id: u64,
    opcode: WcOpcode,
    len: u32,
    signaled: bool,
}

struct Harness {
    qp: QpCore,
    mrs: MrTable,
    mr: Arc<Mr>,
    now: Duration,
    mtu: u32,
    retry_cnt: u8,
    initial: Vec<u8>,
    /// The region as the last check saw it.
    last: Vec<u8>,
    /// Which target bytes (second half) a READ or atomic may write.
    writable: Vec<bool>,
    posted: VecDeque<Posted>,
    next_wr_id: u64,
    /// PSNs sent, latest last (bounded).
    sent: VecDeque<u32>,
    /// Timer expiries since the last response or post.
    silent_expiries: u32,
    buf: Vec<u8>,
    local: SocketAddr,
    peer: SocketAddr,
    /// Seals the QP's packets, as the engine's does.
    endpoint: Endpoint,
}

impl Harness {
    fn new(s: &Setup) -> Harness {
        let mut mrs = MrTable::new();
        let storage = Arc::new(SharedBytes::new(REGION));
        let initial = pattern(3, REGION);
        storage.write(0, &initial).expect("in bounds");
        let mr = mrs
            .register(1, storage, IOVA, ALL_ACCESS)
            .expect("the table has room");
        let mut qp = new_qp(QPN, IpAddr::V4(LOCAL_IP));
        let mtu = match s.mtu % 3 {
            0 => Mtu::Mtu256,
            1 => Mtu::Mtu512,
            _ => Mtu::Mtu1024,
        };
        let retry_cnt = s.retry_cnt % 7;
        connect(
            &mut qp,
            &Link {
                peer_qpn: PEER_QPN,
                peer: IpAddr::V4(PEER_IP),
                mtu,
                sq_psn: s.sq_psn,
                rq_psn: 0,
                timeout: 1 + s.timeout % 18,
                retry_cnt,
                rnr_retry: s.rnr_retry % 7,
                rd_atomic: 1 + s.rd_atomic % 4,
            },
        );
        let port = crate::wire::ROCE_V2_UDP_PORT;
        Harness {
            qp,
            mrs,
            mr,
            now: Duration::ZERO,
            mtu: mtu.bytes(),
            retry_cnt,
            last: initial.clone(),
            initial,
            writable: vec![false; HALF],
            posted: VecDeque::new(),
            next_wr_id: 1,
            sent: VecDeque::new(),
            silent_expiries: 0,
            buf: vec![0u8; MAX_PACKET],
            local: SocketAddr::new(IpAddr::V4(LOCAL_IP), port),
            peer: SocketAddr::new(IpAddr::V4(PEER_IP), port),
            endpoint: Endpoint::new(
                SocketAddr::new(IpAddr::V4(LOCAL_IP), port),
                port,
                Arc::new(Counters::default()),
            ),
        }
    }

    fn post(&mut self, p: &Post) {
        let kind = p.kind % 10;
        let (opcode, wc) = post_opcode(kind, p);
        let target = matches!(kind, 4..=6);
        let len = if matches!(kind, 5 | 6) {
            8
        } else if kind == 7 {
            p.len as u32 % (CAP.max_inline_data + 1)
        } else {
            p.len as u32 % (HALF as u32 / 2 + 1)
        };
        let offset = if matches!(kind, 5 | 6) {
            (p.offset as usize % (HALF / 8)) * 8
        } else {
            p.offset as usize % (HALF / 2)
        };
        let base = if target { HALF } else { 0 };
        let sge = [Sge {
            addr: IOVA + (base + offset) as u64,
            length: len,
            lkey: self.mr.lkey,
        }];
        let mut flags = SendFlags::EMPTY;
        if p.signaled {
            flags |= SendFlags::SIGNALED;
        }
        if p.fence {
            flags |= SendFlags::FENCE;
        }
        if kind == 7 {
            flags |= SendFlags::INLINE;
        }
        let wr_id = self.next_wr_id;
        let wr = SendWr {
            wr_id,
            sg_list: if len == 0 { &[] } else { &sge },
            opcode,
            send_flags: flags,
        };
        if self.qp.post_send(&wr, &self.mrs).is_ok() {
            self.next_wr_id += 1;
            self.silent_expiries = 0;
            self.posted.push_back(Posted {
                wr_id,
                opcode: wc,
                len,
                signaled: p.signaled,
            });
            if target {
                for b in &mut self.writable[offset..offset + len as usize] {
                    *b = true;
                }
            }
        }
    }

    /// Sends up to `n` request packets, checking each; returns how many went.
    fn transmit(&mut self, n: usize) -> usize {
        let mut sent = 0;
        while sent < n {
            let Some(t) = self
                .endpoint
                .poll_transmit(self.now, &mut self.qp, &mut self.buf)
            else {
                break;
            };
            sent += 1;
            assert_eq!(t.dst, self.peer);
            let bytes = &self.buf[..t.len];
            let src = SocketAddr::new(self.local.ip(), t.src_port);
            assert!(icrc_ok(src, self.peer, bytes), "ICRC of a sent packet");
            let pkt = PacketRepr::parse(bytes).expect("sent packets parse");
            assert_eq!(pkt.bth.dest_qp, PEER_QPN);
            let info = pkt.info().expect("known opcode");
            if tracing() {
                eprintln!(
                    "  <- {:?} psn {:#x} {:?}",
                    pkt.opcode().name(),
                    pkt.bth.psn,
                    pkt.ext.reth
                );
            }
            assert!(info.is_request(), "no responses without requests");
            let first = Psn::new(pkt.bth.psn);
            let span = match (pkt.bth.opcode, pkt.ext.reth) {
                (Opcode::RC_RDMA_READ_REQUEST, Some(r)) => {
                    (r.len as u64).div_ceil(self.mtu as u64).max(1)
                }
                _ => 1,
            };
            for i in 0..span.min(64) {
                self.sent.push_back(first.add(i as u32).value());
                if self.sent.len() > 256 {
                    self.sent.pop_front();
                }
            }
        }
        sent
    }

    fn respond(&mut self, r: &Response) {
        let opcode = RESPONSE_OPCODES[r.op as usize % RESPONSE_OPCODES.len()];
        let Some(info) = opcode.info() else { return };
        let last = self.sent.back().copied().unwrap_or(0);
        let psn = match r.psn {
            RespPsn::Sent(k) if !self.sent.is_empty() => {
                self.sent[self.sent.len() - 1 - k as usize % self.sent.len()]
            }
            RespPsn::Sent(_) => last,
            RespPsn::Ahead(k) => Psn::new(last).add(k as u32 + 1).value(),
            RespPsn::Any(p) => p,
        };
        let syndrome = match r.ack {
            AckKind::Ack => 0x1F,
            AckKind::Rnr(t) => 0x20 | (t & 0x1F),
            AckKind::Nak(c) => 0x60 | (c % 5),
            AckKind::Raw(s) => s,
        };
        let h = HeaderFields { syndrome, ..r.h };
        let payload = if info.payload {
            pattern(r.fill as u64, r.len as usize % (self.mtu as usize + 1))
        } else {
            Vec::new()
        };
        let pkt = PacketRepr {
            bth: bth(opcode, QPN, psn, false, false),
            ext: ext_headers(info.headers, &h, 0, 0, 0),
            payload: &payload,
        };
        let Some(bytes) = emit(&pkt) else { return };
        self.raw(&bytes);
    }

    fn raw(&mut self, bytes: &[u8]) {
        let Ok(mut pkt) = PacketRepr::parse(bytes) else {
            return;
        };
        // Only responses: requests are the `responder` target's business, and this harness's
        // peer sends none.
        if !pkt.info().is_some_and(|i| i.is_response()) {
            return;
        }
        pkt.bth.dest_qp = QPN;
        self.silent_expiries = 0;
        self.qp.handle_packet(self.now, &pkt, &self.mrs);
    }

    /// Lets time pass to `to`, firing the timer if it is due.
    fn advance(&mut self, to: Duration) {
        self.now = self.now.max(to);
        let due = self.qp.poll_timeout().is_some_and(|t| t <= self.now);
        self.qp.handle_timeout(self.now);
        if due {
            self.silent_expiries += 1;
        }
        if let Some(t) = self.qp.poll_timeout() {
            assert!(
                t > self.now,
                "a timer expiry left a deadline at or before now"
            );
        }
        if self.qp.state() != QpState::Err {
            assert!(
                self.silent_expiries <= self.retry_cnt as u32 + 2,
                "{} timer expiries without a response and the QP is still {:?} (retry_cnt {})",
                self.silent_expiries,
                self.qp.state(),
                self.retry_cnt
            );
        }
    }

    /// Checks the invariants; memory only when `delivered` (only a received response writes
    /// local memory, and reading a region is most of a step's cost under the fuzzer).
    fn check(&mut self, delivered: bool) {
        check_bounds(&self.qp);
        if self.qp.state() == QpState::Err {
            assert_eq!(self.qp.poll_timeout(), None, "a timer armed in ERROR");
        }
        let mem = if delivered {
            self.mr.storage.to_vec(0, REGION).expect("whole region")
        } else {
            Vec::new()
        };
        // Byte by byte only when something changed since the last step.
        if delivered && mem != self.last {
            assert!(
                mem[..HALF] == self.initial[..HALF],
                "the requester wrote into a source buffer"
            );
            for (i, (now, before)) in mem[HALF..].iter().zip(&self.initial[HALF..]).enumerate() {
                assert!(
                    now == before || self.writable[i],
                    "target byte {i} changed outside every READ and atomic buffer"
                );
            }
            self.last = mem;
        }
        while let Some((side, wc)) = self.qp.poll_completion() {
            assert_eq!(side, CqSide::Send, "no receive WR was posted");
            // Pass over the WRs that completed silently: they must be unsignaled.
            loop {
                let p = self.posted.pop_front().unwrap_or_else(|| {
                    panic!("completion of WR {} never posted or twice", wc.wr_id)
                });
                if p.wr_id == wc.wr_id {
                    if wc.status == WcStatus::Success {
                        assert_eq!(wc.opcode, p.opcode, "completion opcode");
                        if p.opcode == WcOpcode::RdmaRead {
                            assert_eq!(wc.byte_len, p.len, "READ completion length");
                        }
                    }
                    break;
                }
                assert!(
                    !p.signaled,
                    "signaled WR {} passed over by the completion of WR {}",
                    p.wr_id, wc.wr_id
                );
            }
        }
    }
}

/// Most steps per input.
const MAX_STEPS: usize = 512;
/// Most packets one transmit burst may produce: the whole send queue at the smallest MTU
/// (bounded by the window, but a generous bound catches a loop all the same).
const MAX_BURST: usize = 4096;

/// The `completer` fuzz target's body.
pub fn completer(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let setup = Setup::read(&mut u);
    let mut h = Harness::new(&setup);
    for _ in 0..MAX_STEPS {
        let Some(step) = next_step::<ReqStep>(&mut u) else {
            break;
        };
        let delivered = matches!(step, Step::Raw(_) | Step::Shaped(ReqStep::Respond(_)));
        if tracing() {
            match &step {
                Step::Raw(b) => eprintln!("raw {:?}", PacketRepr::parse(b).map(|p| (p.bth, p.ext))),
                Step::Shaped(s) => eprintln!("{s:?}"),
            }
        }
        match step {
            Step::Raw(bytes) => h.raw(bytes),
            Step::Shaped(ReqStep::Post(p)) => h.post(&p),
            Step::Shaped(ReqStep::Transmit(n)) => {
                h.transmit(n as usize);
            }
            Step::Shaped(ReqStep::Respond(r)) => h.respond(&r),
            Step::Shaped(ReqStep::Wait(Wait::Deadline)) => {
                if let Some(t) = h.qp.poll_timeout() {
                    h.advance(t);
                }
            }
            Step::Shaped(ReqStep::Wait(Wait::Micros(us))) => {
                let to = h.now + Duration::from_micros(us as u64);
                h.advance(to);
            }
        }
        if tracing() {
            let a = h.qp.query();
            eprintln!(
                "  state {:?} sq_psn {:#x} {:?} timeout {:?}",
                a.qp_state,
                a.sq_psn,
                h.qp.queue_depths(),
                h.qp.poll_timeout()
            );
        }
        h.check(delivered);
    }
    // The peer goes silent: every WR completes within the retry budget.
    for _ in 0..h.retry_cnt as usize + 3 {
        let sent = h.transmit(MAX_BURST + 1);
        assert!(
            sent <= MAX_BURST,
            "the requester keeps sending without progress"
        );
        let Some(t) = h.qp.poll_timeout() else { break };
        h.advance(t);
        h.check(false);
    }
    h.transmit(MAX_BURST);
    h.check(true);
    assert_eq!(
        h.qp.poll_timeout(),
        None,
        "still waiting after the retry budget"
    );
    assert_eq!(
        h.qp.send_queue_len(),
        0,
        "send WRs left without a completion after the retry budget"
    );
    assert!(
        h.posted.iter().all(|p| !p.signaled),
        "signaled WRs {:?} never completed",
        h.posted
            .iter()
            .filter(|p| p.signaled)
            .map(|p| p.wr_id)
            .collect::<Vec<_>>()
    );
}

/// The work request of kind `kind` (0-9: SEND, SEND with immediate, WRITE, WRITE with
/// immediate, READ, compare-and-swap, fetch-and-add, inline SEND, ATOMIC WRITE, FLUSH) that
/// `p` asks for, and the opcode its completion carries.
fn post_opcode(kind: u8, p: &Post) -> (WrOpcode, WcOpcode) {
    let remote_addr = IOVA + (p.remote as u64 & !7);
    let rkey = 0x1234;
    match kind {
        0 | 7 => (WrOpcode::Send, WcOpcode::Send),
        1 => (WrOpcode::SendWithImm { imm: p.remote }, WcOpcode::Send),
        2 => (
            WrOpcode::RdmaWrite { remote_addr, rkey },
            WcOpcode::RdmaWrite,
        ),
        3 => (
            WrOpcode::RdmaWriteWithImm {
                remote_addr,
                rkey,
                imm: p.remote,
            },
            WcOpcode::RdmaWrite,
        ),
        4 => (WrOpcode::RdmaRead { remote_addr, rkey }, WcOpcode::RdmaRead),
        5 => (
            WrOpcode::AtomicCmpSwap {
                remote_addr,
                rkey,
                compare: p.remote as u64,
                swap: !(p.remote as u64),
            },
            WcOpcode::CompSwap,
        ),
        6 => (
            WrOpcode::AtomicFetchAdd {
                remote_addr,
                rkey,
                add: p.remote as u64 | 1,
            },
            WcOpcode::FetchAdd,
        ),
        // IBTA 1.5: no local buffer; answered by an empty READ RESPONSE ONLY.
        8 => (
            WrOpcode::AtomicWrite {
                remote_addr,
                rkey,
                data: (p.remote as u64 * 0x1_0000_0001).to_ne_bytes(),
            },
            WcOpcode::AtomicWrite,
        ),
        _ => (
            WrOpcode::Flush {
                remote_addr,
                rkey,
                len: p.len as u32,
                placement: crate::wire::feth::PLACEMENT_GLOBAL,
                selectivity: crate::wire::feth::SELECTIVITY_RANGE,
            },
            WcOpcode::Flush,
        ),
    }
}
