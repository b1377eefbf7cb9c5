//! Deterministic tests of the RC core: two QPs joined by an in-memory link with virtual time,
//! a fixed latency, seeded loss, duplication and reordering, and targeted faults (drop or
//! duplicate the next packet that matches a predicate). Every packet crosses the link as bytes
//! (emit, ICRC, parse, ICRC check), exactly as it would cross a socket, and after every step
//! the harness checks that no queue grew past its bound.
//!
//! `scenarios.rs` has one test per recovery rule of spec-notes/rc-transport.md;
//! `simulation.rs` runs thousands of seeded lossy runs against the delivery invariants.

mod cc;
mod endpoint;
mod gather;
mod hostile;
mod mw;
mod node;
mod placement;
mod rereg;
mod revoked;
mod scenarios;
mod simulation;
mod srq;
mod tag_match;
mod uc;
mod ud;
mod xrc;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::ib::DeviceLimits;
use crate::ib::*;
use crate::memory::SharedBytes;
use crate::wire::{PacketRepr, Psn};

const MR_LEN: usize = 1 << 20;
const IOVA: u64 = 0x7F00_0000_0000;

struct Side {
    qp: QpCore,
    mrs: MrTable,
    mr: Arc<Mr>,
    addr: SocketAddr,
    send_wcs: Vec<WorkCompletion>,
    recv_wcs: Vec<WorkCompletion>,
}

struct InFlight {
    at: Duration,
    to_b: bool,
    bytes: Vec<u8>,
    src_port: u16,
}

/// What a targeted fault does to the packet it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Action {
    Drop,
    Duplicate,
}

/// Applies `action` to the next `count` packets in one direction that `matches` accepts.
struct Fault {
    to_b: bool,
    matches: Box<dyn Fn(&PacketRepr) -> bool>,
    action: Action,
    remaining: u32,
}

/// One transmitted packet, as the test sees it (recorded before any fault applies).
#[derive(Debug, Clone)]
pub(super) struct Sent {
    pub to_b: bool,
    pub opcode: crate::wire::Opcode,
    pub psn: Psn,
    pub ack_req: bool,
    pub reth: Option<crate::wire::RethRepr>,
    pub aeth: Option<crate::wire::AethRepr>,
    /// True if a fault or the random loss dropped it.
    pub dropped: bool,
}

pub(super) struct Pair {
    a: Side,
    b: Side,
    now: Duration,
    /// Packets in flight, ordered by arrival time.
    wire: VecDeque<InFlight>,
    latency: Duration,
    loss_permille: u64,
    dup_permille: u64,
    /// Probability (per mille) that a packet takes up to 4 extra latencies, overtaking others.
    reorder_permille: u64,
    /// Everything sent before this instant is lost (a partition).
    partition_until: Duration,
    faults: Vec<Fault>,
    log: Vec<Sent>,
    rng: u64,
    delivered: u64,
    dropped: u64,
    /// Largest number of packets in flight seen.
    max_in_flight: usize,
}

fn side(qpn: u32, ip: &str) -> Side {
    let addr: SocketAddr = format!("{ip}:4791").parse().unwrap();
    let cfg = QpConfig {
        qpn,
        pd: 1,
        cap: QpCap {
            max_send_wr: 256,
            max_recv_wr: 256,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 64,
        },
        sq_sig_all: false,
        local: addr,
        remote_port: 4791,
        qp_type: QpType::Rc,
        srq: None,
        xrc: None,
    };
    let mut mrs = MrTable::new();
    let access = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let mr = mrs
        .register(1, Arc::new(SharedBytes::new(MR_LEN)), IOVA, access)
        .unwrap();
    Side {
        qp: QpCore::new(cfg, DeviceLimits::default(), Arc::new(Counters::default())),
        mrs,
        mr,
        addr,
        send_wcs: Vec::new(),
        recv_wcs: Vec::new(),
    }
}

/// Moves a QP to RTS with the attribute masks ibv_rc_pingpong uses.
fn connect_qp(s: &mut Side, peer: &Side, mtu: Mtu, timeout: u8, retry: u8, rnr: u8) {
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC,
        ..Default::default()
    };
    s.qp.modify(
        &init,
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
    )
    .unwrap();
    // PSNs close to the wrap, so every test crosses it.
    let rtr = QpAttr {
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
        ..node::rtr_towards(peer.qp.qpn(), peer.addr.ip(), mtu, 0xFF_FFF0)
    };
    s.qp.modify(&rtr, node::RC_RTR_MASK).unwrap();
    let rts = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: 0xFF_FFF0,
        timeout,
        retry_cnt: retry,
        rnr_retry: rnr,
        max_rd_atomic: 4,
        ..Default::default()
    };
    s.qp.modify(&rts, node::RC_RTS_MASK).unwrap();
}

impl Pair {
    pub(super) fn new(mtu: Mtu) -> Pair {
        Pair::with(mtu, 14, 7, 7)
    }

    pub(super) fn with(mtu: Mtu, timeout: u8, retry: u8, rnr: u8) -> Pair {
        let mut a = side(0x11, "192.0.2.1");
        let mut b = side(0x12, "192.0.2.2");
        connect_qp(&mut a, &b, mtu, timeout, retry, rnr);
        connect_qp(&mut b, &a, mtu, timeout, retry, rnr);
        Pair {
            a,
            b,
            now: Duration::ZERO,
            wire: VecDeque::new(),
            latency: Duration::from_micros(5),
            loss_permille: 0,
            dup_permille: 0,
            reorder_permille: 0,
            partition_until: Duration::ZERO,
            faults: Vec::new(),
            log: Vec::new(),
            rng: 0x9E37_79B9_7F4A_7C15,
            delivered: 0,
            dropped: 0,
            max_in_flight: 0,
        }
    }

    /// Applies `action` to the next `count` packets from A to B (`to_b`) or B to A that
    /// `matches` accepts.
    pub(super) fn fault(
        &mut self,
        to_b: bool,
        action: Action,
        count: u32,
        matches: impl Fn(&PacketRepr) -> bool + 'static,
    ) {
        self.faults.push(Fault {
            to_b,
            matches: Box::new(matches),
            action,
            remaining: count,
        });
    }

    /// True once every targeted fault has been used up (so a test knows its fault happened).
    pub(super) fn faults_spent(&self) -> bool {
        self.faults.iter().all(|f| f.remaining == 0)
    }

    /// Checks every queue against its bound: the send and receive queues against the QP's
    /// capacities, the responder's saved resources against max_dest_rd_atomic, its response
    /// queue against MAX_QUEUED_RESPONSES, the completions waiting to be polled against the
    /// WQEs that could produce them, and the requester's outstanding PSNs against its window
    /// (one READ may reserve more PSNs than the window when it is the only request out).
    fn check_bounds(&self) {
        for s in [&self.a, &self.b] {
            let q = &s.qp;
            let cap = q.cfg.cap;
            assert!(q.sq.len() <= cap.max_send_wr as usize, "send queue");
            assert!(q.rq.len() <= cap.max_recv_wr as usize, "receive queue");
            let (res, out) = q.resp.queue_lens();
            assert!(
                res <= (q.attr.max_dest_rd_atomic as usize).max(1),
                "responder resources {res}"
            );
            assert!(
                out <= super::params::MAX_QUEUED_RESPONSES,
                "queued responses {out}"
            );
            assert!(
                q.completions.len() <= (cap.max_send_wr + cap.max_recv_wr) as usize,
                "completions"
            );
            let outstanding = q.req.psn.diff(q.req.comp_psn);
            let biggest_read =
                q.sq.iter()
                    .map(|w| w.last_psn.distance_from(w.first_psn) as i32 + 1)
                    .max()
                    .unwrap_or(0);
            assert!(
                outstanding <= (MAX_UNACKED_PSNS as i32).max(biggest_read) + biggest_read,
                "outstanding PSNs {outstanding}"
            );
        }
    }

    fn rand(&mut self) -> u64 {
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Runs both ends until nothing is in flight and no timer is pending, or `limit` of
    /// virtual time passes.
    pub(super) fn drive_for(&mut self, limit: Duration) {
        let end = self.now + limit;
        let mut buf = vec![0u8; MAX_PACKET];
        for _step in 0..10_000_000u64 {
            let mut moved = false;
            for to_b in [true, false] {
                let s = if to_b { &mut self.a } else { &mut self.b };
                let endpoint = Endpoint::new(s.addr, 4791, Arc::clone(&s.qp.counters));
                let Some(t) = endpoint.poll_transmit(self.now, &mut s.qp, &mut buf) else {
                    continue;
                };
                moved = true;
                let pkt = PacketRepr::parse(&buf[..t.len]).expect("sent packets parse");
                let mut action = None;
                for f in self.faults.iter_mut() {
                    if f.remaining > 0 && f.to_b == to_b && (f.matches)(&pkt) {
                        f.remaining -= 1;
                        action = Some(f.action);
                        break;
                    }
                }
                let lost = action == Some(Action::Drop)
                    || self.now < self.partition_until
                    || (self.loss_permille > 0 && self.rand() % 1000 < self.loss_permille);
                self.log.push(Sent {
                    to_b,
                    opcode: pkt.bth.opcode,
                    psn: Psn::new(pkt.bth.psn),
                    ack_req: pkt.bth.ack_req,
                    reth: pkt.ext.reth,
                    aeth: pkt.ext.aeth,
                    dropped: lost,
                });
                if lost {
                    self.dropped += 1;
                    continue;
                }
                let copies = if action == Some(Action::Duplicate)
                    || (self.dup_permille > 0 && self.rand() % 1000 < self.dup_permille)
                {
                    2
                } else {
                    1
                };
                for copy in 0..copies {
                    // A duplicate arrives a little after the original, as a copy taking
                    // another path would.
                    let mut at = self.now + self.latency * (1 + copy);
                    if self.reorder_permille > 0 && self.rand() % 1000 < self.reorder_permille {
                        at += self.latency * (1 + (self.rand() % 4) as u32);
                    }
                    self.enqueue(InFlight {
                        at,
                        to_b,
                        bytes: buf[..t.len].to_vec(),
                        src_port: t.src_port,
                    });
                }
            }
            // Deliver what has arrived.
            while self.wire.front().is_some_and(|p| p.at <= self.now) {
                let p = self.wire.pop_front().unwrap();
                self.deliver(p);
                moved = true;
            }
            self.collect();
            self.check_bounds();
            if moved {
                continue;
            }
            // Idle: jump to the next event.
            let next = [
                self.wire.front().map(|p| p.at),
                self.a.qp.poll_timeout(),
                self.b.qp.poll_timeout(),
            ]
            .into_iter()
            .flatten()
            .min();
            match next {
                Some(t) if t <= end => {
                    self.now = self.now.max(t);
                    self.a.qp.handle_timeout(self.now);
                    self.b.qp.handle_timeout(self.now);
                }
                _ => return,
            }
        }
        panic!("drive did not settle");
    }

    /// Runs until virtual time `t`, even if nothing happens before it.
    pub(super) fn run_until(&mut self, t: Duration) {
        if t > self.now {
            self.drive_for(t - self.now);
            self.now = self.now.max(t);
            self.a.qp.handle_timeout(self.now);
            self.b.qp.handle_timeout(self.now);
        }
    }

    pub(super) fn drive(&mut self) {
        self.drive_for(Duration::from_secs(600));
    }

    /// Puts a packet on the wire, behind every packet that arrives no later.
    fn enqueue(&mut self, p: InFlight) {
        let i = self.wire.partition_point(|q| q.at <= p.at);
        self.wire.insert(i, p);
        self.max_in_flight = self.max_in_flight.max(self.wire.len());
    }

    fn deliver(&mut self, p: InFlight) {
        let (from, to) = if p.to_b {
            (&self.a, &mut self.b)
        } else {
            (&self.b, &mut self.a)
        };
        // The receiver's endpoint, as the engine runs it: the ICRC over the headers the
        // kernel would have built, the parse, the QP lookup and the sender check.
        let src = SocketAddr::new(from.addr.ip(), p.src_port);
        let endpoint = Endpoint::new(to.addr, 4791, Arc::clone(&to.qp.counters));
        let mut qps = OneQp {
            qp: &mut to.qp,
            mrs: &to.mrs,
        };
        let event = endpoint.handle(
            self.now,
            src,
            to.addr,
            IpFields::default(),
            &p.bytes,
            &mut qps,
        );
        assert!(
            matches!(event, Some(DatagramEvent::Qp(q)) if q == to.qp.qpn()),
            "a sent packet reaches its QP: ICRC, headers, QPN and sender check pass"
        );
        self.delivered += 1;
    }

    fn collect(&mut self) {
        for s in [&mut self.a, &mut self.b] {
            while let Some((side, wc)) = s.qp.poll_completion() {
                match side {
                    CqSide::Send => s.send_wcs.push(wc),
                    CqSide::Recv | CqSide::Srq(_) => s.recv_wcs.push(wc),
                }
            }
        }
    }
}

fn sge(s: &Side, offset: u64, len: u32) -> Sge {
    Sge {
        addr: IOVA + offset,
        length: len,
        lkey: s.mr.lkey,
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u64).wrapping_mul(31).wrapping_add(seed * 7) % 251) as u8)
        .collect()
}

fn post_send(p: &mut Pair, wr_id: u64, opcode: WrOpcode, offset: u64, len: u32) {
    let sg = [sge(&p.a, offset, len)];
    let wr = SendWr {
        wr_id,
        sg_list: if len == 0 { &[] } else { &sg },
        opcode,
        send_flags: SendFlags::SIGNALED,
    };
    p.a.qp.post_send(&wr, &p.a.mrs).unwrap();
}

fn post_recv(p: &mut Pair, wr_id: u64, offset: u64, len: u32) {
    let sg = [sge(&p.b, offset, len)];
    let wr = RecvWr {
        wr_id,
        sg_list: &sg,
    };
    p.b.qp.post_recv(&wr, &p.b.mrs).unwrap();
}

fn sizes(mtu: u32) -> Vec<u32> {
    vec![0, 1, mtu - 1, mtu, mtu + 1, 3 * mtu, 7 * mtu + 5]
}

const MTUS: [Mtu; 5] = [
    Mtu::Mtu256,
    Mtu::Mtu512,
    Mtu::Mtu1024,
    Mtu::Mtu2048,
    Mtu::Mtu4096,
];

#[test]
fn send_every_size_class_at_every_mtu() {
    for mtu in MTUS {
        let mut p = Pair::new(mtu);
        for (i, len) in sizes(mtu.bytes()).into_iter().enumerate() {
            let data = pattern(i as u64, len as usize);
            p.a.mr.storage.write(0, &data).unwrap();
            post_recv(&mut p, 100 + i as u64, 0x8_0000, 0x4_0000);
            post_send(&mut p, i as u64, WrOpcode::Send, 0, len);
            p.drive();
            let rwc = p.b.recv_wcs.pop().expect("receive completion");
            assert_eq!(rwc.status, WcStatus::Success, "mtu {mtu:?} len {len}");
            assert_eq!(rwc.wr_id, 100 + i as u64);
            assert_eq!(rwc.byte_len, len);
            assert_eq!(rwc.opcode, WcOpcode::Recv);
            assert_eq!(rwc.src_qp, 0x11);
            assert_eq!(p.b.mr.storage.to_vec(0x8_0000, len as usize).unwrap(), data);
            let swc = p.a.send_wcs.pop().expect("send completion");
            assert_eq!(
                (swc.wr_id, swc.status, swc.opcode),
                (i as u64, WcStatus::Success, WcOpcode::Send)
            );
        }
        assert_eq!(p.a.qp.send_queue_len(), 0);
    }
}

#[test]
fn write_and_write_with_imm_at_every_mtu() {
    for mtu in MTUS {
        let mut p = Pair::new(mtu);
        for (i, len) in sizes(mtu.bytes()).into_iter().enumerate() {
            let data = pattern(i as u64 + 50, len as usize);
            p.a.mr.storage.write(0, &data).unwrap();
            let dst = 0x1_0000 + i as u64 * 0x1_0000;
            let with_imm = i % 2 == 1;
            let op = if with_imm {
                post_recv(&mut p, 7, 0, 0);
                WrOpcode::RdmaWriteWithImm {
                    remote_addr: IOVA + dst,
                    rkey: p.b.mr.rkey,
                    imm: 0xABCD_0000 + i as u32,
                }
            } else {
                WrOpcode::RdmaWrite {
                    remote_addr: IOVA + dst,
                    rkey: p.b.mr.rkey,
                }
            };
            post_send(&mut p, i as u64, op, 0, len);
            p.drive();
            assert_eq!(
                p.b.mr.storage.to_vec(dst, len as usize).unwrap(),
                data,
                "mtu {mtu:?} len {len}"
            );
            let swc = p.a.send_wcs.pop().expect("send completion");
            assert_eq!(
                (swc.status, swc.opcode),
                (WcStatus::Success, WcOpcode::RdmaWrite)
            );
            if with_imm {
                let r = p.b.recv_wcs.pop().expect("imm completion");
                assert_eq!(r.opcode, WcOpcode::RecvRdmaWithImm);
                assert_eq!(r.imm_data, Some(0xABCD_0000 + i as u32));
                assert_eq!(r.byte_len, len);
            } else {
                assert!(p.b.recv_wcs.is_empty());
            }
        }
    }
}

#[test]
fn read_every_size_class_at_every_mtu() {
    for mtu in MTUS {
        let mut p = Pair::new(mtu);
        for (i, len) in sizes(mtu.bytes()).into_iter().enumerate() {
            let data = pattern(i as u64 + 90, len as usize);
            let src = 0x2_0000 + i as u64 * 0x1_0000;
            p.b.mr.storage.write(src, &data).unwrap();
            let rkey = p.b.mr.rkey;
            post_send(
                &mut p,
                i as u64,
                WrOpcode::RdmaRead {
                    remote_addr: IOVA + src,
                    rkey,
                },
                0x8_0000,
                len,
            );
            p.drive();
            let swc = p.a.send_wcs.pop().expect("read completion");
            assert_eq!(
                (swc.status, swc.opcode),
                (WcStatus::Success, WcOpcode::RdmaRead),
                "mtu {mtu:?} len {len}"
            );
            assert_eq!(swc.byte_len, len);
            assert_eq!(p.a.mr.storage.to_vec(0x8_0000, len as usize).unwrap(), data);
        }
    }
}

#[test]
fn atomics_execute_once_and_return_the_original() {
    let mut p = Pair::new(Mtu::Mtu1024);
    p.b.mr.storage.store_u64(64, 10).unwrap();
    let rkey = p.b.mr.rkey;
    post_send(
        &mut p,
        1,
        WrOpcode::AtomicFetchAdd {
            remote_addr: IOVA + 64,
            rkey,
            add: 5,
        },
        0,
        8,
    );
    post_send(
        &mut p,
        2,
        WrOpcode::AtomicCmpSwap {
            remote_addr: IOVA + 64,
            rkey,
            compare: 15,
            swap: 99,
        },
        8,
        8,
    );
    post_send(
        &mut p,
        3,
        WrOpcode::AtomicCmpSwap {
            remote_addr: IOVA + 64,
            rkey,
            compare: 15,
            swap: 7,
        },
        16,
        8,
    );
    p.drive();
    assert_eq!(p.b.mr.storage.load_u64(64).unwrap(), 99);
    let orig = |off| u64::from_ne_bytes(p.a.mr.storage.to_vec(off, 8).unwrap().try_into().unwrap());
    assert_eq!((orig(0), orig(8), orig(16)), (10, 15, 99));
    let ops: Vec<_> =
        p.a.send_wcs
            .iter()
            .map(|w| (w.wr_id, w.status, w.opcode))
            .collect();
    assert_eq!(
        ops,
        vec![
            (1, WcStatus::Success, WcOpcode::FetchAdd),
            (2, WcStatus::Success, WcOpcode::CompSwap),
            (3, WcStatus::Success, WcOpcode::CompSwap)
        ]
    );
}

#[test]
fn completions_come_in_posting_order_across_kinds() {
    let mut p = Pair::new(Mtu::Mtu256);
    let rkey = p.b.mr.rkey;
    for i in 0..12u64 {
        let op = match i % 4 {
            0 => WrOpcode::RdmaWrite {
                remote_addr: IOVA + i * 4096,
                rkey,
            },
            1 => WrOpcode::RdmaRead {
                remote_addr: IOVA + i * 4096,
                rkey,
            },
            2 => WrOpcode::AtomicFetchAdd {
                remote_addr: IOVA + 8 * i,
                rkey,
                add: 1,
            },
            _ => {
                post_recv(&mut p, i, 0, 4096);
                WrOpcode::Send
            }
        };
        let len = if i % 4 == 2 { 8 } else { 1000 };
        post_send(&mut p, i, op, i * 4096, len);
    }
    p.drive();
    let ids: Vec<u64> = p.a.send_wcs.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, (0..12).collect::<Vec<_>>());
    assert!(p.a.send_wcs.iter().all(|w| w.status == WcStatus::Success));
}

#[test]
fn unsignaled_wrs_complete_silently_but_in_order() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let rkey = p.b.mr.rkey;
    for i in 0..10u64 {
        let sg = [sge(&p.a, 0, 100)];
        let wr = SendWr {
            wr_id: i,
            sg_list: &sg,
            opcode: WrOpcode::RdmaWrite {
                remote_addr: IOVA,
                rkey,
            },
            send_flags: if i == 9 {
                SendFlags::SIGNALED
            } else {
                SendFlags::EMPTY
            },
        };
        p.a.qp.post_send(&wr, &p.a.mrs).unwrap();
    }
    p.drive();
    assert_eq!(p.a.send_wcs.len(), 1);
    assert_eq!(p.a.send_wcs[0].wr_id, 9);
    assert_eq!(p.a.qp.send_queue_len(), 0, "unsignaled WQEs were retired");
}

#[test]
fn rnr_then_receive_posted_completes() {
    let mut p = Pair::with(Mtu::Mtu1024, 14, 7, 7);
    p.a.mr.storage.write(0, b"hello").unwrap();
    post_send(&mut p, 1, WrOpcode::Send, 0, 5);
    p.drive_for(Duration::from_millis(1));
    assert!(p.a.send_wcs.is_empty(), "no receive posted yet");
    assert!(
        p.b.qp
            .counters
            .send_rnr_err
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );
    post_recv(&mut p, 9, 0, 64);
    p.drive();
    assert_eq!(p.b.recv_wcs.pop().unwrap().byte_len, 5);
    assert_eq!(p.a.send_wcs.pop().unwrap().status, WcStatus::Success);
}

#[test]
fn rnr_retry_exhaustion_flushes_the_qp() {
    let mut p = Pair::with(Mtu::Mtu1024, 14, 7, 2);
    post_send(&mut p, 1, WrOpcode::Send, 0, 5);
    post_send(&mut p, 2, WrOpcode::Send, 0, 5);
    p.drive();
    let st: Vec<_> = p.a.send_wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        st,
        vec![(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(p.a.qp.state(), QpState::Err);
}

#[test]
fn remote_access_error_fails_the_wr_and_both_qps() {
    let mut p = Pair::new(Mtu::Mtu1024);
    post_recv(&mut p, 5, 0, 64);
    let bad = WrOpcode::RdmaWrite {
        remote_addr: IOVA + MR_LEN as u64 - 10,
        rkey: p.b.mr.rkey,
    };
    post_send(&mut p, 1, bad, 0, 100);
    post_send(&mut p, 2, WrOpcode::Send, 0, 4);
    p.drive();
    let st: Vec<_> = p.a.send_wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        st,
        vec![(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(p.a.qp.state(), QpState::Err);
    assert_eq!(p.b.qp.state(), QpState::Err);
    assert_eq!(p.b.recv_wcs.pop().unwrap().status, WcStatus::WrFlushErr);
    // Memory untouched.
    assert_eq!(
        p.b.mr.storage.to_vec(MR_LEN as u64 - 10, 10).unwrap(),
        vec![0; 10]
    );
}

#[test]
fn receive_buffer_too_small_is_a_local_length_error() {
    let mut p = Pair::new(Mtu::Mtu1024);
    post_recv(&mut p, 5, 0, 10);
    post_send(&mut p, 1, WrOpcode::Send, 0, 2000);
    p.drive();
    assert_eq!(p.b.recv_wcs[0].status, WcStatus::LocLenErr);
    assert_eq!(p.a.send_wcs[0].status, WcStatus::RemInvReqErr);
}

#[test]
fn peer_gone_ends_in_retry_exceeded_and_flush() {
    let mut p = Pair::with(Mtu::Mtu1024, 10, 3, 7); // 4.2 ms timeout, 3 retries
    p.loss_permille = 1000;
    let rkey = p.b.mr.rkey;
    post_send(
        &mut p,
        1,
        WrOpcode::RdmaWrite {
            remote_addr: IOVA,
            rkey,
        },
        0,
        3000,
    );
    post_send(
        &mut p,
        2,
        WrOpcode::RdmaWrite {
            remote_addr: IOVA,
            rkey,
        },
        0,
        30,
    );
    p.drive();
    let st: Vec<_> = p.a.send_wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        st,
        vec![(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(
        p.a.qp
            .counters
            .timeouts
            .load(std::sync::atomic::Ordering::Relaxed),
        4
    );
    // 4 timeouts of 4.194 ms each.
    assert!(
        p.now >= Duration::from_micros(4 * 4194) && p.now < Duration::from_millis(20),
        "{:?}",
        p.now
    );
}

#[test]
fn lossy_link_delivers_everything_exactly_once_in_order() {
    for seed in 0..20u64 {
        let mut p = Pair::with(Mtu::Mtu256, 8, 7, 7);
        p.rng ^= seed.wrapping_mul(0x1234_5678_9ABC_DEF1);
        p.loss_permille = 100;
        let rkey = p.b.mr.rkey;
        let mut expect_reads = Vec::new();
        for i in 0..40u64 {
            let len = (i * 97 % 1500) as u32 + 1;
            let data = pattern(i + seed, len as usize);
            p.a.mr.storage.write(i * 2048, &data).unwrap();
            let op = match i % 4 {
                0 => {
                    post_recv(&mut p, i, i * 2048, 2048);
                    WrOpcode::Send
                }
                1 => WrOpcode::RdmaWrite {
                    remote_addr: IOVA + 0x8_0000 + i * 2048,
                    rkey,
                },
                2 => {
                    let src = 0x4_0000 + i * 2048;
                    p.b.mr.storage.write(src, &data).unwrap();
                    expect_reads.push((i, data.clone()));
                    WrOpcode::RdmaRead {
                        remote_addr: IOVA + src,
                        rkey,
                    }
                }
                _ => WrOpcode::AtomicFetchAdd {
                    remote_addr: IOVA + 0xF_0000,
                    rkey,
                    add: 1,
                },
            };
            let l = if i % 4 == 3 { 8 } else { len };
            let off = if i % 4 == 2 {
                0xA_0000 + i * 2048
            } else if i % 4 == 3 {
                0xE_0000 + i * 8
            } else {
                i * 2048
            };
            post_send(&mut p, i, op, off, l);
        }
        p.drive();
        let ids: Vec<u64> = p.a.send_wcs.iter().map(|w| w.wr_id).collect();
        assert_eq!(ids, (0..40).collect::<Vec<_>>(), "seed {seed}");
        assert!(
            p.a.send_wcs.iter().all(|w| w.status == WcStatus::Success),
            "seed {seed}"
        );
        let rids: Vec<u64> = p.b.recv_wcs.iter().map(|w| w.wr_id).collect();
        assert_eq!(
            rids,
            (0..40).filter(|i| i % 4 == 0).collect::<Vec<_>>(),
            "seed {seed}"
        );
        for i in (0..40u64).filter(|i| i % 4 == 0) {
            let len = (i * 97 % 1500) as usize + 1;
            assert_eq!(
                p.b.mr.storage.to_vec(i * 2048, len).unwrap(),
                pattern(i + seed, len)
            );
        }
        for i in (0..40u64).filter(|i| i % 4 == 1) {
            let len = (i * 97 % 1500) as usize + 1;
            assert_eq!(
                p.b.mr.storage.to_vec(0x8_0000 + i * 2048, len).unwrap(),
                pattern(i + seed, len)
            );
        }
        for (i, data) in &expect_reads {
            assert_eq!(
                &p.a.mr
                    .storage
                    .to_vec(0xA_0000 + i * 2048, data.len())
                    .unwrap(),
                data
            );
        }
        // Ten fetch-adds, each executed exactly once despite retransmissions.
        assert_eq!(
            p.b.mr.storage.load_u64(0xF_0000).unwrap(),
            10,
            "seed {seed}"
        );
        assert!(p.dropped > 0);
    }
}

/// A READ longer than `READ_PIECE_PKTS` path MTUs goes out as one request per piece, each sent
/// only once the previous piece's response is all in, and completes once, with every byte; a
/// response packet lost in the middle of a piece is requested again up to that piece's end.
#[test]
fn long_reads_are_requested_one_piece_at_a_time() {
    use crate::transport::requester::READ_PIECE_PKTS;
    use crate::wire::Opcode;
    for lose in [false, true] {
        let mtu = Mtu::Mtu256;
        let m = mtu.bytes() as u64;
        let mut p = Pair::new(mtu);
        let len = (3 * READ_PIECE_PKTS * m + 5) as u32;
        let data = pattern(7, len as usize);
        p.b.mr.storage.write(0x2_0000, &data).unwrap();
        let rkey = p.b.mr.rkey;
        if lose {
            // The 11th response packet of the second piece (the 75th response packet).
            let seen = std::sync::atomic::AtomicU64::new(0);
            p.fault(false, Action::Drop, 1, move |pkt| {
                pkt.bth.opcode.0 >= Opcode::RC_RDMA_READ_RESPONSE_FIRST.0
                    && pkt.bth.opcode.0 <= Opcode::RC_RDMA_READ_RESPONSE_ONLY.0
                    && seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                        == READ_PIECE_PKTS + 10
            });
        }
        post_send(
            &mut p,
            1,
            WrOpcode::RdmaRead {
                remote_addr: IOVA + 0x2_0000,
                rkey,
            },
            0x8_0000,
            len,
        );
        p.drive();
        let swc = p.a.send_wcs.pop().expect("read completion");
        assert_eq!((swc.status, swc.byte_len), (WcStatus::Success, len));
        assert!(p.a.send_wcs.is_empty(), "one completion");
        assert_eq!(p.a.mr.storage.to_vec(0x8_0000, len as usize).unwrap(), data);
        let requests: Vec<_> = p
            .log
            .iter()
            .filter(|s| s.to_b && s.opcode == Opcode::RC_RDMA_READ_REQUEST)
            .map(|s| s.reth.expect("a READ request has a RETH"))
            .collect();
        let piece = READ_PIECE_PKTS * m;
        let mut want: Vec<(u64, u32)> = (0..3)
            .map(|k| (IOVA + 0x2_0000 + k * piece, piece as u32))
            .chain([(IOVA + 0x2_0000 + 3 * piece, 5)])
            .collect();
        if lose {
            // The retry asks for the rest of the second piece only.
            let from = piece + 10 * m;
            want.insert(2, (IOVA + 0x2_0000 + from, (2 * piece - from) as u32));
        }
        let got: Vec<(u64, u32)> = requests.iter().map(|r| (r.va, r.len)).collect();
        assert_eq!(got, want, "lose={lose}");
        if lose {
            assert!(p.faults_spent());
        }
    }
}
