//! Fuzz target `responder`: arbitrary request packets (shaped, or raw bytes such as packets
//! from real captures) into one QP's responder, which owns registered memory with every
//! combination of rights, interleaved with receive posts, transmit drains and time.
//!
//! Invariants checked after every step (memory after each of the first 8 packets delivered,
//! every 8th after that, and at the end):
//! - no write outside the regions with the right: the read-only region, the region of another
//!   protection domain, the deregistered region and the local-only region (outside the
//!   receive buffers posted in it) never change; once the QP is in ERROR no region changes;
//! - no read from regions without the right: every READ response's payload is bytes of a
//!   readable region (as it is at the time of sending);
//! - bounded queues (see [`check_bounds`]) and bounded output: draining the responses of any
//!   history ends;
//! - every packet sent parses, goes to the peer QP and carries a valid ICRC;
//! - receive completions are for posted receive WRs only, in posting order, once each, and
//!   report no more bytes than the buffer holds.
//!
//! With the setup's XRC bit the QP is an XRC target (spec-notes/xrc.md) in a domain with one
//! XRC SRQ ([`XRC_SRQN`], PD 1, the receives' queue, completing on its CQ), beside another
//! domain's SRQ ([`OTHER_SRQN`]): shaped requests are XRC opcodes whose XRCETH names that SRQ,
//! the other domain's or any number; the same invariants hold, and receive completions come
//! from the SRQ's CQ only.
//!
//! With the setup's bit 1 (and not bit 0) the QP's receives are in a TM SRQ
//! (spec-notes/beyond-rxe.md rule 13) holding [`TAGS`] tags over the local-only region, the
//! last with mask 0 (every EAGER or RNDV message matches it while it lasts): a matched message
//! lands in its tag's buffer, a rendezvous READs from the peer into it; the invariants hold,
//! and a tag completes at most twice (a rendezvous: matched, then its data).

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};

use super::harness::{
    bth, check_bounds, connect, emit, ext_headers, icrc_ok, new_qp_with, next_step, pattern,
    read_head, tracing, HeaderFields, Link, Step, IOVA, REQUEST_OPCODES,
};
use crate::ib::{
    AccessFlags, DeviceLimits, Mtu, QpState, RecvWr, Sge, SrqAttr, TmOp, TmOpKind, WcStatus,
};
use crate::memory::SharedBytes;
use crate::transport::tag_match::is_fin;
use crate::transport::{
    Counters, CqSide, Endpoint, Mr, MrTable, QpCore, Srq, XrcDomain, XrcRole, MAX_PACKET,
    MAX_QUEUED_RESPONSES,
};
use crate::wire::{Opcode, PacketRepr, Psn, Transport, XrcEthRepr};

/// XRC mode: the number of the target domain's SRQ.
pub const XRC_SRQN: u32 = 0x42;
/// XRC mode: the number of another domain's SRQ, which the target must refuse.
pub const OTHER_SRQN: u32 = 0x50;

/// TM mode: the tags added at setup, each over [`TAG_LEN`] bytes of the local-only region.
pub const TAGS: u64 = 4;
/// TM mode: the bytes of each tag's buffer.
const TAG_LEN: u32 = 512;
/// TM mode: tag `i`'s `recv_wr_id` is this plus `i` (apart from the receive WRs' ids).
const TAG_WR_ID: u64 = 1 << 40;

/// Our QP number and the (simulated) peer's.
pub const QPN: u32 = 0x11;
/// The peer's QP number.
pub const PEER_QPN: u32 = 0x12;
const LOCAL_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const PEER_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
/// Size of every region.
pub const REGION: usize = 4096;
/// Distance between the regions' virtual addresses (so that a VA off the end of one region is
/// not inside the next).
const STRIDE: u64 = 0x1_0000;

/// The first bytes of an input: the connection.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    /// Path MTU selector (256 .. 4096).
    pub mtu: u8,
    /// The first PSN the responder expects (24 bits used).
    pub rq_psn: u32,
    /// `max_dest_rd_atomic` (1 .. 16).
    pub rd_atomic: u8,
    /// Receive WRs posted before the first step, each over the first [`REGION`] bytes of the
    /// local-only region (0 .. 16).
    pub recvs: u8,
    /// Bit 0: the QP is an XRC target, its receives in an XRC SRQ. Bit 1 (without bit 0):
    /// its receives are in a TM SRQ with [`TAGS`] tags.
    pub xrc: u8,
}

impl Setup {
    /// Bytes of an input that hold the setup.
    pub const LEN: usize = 8;

    /// Reads the setup from the first [`Setup::LEN`] bytes (missing bytes read as zero).
    pub fn read(u: &mut Unstructured) -> Setup {
        let b = read_head::<{ Setup::LEN }>(u);
        Setup {
            mtu: b[0],
            rq_psn: u32::from_le_bytes([b[1], b[2], b[3], 0]),
            rd_atomic: b[4],
            recvs: b[5],
            xrc: b[6],
        }
    }

    /// The bytes [`Setup::read`] reads back as `self`.
    pub fn encode(&self) -> [u8; Setup::LEN] {
        let p = self.rq_psn.to_le_bytes();
        [
            self.mtu,
            p[0],
            p[1],
            p[2],
            self.rd_atomic,
            self.recvs,
            self.xrc,
            0,
        ]
    }

    fn mtu(&self) -> Mtu {
        match self.mtu % 5 {
            0 => Mtu::Mtu256,
            1 => Mtu::Mtu512,
            2 => Mtu::Mtu1024,
            3 => Mtu::Mtu2048,
            _ => Mtu::Mtu4096,
        }
    }
}

/// Where a shaped request's PSN lies relative to the one the responder expects.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum PsnSel {
    /// The expected PSN.
    Expected,
    /// This many before it (a duplicate).
    Behind(u8),
    /// This many after it (a gap).
    Ahead(u8),
    /// Any PSN.
    Any(u32),
}

/// A request packet shaped from fuzz input.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub struct Request {
    /// Index into [`REQUEST_OPCODES`].
    pub op: u8,
    /// PSN.
    pub psn: PsnSel,
    /// Payload length (modulo MTU + 1).
    pub len: u16,
    /// Payload pattern seed.
    pub fill: u8,
    /// BTH AckReq.
    pub ack_req: bool,
    /// BTH solicited event.
    pub solicited: bool,
    /// Extended header fields; `key % 8` picks the region (see [`Regions::key`]).
    pub h: HeaderFields,
}

/// A structured step.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum RespStep {
    /// A request packet.
    Request(Request),
    /// `ibv_post_recv` of one buffer in the local-only region.
    PostRecv {
        /// Offset in the region.
        offset: u16,
        /// Length.
        len: u16,
    },
    /// Sends up to this many queued packets.
    Drain(u8),
    /// Lets this many microseconds pass.
    Wait(u16),
}

/// The regions of the responder's device.
struct Regions {
    mrs: MrTable,
    /// Every right, PD 1.
    full: Arc<Mr>,
    /// REMOTE_READ only.
    read_only: Arc<Mr>,
    /// REMOTE_WRITE (and local write).
    write_only: Arc<Mr>,
    /// REMOTE_ATOMIC (and local write).
    atomic_only: Arc<Mr>,
    /// Local write only, no rkey: the receive buffers.
    local: Arc<Mr>,
    /// Every right, but in PD 2.
    other_pd: Arc<Mr>,
    /// Every right, deregistered before the first packet.
    stale: Arc<Mr>,
}

impl Regions {
    fn new() -> Regions {
        let mut mrs = MrTable::new();
        let mut reg = |i: u64, pd: u32, access: AccessFlags| {
            let storage = Arc::new(SharedBytes::new(REGION));
            storage
                .write(0, &pattern(i + 1, REGION))
                .expect("in bounds");
            mrs.register(pd, storage, IOVA + i * STRIDE, access)
                .expect("the table has room")
        };
        let full = reg(0, 1, super::harness::ALL_ACCESS);
        let read_only = reg(1, 1, AccessFlags::REMOTE_READ);
        let write_only = reg(2, 1, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE);
        let atomic_only = reg(3, 1, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC);
        let local = reg(4, 1, AccessFlags::LOCAL_WRITE);
        let other_pd = reg(5, 2, super::harness::ALL_ACCESS);
        let stale = reg(6, 1, super::harness::ALL_ACCESS);
        mrs.deregister(stale.lkey).expect("registered");
        Regions {
            mrs,
            full,
            read_only,
            write_only,
            atomic_only,
            local,
            other_pd,
            stale,
        }
    }

    /// The remote key and the base VA selector `k` names: a region's rkey (the local-only
    /// region's lkey, which must not work remotely), or any key and VA.
    fn key(&self, k: u8, h: &HeaderFields) -> (u32, u64) {
        let mr = match k % 8 {
            0 => &self.full,
            1 => &self.read_only,
            2 => &self.write_only,
            3 => &self.atomic_only,
            4 => return (self.local.lkey, self.local.iova),
            5 => &self.other_pd,
            6 => &self.stale,
            _ => return (h.msn, h.orig),
        };
        (mr.rkey, mr.iova)
    }

    /// Regions no remote access may ever change.
    fn immutable(&self) -> [&Arc<Mr>; 3] {
        [&self.read_only, &self.other_pd, &self.stale]
    }

    /// Regions whose bytes a READ may return.
    fn readable(&self) -> [&Arc<Mr>; 2] {
        [&self.full, &self.read_only]
    }

    fn all(&self) -> [&Arc<Mr>; 7] {
        [
            &self.full,
            &self.read_only,
            &self.write_only,
            &self.atomic_only,
            &self.local,
            &self.other_pd,
            &self.stale,
        ]
    }
}

fn contents(mr: &Mr) -> Vec<u8> {
    mr.storage
        .to_vec(0, mr.storage.len())
        .expect("whole region")
}

/// A posted receive WR as the harness remembers it.
struct PostedRecv {
    wr_id: u64,
    len: u32,
}

struct Harness {
    qp: QpCore,
    r: Regions,
    now: Duration,
    mtu: u32,
    /// Initial contents of the regions nothing may change.
    immutable: Vec<Vec<u8>>,
    /// Initial contents of the local-only region, and which bytes receives may write.
    local_before: Vec<u8>,
    local_last: Vec<u8>,
    local_writable: Vec<bool>,
    posted: VecDeque<PostedRecv>,
    next_wr_id: u64,
    /// Packets delivered so far.
    delivered: u32,
    /// Contents of every region when the QP entered ERROR.
    frozen: Option<Vec<Vec<u8>>>,
    buf: Vec<u8>,
    local: SocketAddr,
    peer: SocketAddr,
    /// Seals the QP's packets, as the engine's does.
    endpoint: Endpoint,
    /// XRC mode: the target domain's SRQ, which takes the receives, and the other domain,
    /// kept alive.
    xrc: Option<(Arc<Srq>, XrcDomain)>,
    /// TM mode: the TM SRQ, which takes the receives, and each tag's completions so far.
    tm: Option<(Arc<Srq>, [u8; TAGS as usize])>,
}

/// TM mode's SRQ on PD 1 with its tags over the local-only region `local`.
fn tm_setup(local: &Mr, mrs: &MrTable) -> Arc<Srq> {
    let attr = SrqAttr {
        max_wr: 64,
        max_sge: 1,
        srq_limit: 0,
    };
    let c = Arc::new(Counters::default());
    let s = Srq::new(1, attr, &DeviceLimits::default(), c).expect("within limits");
    let s = s.with_tm(TAGS as u32).expect("within limits");
    for i in 0..TAGS {
        let sge = [Sge {
            addr: local.iova + i * TAG_LEN as u64,
            length: TAG_LEN,
            lkey: local.lkey,
        }];
        let op = TmOp {
            wr_id: 0,
            kind: TmOpKind::Add {
                recv_wr_id: TAG_WR_ID + i,
                sg_list: &sge,
                tag: i,
                mask: if i + 1 == TAGS { 0 } else { u64::MAX },
            },
            signaled: false,
            sync: None,
        };
        let (r, _) = s.tm_op(&op, mrs).expect("a valid buffer");
        r.expect("room in the list");
    }
    Arc::new(s)
}

/// XRC mode's SRQs: one in the target's domain (1), one in another (2), both on PD 1.
fn xrc_setup() -> (Arc<XrcDomain>, Arc<Srq>, XrcDomain) {
    let attr = SrqAttr {
        max_wr: 64,
        max_sge: 1,
        srq_limit: 0,
    };
    let srq = |d: u32, n: u32| {
        let c = Arc::new(Counters::default());
        let s = Srq::new(1, attr, &DeviceLimits::default(), c).expect("within limits");
        Arc::new(s.with_xrc(d, n))
    };
    let domain = Arc::new(XrcDomain::new(1));
    let mine = srq(1, XRC_SRQN);
    domain.add_srq(&mine).expect("of the domain");
    let other = XrcDomain::new(2);
    other.add_srq(&srq(2, OTHER_SRQN)).expect("of the domain");
    (domain, mine, other)
}

impl Harness {
    fn new(s: &Setup) -> Harness {
        let r = Regions::new();
        let (role, xrc) = if s.xrc & 1 != 0 {
            let (domain, srq, other) = xrc_setup();
            (Some(XrcRole::Recv(domain)), Some((srq, other)))
        } else {
            (None, None)
        };
        let tm = (s.xrc & 3 == 2).then(|| tm_setup(&r.local, &r.mrs));
        let mut qp = new_qp_with(QPN, IpAddr::V4(LOCAL_IP), role, tm.clone());
        let mtu = s.mtu();
        connect(
            &mut qp,
            &Link {
                peer_qpn: PEER_QPN,
                peer: IpAddr::V4(PEER_IP),
                mtu,
                sq_psn: 0,
                rq_psn: s.rq_psn,
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 7,
                rd_atomic: 1 + s.rd_atomic % 16,
            },
        );
        let immutable = r.immutable().iter().map(|m| contents(m)).collect();
        let local_before = contents(&r.local);
        let port = crate::wire::ROCE_V2_UDP_PORT;
        let mut h = Harness {
            qp,
            now: Duration::ZERO,
            mtu: mtu.bytes(),
            immutable,
            local_last: local_before.clone(),
            local_before,
            // TM mode: the tags' buffers, which matched messages may write.
            local_writable: (0..REGION)
                .map(|i| tm.is_some() && (i as u64) < TAGS * TAG_LEN as u64)
                .collect(),
            posted: VecDeque::new(),
            next_wr_id: 1,
            delivered: 0,
            frozen: None,
            buf: vec![0u8; MAX_PACKET],
            local: SocketAddr::new(IpAddr::V4(LOCAL_IP), port),
            peer: SocketAddr::new(IpAddr::V4(PEER_IP), port),
            endpoint: Endpoint::new(
                SocketAddr::new(IpAddr::V4(LOCAL_IP), port),
                port,
                Arc::new(Counters::default()),
            ),
            r,
            xrc,
            tm: tm.map(|t| (t, [0; TAGS as usize])),
        };
        for _ in 0..s.recvs % 17 {
            h.post_recv(0, REGION as u16);
        }
        h
    }

    fn post_recv(&mut self, offset: u16, len: u16) {
        let sge = [Sge {
            addr: self.r.local.iova + offset as u64,
            length: len as u32,
            lkey: self.r.local.lkey,
        }];
        let wr_id = self.next_wr_id;
        let wr = RecvWr {
            wr_id,
            sg_list: &sge,
        };
        let posted = match (&self.xrc, &self.tm) {
            (Some((srq, _)), _) | (None, Some((srq, _))) => srq.post_recv(&wr, &self.r.mrs),
            (None, None) => self.qp.post_recv(&wr, &self.r.mrs),
        };
        if posted.is_ok() {
            self.next_wr_id += 1;
            if self.qp.state() != QpState::Err {
                self.posted.push_back(PostedRecv {
                    wr_id,
                    len: len as u32,
                });
                // A zero-length SGE is not checked (as rxe): it may lie anywhere.
                let start = (offset as usize).min(REGION);
                let end = (offset as usize + len as usize).min(REGION);
                for b in &mut self.local_writable[start..end] {
                    *b = true;
                }
            } else {
                // Flushed at once: its completion is checked like any other.
                self.posted.push_back(PostedRecv { wr_id, len: 0 });
            }
        }
    }

    fn request(&mut self, q: &Request) {
        let mut opcode = REQUEST_OPCODES[q.op as usize % REQUEST_OPCODES.len()];
        if self.xrc.is_some() {
            // The same operation on XRC (none for FLUSH and ATOMIC WRITE: skipped below).
            opcode = Opcode(opcode.0 | Opcode::XRC_BASE);
        }
        let Some(info) = opcode.info() else { return };
        let expected = Psn::new(self.qp.query().rq_psn);
        let psn = match q.psn {
            PsnSel::Expected => expected,
            PsnSel::Behind(n) => expected.sub(n as u32 + 1),
            PsnSel::Ahead(n) => expected.add(n as u32 + 1),
            PsnSel::Any(p) => Psn::new(p),
        };
        let (key, base) = self.r.key(q.h.key, &q.h);
        let va = base.wrapping_add(q.h.va_offset as i64 as u64);
        // Mostly lengths near the regions' size; now and then any 32-bit length.
        let dma_len = if q.h.dma_len & 0x8000 != 0 {
            (q.h.dma_len as u32) << 16 | q.h.dma_len as u32
        } else {
            q.h.dma_len as u32 & 0x1FFF
        };
        let payload = if info.payload {
            pattern(q.fill as u64, q.len as usize % (self.mtu as usize + 1))
        } else {
            Vec::new()
        };
        let mut ext = ext_headers(info.headers, &q.h, key, va, dma_len);
        if ext.xrceth.is_some() {
            // Mostly the target's SRQ; now and then the other domain's or any number.
            let srqn = match q.h.syndrome % 8 {
                0 => OTHER_SRQN,
                1 => q.h.msn & 0xFF_FFFF,
                _ => XRC_SRQN,
            };
            ext.xrceth = Some(XrcEthRepr { srqn });
        }
        let pkt = PacketRepr {
            bth: bth(opcode, QPN, psn.value(), q.ack_req, q.solicited),
            ext,
            payload: &payload,
        };
        // Through bytes, as it would arrive.
        let Some(bytes) = emit(&pkt) else { return };
        self.raw(&bytes);
    }

    /// A received datagram: parsed as the engine parses it and handed over if addressed to
    /// this QP (the engine drops the rest before the transport sees them).
    fn raw(&mut self, bytes: &[u8]) {
        let Ok(mut pkt) = PacketRepr::parse(bytes) else {
            return;
        };
        // Raw packets (from captures) name other QPs: readdress them, as a hostile peer that
        // knows our QPN would.
        pkt.bth.dest_qp = QPN;
        self.qp.handle_packet(self.now, &pkt, &self.r.mrs);
    }

    /// Sends up to `n` queued packets, checking each.
    fn drain(&mut self, n: usize) -> usize {
        let mut sent = 0;
        while sent < n {
            let Some(t) = self
                .endpoint
                .poll_transmit(self.now, &mut self.qp, &mut self.buf)
            else {
                break;
            };
            sent += 1;
            assert_eq!(t.dst, self.peer, "sent to the peer");
            let bytes = &self.buf[..t.len];
            assert!(
                icrc_ok(
                    SocketAddr::new(self.local.ip(), t.src_port),
                    self.peer,
                    bytes
                ),
                "a sent packet carries the ICRC of its headers"
            );
            let pkt = PacketRepr::parse(bytes).expect("sent packets parse");
            if tracing() {
                eprintln!(
                    "  <- {:?} psn {:#x} {:?}",
                    pkt.opcode().name(),
                    pkt.bth.psn,
                    pkt.ext.aeth
                );
            }
            assert_eq!(pkt.bth.dest_qp, PEER_QPN);
            let info = pkt.info().expect("known opcode");
            // TM mode: a rendezvous's READ and FIN come from the QP itself.
            let internal = self.tm.is_some()
                && (pkt.bth.opcode == Opcode::RC_RDMA_READ_REQUEST
                    || (pkt.bth.opcode == Opcode::RC_SEND_ONLY && is_fin(pkt.payload)));
            assert!(
                info.is_response() || internal,
                "the responder sends responses only (and a rendezvous's READ and FIN)"
            );
            if is_read_response(pkt.bth.opcode) && !pkt.payload.is_empty() {
                assert!(
                    self.r
                        .readable()
                        .iter()
                        .any(|mr| contains(&contents(mr), pkt.payload)),
                    "a READ response carries bytes of no readable region"
                );
            }
        }
        sent
    }

    /// Checks the invariants; memory only when `delivered` (only a received request writes
    /// memory, and reading the regions is most of a step's cost under the fuzzer).
    fn check(&mut self, delivered: bool) {
        check_bounds(&self.qp);
        self.check_completions();
        if delivered {
            self.delivered += 1;
            // Reading every region is most of a step's cost under the fuzzer's comparison
            // tracing: check after the first packets, then every few, and at the end (a
            // change is permanent unless a later write restores the very bytes).
            if self.delivered <= 8 || self.delivered % 8 == 0 {
                self.check_memory();
            }
        }
    }

    fn check_memory(&mut self) {
        for (mr, before) in self.r.immutable().iter().zip(&self.immutable) {
            assert!(
                contents(mr) == *before,
                "a region without remote write rights changed (iova {:#x})",
                mr.iova
            );
        }
        let local = contents(&self.r.local);
        // Byte by byte only when something changed since the last step.
        if local != self.local_last {
            for (i, (now, before)) in local.iter().zip(&self.local_before).enumerate() {
                assert!(
                    now == before || self.local_writable[i],
                    "local-only region byte {i} changed outside every posted receive buffer"
                );
            }
            self.local_last = local;
        }
        if self.qp.state() == QpState::Err {
            let now: Vec<Vec<u8>> = self.r.all().iter().map(|m| contents(m)).collect();
            match &self.frozen {
                None => self.frozen = Some(now),
                Some(f) => assert!(*f == now, "memory changed after the QP entered ERROR"),
            }
        }
    }

    fn check_completions(&mut self) {
        while let Some((side, wc)) = self.qp.poll_completion() {
            if tracing() {
                eprintln!("  -> {side:?} {wc:?}");
            }
            let want = match self.xrc {
                Some(_) => CqSide::Srq(XRC_SRQN),
                None => CqSide::Recv,
            };
            assert_eq!(
                side, want,
                "the responder completes receives only, on their CQ"
            );
            if let (Some((_, done)), Some(i)) = (&mut self.tm, wc.wr_id.checked_sub(TAG_WR_ID)) {
                let n = done.get_mut(i as usize).expect("a tag's recv_wr_id");
                *n += 1;
                assert!(*n <= 2, "a tag completes at most twice");
                assert!(
                    wc.byte_len <= TAG_LEN,
                    "more bytes than the tag's buffer holds"
                );
                continue;
            }
            let p = self
                .posted
                .pop_front()
                .expect("a receive completion without a posted receive WR");
            assert_eq!(wc.wr_id, p.wr_id, "receive completions in posting order");
            if wc.status == WcStatus::Success {
                assert!(wc.byte_len <= p.len, "more bytes than the buffer holds");
            }
        }
    }
}

fn is_read_response(op: Opcode) -> bool {
    // XRC's READ responses are RC's in the XRC group.
    let op = match op.transport() {
        Transport::Xrc => Opcode(op.0 & !Opcode::XRC_BASE),
        _ => op,
    };
    matches!(
        op,
        Opcode::RC_RDMA_READ_RESPONSE_FIRST
            | Opcode::RC_RDMA_READ_RESPONSE_MIDDLE
            | Opcode::RC_RDMA_READ_RESPONSE_LAST
            | Opcode::RC_RDMA_READ_RESPONSE_ONLY
    )
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.len() <= hay.len() && hay.windows(needle.len()).any(|w| w == needle)
}

/// Most steps per input (keeps every input fast).
const MAX_STEPS: usize = 512;

/// The `responder` fuzz target's body.
pub fn responder(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let setup = Setup::read(&mut u);
    let mut h = Harness::new(&setup);
    h.check(true);
    for _ in 0..MAX_STEPS {
        let Some(step) = next_step::<RespStep>(&mut u) else {
            break;
        };
        let delivered = matches!(step, Step::Raw(_) | Step::Shaped(RespStep::Request(_)));
        if tracing() {
            match &step {
                Step::Raw(b) => eprintln!("raw {:?}", PacketRepr::parse(b)),
                Step::Shaped(RespStep::Request(q)) => eprintln!(
                    "request {:?} {q:?}",
                    REQUEST_OPCODES[q.op as usize % REQUEST_OPCODES.len()].name()
                ),
                Step::Shaped(s) => eprintln!("{s:?}"),
            }
        }
        match step {
            Step::Raw(bytes) => h.raw(bytes),
            Step::Shaped(RespStep::Request(q)) => h.request(&q),
            Step::Shaped(RespStep::PostRecv { offset, len }) => h.post_recv(offset, len),
            Step::Shaped(RespStep::Drain(n)) => {
                h.drain(n as usize);
            }
            Step::Shaped(RespStep::Wait(us)) => {
                h.now += Duration::from_micros(us as u64);
                h.qp.handle_timeout(h.now);
            }
        }
        if tracing() {
            let a = h.qp.query();
            eprintln!(
                "  state {:?} rq_psn {:#x} rq {} {:?}",
                a.qp_state,
                a.rq_psn,
                h.qp.recv_queue_len(),
                h.qp.queue_depths()
            );
        }
        h.check(delivered);
    }
    // Whatever is queued drains in a bounded number of packets: each queued response is at
    // most one READ of a whole region.
    let per_response = REGION / 256 + 1;
    let bound = (MAX_QUEUED_RESPONSES + 1) * per_response;
    let sent = h.drain(bound + 1);
    assert!(
        sent <= bound,
        "the responder keeps sending without progress"
    );
    h.check(true);
}
