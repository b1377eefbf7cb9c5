//! The vocabulary of the verbs API: the types of libibverbs (`ibv_qp_attr`, `ibv_send_wr`,
//! `ibv_wc`, ...) in Rust, with the same names, meanings and numeric values, so that code and
//! habits carry over from C.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Writes `Name(A | B)` for a flag set: bitflags' own text form (unknown bits in hex) in the
/// tuple-struct shape the types print as.
fn fmt_flags<F>(name: &str, flags: &F, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result
where
    F: bitflags::Flags,
    F::Bits: bitflags::parser::WriteHex,
{
    write!(f, "{name}(")?;
    bitflags::parser::to_writer(flags, &mut *f)?;
    f.write_str(")")
}

// The three flag sets below are newtypes over the libibverbs `u32`, so that `.0` is the C value
// and a value from C converts with `Flags(bits)`; bitflags' `impl` form supplies the flag
// constants, `contains`, `intersects`, `is_empty` and the operators.

/// What bitflags' `impl` form leaves to the type: the `EMPTY` constant and `Debug`.
macro_rules! flags_extras {
    ($($name:ident),*) => {$(
        impl $name {
            /// No flag set (also `empty()`).
            pub const EMPTY: $name = $name(0);
        }

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                fmt_flags(stringify!($name), self, f)
            }
        }
    )*};
}

flags_extras!(AccessFlags, SendFlags, QpAttrMask);

/// Memory region and QP access rights (`enum ibv_access_flags`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AccessFlags(pub u32);

bitflags::bitflags! {
    impl AccessFlags: u32 {
        /// The local HCA may write (needed for receive and READ/atomic result buffers).
        const LOCAL_WRITE = 1;
        /// The remote peer may RDMA WRITE.
        const REMOTE_WRITE = 1 << 1;
        /// The remote peer may RDMA READ.
        const REMOTE_READ = 1 << 2;
        /// The remote peer may perform atomics.
        const REMOTE_ATOMIC = 1 << 3;
        /// Memory windows may be bound to the region (`IBV_ACCESS_MW_BIND`).
        const MW_BIND = 1 << 4;
        /// A memory window bound with it is addressed from 0, not by virtual address
        /// (`IBV_ACCESS_ZERO_BASED`; type 2 windows only, as rxe).
        const ZERO_BASED = 1 << 5;
        /// On-demand paging (`IBV_ACCESS_ON_DEMAND`): the region's pages need not be mapped
        /// at registration; an access to one that is not fails then (spec-notes/beyond-rxe.md
        /// rule 1).
        const ON_DEMAND = 1 << 6;
        /// The remote peer may FLUSH the region to global visibility (IBTA 1.5 memory
        /// placement extensions; `IBV_ACCESS_FLUSH_GLOBAL` of rdma-core 45, not in 44's ABI).
        const FLUSH_GLOBAL = 1 << 8;
        /// The remote peer may FLUSH the region to persistence (`IBV_ACCESS_FLUSH_PERSISTENT`).
        /// As on rxe, only persistent memory may be registered with it: softroce has none, so
        /// registering with it fails.
        const FLUSH_PERSISTENT = 1 << 9;
    }
}

/// Per-work-request flags (`enum ibv_send_flags`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SendFlags(pub u32);

bitflags::bitflags! {
    impl SendFlags: u32 {
        /// Wait for outstanding READs and atomics to complete before starting.
        const FENCE = 1;
        /// Generate a completion even if the QP was created with `sq_sig_all = false`.
        const SIGNALED = 1 << 1;
        /// Set the Solicited Event bit on the last packet.
        const SOLICITED = 1 << 2;
        /// Copy the data at post time; the lkeys of the SGEs are not checked.
        const INLINE = 1 << 3;
    }
}

/// Which fields of [`QpAttr`] a modify applies (`enum ibv_qp_attr_mask`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct QpAttrMask(pub u32);

bitflags::bitflags! {
    impl QpAttrMask: u32 {
        /// `qp_state`.
        const STATE = 1;
        /// `cur_qp_state`.
        const CUR_STATE = 1 << 1;
        /// `en_sqd_async_notify`.
        const EN_SQD_ASYNC_NOTIFY = 1 << 2;
        /// `qp_access_flags`.
        const ACCESS_FLAGS = 1 << 3;
        /// `pkey_index`.
        const PKEY_INDEX = 1 << 4;
        /// `port_num`.
        const PORT = 1 << 5;
        /// `qkey`.
        const QKEY = 1 << 6;
        /// `ah_attr` (the primary path).
        const AV = 1 << 7;
        /// `path_mtu`.
        const PATH_MTU = 1 << 8;
        /// `timeout`.
        const TIMEOUT = 1 << 9;
        /// `retry_cnt`.
        const RETRY_CNT = 1 << 10;
        /// `rnr_retry`.
        const RNR_RETRY = 1 << 11;
        /// `rq_psn`.
        const RQ_PSN = 1 << 12;
        /// `max_rd_atomic`.
        const MAX_QP_RD_ATOMIC = 1 << 13;
        /// `alt_ah_attr` (alternate path; not supported on RoCE by softroce).
        const ALT_PATH = 1 << 14;
        /// `min_rnr_timer`.
        const MIN_RNR_TIMER = 1 << 15;
        /// `sq_psn`.
        const SQ_PSN = 1 << 16;
        /// `max_dest_rd_atomic`.
        const MAX_DEST_RD_ATOMIC = 1 << 17;
        /// `path_mig_state`.
        const PATH_MIG_STATE = 1 << 18;
        /// `cap`.
        const CAP = 1 << 19;
        /// `dest_qp_num`.
        const DEST_QPN = 1 << 20;
    }
}

/// QP states (`enum ibv_qp_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum QpState {
    /// Just created or reset: no processing.
    #[default]
    Reset,
    /// Initialised: receives may be posted, nothing is processed.
    Init,
    /// Ready to receive: the responder runs.
    Rtr,
    /// Ready to send: requester and responder run.
    Rts,
    /// Send queue drain: no new send WRs are started.
    Sqd,
    /// Send queue error (UC/UD only).
    Sqe,
    /// Error: every WR is flushed with `WrFlushErr`.
    Err,
}

/// QP transport types (`enum ibv_qp_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum QpType {
    /// Reliable Connected.
    #[default]
    Rc,
    /// Unreliable Connected: SEND and WRITE without acknowledgements.
    Uc,
    /// Unreliable Datagram: single-packet SENDs to any QP named per work request.
    Ud,
}

/// Path MTU (`enum ibv_mtu`): the enum values 1..=5 stand for 256..=4096 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes (the ibv_rc_pingpong default).
    #[default]
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
    Mtu4096 = 5,
}

impl Mtu {
    /// Payload bytes per packet.
    pub const fn bytes(self) -> u32 {
        128 << (self as u32)
    }
    /// From a byte count (256, 512, 1024, 2048 or 4096).
    pub fn from_bytes(n: u32) -> Option<Mtu> {
        Some(match n {
            256 => Mtu::Mtu256,
            512 => Mtu::Mtu512,
            1024 => Mtu::Mtu1024,
            2048 => Mtu::Mtu2048,
            4096 => Mtu::Mtu4096,
            _ => return None,
        })
    }
    /// From the `enum ibv_mtu` value (1..=5).
    pub fn from_enum(v: u32) -> Option<Mtu> {
        Mtu::from_bytes(128u32.checked_shl(v)?)
    }
}

/// A 128-bit GID. On RoCEv2 it is the IP address: IPv6 as is, IPv4 mapped (`::ffff:a.b.c.d`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The GID of an IP address.
    pub fn from_ip(ip: IpAddr) -> Gid {
        match ip {
            IpAddr::V4(v4) => Gid(v4.to_ipv6_mapped().octets()),
            IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }
    /// The IP address of a GID (IPv4 for an IPv4-mapped GID).
    pub fn to_ip(self) -> IpAddr {
        let v6 = Ipv6Addr::from(self.0);
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }
    /// Whether the GID names a multicast group: an IPv6 multicast address (ff00::/8) or an
    /// IPv4-mapped IPv4 multicast one (224.0.0.0/4), as the kernel's `rdma_is_multicast_addr`
    /// decides for `ib_attach_mcast`.
    pub fn is_multicast(self) -> bool {
        self.to_ip().is_multicast()
    }
    /// Whether the GID is all zeros (no GID: e.g. an InfiniBand peer without GRH).
    pub fn is_zero(self) -> bool {
        self.0 == [0; 16]
    }
}

impl From<IpAddr> for Gid {
    fn from(ip: IpAddr) -> Gid {
        Gid::from_ip(ip)
    }
}

impl From<Ipv4Addr> for Gid {
    fn from(ip: Ipv4Addr) -> Gid {
        Gid::from_ip(IpAddr::V4(ip))
    }
}

impl core::fmt::Debug for Gid {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Gid({})", self.to_ip())
    }
}

impl core::fmt::Display for Gid {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // The form ibv_devinfo -v and the pingpong tools print: eight groups of four hex digits.
        for (i, pair) in self.0.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

/// Address vector of the primary path (`struct ibv_ah_attr` with its GRH, as RoCE uses it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AhAttr {
    /// Destination GID: the peer's IP address.
    pub dgid: Gid,
    /// Index of the local GID to send from (softroce has index 0 = its own address, and
    /// accepts 1 as an alias so that rxe habits such as `-g 1` work).
    pub sgid_index: u8,
    /// Hop limit (IPv4 TTL or IPv6 hop limit); 0 means the default of 64.
    pub hop_limit: u8,
    /// Traffic class (IPv4 TOS or IPv6 traffic class).
    pub traffic_class: u8,
    /// IPv6 flow label; also feeds the UDP source port choice as in rxe.
    pub flow_label: u32,
    /// Service level (kept for API parity; RoCE maps priority through the traffic class).
    pub sl: u8,
}

/// QP capacities (`struct ibv_qp_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpCap {
    /// Send queue depth: posted WRs not yet completed and polled, at most.
    pub max_send_wr: u32,
    /// Receive queue depth: posted receive WRs not yet consumed, at most.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send WR.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive WR.
    pub max_recv_sge: u32,
    /// Bytes of inline data per send WR.
    pub max_inline_data: u32,
}

impl Default for QpCap {
    fn default() -> Self {
        QpCap {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }
    }
}

/// QP attributes (`struct ibv_qp_attr`); which are applied is given by a [`QpAttrMask`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct QpAttr {
    /// The state to move to (`STATE` in the mask).
    pub qp_state: QpState,
    /// Assumed current state (checked when `CUR_STATE` is in the mask).
    pub cur_qp_state: QpState,
    /// Payload bytes per packet; both ends must agree (RTR).
    pub path_mtu: Mtu,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Expected PSN of the first incoming request.
    pub rq_psn: u32,
    /// PSN of the first outgoing request.
    pub sq_psn: u32,
    /// The peer's QP number, the BTH destination of every packet this QP sends (RTR).
    pub dest_qp_num: u32,
    /// Which remote operations this QP's responder allows.
    pub qp_access_flags: AccessFlags,
    /// Capacities (query only; modify of `CAP` is refused).
    pub cap: QpCap,
    /// Primary path: the peer's GID (its IP address on RoCEv2) and hop limit (RTR).
    pub ah_attr: AhAttr,
    /// P_Key index (0: the default P_Key 0xFFFF).
    pub pkey_index: u16,
    /// Whether an SQD transition raises an event.
    pub en_sqd_async_notify: bool,
    /// Whether the send queue is draining (query only).
    pub sq_draining: bool,
    /// Outstanding READ/atomic requests this QP may have as requester.
    pub max_rd_atomic: u8,
    /// READ/atomic requests this QP accepts as responder.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code this responder advertises (0..=31).
    pub min_rnr_timer: u8,
    /// Port number (1).
    pub port_num: u8,
    /// Local ACK timeout exponent: 4.096 us x 2^timeout; 0 = infinite.
    pub timeout: u8,
    /// Transport retries (0..=7).
    pub retry_cnt: u8,
    /// RNR retries (0..=7, 7 = infinite).
    pub rnr_retry: u8,
}

/// A scatter/gather element (`struct ibv_sge`): `length` bytes at virtual address `addr` of the
/// memory region with local key `lkey`.
///
/// Laid out as C's `struct ibv_sge` (`repr(C)`, no padding, [`bytemuck::Pod`]), so that the
/// shim reads an application's SGE list in place instead of copying it.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Sge {
    /// Virtual address within the memory region.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the memory region.
    pub lkey: u32,
}

/// The operation of a send work request (`ibv_wr_opcode` with the fields it uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WrOpcode {
    /// SEND.
    Send,
    /// SEND with immediate data.
    SendWithImm {
        /// Immediate data (host order; sent big-endian).
        imm: u32,
    },
    /// RDMA WRITE.
    RdmaWrite {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// RDMA WRITE with immediate data (consumes a receive WR at the peer).
    RdmaWriteWithImm {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Immediate data.
        imm: u32,
    },
    /// RDMA READ.
    RdmaRead {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// 8-byte atomic compare-and-swap; the original value lands in the (single, 8-byte) SGE.
    AtomicCmpSwap {
        /// Remote virtual address (8-byte aligned).
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Value to compare with.
        compare: u64,
        /// Value to store when equal.
        swap: u64,
    },
    /// 8-byte atomic fetch-and-add; the original value lands in the (single, 8-byte) SGE.
    AtomicFetchAdd {
        /// Remote virtual address (8-byte aligned).
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Value to add.
        add: u64,
    },
    /// SEND with invalidate (`IBV_WR_SEND_WITH_INV`, RC only): after the message has landed
    /// the receiver invalidates `rkey`, a type 2 memory window of its QP.
    SendWithInv {
        /// The receiver's R_Key to invalidate (carried in the IETH).
        rkey: u32,
    },
    /// Local invalidate (`IBV_WR_LOCAL_INV`): invalidates the type 2 memory window `rkey`
    /// names, in order with the other WRs of the send queue; no packet is sent.
    LocalInv {
        /// The R_Key to invalidate.
        rkey: u32,
    },
    /// Bind a memory window (`IBV_WR_BIND_MW`; what `ibv_bind_mw` posts for a type 1
    /// window), in order with the other WRs of the send queue; no packet is sent.
    BindMw {
        /// The window's current R_Key (`wr.bind_mw.mw->rkey`).
        mw_rkey: u32,
        /// The R_Key after the bind: its index bits must be the window's, its low byte is the
        /// consumer's (`wr.bind_mw.rkey`).
        new_rkey: u32,
        /// What to bind (`wr.bind_mw.bind_info`).
        bind: MwBindInfo,
    },
    /// ATOMIC WRITE (`IBV_WR_ATOMIC_WRITE`, IBTA 1.5, RC only): the 8 bytes of `data` land at
    /// `remote_addr` (8-byte aligned) in one store, after every earlier request of the QP.
    AtomicWrite {
        /// Remote virtual address (8-byte aligned).
        remote_addr: u64,
        /// Remote key (the region needs REMOTE_WRITE).
        rkey: u32,
        /// The bytes written, in memory order (`atomic_wr` of `ibv_wr_atomic_write`).
        data: [u8; 8],
    },
    /// FLUSH (`IBV_WR_FLUSH` of rdma-core 45, IBTA 1.5, RC only): completes once the earlier
    /// writes of the QP to `len` bytes at `remote_addr` (or to the whole region, with
    /// selectivity [`crate::wire::feth::SELECTIVITY_MR`]) are placed as `placement` asks.
    Flush {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key (the region needs the FLUSH_* rights `placement` names).
        rkey: u32,
        /// Length of the range.
        len: u32,
        /// Placement type: [`crate::wire::feth::PLACEMENT_GLOBAL`] and/or
        /// [`crate::wire::feth::PLACEMENT_PERSISTENT`] (`wr.flush.type`).
        placement: u8,
        /// Selectivity level: [`crate::wire::feth::SELECTIVITY_RANGE`] or
        /// [`crate::wire::feth::SELECTIVITY_MR`] (`wr.flush.level`).
        selectivity: u8,
    },
}

/// What a memory window is bound to (`struct ibv_mw_bind_info`, the region named by its
/// lkey): `length` bytes at `addr` of the region, with the window's access rights. A length
/// of 0 unbinds a type 1 window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MwBindInfo {
    /// Local key of the memory region (which needs `MW_BIND` access).
    pub mr_lkey: u32,
    /// Virtual address of the window's first byte, inside the region.
    pub addr: u64,
    /// Length in bytes.
    pub length: u64,
    /// The window's rights: REMOTE_READ, REMOTE_WRITE, REMOTE_ATOMIC, ZERO_BASED.
    pub access: AccessFlags,
}

impl WrOpcode {
    /// The completion opcode a successful WR of this kind reports.
    pub fn wc_opcode(self) -> WcOpcode {
        match self {
            WrOpcode::Send | WrOpcode::SendWithImm { .. } | WrOpcode::SendWithInv { .. } => {
                WcOpcode::Send
            }
            WrOpcode::LocalInv { .. } => WcOpcode::LocalInv,
            WrOpcode::BindMw { .. } => WcOpcode::BindMw,
            WrOpcode::RdmaWrite { .. } | WrOpcode::RdmaWriteWithImm { .. } => WcOpcode::RdmaWrite,
            WrOpcode::RdmaRead { .. } => WcOpcode::RdmaRead,
            WrOpcode::AtomicCmpSwap { .. } => WcOpcode::CompSwap,
            WrOpcode::AtomicFetchAdd { .. } => WcOpcode::FetchAdd,
            WrOpcode::AtomicWrite { .. } => WcOpcode::AtomicWrite,
            WrOpcode::Flush { .. } => WcOpcode::Flush,
        }
    }
    /// Whether the WR is a READ or an atomic: its response brings data back, and an ACK
    /// past it means that response was lost (see also [`Self::holds_rd_atomic`]).
    pub fn is_read_or_atomic(self) -> bool {
        matches!(
            self,
            WrOpcode::RdmaRead { .. }
                | WrOpcode::AtomicCmpSwap { .. }
                | WrOpcode::AtomicFetchAdd { .. }
        )
    }
    /// Whether the WR is an ATOMIC WRITE or a FLUSH: answered by an RDMA READ RESPONSE ONLY
    /// without payload, but completed like a WRITE by a later ACK (rxe's completer leaves
    /// them out of WR_ATOMIC_OR_READ_MASK).
    pub fn is_placement(self) -> bool {
        matches!(self, WrOpcode::AtomicWrite { .. } | WrOpcode::Flush { .. })
    }
    /// Whether the requester counts the WR against `max_rd_atomic` from its first packet to
    /// its completion, and a FENCEd WR waits for it: READs, atomics and, as rxe's
    /// rxe_requester gates `RXE_READ_OR_ATOMIC_MASK | RXE_ATOMIC_WRITE_MASK`, ATOMIC WRITE
    /// (not FLUSH).
    pub fn holds_rd_atomic(self) -> bool {
        self.is_read_or_atomic() || matches!(self, WrOpcode::AtomicWrite { .. })
    }
    /// Whether the WR is executed locally, without a packet: BIND_MW and LOCAL_INV (rxe's
    /// `WR_LOCAL_OP_MASK`).
    pub fn is_local(self) -> bool {
        matches!(self, WrOpcode::BindMw { .. } | WrOpcode::LocalInv { .. })
    }
    /// Whether the WR is an atomic.
    pub fn is_atomic(self) -> bool {
        matches!(
            self,
            WrOpcode::AtomicCmpSwap { .. } | WrOpcode::AtomicFetchAdd { .. }
        )
    }
}

/// A send work request (`struct ibv_send_wr`, without the linked list).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SendWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Local buffers: the data to send, or where READ data / the atomic original value goes.
    pub sg_list: &'a [Sge],
    /// The operation.
    pub opcode: WrOpcode,
    /// Completion, fencing, solicited-event and inline behaviour of this WR.
    pub send_flags: SendFlags,
}

/// A receive work request (`struct ibv_recv_wr`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RecvWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where an incoming SEND's data is scattered.
    pub sg_list: &'a [Sge],
}

/// Where a UD send goes (`wr.ud` of `struct ibv_send_wr`, with the address handle's
/// attributes in place of the `ibv_ah` pointer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct UdDest {
    /// The address handle: destination GID, hop limit, traffic class.
    pub ah: AhAttr,
    /// Destination QP number (BTH DestQP).
    pub remote_qpn: u32,
    /// Q_Key for the DETH; with bit 31 set the QP's own Q_Key is sent instead (IBTA 10.2.5).
    pub remote_qkey: u32,
}

/// Shared receive queue attributes (`struct ibv_srq_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SrqAttr {
    /// Most receive WRs queued at once.
    pub max_wr: u32,
    /// Scatter/gather entries per receive WR.
    pub max_sge: u32,
    /// Limit: when armed (non-zero), the queue falling below it raises one
    /// `SRQ_LIMIT_REACHED` event and disarms it.
    pub srq_limit: u32,
}

impl Default for SrqAttr {
    fn default() -> Self {
        SrqAttr {
            max_wr: 128,
            max_sge: 1,
            srq_limit: 0,
        }
    }
}

/// Which [`SrqAttr`] fields `modify_srq` applies (`enum ibv_srq_attr_mask`, same bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SrqAttrMask(pub u32);

impl SrqAttrMask {
    /// Resize the queue (`IBV_SRQ_MAX_WR`).
    pub const MAX_WR: SrqAttrMask = SrqAttrMask(1);
    /// Arm the limit (`IBV_SRQ_LIMIT`).
    pub const LIMIT: SrqAttrMask = SrqAttrMask(2);

    /// Whether every bit of `other` is set.
    pub fn contains(self, other: SrqAttrMask) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for SrqAttrMask {
    type Output = SrqAttrMask;
    fn bitor(self, rhs: SrqAttrMask) -> SrqAttrMask {
        SrqAttrMask(self.0 | rhs.0)
    }
}

/// Completion status (`enum ibv_wc_status`, same values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcStatus {
    /// Success.
    Success = 0,
    /// Local length error: e.g. an incoming SEND larger than the receive buffers.
    LocLenErr = 1,
    /// Local QP operation error.
    LocQpOpErr = 2,
    /// Local protection error: an SGE's lkey or range is invalid for the operation.
    LocProtErr = 4,
    /// Flushed: the QP went to the error state before this WR completed.
    WrFlushErr = 5,
    /// A memory window bind failed (`IBV_WC_MW_BIND_ERR`).
    MwBindErr = 6,
    /// Bad response: an unexpected opcode from the responder.
    BadRespErr = 7,
    /// Local access error.
    LocAccessErr = 8,
    /// Remote invalid request (NAK code 1).
    RemInvReqErr = 9,
    /// Remote access error (NAK code 2).
    RemAccessErr = 10,
    /// Remote operational error (NAK code 3).
    RemOpErr = 11,
    /// Transport retry counter exceeded.
    RetryExcErr = 12,
    /// RNR retry counter exceeded.
    RnrRetryExcErr = 13,
    /// Fatal error of another kind.
    GeneralErr = 21,
    /// A tag list operation failed (`IBV_WC_TM_ERR`).
    TmErr = 22,
}

impl WcStatus {
    /// The string `ibv_wc_status_str` gives.
    pub fn as_str(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::MwBindErr => "memory management operation error",
            WcStatus::BadRespErr => "bad response error",
            WcStatus::LocAccessErr => "local access error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            WcStatus::GeneralErr => "general error",
            WcStatus::TmErr => "TM error",
        }
    }
}

impl core::fmt::Display for WcStatus {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Completion opcode (`enum ibv_wc_opcode`, same values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// A SEND (with or without immediate) completed.
    Send = 0,
    /// An RDMA WRITE completed.
    RdmaWrite = 1,
    /// An RDMA READ completed.
    RdmaRead = 2,
    /// A compare-and-swap completed.
    CompSwap = 3,
    /// A fetch-and-add completed.
    FetchAdd = 4,
    /// A memory window bind completed.
    BindMw = 5,
    /// A local invalidate completed.
    LocalInv = 6,
    /// A FLUSH completed (`IBV_WC_FLUSH` of rdma-core 45).
    Flush = 8,
    /// An ATOMIC WRITE completed (`IBV_WC_ATOMIC_WRITE`).
    AtomicWrite = 9,
    /// A SEND was received.
    Recv = 128,
    /// An RDMA WRITE with immediate was received.
    RecvRdmaWithImm = 129,
    /// A tag was added to a TM SRQ's list (`IBV_WC_TM_ADD`).
    TmAdd = 130,
    /// A tag was deleted (`IBV_WC_TM_DEL`).
    TmDel = 131,
    /// A TM SRQ's unexpected count was synchronised (`IBV_WC_TM_SYNC`).
    TmSync = 132,
    /// A tagged message was received, matched or unexpected (`IBV_WC_TM_RECV`).
    TmRecv = 133,
    /// A NO_TAG message was received on a TM SRQ (`IBV_WC_TM_NO_TAG`).
    TmNoTag = 134,
}

/// A work completion (`struct ibv_wc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WorkCompletion {
    /// The WR's id.
    pub wr_id: u64,
    /// Success, or why the WR failed; only `wr_id`, `status`, `qp_num` are defined when it
    /// is not [`WcStatus::Success`] (as in libibverbs).
    pub status: WcStatus,
    /// What completed. For error completions libibverbs leaves it undefined; softroce fills it
    /// in when it is known.
    pub opcode: WcOpcode,
    /// Bytes received (receive completions) or transferred (READ).
    pub byte_len: u32,
    /// Immediate data, when the incoming message carried it.
    pub imm_data: Option<u32>,
    /// The QP the completion belongs to (one CQ may serve several).
    pub qp_num: u32,
    /// Remote QP number (receive completions).
    pub src_qp: u32,
    /// Whether the incoming message had the Solicited Event bit.
    pub solicited: bool,
    /// `IBV_WC_GRH`: the first 40 bytes of the receive buffer hold the GRH area (rxe sets
    /// it on every successful receive completion, whatever the QP type).
    pub grh: bool,
    /// `IBV_WC_WITH_INV` and `ex.invalidate_rkey`: the incoming SEND with invalidate
    /// invalidated this R_Key.
    pub invalidated_rkey: Option<u32>,
    /// The network header a UD receive arrived with (the kernel's `network_hdr_type`, which
    /// rxe sets on UD completions); user space reads it from [`WorkCompletion::sl`].
    pub network_hdr_type: Option<NetworkHdrType>,
    /// Tag matching's part (`ibv_wc_read_tm_info` and the `IBV_WC_TM_*` flags).
    pub tm: Option<super::TmInfo>,
}

/// The L3 header a RoCEv2 packet arrived with (IBTA vol.1 annex A17.4.5.1: a UD completion
/// tells whether the frame was IPv4 or IPv6; the kernel's `enum rdma_network_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NetworkHdrType {
    /// IPv4: the GRH area holds the IPv4 header in its last 20 bytes.
    Ipv4,
    /// IPv6: the GRH area is the IPv6 header.
    Ipv6,
}

impl WorkCompletion {
    /// `ibv_wc.sl` as softroce reports it. RoCE has no LRH and so no service level to report;
    /// libibverbs has no other field for the annex A17 packet type, and mlx5 puts it in `sl`
    /// (CQE flags_rqpn bits 27:24, L3 type 2 = IPv4, 1 = IPv6), where UCX's UD transport
    /// reads it to find the destination GID in the GRH area (spec-notes/ud-completion-sl.md).
    /// So a UD receive reports 2 or 1, everything else 0 (as rxe does for all).
    pub fn sl(&self) -> u8 {
        match self.network_hdr_type {
            Some(NetworkHdrType::Ipv4) => 2,
            Some(NetworkHdrType::Ipv6) => 1,
            None => 0,
        }
    }
}

/// An empty slot for [`CompletionQueue::poll`](crate::verbs::CompletionQueue::poll) to fill: wr_id 0,
/// a successful SEND of 0 bytes.
impl Default for WorkCompletion {
    fn default() -> WorkCompletion {
        WorkCompletion {
            wr_id: 0,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            byte_len: 0,
            imm_data: None,
            qp_num: 0,
            src_qp: 0,
            solicited: false,
            grh: false,
            invalidated_rkey: None,
            network_hdr_type: None,
            tm: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_values_match_libibverbs() {
        assert_eq!(AccessFlags::REMOTE_ATOMIC.0, 8);
        assert_eq!(SendFlags::INLINE.0, 8);
        assert_eq!(QpAttrMask::DEST_QPN.0, 1 << 20);
        assert_eq!(QpAttrMask::MAX_DEST_RD_ATOMIC.0, 1 << 17);
        assert_eq!(WcStatus::RnrRetryExcErr as u32, 13);
        assert_eq!(WcOpcode::RecvRdmaWithImm as u32, 129);
        assert_eq!(AccessFlags::MW_BIND.0, 16);
        assert_eq!(AccessFlags::ZERO_BASED.0, 32);
        assert_eq!(WcOpcode::BindMw as u32, 5);
        assert_eq!(WcOpcode::LocalInv as u32, 6);
        assert_eq!(WcStatus::MwBindErr as u32, 6);
        assert_eq!(Mtu::Mtu4096 as u32, 5);
    }

    #[test]
    fn mtu_conversions() {
        for (e, b) in [(1, 256), (2, 512), (3, 1024), (4, 2048), (5, 4096)] {
            let m = Mtu::from_enum(e).unwrap();
            assert_eq!(m.bytes(), b);
            assert_eq!(Mtu::from_bytes(b), Some(m));
        }
        assert_eq!(Mtu::from_enum(0), None);
        assert_eq!(Mtu::from_enum(6), None);
        assert_eq!(Mtu::from_enum(200), None);
        assert_eq!(Mtu::from_bytes(1500), None);
    }

    #[test]
    fn gid_of_ipv4_is_mapped() {
        let g = Gid::from_ip("192.0.2.11".parse().unwrap());
        assert_eq!(&g.0[..12], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF]);
        assert_eq!(&g.0[12..], &[192, 0, 2, 11]);
        assert_eq!(g.to_ip(), "192.0.2.11".parse::<IpAddr>().unwrap());
        assert_eq!(g.to_string(), "0000:0000:0000:0000:0000:ffff:c000:020b");
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(Gid::from_ip(v6).to_ip(), v6);
    }

    #[test]
    fn flags_debug_and_ops() {
        let a = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
        assert!(a.contains(AccessFlags::REMOTE_READ));
        assert!(!a.contains(AccessFlags::REMOTE_WRITE));
        assert_eq!(format!("{a:?}"), "AccessFlags(LOCAL_WRITE | REMOTE_READ)");
        assert_eq!(format!("{:?}", SendFlags::EMPTY), "SendFlags()");
        assert_eq!(SendFlags::EMPTY, SendFlags::empty());
        // Bits libibverbs defines but softroce does not name still show, in hex.
        let m = QpAttrMask::STATE | QpAttrMask(1 << 21);
        assert_eq!(format!("{m:?}"), "QpAttrMask(STATE | 0x200000)");
        assert_eq!(m.0, 1 | 1 << 21);
    }
}
