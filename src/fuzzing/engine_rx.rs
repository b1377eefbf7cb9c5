//! Fuzz target `engine_rx`: arbitrary datagrams into a running engine through a real UDP
//! socket on loopback. A softroce context on 127.0.0.1 has two RC QPs: one connected to a
//! plain UDP socket on 127.0.0.3 that the fuzzer speaks through (the hostile peer), one
//! connected to a second, well-behaved context on 127.0.0.2. The input is a sequence of
//! datagrams, each sent raw or sealed with the ICRC the engine expects from the hostile
//! address, addressed as it is or readdressed to either QP.
//!
//! Invariants checked after every input:
//! - the engine is alive and the well-behaved connection unharmed: a SEND from the good peer
//!   completes on both ends within a bounded wait, with its bytes intact (datagrams aimed at
//!   the good QP from the hostile address must not disturb it);
//! - memory without remote rights (a local-only region and a read-only region) is unchanged.
//!
//! The contexts are opened once per process and reused by every input (the hostile QP is
//! reset and reconnected at the start of each), so that an input costs a few round trips.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::harness::{pattern, seal, ALL_ACCESS};
use crate::driver::DeviceConfig;
use crate::ib::{
    AccessFlags, Gid, Mtu, QpAttr, QpAttrMask, QpCap, QpState, QpType, RecvWr, SendFlags, SendWr,
    WcStatus, WorkCompletion, WrOpcode,
};
use crate::verbs::{
    CompletionQueue, Context, MemoryRegion, ProtectionDomain, QpInitAttr, QueuePair, RcConnect,
};

/// Flag bit of a datagram: fill in the ICRC the engine expects from the hostile socket.
pub const SEAL: u8 = 1;
/// Flag bit: set the BTH destination QP to the hostile QP's number.
pub const TO_HOSTILE_QP: u8 = 2;
/// Flag bit: set the BTH destination QP to the good QP's number (takes precedence).
pub const TO_GOOD_QP: u8 = 4;
/// Most datagrams one input sends.
pub const MAX_DATAGRAMS: usize = 64;
/// The PSN the hostile QP expects first after each reset (seeds start their PSNs here).
pub const HOSTILE_RQ_PSN: u32 = 0;
/// QP number the hostile QP believes its peer has.
pub const HOSTILE_PEER_QPN: u32 = 0x77;
const REGION: usize = 4096;
const CAP: QpCap = QpCap {
    max_send_wr: 16,
    max_recv_wr: 16,
    max_send_sge: 1,
    max_recv_sge: 1,
    max_inline_data: 64,
};

/// Encodes one datagram of an input: flags, 2-byte little-endian length, bytes.
pub fn encode_datagram(out: &mut Vec<u8>, flags: u8, bytes: &[u8]) {
    let n = bytes.len().min(u16::MAX as usize);
    out.push(flags);
    out.extend_from_slice(&(n as u16).to_le_bytes());
    out.extend_from_slice(&bytes[..n]);
}

struct Rig {
    // Field order is drop order: QPs before their CQs and PDs before their contexts.
    hostile_qp: QueuePair,
    good_qp: QueuePair,
    peer_qp: QueuePair,
    victim_cq: CompletionQueue,
    peer_cq: CompletionQueue,
    full: MemoryRegion,
    local_only: MemoryRegion,
    read_only: MemoryRegion,
    recv_mr: MemoryRegion,
    peer_mr: MemoryRegion,
    _victim_pd: ProtectionDomain,
    _peer_pd: ProtectionDomain,
    victim: Context,
    _peer: Context,
    hostile: UdpSocket,
    local_before: Vec<u8>,
    read_only_before: Vec<u8>,
    round: u64,
}

fn open_on_free_port() -> (Context, Context, UdpSocket) {
    for _ in 0..100 {
        let Ok(probe) = UdpSocket::bind("127.0.0.1:0") else {
            continue;
        };
        let Ok(port) = probe.local_addr().map(|a| a.port()) else {
            continue;
        };
        drop(probe);
        let at = |last: u8| SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, last)), port);
        let Ok(hostile) = UdpSocket::bind(at(3)) else {
            continue;
        };
        let (Ok(victim), Ok(peer)) = (
            Context::open(&DeviceConfig::new(at(1))),
            Context::open(&DeviceConfig::new(at(2))),
        ) else {
            continue;
        };
        return (victim, peer, hostile);
    }
    panic!("engine_rx: no free UDP port on 127.0.0.1-3");
}

fn rc_qp(pd: &ProtectionDomain, cq: &CompletionQueue) -> QueuePair {
    pd.create_qp(&QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        cap: CAP,
        qp_type: QpType::Rc,
        sq_sig_all: false,
    })
    .expect("create_qp")
}

fn connect(qp: &QueuePair, remote_qpn: u32, remote: Gid, rq_psn: u32, sq_psn: u32) {
    let c = RcConnect {
        path_mtu: Mtu::Mtu1024,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
        timeout: 10,
        retry_cnt: 3,
        rnr_retry: 3,
        ..RcConnect::new(remote_qpn, rq_psn, remote, sq_psn)
    };
    qp.init(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC)
        .expect("init");
    qp.ready_to_receive(&c).expect("rtr");
    qp.ready_to_send(&c).expect("rts");
}

impl Rig {
    fn open() -> Rig {
        let (victim, peer, hostile) = open_on_free_port();
        hostile
            .set_nonblocking(true)
            .expect("a non-blocking socket");
        let victim_pd = victim.alloc_pd().expect("pd");
        let peer_pd = peer.alloc_pd().expect("pd");
        let victim_cq = victim.create_cq(256).expect("cq");
        let peer_cq = peer.create_cq(256).expect("cq");
        let reg = |pd: &ProtectionDomain, access, seed| {
            let mr = pd.register_mr(REGION, access).expect("register_mr");
            mr.write(0, &pattern(seed, REGION)).expect("in bounds");
            mr
        };
        let full = reg(&victim_pd, ALL_ACCESS, 1);
        let local_only = reg(&victim_pd, AccessFlags::LOCAL_WRITE, 2);
        let read_only = reg(&victim_pd, AccessFlags::REMOTE_READ, 3);
        let recv_mr = reg(&victim_pd, AccessFlags::LOCAL_WRITE, 4);
        let peer_mr = reg(&peer_pd, ALL_ACCESS, 5);
        let hostile_qp = rc_qp(&victim_pd, &victim_cq);
        let good_qp = rc_qp(&victim_pd, &victim_cq);
        let peer_qp = rc_qp(&peer_pd, &peer_cq);
        let hostile_gid = Gid::from_ip(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3)));
        connect(
            &hostile_qp,
            HOSTILE_PEER_QPN,
            hostile_gid,
            HOSTILE_RQ_PSN,
            0,
        );
        let vg = victim.gid(1).expect("gid 1");
        let pg = peer.gid(1).expect("gid 1");
        connect(&good_qp, peer_qp.qp_num(), pg, 0x10, 0x20);
        connect(&peer_qp, good_qp.qp_num(), vg, 0x20, 0x10);
        Rig {
            local_before: local_only.to_vec(0, REGION).expect("in bounds"),
            read_only_before: read_only.to_vec(0, REGION).expect("in bounds"),
            hostile_qp,
            good_qp,
            peer_qp,
            victim_cq,
            peer_cq,
            full,
            local_only,
            read_only,
            recv_mr,
            peer_mr,
            _victim_pd: victim_pd,
            _peer_pd: peer_pd,
            victim,
            _peer: peer,
            hostile,
            round: 0,
        }
    }

    /// Resets the hostile QP and connects it again, with receive buffers posted, so that every
    /// input meets a fresh connection whatever the last one did to it.
    fn reset_hostile(&mut self) {
        let qp = &self.hostile_qp;
        qp.modify(
            &QpAttr {
                qp_state: QpState::Reset,
                ..Default::default()
            },
            QpAttrMask::STATE,
        )
        .expect("any state -> RESET");
        let gid = Gid::from_ip(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3)));
        connect(qp, HOSTILE_PEER_QPN, gid, HOSTILE_RQ_PSN, 0);
        let sge = [self.full.sge(0, REGION as u32)];
        for i in 0..4 {
            let wr = RecvWr {
                wr_id: 0xF000 + i,
                sg_list: &sge,
            };
            qp.post_recv(&[wr]).expect("post_recv on a fresh QP");
        }
    }

    fn drain_hostile_socket(&self) {
        let mut buf = [0u8; 9000];
        for _ in 0..10_000 {
            if self.hostile.recv_from(&mut buf).is_err() {
                break;
            }
        }
    }

    /// A SEND from the good peer: both ends complete it within a bounded wait and the bytes
    /// arrive intact. Completions of the hostile QP on the shared CQ are set aside.
    fn good_transfer(&mut self) {
        self.round += 1;
        let len = 64 + (self.round % 128) as u32;
        let data = pattern(self.round + 100, len as usize);
        self.peer_mr.write(0, &data).expect("in bounds");
        let good = self.good_qp.qp_num();
        let rsge = [self.recv_mr.sge(0, REGION as u32)];
        self.good_qp
            .post_recv(&[RecvWr {
                wr_id: self.round,
                sg_list: &rsge,
            }])
            .expect("post_recv on the good QP");
        let ssge = [self.peer_mr.sge(0, len)];
        self.peer_qp
            .post_send(&[SendWr {
                wr_id: self.round,
                sg_list: &ssge,
                opcode: WrOpcode::Send,
                send_flags: SendFlags::SIGNALED,
            }])
            .expect("post_send on the good peer");
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut wc = [WorkCompletion::default(); 16];
        let mut sent = false;
        let mut received = false;
        while !(sent && received) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "engine_rx: the good connection stalled (sent {sent}, received {received}); counters {:?}",
                self.victim.counters()
            );
            let n = self.peer_cq.poll(&mut wc).expect("poll");
            for w in &wc[..n] {
                assert_eq!(
                    (w.wr_id, w.status),
                    (self.round, WcStatus::Success),
                    "the good peer's SEND"
                );
                sent = true;
            }
            let n = self.victim_cq.poll(&mut wc).expect("poll");
            for w in &wc[..n] {
                if w.qp_num != good {
                    continue; // the hostile QP's flushed receives
                }
                assert_eq!(
                    (w.wr_id, w.status, w.byte_len),
                    (self.round, WcStatus::Success, len),
                    "the good QP's receive"
                );
                received = true;
            }
            if !(sent && received) {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        let got = self.recv_mr.to_vec(0, len as usize).expect("in bounds");
        assert!(got == data, "the good SEND's bytes were altered");
        assert_eq!(self.good_qp.query().qp_state, QpState::Rts);
    }

    fn check_memory(&self) {
        assert!(
            self.local_only.to_vec(0, REGION).expect("in bounds") == self.local_before,
            "a region with local access only changed"
        );
        assert!(
            self.read_only.to_vec(0, REGION).expect("in bounds") == self.read_only_before,
            "a read-only region changed"
        );
    }
}

fn rig() -> &'static Mutex<Rig> {
    static RIG: OnceLock<Mutex<Rig>> = OnceLock::new();
    RIG.get_or_init(|| Mutex::new(Rig::open()))
}

/// The `engine_rx` fuzz target's body.
pub fn engine_rx(data: &[u8]) {
    // A failed assertion poisons the mutex; the process is ending then anyway (the fuzzer
    // stops at the first failure, a test fails).
    let mut rig = rig().lock().unwrap_or_else(|e| e.into_inner());
    rig.reset_hostile();
    let dst = rig.victim.local_addr();
    let src = rig.hostile.local_addr().expect("bound");
    let hostile_qpn = rig.hostile_qp.qp_num();
    let good_qpn = rig.good_qp.qp_num();
    let mut rest = data;
    let mut sent = 0;
    while rest.len() >= 3 && sent < MAX_DATAGRAMS {
        let flags = rest[0];
        let n = (u16::from_le_bytes([rest[1], rest[2]]) as usize).min(rest.len() - 3);
        let mut d = rest[3..3 + n].to_vec();
        rest = &rest[3 + n..];
        if d.len() >= 12 && flags & (TO_HOSTILE_QP | TO_GOOD_QP) != 0 {
            let qpn = if flags & TO_GOOD_QP != 0 {
                good_qpn
            } else {
                hostile_qpn
            };
            d[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        }
        if flags & SEAL != 0 {
            seal(src, dst, &mut d);
        }
        // A datagram the kernel refuses (too large) is not the engine's business.
        let _ = rig.hostile.send_to(&d, dst);
        sent += 1;
    }
    rig.good_transfer();
    rig.drain_hostile_socket();
    rig.check_memory();
}
