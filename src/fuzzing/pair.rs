//! Fuzz target `pair`: two connected cores driven by an arbitrary interleaving of verbs calls
//! (SEND, WRITE, READ, fetch-and-add, receive posts) on both ends, transmits, and a network the
//! input controls: it delivers any datagram in flight (so in any order), drops, duplicates or
//! corrupts them, and lets timers expire. Every datagram crosses as bytes with the ICRC a UDP
//! socket pair would give it, and the receiver checks it as the engine does.
//!
//! After the input, the network becomes reliable and the pair runs until quiet. Then:
//! - every send WR completed exactly once, in posting order, within the retry budget (virtual
//!   time bounded by the retries and RNR retries the QPs were given);
//! - after an error completion only errors follow, and that end is in ERROR;
//! - data intact: a successful WRITE's bytes are at its target, a successful READ's bytes in
//!   its buffer, a successful fetch-and-add executed exactly once (and a failed one at most
//!   once); when every SEND of an end succeeded, the peer's receive completions match them one
//!   for one, in order, with the same bytes;
//! - no queue grew past its bound at any step ([`check_bounds`]).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};

use super::harness::{
    check_bounds, connect, new_qp, next_step, pattern, read_head, Link, Step, ALL_ACCESS, IOVA,
};
use crate::ib::{QpState, RecvWr, SendFlags, SendWr, Sge, WcOpcode, WcStatus, WrOpcode};
use crate::memory::SharedBytes;
use crate::transport::{
    Counters, CqSide, Endpoint, IpFields, Mr, MrTable, OneQp, QpCore, MAX_PACKET,
};
use crate::wire::ROCE_V2_UDP_PORT;

const KI: u64 = 1024;
/// Region layout (each end): sources, targets of the peer's WRITEs, sources of the peer's
/// READs, targets of our READs, receive buffers, the words the peer's fetch-and-adds target
/// (zero at the start) and the original values our fetch-and-adds return.
const SRC: u64 = 0;
const WRITE_DST: u64 = 8 * KI;
const READ_SRC: u64 = 16 * KI;
const READ_DST: u64 = 24 * KI;
const RECV: u64 = 32 * KI;
const ATOMIC: u64 = 40 * KI;
const ORIG: u64 = ATOMIC + ATOMICS as u64 * 8;
const REGION: usize = 41 * KI as usize;
/// Slots of 1 KiB per area, each used once per run.
const SLOTS: usize = 8;
const SLOT: u64 = KI;
/// Fetch-and-add words per end.
const ATOMICS: usize = 64;

/// The first bytes of an input.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    /// Path MTU selector.
    pub mtu: u8,
    /// Low byte of the first PSNs (which start just below the 24-bit wrap).
    pub psn: u8,
    /// Timeout exponent selector (1 .. 12).
    pub timeout: u8,
    /// Transport retries (0 .. 6).
    pub retry_cnt: u8,
    /// RNR retries (0 .. 6).
    pub rnr_retry: u8,
    /// `max_rd_atomic` and `max_dest_rd_atomic` (1 .. 4).
    pub rd_atomic: u8,
}

impl Setup {
    /// Bytes of an input that hold the setup.
    pub const LEN: usize = 6;

    /// Reads the setup from the first [`Setup::LEN`] bytes (missing bytes read as zero).
    pub fn read(u: &mut Unstructured) -> Setup {
        let b = read_head::<{ Setup::LEN }>(u);
        Setup {
            mtu: b[0],
            psn: b[1],
            timeout: b[2],
            retry_cnt: b[3],
            rnr_retry: b[4],
            rd_atomic: b[5],
        }
    }

    /// The bytes [`Setup::read`] reads back as `self`.
    pub fn encode(&self) -> [u8; Setup::LEN] {
        [
            self.mtu,
            self.psn,
            self.timeout,
            self.retry_cnt,
            self.rnr_retry,
            self.rd_atomic,
        ]
    }
}

/// What the input does next.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum PairStep {
    /// `ibv_post_send` on end B (`b`) or A: kind 0 SEND, 1 WRITE, 2 READ, 3 fetch-and-add.
    Post {
        /// End B.
        b: bool,
        /// Operation.
        kind: u8,
        /// Length (modulo 1 KiB + 1).
        len: u16,
    },
    /// `ibv_post_recv` of a 1 KiB buffer on end B or A.
    PostRecv {
        /// End B.
        b: bool,
    },
    /// Up to `n` packets from end B or A onto the network.
    Transmit {
        /// End B.
        b: bool,
        /// Most packets.
        n: u8,
    },
    /// Delivers the datagram at this index (modulo those in flight): any order.
    Deliver(u8),
    /// Drops one.
    Drop(u8),
    /// Duplicates one.
    Duplicate(u8),
    /// Flips bits of one byte of one.
    Corrupt {
        /// Datagram.
        idx: u8,
        /// Byte.
        at: u16,
        /// Bits.
        xor: u8,
    },
    /// Time passes to the next deadline of end B or A, and both ends handle it.
    Timer {
        /// End B.
        b: bool,
    },
    /// This many microseconds pass.
    Wait(u16),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Send,
    Write,
    Read,
    FetchAdd,
}

#[derive(Debug)]
struct PostedSend {
    wr_id: u64,
    kind: Kind,
    /// Slot (WRITE, READ), word (fetch-and-add) or source offset (SEND).
    slot: u64,
    len: u32,
    status: Option<WcStatus>,
}

struct End {
    qp: QpCore,
    /// Seals the QP's packets, as the engine's does.
    endpoint: Endpoint,
    mrs: MrTable,
    mr: Arc<Mr>,
    addr: SocketAddr,
    sends: Vec<PostedSend>,
    /// Posted receive WR ids (slot = index), and the completions they got.
    recvs: Vec<u64>,
    recv_wcs: Vec<crate::ib::WorkCompletion>,
    /// Completions in arrival order (wr ids) for the order check.
    send_order: Vec<u64>,
    writes: usize,
    reads: usize,
    atomics: usize,
    next_wr_id: u64,
}

impl End {
    fn new(qpn: u32, ip: Ipv4Addr, seed: u64) -> End {
        let mut mrs = MrTable::new();
        let storage = Arc::new(SharedBytes::new(REGION));
        storage
            .write(0, &pattern(seed, ATOMIC as usize))
            .expect("in bounds");
        let mr = mrs
            .register(1, storage, IOVA, ALL_ACCESS)
            .expect("the table has room");
        End {
            qp: new_qp(qpn, IpAddr::V4(ip)),
            endpoint: Endpoint::new(
                SocketAddr::new(IpAddr::V4(ip), ROCE_V2_UDP_PORT),
                ROCE_V2_UDP_PORT,
                Arc::new(Counters::default()),
            ),
            mrs,
            mr,
            addr: SocketAddr::new(IpAddr::V4(ip), ROCE_V2_UDP_PORT),
            sends: Vec::new(),
            recvs: Vec::new(),
            recv_wcs: Vec::new(),
            send_order: Vec::new(),
            writes: 0,
            reads: 0,
            atomics: 0,
            next_wr_id: 1,
        }
    }

    fn sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: IOVA + off,
            length: len,
            lkey: self.mr.lkey,
        }
    }

    fn collect(&mut self) {
        while let Some((side, wc)) = self.qp.poll_completion() {
            match side {
                CqSide::Recv | CqSide::Srq(_) => {
                    assert!(
                        self.recvs.get(self.recv_wcs.len()) == Some(&wc.wr_id),
                        "receive completion {} out of posting order or never posted",
                        wc.wr_id
                    );
                    self.recv_wcs.push(wc);
                }
                CqSide::Send => {
                    let w = self
                        .sends
                        .iter_mut()
                        .find(|w| w.wr_id == wc.wr_id)
                        .expect("a send completion for a posted WR");
                    assert!(w.status.is_none(), "WR {} completed twice", wc.wr_id);
                    w.status = Some(wc.status);
                    if wc.status == WcStatus::Success && w.kind == Kind::Read {
                        assert_eq!(wc.byte_len, w.len, "READ completion length");
                    }
                    if wc.status == WcStatus::Success {
                        let want = match w.kind {
                            Kind::Send => WcOpcode::Send,
                            Kind::Write => WcOpcode::RdmaWrite,
                            Kind::Read => WcOpcode::RdmaRead,
                            Kind::FetchAdd => WcOpcode::FetchAdd,
                        };
                        assert_eq!(wc.opcode, want);
                    }
                    self.send_order.push(wc.wr_id);
                }
            }
        }
    }
}

/// A datagram on the simulated network.
#[derive(Debug, Clone)]
struct Datagram {
    to_b: bool,
    src_port: u16,
    bytes: Vec<u8>,
}

struct Net {
    a: End,
    b: End,
    wire: Vec<Datagram>,
    now: Duration,
    buf: Vec<u8>,
}

/// Most datagrams in flight (older ones are lost, as a full queue would lose them).
const MAX_IN_FLIGHT: usize = 512;

impl Net {
    /// Runs one step of the fuzzer's input.
    fn step(&mut self, step: Step<PairStep>) {
        match step {
            // Raw bytes go on the wire towards B as if A sent them. Without A's ICRC the
            // receiver drops them, as the engine does; a hostile peer that seals what it sends
            // is the business of `responder`, `completer` and `engine_rx`.
            Step::Raw(bytes) => {
                if self.wire.len() < MAX_IN_FLIGHT && !bytes.is_empty() {
                    let src_port = self.a.qp.src_port();
                    self.wire.push(Datagram {
                        to_b: true,
                        src_port,
                        bytes: bytes.to_vec(),
                    });
                }
            }
            Step::Shaped(PairStep::Post { b, kind, len }) => self.post(b, kind, len),
            Step::Shaped(PairStep::PostRecv { b }) => self.post_recv(b),
            Step::Shaped(PairStep::Transmit { b, n: k }) => {
                self.transmit(b, k as usize);
            }
            Step::Shaped(PairStep::Deliver(i)) => {
                if let Some(i) = self.pick(i) {
                    let d = self.wire.remove(i);
                    self.deliver(d);
                }
            }
            Step::Shaped(PairStep::Drop(i)) => {
                if let Some(i) = self.pick(i) {
                    self.wire.remove(i);
                }
            }
            Step::Shaped(PairStep::Duplicate(i)) => {
                if let Some(i) = self.pick(i) {
                    let d = self.wire[i].clone();
                    if self.wire.len() < MAX_IN_FLIGHT {
                        self.wire.push(d);
                    }
                }
            }
            Step::Shaped(PairStep::Corrupt { idx, at, xor }) => {
                if let Some(i) = self.pick(idx) {
                    let d = &mut self.wire[i];
                    let at = at as usize % d.bytes.len();
                    d.bytes[at] ^= xor;
                }
            }
            Step::Shaped(PairStep::Timer { b }) => {
                let e = if b { &self.b } else { &self.a };
                if let Some(t) = e.qp.poll_timeout() {
                    self.timers(t);
                }
            }
            Step::Shaped(PairStep::Wait(us)) => {
                let t = self.now + Duration::from_micros(us as u64);
                self.timers(t);
            }
        }
    }

    /// The index of a datagram on the wire that `i` picks, if the wire holds any.
    fn pick(&self, i: u8) -> Option<usize> {
        (!self.wire.is_empty()).then(|| i as usize % self.wire.len())
    }

    fn end(&mut self, b: bool) -> (&mut End, &mut End) {
        if b {
            (&mut self.b, &mut self.a)
        } else {
            (&mut self.a, &mut self.b)
        }
    }

    fn post(&mut self, b: bool, kind: u8, len: u16) {
        let (e, peer) = self.end(b);
        let len = len as u32 % (SLOT as u32 + 1);
        let rkey = peer.mr.rkey;
        let (kind, slot, opcode, local, len) = match kind % 4 {
            0 => {
                let off = (e.next_wr_id * 97) % (8 * KI - SLOT);
                (Kind::Send, off, WrOpcode::Send, SRC + off, len)
            }
            1 if e.writes < SLOTS => {
                let slot = e.writes as u64;
                e.writes += 1;
                let op = WrOpcode::RdmaWrite {
                    remote_addr: IOVA + WRITE_DST + slot * SLOT,
                    rkey,
                };
                (Kind::Write, slot, op, SRC + slot * SLOT, len)
            }
            2 if e.reads < SLOTS => {
                let slot = e.reads as u64;
                e.reads += 1;
                let op = WrOpcode::RdmaRead {
                    remote_addr: IOVA + READ_SRC + slot * SLOT,
                    rkey,
                };
                (Kind::Read, slot, op, READ_DST + slot * SLOT, len)
            }
            3 if e.atomics < ATOMICS => {
                let slot = e.atomics as u64;
                e.atomics += 1;
                let op = WrOpcode::AtomicFetchAdd {
                    remote_addr: IOVA + ATOMIC + slot * 8,
                    rkey,
                    add: 1,
                };
                // The original value lands in our own area, which the peer never touches.
                (Kind::FetchAdd, slot, op, ORIG + slot * 8, 8)
            }
            _ => return,
        };
        let sge = [e.sge(local, len)];
        let wr_id = e.next_wr_id;
        let wr = SendWr {
            wr_id,
            sg_list: if len == 0 { &[] } else { &sge },
            opcode,
            send_flags: SendFlags::SIGNALED,
        };
        if e.qp.post_send(&wr, &e.mrs).is_ok() {
            e.next_wr_id += 1;
            e.sends.push(PostedSend {
                wr_id,
                kind,
                slot,
                len,
                status: None,
            });
        }
    }

    fn post_recv(&mut self, b: bool) {
        let (e, _) = self.end(b);
        if e.recvs.len() >= SLOTS {
            return;
        }
        let sge = [e.sge(RECV + e.recvs.len() as u64 * SLOT, SLOT as u32)];
        let wr_id = 1000 + e.recvs.len() as u64;
        let wr = RecvWr {
            wr_id,
            sg_list: &sge,
        };
        if e.qp.post_recv(&wr, &e.mrs).is_ok() {
            e.recvs.push(wr_id);
        }
    }

    fn transmit(&mut self, b: bool, n: usize) -> usize {
        let mut sent = 0;
        while sent < n {
            let now = self.now;
            let (e, peer) = if b {
                (&mut self.b, &self.a)
            } else {
                (&mut self.a, &self.b)
            };
            let Some(t) = e.endpoint.poll_transmit(now, &mut e.qp, &mut self.buf) else {
                break;
            };
            assert_eq!(t.dst, peer.addr);
            sent += 1;
            if self.wire.len() >= MAX_IN_FLIGHT {
                self.wire.remove(0);
            }
            self.wire.push(Datagram {
                to_b: !b,
                src_port: t.src_port,
                bytes: self.buf[..t.len].to_vec(),
            });
        }
        sent
    }

    fn deliver(&mut self, d: Datagram) {
        let now = self.now;
        let (to, from) = if d.to_b {
            (&mut self.b, &self.a)
        } else {
            (&mut self.a, &self.b)
        };
        let src = SocketAddr::new(from.addr.ip(), d.src_port);
        // The receiver's endpoint, as the engine runs it: ICRC, parse, QP lookup, sender.
        let mut qps = OneQp {
            qp: &mut to.qp,
            mrs: &to.mrs,
        };
        to.endpoint
            .handle(now, src, to.addr, IpFields::default(), &d.bytes, &mut qps);
    }

    fn timers(&mut self, to: Duration) {
        self.now = self.now.max(to);
        self.a.qp.handle_timeout(self.now);
        self.b.qp.handle_timeout(self.now);
    }

    fn check(&mut self) {
        check_bounds(&self.a.qp);
        check_bounds(&self.b.qp);
        self.a.collect();
        self.b.collect();
    }

    /// Reliable network until nothing is in flight and no timer is armed, or `limit` passes.
    /// Returns whether it went quiet.
    fn settle(&mut self, limit: Duration) -> bool {
        let end = self.now + limit;
        for _ in 0..100_000 {
            let mut moved = self.transmit(false, 64) + self.transmit(true, 64) > 0;
            while !self.wire.is_empty() {
                let d = self.wire.remove(0);
                self.deliver(d);
                moved = true;
            }
            self.check();
            if moved {
                continue;
            }
            let next = [self.a.qp.poll_timeout(), self.b.qp.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            match next {
                Some(t) if t <= end => self.timers(t),
                Some(_) => return false,
                None => return true,
            }
        }
        false
    }
}

/// Most steps per input.
const MAX_STEPS: usize = 1024;

/// What a `pair` run ended with (for tests that check a seed does what it is named for).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PairReport {
    /// Send WRs completed successfully, on A and on B.
    pub ok: [usize; 2],
    /// Send WRs completed with an error, on A and on B.
    pub failed: [usize; 2],
    /// Successful receive completions, on A and on B.
    pub received: [usize; 2],
}

/// The `pair` fuzz target's body.
pub fn pair(data: &[u8]) {
    pair_report(data);
}

/// [`pair`], returning what the run ended with.
pub fn pair_report(data: &[u8]) -> PairReport {
    let mut u = Unstructured::new(data);
    let s = Setup::read(&mut u);
    let mut a = End::new(0x31, Ipv4Addr::new(192, 0, 2, 1), 1);
    let mut b = End::new(0x32, Ipv4Addr::new(192, 0, 2, 2), 2);
    let mtu = super::harness::mtu_from(s.mtu);
    let psn = 0xFF_FF00 | s.psn as u32;
    let timeout = 1 + s.timeout % 12;
    let retry_cnt = s.retry_cnt % 7;
    let rnr_retry = s.rnr_retry % 7;
    let rd_atomic = 1 + s.rd_atomic % 4;
    let link = |peer: &End, sq: u32, rq: u32| Link {
        peer_qpn: peer.qp.qpn(),
        peer: peer.addr.ip(),
        mtu,
        sq_psn: sq,
        rq_psn: rq,
        timeout,
        retry_cnt,
        rnr_retry,
        rd_atomic,
    };
    let (la, lb) = (
        link(&b, psn, psn.wrapping_add(0x40)),
        link(&a, psn.wrapping_add(0x40), psn),
    );
    connect(&mut a.qp, &la);
    connect(&mut b.qp, &lb);
    let mut n = Net {
        a,
        b,
        wire: Vec::new(),
        now: Duration::ZERO,
        buf: vec![0u8; MAX_PACKET],
    };
    for _ in 0..MAX_STEPS {
        let Some(step) = next_step::<PairStep>(&mut u) else {
            break;
        };
        n.step(step);
        n.check();
    }
    // The retry budget: every retry waits one timeout, every RNR retry one RNR timer (the
    // harness's QPs ask for the shortest), and a READ or atomic may be retried for each.
    let rto = Duration::from_nanos(4096u64 << timeout);
    let budget = (rto + Duration::from_millis(1)) * (retry_cnt as u32 + rnr_retry as u32 + 4) * 4;
    assert!(
        n.settle(budget),
        "the pair did not go quiet within the retry budget ({budget:?})"
    );
    let mut report = PairReport::default();
    for (i, (e, peer)) in [(&n.a, &n.b), (&n.b, &n.a)].into_iter().enumerate() {
        verify(e, peer);
        let ok = |w: &&PostedSend| w.status == Some(WcStatus::Success);
        report.ok[i] = e.sends.iter().filter(ok).count();
        report.failed[i] = e.sends.len() - report.ok[i];
        report.received[i] = e
            .recv_wcs
            .iter()
            .filter(|w| w.status == WcStatus::Success)
            .count();
    }
    report
}

/// The end-of-run checks of one end's send WRs against its peer's memory and receives.
fn verify(e: &End, peer: &End) {
    assert_eq!(e.qp.send_queue_len(), 0, "send WRs never completed");
    let ids: Vec<u64> = e.sends.iter().map(|w| w.wr_id).collect();
    assert_eq!(e.send_order, ids, "send completions out of posting order");
    let mut failed = false;
    for w in &e.sends {
        let status = w.status.expect("every WR completed");
        if failed {
            assert_ne!(status, WcStatus::Success, "success after an error");
        }
        if status != WcStatus::Success {
            failed = true;
            assert_eq!(
                e.qp.state(),
                QpState::Err,
                "an error completion outside ERROR"
            );
        }
        let mine = |off: u64, len: u32| e.mr.storage.to_vec(off, len as usize).expect("in region");
        let theirs = |off: u64, len: u32| {
            peer.mr
                .storage
                .to_vec(off, len as usize)
                .expect("in region")
        };
        match w.kind {
            Kind::Write if status == WcStatus::Success => assert!(
                theirs(WRITE_DST + w.slot * SLOT, w.len) == mine(SRC + w.slot * SLOT, w.len),
                "WRITE {} not intact at the peer",
                w.wr_id
            ),
            Kind::Read if status == WcStatus::Success => assert!(
                mine(READ_DST + w.slot * SLOT, w.len) == theirs(READ_SRC + w.slot * SLOT, w.len),
                "READ {} not intact",
                w.wr_id
            ),
            Kind::FetchAdd => {
                let v = peer
                    .mr
                    .storage
                    .load_u64(ATOMIC + w.slot * 8)
                    .expect("aligned");
                if status == WcStatus::Success {
                    assert_eq!(v, 1, "fetch-and-add {} not executed exactly once", w.wr_id);
                } else {
                    assert!(
                        v <= 1,
                        "failed fetch-and-add {} executed {v} times",
                        w.wr_id
                    );
                }
            }
            _ => {}
        }
    }
    if !failed {
        let sends: Vec<&PostedSend> = e.sends.iter().filter(|w| w.kind == Kind::Send).collect();
        let got: Vec<&crate::ib::WorkCompletion> = peer
            .recv_wcs
            .iter()
            .filter(|wc| wc.status == WcStatus::Success)
            .collect();
        assert_eq!(
            got.len(),
            sends.len(),
            "receives do not match the SENDs one for one"
        );
        for (i, (w, wc)) in sends.iter().zip(&got).enumerate() {
            assert_eq!(wc.byte_len, w.len, "SEND {} length", w.wr_id);
            let slot = (wc.wr_id - 1000) * SLOT;
            let data = peer
                .mr
                .storage
                .to_vec(RECV + slot, w.len as usize)
                .expect("in region");
            let sent =
                e.mr.storage
                    .to_vec(SRC + w.slot, w.len as usize)
                    .expect("in region");
            assert!(data == sent, "SEND {i} ({}) not intact", w.wr_id);
        }
    }
}
