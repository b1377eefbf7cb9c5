//! What the protocol fuzz targets share: building a connected [`QpCore`] with the verbs'
//! attribute masks, the step framing of their inputs, shaping arbitrary request and response
//! packets, sealing and verifying ICRCs as a UDP socket pair would, and the queue-bound check.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use arbitrary::{Arbitrary, Unstructured};

use crate::ib::{AccessFlags, AhAttr, DeviceLimits, Gid, Mtu, QpAttr, QpAttrMask, QpCap, QpState};
use crate::transport::{Counters, QpConfig, QpCore, MAX_QUEUED_RESPONSES, MAX_UNACKED_PSNS};
use crate::wire::{
    icrc, AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, ExtHeaders, FethRepr,
    HeaderSet, IethRepr, ImmDtRepr, Opcode, PacketRepr, RethRepr, XrcEthRepr, ICRC_LEN,
};

/// Virtual address at which the harnesses register their regions (as a user-space pointer).
pub const IOVA: u64 = 0x7F00_0000_0000;

/// Step tag for a raw packet: a 2-byte little-endian length and that many bytes follow. Any
/// other tag byte means a structured step shaped by `arbitrary`. A fixed tag rather than an
/// `arbitrary` enum variant keeps the seed files, written from real captures by
/// [`super::seeds`], independent of how a version of `arbitrary` encodes enums.
pub const RAW_TAG: u8 = 0;

/// One step of a protocol target's input.
#[derive(Debug)]
pub enum Step<'a, T> {
    /// Raw bytes, normally a whole RoCE UDP payload (BTH .. ICRC).
    Raw(&'a [u8]),
    /// A structured step.
    Shaped(T),
}

/// Reads the next step; `None` at the end of the input (or when what is left cannot shape a
/// step).
pub fn next_step<'a, T: Arbitrary<'a>>(u: &mut Unstructured<'a>) -> Option<Step<'a, T>> {
    if u.is_empty() {
        return None;
    }
    let tag = u8::arbitrary(u).ok()?;
    if tag == RAW_TAG {
        let len = u16::from_le_bytes([u8::arbitrary(u).ok()?, u8::arbitrary(u).ok()?]) as usize;
        let len = len.min(u.len());
        return u.bytes(len).ok().map(Step::Raw);
    }
    T::arbitrary(u).ok().map(Step::Shaped)
}

/// The first `N` bytes of an input, which hold a target's setup; bytes the input lacks read as
/// zero, so every input, however short, has a setup.
pub fn read_head<const N: usize>(u: &mut Unstructured) -> [u8; N] {
    let mut b = [0u8; N];
    let n = u.len().min(N);
    if let Ok(head) = u.bytes(n) {
        b[..n].copy_from_slice(head);
    }
    b
}

/// Encodes a raw step as [`next_step`] reads it (for seed files).
pub fn encode_raw(out: &mut Vec<u8>, packet: &[u8]) {
    out.push(RAW_TAG);
    out.extend_from_slice(&(packet.len().min(u16::MAX as usize) as u16).to_le_bytes());
    out.extend_from_slice(&packet[..packet.len().min(u16::MAX as usize)]);
}

/// Every access right a region can grant remotely, and local write.
pub const ALL_ACCESS: AccessFlags = AccessFlags(
    AccessFlags::LOCAL_WRITE.0
        | AccessFlags::REMOTE_WRITE.0
        | AccessFlags::REMOTE_READ.0
        | AccessFlags::REMOTE_ATOMIC.0,
);

/// The capacities of the harnesses' QPs: small, so that the fuzzer reaches the limits.
pub const CAP: QpCap = QpCap {
    max_send_wr: 16,
    max_recv_wr: 16,
    max_send_sge: 2,
    max_recv_sge: 2,
    max_inline_data: 64,
};

/// A QP in the RESET state at `addr` (port 4791) in protection domain 1.
pub fn new_qp(qpn: u32, addr: IpAddr) -> QpCore {
    new_qp_with(qpn, addr, None, None)
}

/// As [`new_qp`], an XRC QP of `role` when given.
pub fn new_qp_with(
    qpn: u32,
    addr: IpAddr,
    xrc: Option<crate::transport::XrcRole>,
    srq: Option<Arc<crate::transport::Srq>>,
) -> QpCore {
    let cfg = QpConfig {
        qpn,
        pd: 1,
        cap: CAP,
        sq_sig_all: false,
        local: SocketAddr::new(addr, crate::wire::ROCE_V2_UDP_PORT),
        remote_port: crate::wire::ROCE_V2_UDP_PORT,
        qp_type: crate::ib::QpType::Rc,
        srq,
        xrc,
    };
    QpCore::new(cfg, DeviceLimits::default(), Arc::new(Counters::default()))
}

/// Connection parameters of one end, as an application passes them to `ibv_modify_qp`.
#[derive(Debug, Clone, Copy)]
pub struct Link {
    /// The peer's QP number.
    pub peer_qpn: u32,
    /// The peer's address.
    pub peer: IpAddr,
    /// Path MTU.
    pub mtu: Mtu,
    /// First PSN this end sends.
    pub sq_psn: u32,
    /// First PSN this end expects.
    pub rq_psn: u32,
    /// Retransmission timeout exponent (4.096 us x 2^timeout).
    pub timeout: u8,
    /// Transport retries (7 = unlimited).
    pub retry_cnt: u8,
    /// RNR retries (7 = unlimited).
    pub rnr_retry: u8,
    /// READ/atomic requests this end may have outstanding and may accept.
    pub rd_atomic: u8,
}

/// Moves `qp` through INIT and RTR to RTS, as ibv_rc_pingpong does.
pub fn connect(qp: &mut QpCore, l: &Link) {
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC,
        ..Default::default()
    };
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: l.mtu,
        dest_qp_num: l.peer_qpn,
        rq_psn: l.rq_psn & 0xFF_FFFF,
        max_dest_rd_atomic: l.rd_atomic,
        min_rnr_timer: 1,
        ah_attr: AhAttr {
            dgid: Gid::from_ip(l.peer),
            hop_limit: 1,
            ..Default::default()
        },
        ..Default::default()
    };
    let rts = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: l.sq_psn & 0xFF_FFFF,
        timeout: l.timeout,
        retry_cnt: l.retry_cnt,
        rnr_retry: l.rnr_retry,
        max_rd_atomic: l.rd_atomic,
        ..Default::default()
    };
    let steps = [
        (
            init,
            QpAttrMask::STATE
                | QpAttrMask::PKEY_INDEX
                | QpAttrMask::PORT
                | QpAttrMask::ACCESS_FLAGS,
        ),
        (
            rtr,
            QpAttrMask::STATE
                | QpAttrMask::AV
                | QpAttrMask::PATH_MTU
                | QpAttrMask::DEST_QPN
                | QpAttrMask::RQ_PSN
                | QpAttrMask::MAX_DEST_RD_ATOMIC
                | QpAttrMask::MIN_RNR_TIMER,
        ),
        (
            rts,
            QpAttrMask::STATE
                | QpAttrMask::TIMEOUT
                | QpAttrMask::RETRY_CNT
                | QpAttrMask::RNR_RETRY
                | QpAttrMask::SQ_PSN
                | QpAttrMask::MAX_QP_RD_ATOMIC,
        ),
    ];
    for (attr, mask) in steps {
        qp.modify(&attr, mask)
            .expect("the harness's connection attributes are valid");
    }
}

/// Checks every queue of `qp` against its bound: send and receive queues against the
/// capacities, the responder's saved resources against `max_dest_rd_atomic`, its queued
/// responses against [`MAX_QUEUED_RESPONSES`] (a fatal NAK may go beyond, once), the
/// completions against the WQEs that could produce them, and the requester's outstanding PSNs
/// against its window (one READ may reserve more PSNs than the window when it is alone).
pub fn check_bounds(qp: &QpCore) {
    let d = qp.queue_depths();
    let attr = qp.query();
    assert!(d.send <= CAP.max_send_wr as usize, "send queue {}", d.send);
    assert!(
        d.recv <= CAP.max_recv_wr as usize,
        "receive queue {}",
        d.recv
    );
    assert!(
        d.resp_resources <= (attr.max_dest_rd_atomic as usize).max(1),
        "responder resources {} > max_dest_rd_atomic {}",
        d.resp_resources,
        attr.max_dest_rd_atomic
    );
    assert!(
        d.resp_queued <= MAX_QUEUED_RESPONSES + 1,
        "queued responses {}",
        d.resp_queued
    );
    // Every send WQE and every receive WQE completes once; a SEND may also complete the
    // receive WQE it was filling after that left the receive queue.
    assert!(
        d.completions <= (CAP.max_send_wr + CAP.max_recv_wr) as usize + 1,
        "completions {}",
        d.completions
    );
    let window = (MAX_UNACKED_PSNS as i32).max(d.largest_wqe_psns) + d.largest_wqe_psns;
    assert!(
        d.outstanding_psns <= window,
        "outstanding PSNs {} beyond {window}",
        d.outstanding_psns
    );
    assert!(d.outstanding_psns >= 0, "acknowledged past what was sent");
}

/// The fields of every extended header a shaped packet may need; which ones are used is
/// decided by the opcode.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub struct HeaderFields {
    /// RETH / AtomicETH / IETH remote key selector (see the target's key table).
    pub key: u8,
    /// Offset of the RETH/AtomicETH VA from the start of the selected region.
    pub va_offset: i16,
    /// RETH DMA length (scaled by the target).
    pub dma_len: u16,
    /// AtomicETH compare.
    pub compare: u64,
    /// AtomicETH swap/add.
    pub swap_add: u64,
    /// AETH syndrome.
    pub syndrome: u8,
    /// AETH MSN.
    pub msn: u32,
    /// AtomicAckETH original value.
    pub orig: u64,
    /// Immediate data.
    pub imm: u32,
}

/// Fills the extended headers `set` asks for. `key` and `va` are the already resolved RETH and
/// AtomicETH key and address.
pub fn ext_headers(
    set: HeaderSet,
    f: &HeaderFields,
    key: u32,
    va: u64,
    dma_len: u32,
) -> ExtHeaders {
    let on = |h: HeaderSet| set.contains(h);
    ExtHeaders {
        deth: on(HeaderSet::DETH).then_some(DethRepr {
            qkey: f.imm,
            src_qp: f.msn & 0xFF_FFFF,
        }),
        xrceth: on(HeaderSet::XRCETH).then_some(XrcEthRepr {
            srqn: f.msn & 0xFF_FFFF,
        }),
        feth: on(HeaderSet::FETH).then_some(FethRepr {
            selectivity: f.syndrome & 0x3,
            placement: (f.syndrome >> 4) & 0x3,
        }),
        reth: on(HeaderSet::RETH).then_some(RethRepr {
            va,
            rkey: key,
            len: dma_len,
        }),
        atomic: on(HeaderSet::ATOMIC_ETH).then_some(AtomicEthRepr {
            va,
            rkey: key,
            swap_add: f.swap_add,
            compare: f.compare,
        }),
        aeth: on(HeaderSet::AETH).then_some(AethRepr {
            syndrome: f.syndrome,
            msn: f.msn & 0xFF_FFFF,
        }),
        atomic_ack: on(HeaderSet::ATOMIC_ACK_ETH).then_some(AtomicAckEthRepr { orig: f.orig }),
        imm: on(HeaderSet::IMMDT).then_some(ImmDtRepr { imm: f.imm }),
        ieth: on(HeaderSet::IETH).then_some(IethRepr { rkey: key }),
    }
}

/// A BTH for `opcode` to `dest_qp` at `psn`.
pub fn bth(opcode: Opcode, dest_qp: u32, psn: u32, ack_req: bool, solicited: bool) -> BthRepr {
    BthRepr {
        opcode,
        solicited,
        pkey: 0xFFFF,
        dest_qp,
        ack_req,
        psn: psn & 0xFF_FFFF,
        ..BthRepr::default()
    }
}

/// The RC request opcodes a responder accepts.
pub const REQUEST_OPCODES: [Opcode; 19] = [
    Opcode::RC_SEND_FIRST,
    Opcode::RC_SEND_MIDDLE,
    Opcode::RC_SEND_LAST,
    Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
    Opcode::RC_SEND_ONLY,
    Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
    Opcode::RC_RDMA_WRITE_FIRST,
    Opcode::RC_RDMA_WRITE_MIDDLE,
    Opcode::RC_RDMA_WRITE_LAST,
    Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
    Opcode::RC_RDMA_WRITE_ONLY,
    Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
    Opcode::RC_RDMA_READ_REQUEST,
    Opcode::RC_COMPARE_SWAP,
    Opcode::RC_FETCH_ADD,
    Opcode::RC_SEND_LAST_WITH_INVALIDATE,
    Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
    Opcode::RC_FLUSH,
    Opcode::RC_ATOMIC_WRITE,
];

/// The RC response opcodes a requester's completer accepts.
pub const RESPONSE_OPCODES: [Opcode; 6] = [
    Opcode::RC_RDMA_READ_RESPONSE_FIRST,
    Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
    Opcode::RC_RDMA_READ_RESPONSE_LAST,
    Opcode::RC_RDMA_READ_RESPONSE_ONLY,
    Opcode::RC_ACK,
    Opcode::RC_ATOMIC_ACK,
];

/// The UDP header a socket at `src` sends to `dst` for a `len`-byte payload.
/// The ICRC of RoCE UDP payload `bytes` (ICRC bytes included, not covered) sent through a UDP
/// socket from `src` to `dst`, in wire order; `None` for mixed address families.
pub fn icrc_for(src: SocketAddr, dst: SocketAddr, bytes: &[u8]) -> Option<[u8; ICRC_LEN]> {
    icrc::socket_datagram_icrc(src, dst, bytes)
}

/// Writes the ICRC into the last 4 bytes of `bytes`, as a sender at `src` would.
pub fn seal(src: SocketAddr, dst: SocketAddr, bytes: &mut [u8]) {
    icrc::seal_socket_datagram(src, dst, bytes);
}

/// Whether the ICRC at the end of `bytes` is the one a sender at `src` computes.
pub fn icrc_ok(src: SocketAddr, dst: SocketAddr, bytes: &[u8]) -> bool {
    icrc_for(src, dst, bytes).is_some_and(|c| bytes[bytes.len() - ICRC_LEN..] == c)
}

/// Emits `pkt` into a new buffer (ICRC bytes zero), or `None` if it is inconsistent.
pub fn emit(pkt: &PacketRepr) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; pkt.buffer_len()];
    pkt.emit(&mut buf).ok()?;
    Some(buf)
}

/// A deterministic byte pattern, different for every `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(131).wrapping_add(seed.wrapping_mul(0x9E37)) >> 2) as u8 ^ 0x5A)
        .collect()
}

/// The path MTU a selector byte picks (small ones, so that messages span packets cheaply).
pub fn mtu_from(sel: u8) -> Mtu {
    match sel % 3 {
        0 => Mtu::Mtu256,
        1 => Mtu::Mtu512,
        _ => Mtu::Mtu1024,
    }
}

/// Whether `SOFTROCE_FUZZ_TRACE` is set: the targets then print every step and what came of
/// it to stderr, to read a reproducer's story.
pub fn tracing() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("SOFTROCE_FUZZ_TRACE").is_some())
}
