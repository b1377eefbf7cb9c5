//! A small harness for the UC, UD and SRQ tests: QPs on addresses of their own, joined by a
//! link the test drives packet by packet. Every packet crosses as bytes (emit, ICRC, then the
//! receiver's transport endpoint, as the engine runs it: ICRC check against the addresses it
//! travels between, parse, QP lookup, sender check, GRH area) and can be dropped by its index.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use super::super::*;
use crate::ib::DeviceLimits;
use crate::ib::*;
use crate::memory::SharedBytes;
use crate::wire::{Opcode, PacketRepr};

pub(super) const MR_LEN: usize = 1 << 16;
pub(super) const IOVA: u64 = 0x10_0000;
/// Where received data lands in a node's region; sent data starts at 0.
pub(super) const RECV_AT: u64 = 0x8000;

pub(super) struct Node {
    pub qp: QpCore,
    pub mrs: MrTable,
    pub mr: Arc<Mr>,
    pub addr: SocketAddr,
    pub counters: Arc<Counters>,
    /// The node's demultiplexer, the one the engine runs.
    pub endpoint: Endpoint,
    pub recv_wcs: Vec<WorkCompletion>,
    pub send_wcs: Vec<WorkCompletion>,
    /// Receive completions for the CQ of an XRC SRQ, with its number.
    pub srq_wcs: Vec<(u32, WorkCompletion)>,
}

/// One packet as it crossed (or failed to cross) the link.
#[derive(Debug, Clone)]
pub(super) struct Seen {
    pub opcode: Opcode,
    pub ack_req: bool,
    pub dest_qp: u32,
    pub deth: Option<crate::wire::DethRepr>,
    pub src_port: u16,
    /// The IP header's TTL and TOS the packet asked for.
    pub ip: (u8, u8),
    pub dropped: bool,
}

pub(super) fn node(qpn: u32, ip: &str, qp_type: QpType, srq: Option<Arc<Srq>>) -> Node {
    node_with(qpn, ip, qp_type, srq, None)
}

/// A node whose QP is an XRC initiator or target (RC-typed, as the transport has them).
pub(super) fn node_xrc(qpn: u32, ip: &str, role: XrcRole) -> Node {
    node_with(qpn, ip, QpType::Rc, None, Some(role))
}

fn node_with(
    qpn: u32,
    ip: &str,
    qp_type: QpType,
    srq: Option<Arc<Srq>>,
    xrc: Option<XrcRole>,
) -> Node {
    let addr = SocketAddr::new(ip.parse::<IpAddr>().unwrap(), 4791);
    let counters = Arc::new(Counters::default());
    // An XRC target QP has no protection domain of its own, as the verbs layer makes it: its
    // requests are checked against the SRQ they name.
    let pd = if matches!(xrc, Some(XrcRole::Recv(_))) {
        0
    } else {
        1
    };
    let cfg = QpConfig {
        qpn,
        pd,
        cap: QpCap {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 64,
        },
        sq_sig_all: true,
        local: addr,
        remote_port: 4791,
        qp_type,
        srq,
        xrc,
    };
    let mut mrs = MrTable::new();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mr = mrs
        .register(1, Arc::new(SharedBytes::new(MR_LEN)), IOVA, access)
        .unwrap();
    for i in 0..RECV_AT {
        mr.storage.write(i, &[(i * 7 + 3) as u8]).unwrap();
    }
    Node {
        qp: QpCore::new(cfg, DeviceLimits::default(), Arc::clone(&counters)),
        mrs,
        mr,
        addr,
        endpoint: Endpoint::new(addr, 4791, Arc::clone(&counters)),
        counters,
        recv_wcs: Vec::new(),
        send_wcs: Vec::new(),
        srq_wcs: Vec::new(),
    }
}

pub(super) fn count(n: &Node, name: &str) -> u64 {
    n.counters.get(name).unwrap()
}

pub(super) fn init(n: &mut Node, access: AccessFlags, qkey: Option<u32>) {
    let mut a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: access,
        ..Default::default()
    };
    let mut m = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT;
    match qkey {
        Some(q) => {
            a.qkey = q;
            m |= QpAttrMask::QKEY;
        }
        None => m |= QpAttrMask::ACCESS_FLAGS,
    }
    n.qp.modify(&a, m).unwrap();
}

/// ibv_uc_pingpong's INIT -> RTR mask.
pub(super) const UC_RTR_MASK: QpAttrMask = QpAttrMask::STATE
    .union(QpAttrMask::AV)
    .union(QpAttrMask::PATH_MTU)
    .union(QpAttrMask::DEST_QPN)
    .union(QpAttrMask::RQ_PSN);
/// ibv_rc_pingpong's INIT -> RTR mask: UC's and the READ/atomic and RNR ones.
pub(super) const RC_RTR_MASK: QpAttrMask = UC_RTR_MASK
    .union(QpAttrMask::MAX_DEST_RD_ATOMIC)
    .union(QpAttrMask::MIN_RNR_TIMER);
/// ibv_rc_pingpong's RTR -> RTS mask.
pub(super) const RC_RTS_MASK: QpAttrMask = QpAttrMask::STATE
    .union(QpAttrMask::TIMEOUT)
    .union(QpAttrMask::RETRY_CNT)
    .union(QpAttrMask::RNR_RETRY)
    .union(QpAttrMask::SQ_PSN)
    .union(QpAttrMask::MAX_QP_RD_ATOMIC);

/// The RTR attributes towards a peer, as the pingpong programs give them: its QPN, the PSN
/// to expect, the path MTU and an address vector with hop limit 1 (the RC-only fields are
/// left for the caller).
pub(super) fn rtr_towards(peer_qpn: u32, peer_ip: IpAddr, mtu: Mtu, rq_psn: u32) -> QpAttr {
    QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: mtu,
        dest_qp_num: peer_qpn,
        rq_psn,
        ah_attr: AhAttr {
            dgid: Gid::from_ip(peer_ip),
            hop_limit: 1,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// UC: RESET -> INIT -> RTR -> RTS with ibv_uc_pingpong's masks.
pub(super) fn connect_uc(n: &mut Node, peer: &Node, mtu: Mtu, access: AccessFlags) {
    init(n, access, None);
    // PSNs close to the wrap.
    let rtr = rtr_towards(peer.qp.qpn(), peer.addr.ip(), mtu, 0xFF_FFFE);
    n.qp.modify(&rtr, UC_RTR_MASK).unwrap();
    let rts = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: 0xFF_FFFE,
        ..Default::default()
    };
    n.qp.modify(&rts, QpAttrMask::STATE | QpAttrMask::SQ_PSN)
        .unwrap();
}

/// RC: RESET -> INIT -> RTR -> RTS with ibv_rc_pingpong's masks.
pub(super) fn connect_rc(n: &mut Node, peer: &Node, mtu: Mtu) {
    init(n, AccessFlags::REMOTE_WRITE, None);
    let rtr = QpAttr {
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ..rtr_towards(peer.qp.qpn(), peer.addr.ip(), mtu, 0xFF_FFFE)
    };
    n.qp.modify(&rtr, RC_RTR_MASK).unwrap();
    n.qp.modify(&rc_rts(), RC_RTS_MASK).unwrap();
}

/// An RC QP's RTS attributes as these tests give them: send PSN 0xFFFFFE, ACK timeout 14,
/// seven retries of each kind, one READ outstanding.
pub(super) fn rc_rts() -> QpAttr {
    QpAttr {
        qp_state: QpState::Rts,
        sq_psn: 0xFF_FFFE,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 1,
        ..Default::default()
    }
}

/// UD: RESET -> INIT (Q_Key) -> RTR -> RTS with ibv_ud_pingpong's masks.
pub(super) fn ready_ud(n: &mut Node, qkey: u32) {
    init(n, AccessFlags::EMPTY, Some(qkey));
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        ..Default::default()
    };
    n.qp.modify(&rtr, QpAttrMask::STATE).unwrap();
    let rts = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: 0x12_3456,
        ..Default::default()
    };
    n.qp.modify(&rts, QpAttrMask::STATE | QpAttrMask::SQ_PSN)
        .unwrap();
}

impl Node {
    pub fn sge(&self, at: u64, len: u32) -> Sge {
        Sge {
            addr: IOVA + at,
            length: len,
            lkey: self.mr.lkey,
        }
    }

    /// Posts a receive WR of `len` bytes at `RECV_AT + at`.
    pub fn post_recv(&mut self, wr_id: u64, at: u64, len: u32) {
        let sge = [self.sge(RECV_AT + at, len)];
        self.qp
            .post_recv(
                &RecvWr {
                    wr_id,
                    sg_list: &sge,
                },
                &self.mrs,
            )
            .unwrap();
    }

    pub fn post(&mut self, wr_id: u64, opcode: WrOpcode, at: u64, len: u32) -> Result<()> {
        let sge = [self.sge(at, len)];
        self.qp.post_send(
            &SendWr {
                wr_id,
                sg_list: &sge,
                opcode,
                send_flags: SendFlags::SIGNALED,
            },
            &self.mrs,
        )
    }

    pub fn post_ud(&mut self, wr_id: u64, opcode: WrOpcode, len: u32, dest: &UdDest) -> Result<()> {
        let sge = [self.sge(0, len)];
        self.qp.post_send_ud(
            &SendWr {
                wr_id,
                sg_list: &sge,
                opcode,
                send_flags: SendFlags::SIGNALED,
            },
            dest,
            &self.mrs,
        )
    }

    pub fn sent_bytes(&self, at: u64, len: usize) -> Vec<u8> {
        self.mr.storage.to_vec(at, len).unwrap()
    }

    pub fn recv_bytes(&self, at: u64, len: usize) -> Vec<u8> {
        self.mr.storage.to_vec(RECV_AT + at, len).unwrap()
    }

    pub fn collect(&mut self) {
        while let Some((side, wc)) = self.qp.poll_completion() {
            match side {
                CqSide::Send => self.send_wcs.push(wc),
                CqSide::Recv => self.recv_wcs.push(wc),
                CqSide::Srq(n) => self.srq_wcs.push((n, wc)),
            }
        }
    }
}

/// Moves every packet `from` has to send to `to`, dropping those whose index (counted from 0
/// in this call) is in `drop`. The receiver gets the IP header the packet travelled with.
pub(super) fn transfer(from: &mut Node, to: &mut Node, drop: &[usize]) -> Vec<Seen> {
    let mut seen = Vec::new();
    let mut buf = vec![0u8; MAX_PACKET];
    for i in 0..10_000 {
        let Some(t) = from
            .endpoint
            .poll_transmit(Duration::ZERO, &mut from.qp, &mut buf)
        else {
            break;
        };
        let bytes = &buf[..t.len];
        let src = SocketAddr::new(from.addr.ip(), t.src_port);
        let pkt = PacketRepr::parse(bytes).expect("sent packets parse");
        let dropped = drop.contains(&i);
        seen.push(Seen {
            opcode: pkt.bth.opcode,
            ack_req: pkt.bth.ack_req,
            dest_qp: pkt.bth.dest_qp,
            deth: pkt.ext.deth,
            src_port: t.src_port,
            ip: (t.hop_limit, t.traffic_class),
            dropped,
        });
        if dropped || t.dst.ip() != to.addr.ip() {
            continue;
        }
        // The receiver's endpoint, as the engine runs it: ICRC, parse, QP lookup, the sender
        // check and the GRH area from the IP fields the packet was sent with (a hop limit of 0,
        // the route's, reads as not reported: the socket default).
        let ip = IpFields {
            hop_limit: t.hop_limit,
            traffic_class: t.traffic_class,
        };
        let mut qps = OneQp {
            qp: &mut to.qp,
            mrs: &to.mrs,
        };
        to.endpoint
            .handle(Duration::ZERO, src, t.dst, ip, bytes, &mut qps);
        assert_eq!(count(to, "icrc_err"), 0, "ICRC of packet {i}");
    }
    from.collect();
    to.collect();
    seen
}
