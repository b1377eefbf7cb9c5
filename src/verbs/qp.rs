//! Queue pairs (`ibv_qp`).
//!
//! The QP's transport state ([`QpCore`]) sits behind a mutex shared with the engine thread: a
//! post validates synchronously (so every error is returned to the caller, typed) and the
//! engine sends the packets. The engine takes the lock to feed received packets and to take
//! a batch of packets out of the QP, never while it waits on the socket, so a post waits at
//! most for that much work on its own QP.

use std::sync::{Arc, Mutex, MutexGuard};

use super::ah::AddressHandle;
use super::cq::CompletionQueue;
use crate::driver::device::Device;
use crate::ib::{
    AccessFlags, AhAttr, Gid, Mtu, QpAttr, QpAttrMask, QpCap, QpState, QpType, Result, SendWr,
    VerbsError,
};
use crate::transport::{QpCore, Srq};

/// Creation attributes (`struct ibv_qp_init_attr`).
#[derive(Debug, Clone)]
pub struct QpInitAttr<'a> {
    /// Completion queue of send WRs.
    pub send_cq: &'a CompletionQueue,
    /// Completion queue of receive WRs.
    pub recv_cq: &'a CompletionQueue,
    /// Capacities.
    pub cap: QpCap,
    /// Transport: RC, UC or UD.
    pub qp_type: QpType,
    /// Whether every send WR generates a completion.
    pub sq_sig_all: bool,
}

/// The attributes that connect an RC QP to its peer, for the usual walk RESET -> INIT -> RTR
/// -> RTS in three calls ([`QueuePair::init`], [`QueuePair::ready_to_receive`],
/// [`QueuePair::ready_to_send`]) with the masks ibv_rc_pingpong and perftest use. `new` gives
/// ibv_rc_pingpong's values; change fields as needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcConnect {
    /// The peer's QP number.
    pub remote_qpn: u32,
    /// The PSN the peer starts sending with (our expected PSN).
    pub remote_psn: u32,
    /// The peer's GID.
    pub remote_gid: Gid,
    /// The PSN we start sending with.
    pub local_psn: u32,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Local GID index.
    pub sgid_index: u8,
    /// Hop limit: the IPv4 TTL or IPv6 hop limit of every packet the QP sends (0: 64).
    pub hop_limit: u8,
    /// Traffic class: the IPv4 TOS or IPv6 traffic class of every packet the QP sends.
    pub traffic_class: u8,
    /// Outstanding READ/atomic requests we may issue.
    pub max_rd_atomic: u8,
    /// READ/atomic requests we accept.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code we advertise.
    pub min_rnr_timer: u8,
    /// Local ACK timeout exponent (4.096 us x 2^timeout).
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7 = forever).
    pub rnr_retry: u8,
}

impl RcConnect {
    /// ibv_rc_pingpong's attributes for a peer.
    pub fn new(remote_qpn: u32, remote_psn: u32, remote_gid: Gid, local_psn: u32) -> RcConnect {
        RcConnect {
            remote_qpn,
            remote_psn,
            remote_gid,
            local_psn,
            path_mtu: Mtu::Mtu1024,
            sgid_index: 1,
            hop_limit: 1,
            traffic_class: 0,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
        }
    }
}

/// A failed post: WRs before `bad_wr` were posted, `bad_wr` and those after were not
/// (libibverbs returns the same split through its `bad_wr` pointer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostError {
    /// Index of the first WR not posted.
    pub bad_wr: usize,
    /// Why.
    pub error: VerbsError,
}

impl core::fmt::Display for PostError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "work request {}: {}", self.bad_wr, self.error)
    }
}

impl std::error::Error for PostError {}

/// A UD send work request (`ibv_send_wr` with `wr.ud`): the WR, the address handle of the
/// destination, its QP number and the Q_Key (bit 31 set: the sending QP's own).
#[derive(Debug, Clone)]
pub struct UdSendWr<'a> {
    /// The work request (SEND or SEND with immediate).
    pub wr: SendWr<'a>,
    /// Where the datagram goes.
    pub ah: &'a AddressHandle,
    /// Destination QP number.
    pub remote_qpn: u32,
    /// Q_Key.
    pub remote_qkey: u32,
}

/// A queue pair. Destroyed when dropped.
#[derive(Debug)]
pub struct QueuePair {
    pub(crate) dev: Arc<Device>,
    pub(crate) core: Arc<Mutex<QpCore>>,
    qpn: u32,
    srq: Option<Arc<Srq>>,
    pub(super) pd: u32,
}

impl QueuePair {
    pub(crate) fn new(
        dev: Arc<Device>,
        core: Arc<Mutex<QpCore>>,
        qpn: u32,
        srq: Option<Arc<Srq>>,
        pd: u32,
    ) -> QueuePair {
        QueuePair {
            dev,
            core,
            qpn,
            srq,
            pd,
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, QpCore> {
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// QP number.
    pub fn qp_num(&self) -> u32 {
        self.qpn
    }

    /// `ibv_modify_qp`: checks the transition and attributes as the kernel does.
    pub fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        self.dev.check_open()?;
        let mut core = self.lock();
        let from = core.state();
        core.modify(attr, mask)?;
        if from != QpState::Reset && core.state() == QpState::Reset {
            // Under the QP's lock, so that no completion of it is delivered meanwhile.
            self.forget_completions();
        }
        drop(core);
        self.dev.ring(self.qpn);
        Ok(())
    }

    /// A QP gone to RESET: its completions not yet polled leave its CQs, as libmlx5's
    /// `mlx5_cq_clean` takes them (rxe leaves them; spec-notes/beyond-rxe.md rule 5).
    fn forget_completions(&self) {
        let qps = self.dev.qps.read().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = qps.get(&self.qpn) {
            e.send_cq.remove_qp(self.qpn);
            if !Arc::ptr_eq(&e.send_cq, &e.recv_cq) {
                e.recv_cq.remove_qp(self.qpn);
            }
        }
    }

    /// RESET -> INIT on port 1, P_Key index 0, granting `access` to the peer.
    pub fn init(&self, access: AccessFlags) -> Result<()> {
        self.modify(
            &QpAttr {
                qp_state: QpState::Init,
                pkey_index: 0,
                port_num: 1,
                qp_access_flags: access,
                ..Default::default()
            },
            QpAttrMask::STATE
                | QpAttrMask::PKEY_INDEX
                | QpAttrMask::PORT
                | QpAttrMask::ACCESS_FLAGS,
        )
    }

    /// INIT -> RTR towards the peer described by `c`.
    pub fn ready_to_receive(&self, c: &RcConnect) -> Result<()> {
        self.modify(
            &rtr_attr(c),
            RTR_COMMON | QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER,
        )
    }

    /// RTR -> RTS with the timers, retry counts and starting PSN of `c`.
    pub fn ready_to_send(&self, c: &RcConnect) -> Result<()> {
        self.modify(
            &QpAttr {
                qp_state: QpState::Rts,
                timeout: c.timeout,
                retry_cnt: c.retry_cnt,
                rnr_retry: c.rnr_retry,
                sq_psn: c.local_psn,
                max_rd_atomic: c.max_rd_atomic,
                ..Default::default()
            },
            QpAttrMask::STATE
                | QpAttrMask::TIMEOUT
                | QpAttrMask::RETRY_CNT
                | QpAttrMask::RNR_RETRY
                | QpAttrMask::SQ_PSN
                | QpAttrMask::MAX_QP_RD_ATOMIC,
        )
    }

    /// UC: INIT -> RTR towards the peer described by `c`, with the attributes
    /// ibv_uc_pingpong gives (no READ/atomic resources, no RNR timer).
    pub fn ready_to_receive_uc(&self, c: &RcConnect) -> Result<()> {
        self.modify(&rtr_attr(c), RTR_COMMON)
    }

    /// UC: RTR -> RTS with the starting PSN of `c`.
    pub fn ready_to_send_uc(&self, c: &RcConnect) -> Result<()> {
        self.modify(
            &QpAttr {
                qp_state: QpState::Rts,
                sq_psn: c.local_psn,
                ..Default::default()
            },
            QpAttrMask::STATE | QpAttrMask::SQ_PSN,
        )
    }

    /// UD: RESET -> INIT -> RTR -> RTS with `qkey` and the starting PSN `sq_psn`, the walk of
    /// ibv_ud_pingpong.
    pub fn ready_ud(&self, qkey: u32, sq_psn: u32) -> Result<()> {
        self.modify(
            &QpAttr {
                qp_state: QpState::Init,
                pkey_index: 0,
                port_num: 1,
                qkey,
                ..Default::default()
            },
            QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY,
        )?;
        self.modify(
            &QpAttr {
                qp_state: QpState::Rtr,
                ..Default::default()
            },
            QpAttrMask::STATE,
        )?;
        self.modify(
            &QpAttr {
                qp_state: QpState::Rts,
                sq_psn,
                ..Default::default()
            },
            QpAttrMask::STATE | QpAttrMask::SQ_PSN,
        )
    }

    /// `ibv_query_qp`: the current attributes.
    pub fn query(&self) -> QpAttr {
        self.lock().query()
    }

    /// Send WRs posted and not yet completed.
    pub fn send_queue_len(&self) -> usize {
        self.lock().send_queue_len()
    }

    /// Attaches this UD QP to the multicast group `gid` (`ibv_attach_mcast`): from now on it
    /// receives the UD SENDs to QPN 0xFFFFFF whose destination is the group's IP address
    /// (its GID: IPv4-mapped for IPv4), each a copy of its own. `lid` is an InfiniBand
    /// multicast LID; RoCE has none, and ignores it (the kernel's is_valid_mcast_lid). The
    /// first QP of the device attached to a group joins the IP group on the device's
    /// interface. Attaching twice succeeds. InvalidAttribute for a GID that is not a
    /// multicast address or a QP that is not UD; ExceedsDeviceLimit past the device's
    /// multicast limits; Io if the group cannot be joined.
    pub fn attach_mcast(&self, gid: Gid, lid: u16) -> Result<()> {
        let _ = lid;
        self.check_mcast(gid)?;
        self.dev.attach_mcast(self.qpn, gid.to_ip())
    }

    /// Detaches this QP from the multicast group `gid` (`ibv_detach_mcast`); NotFound if it
    /// is not attached to it. The device's last QP leaves the IP group.
    pub fn detach_mcast(&self, gid: Gid, lid: u16) -> Result<()> {
        let _ = lid;
        self.check_mcast(gid)?;
        self.dev.detach_mcast(self.qpn, gid.to_ip())
    }

    /// Whether this QP is attached to a multicast group (the shim refuses to destroy it then,
    /// as rxe does: IBTA o10-2.2.3).
    pub fn is_attached_to_mcast(&self) -> bool {
        self.dev
            .groups
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .has_qp(self.qpn)
    }

    /// ib_attach_mcast's checks (verbs.c): a multicast GID and a UD QP.
    fn check_mcast(&self, gid: Gid) -> Result<()> {
        self.dev.check_open()?;
        if !gid.is_multicast() {
            return Err(VerbsError::InvalidAttribute {
                attr: "gid",
                reason: "not a multicast group address",
            });
        }
        if self.lock().qp_type() != QpType::Ud {
            return Err(VerbsError::InvalidAttribute {
                attr: "qp",
                reason: "only UD QPs attach to multicast groups",
            });
        }
        Ok(())
    }
}

/// How long destroying a QP waits for the engine (to send what a UD or UC QP holds, and to
/// finish a pass that may still serve the QP).
const ENGINE_AT_DESTROY: std::time::Duration = std::time::Duration::from_secs(1);

impl QueuePair {
    /// rxe's post_send runs the requester before it returns, so a UD or UC send posted and
    /// then destroyed has left already (nothing acknowledges it): lets the engine send what
    /// this QP still holds (at most 1 s). Run when the QP is dropped, and by a caller whose
    /// destroy may not be the last reference (the shim's `ibv_destroy_qp`, while rdma_cm
    /// still holds the QP).
    pub fn send_what_is_posted(&self) {
        let unsent = {
            let core = self.lock();
            matches!(core.qp_type(), QpType::Ud | QpType::Uc) && core.send_queue_len() > 0
        };
        if unsent {
            self.dev.settle(ENGINE_AT_DESTROY);
        }
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        self.send_what_is_posted();
        // A QP dropped while attached leaves its groups (the shim refuses to destroy one, as
        // rxe does; the native API's drop cannot fail).
        self.dev.detach_all_mcast(self.qpn);
        self.dev.remove_qp(self.qpn);
        // Once ibv_destroy_qp has returned, no completion of the QP may appear in a CQ (the
        // application frees what its wr_ids point at: libfabric's verbs provider crashed on
        // one). The engine serves QPs from its own copy of the table, so a pass in progress may
        // still push one: wait for a pass that began after the removal.
        self.dev.settle(ENGINE_AT_DESTROY);
        // Type 2 memory windows bound to this QP serve no later QP with its number.
        self.dev
            .mrs
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .forget_qp(self.qpn);
        if let Some(s) = &self.srq {
            s.detach();
        }
        if let Some(crate::transport::XrcRole::Recv(d)) = self.lock().xrc() {
            d.detach_qp();
        }
    }
}

/// The attributes RTR needs on a connected QP (RC or UC): the path to the peer, its QPN and
/// the first PSN to receive.
const RTR_COMMON: QpAttrMask = QpAttrMask(
    QpAttrMask::STATE.0
        | QpAttrMask::AV.0
        | QpAttrMask::PATH_MTU.0
        | QpAttrMask::DEST_QPN.0
        | QpAttrMask::RQ_PSN.0,
);

/// INIT -> RTR attributes towards the peer `c` describes (the RC-only ones are set too; the
/// mask says which are given).
fn rtr_attr(c: &RcConnect) -> QpAttr {
    QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: c.path_mtu,
        dest_qp_num: c.remote_qpn,
        rq_psn: c.remote_psn,
        max_dest_rd_atomic: c.max_dest_rd_atomic,
        min_rnr_timer: c.min_rnr_timer,
        ah_attr: AhAttr {
            dgid: c.remote_gid,
            sgid_index: c.sgid_index,
            hop_limit: c.hop_limit,
            traffic_class: c.traffic_class,
            ..Default::default()
        },
        ..Default::default()
    }
}
