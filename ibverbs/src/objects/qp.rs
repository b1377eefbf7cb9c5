//! Queue pairs: creation, destruction, modify and query (the post ops are in `post`).

use std::ptr::{self, null_mut};
use std::sync::{Arc, Mutex};

use libc::{c_int, c_uint, c_void, EINVAL, EOPNOTSUPP};
use softroce::ib::{
    AccessFlags, AhAttr, Gid, Mtu, QpAttr, QpAttrMask, QpCap, QpState, QpType, Sge, VerbsError,
};
use softroce::verbs::{MemoryRegion, ProtectionDomain, QpInitAttr, QueuePair};

use super::common::{cond_init, errno_of, fail, fail_null, mutex_init, PORT};
use super::cq::{cq_of, Cq};
use super::handle::{self, CMutexGuard, Obj, Object};
use super::pd::{pd_of, Pd};
use super::srq::{srq_of, Srq};
use super::xrcd::{xrcd_of, Xrcd};
use crate::ffi::*;

/// A queue pair. It holds its PD, CQs and SRQ, so none of them can be destroyed while it
/// lives (EBUSY).
pub(super) struct Qp {
    /// Shared with the librdmacm shim's identifier when rdma_cm connects it.
    pub(super) qp: Arc<QueuePair>,
    /// The PD and CQs (none for an XRC target QP, which has no PD nor CQ of its own).
    _pd: Option<Arc<Obj<Pd>>>,
    _send_cq: Option<Arc<Obj<Cq>>>,
    _recv_cq: Option<Arc<Obj<Cq>>>,
    _srq: Option<Arc<Obj<Srq>>>,
    /// An XRC target QP's domain, which it holds.
    _xrcd: Option<Arc<Obj<Xrcd>>>,
    /// A UD QP: its sends carry `wr.ud`.
    pub(super) ud: bool,
    /// An XRC initiator QP: its sends carry `qp_type.xrc.remote_srqn`.
    pub(super) xrc_send: bool,
    cap: ibv_qp_cap,
    sq_sig_all: c_int,
    /// Where inline data is gathered (None without `max_inline_data`).
    pub(super) inline: Option<Mutex<InlineScratch>>,
    /// The `ibv_wr_*` builder, set up by `ibv_create_qp_ex` (see `qp_ex`).
    pub(super) ex: super::qp_ex_state::WrBuilder,
}

impl Object for Qp {
    /// Every QP is allocated as an `ibv_qp_ex` (whose start is the `ibv_qp`), as rdma-core's
    /// `verbs_qp`; only `ibv_create_qp_ex` fills in the extension.
    type C = ibv_qp_ex;
    type Handle = ibv_qp;
}

impl Obj<Qp> {
    /// The `ibv_qp` at the start of the C struct (raw: C may write its fields).
    pub(super) fn qp_c(&self) -> *mut ibv_qp {
        // SAFETY: a raw projection into this live object's C struct.
        unsafe { ptr::addr_of_mut!((*self.c()).qp_base) }
    }
}

/// A registered buffer of the shim's own into which a post gathers inline data: inline SGEs
/// are plain process addresses whose lkey means nothing (as with any provider), while softroce
/// reads a WR's data out of a region. The transport copies inline data when the WR is posted,
/// so one buffer per QP, held under its mutex for the post, is enough.
pub(super) struct InlineScratch {
    /// Registered over `buf`; dropped (revoked) before `buf` is freed.
    mr: Option<MemoryRegion>,
    buf: *mut u8,
    len: usize,
}

// SAFETY: the buffer is owned by the scratch and only touched under its mutex.
unsafe impl Send for InlineScratch {}

impl InlineScratch {
    fn new(pd: &ProtectionDomain, len: usize) -> Result<InlineScratch, c_int> {
        let buf = Box::into_raw(vec![0u8; len].into_boxed_slice()) as *mut u8;
        let mut s = InlineScratch { mr: None, buf, len };
        // SAFETY: `buf` lives until Drop, which drops the region (revoking it) first.
        let mr = unsafe { pd.register_foreign_mr(buf, len, buf as u64, AccessFlags::LOCAL_WRITE) }
            .map_err(|e| errno_of(&e))?;
        s.mr = Some(mr);
        Ok(s)
    }

    /// Copies the bytes the SGEs point at into the buffer; returns the one SGE that covers
    /// them, or EINVAL when they exceed it.
    ///
    /// # Safety
    ///
    /// Each SGE names `length` readable bytes at `addr` (the verbs contract for inline data).
    pub(super) unsafe fn gather(&mut self, list: &[Sge]) -> Result<Sge, c_int> {
        let mr = self.mr.as_ref().ok_or(EINVAL)?;
        let mut at = 0usize;
        for s in list {
            let n = s.length as usize;
            if n > self.len - at {
                return Err(EINVAL);
            }
            if n > 0 {
                // SAFETY: inline SGEs name `length` readable bytes at `addr` in this process
                // (the verbs contract for IBV_SEND_INLINE); the destination is in bounds.
                unsafe { ptr::copy_nonoverlapping(s.addr as *const u8, self.buf.add(at), n) };
            }
            at += n;
        }
        Ok(Sge {
            addr: mr.addr(),
            length: at as u32,
            lkey: mr.lkey(),
        })
    }
}

impl Drop for InlineScratch {
    fn drop(&mut self) {
        drop(self.mr.take());
        // SAFETY: allocated in `new` as a boxed slice of `len` bytes; the region over it is
        // gone, so nothing else refers to it.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.buf, self.len)) });
    }
}

fn qp_of(p: *mut ibv_qp) -> Option<Arc<Obj<Qp>>> {
    handle::get::<Qp>(p)
}

pub(super) fn state_to_c(s: QpState) -> c_uint {
    match s {
        QpState::Reset => IBV_QPS_RESET,
        QpState::Init => IBV_QPS_INIT,
        QpState::Rtr => IBV_QPS_RTR,
        QpState::Rts => IBV_QPS_RTS,
        QpState::Sqd => IBV_QPS_SQD,
        QpState::Sqe => IBV_QPS_SQE,
        QpState::Err => IBV_QPS_ERR,
    }
}

fn state_from_c(v: c_uint) -> Option<QpState> {
    Some(match v {
        IBV_QPS_RESET => QpState::Reset,
        IBV_QPS_INIT => QpState::Init,
        IBV_QPS_RTR => QpState::Rtr,
        IBV_QPS_RTS => QpState::Rts,
        IBV_QPS_SQD => QpState::Sqd,
        IBV_QPS_SQE => QpState::Sqe,
        IBV_QPS_ERR => QpState::Err,
        _ => return None,
    })
}

/// The QP types softroce runs (None for the others).
fn qp_type_of(t: libc::c_uint) -> Option<QpType> {
    Some(match t {
        // An XRC initiator is an RC requester (spec-notes/xrc.md).
        IBV_QPT_RC | IBV_QPT_XRC_SEND => QpType::Rc,
        IBV_QPT_UC => QpType::Uc,
        IBV_QPT_UD => QpType::Ud,
        _ => return None,
    })
}

/// The capacities a C `ibv_qp_cap` asks for, as softroce's.
fn cap_of(c: &ibv_qp_cap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// The registered scratch buffer a QP copies inline data through (None for no inline data).
fn inline_scratch(
    pd: &softroce::verbs::ProtectionDomain,
    max_inline: u32,
) -> Result<Option<Mutex<InlineScratch>>, c_int> {
    if max_inline == 0 {
        return Ok(None);
    }
    InlineScratch::new(pd, max_inline as usize).map(|x| Some(Mutex::new(x)))
}

/// `ibv_create_qp`: NULL and errno on failure (EINVAL for bad CQs or capacities, EOPNOTSUPP
/// for a QP type softroce does not run, as rxe for types it lacks).
#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    init: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    // SAFETY: the caller's contract, passed on.
    unsafe { create_qp(pd, init) }
}

/// `ibv_create_qp` for every type with a PD: RC, UC, UD and XRC initiators (`IBV_QPT_XRC_SEND`,
/// which `ibv_create_qp_ex` passes on, with no receive CQ).
///
/// # Safety
///
/// `init` is NULL or a readable and writable `ibv_qp_init_attr`.
pub(super) unsafe fn create_qp(pd: *mut ibv_pd, init: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    // The PD, CQs and SRQ are referenced under the registry lock as they are looked up: a
    // concurrent destroy of any of them is EBUSY from here on.
    let Some(pdr) = pd_of(pd) else {
        return fail_null(EINVAL);
    };
    if init.is_null() {
        return fail_null(EINVAL);
    }
    // SAFETY: non-null, and the caller passes an ibv_qp_init_attr; only read through this
    // reference, whose last use comes before `cap` is written back (below).
    let ia = unsafe { &*init };
    let xrc_send = ia.qp_type == IBV_QPT_XRC_SEND;
    // An XRC initiator has no receive side: its send CQ stands in for the engine's table.
    let recv_cq = if xrc_send { ia.send_cq } else { ia.recv_cq };
    let (Some(scq), Some(rcq)) = (cq_of(ia.send_cq), cq_of(recv_cq)) else {
        return fail_null(EINVAL);
    };
    let srq = if ia.srq.is_null() || xrc_send {
        None
    } else {
        match srq_of(ia.srq as *mut ibv_srq) {
            Some(x) => Some(x),
            None => return fail_null(EINVAL),
        }
    };
    let Some(qp_type) = qp_type_of(ia.qp_type) else {
        return fail_null(EOPNOTSUPP);
    };
    let cap = cap_of(&ia.cap);
    let init_attr = QpInitAttr {
        send_cq: &scq.cq,
        recv_cq: &rcq.cq,
        cap,
        qp_type,
        sq_sig_all: ia.sq_sig_all != 0,
    };
    let created = match &srq {
        _ if xrc_send => pdr.pd.create_xrc_send_qp(&init_attr),
        Some(x) => pdr.pd.create_qp_with_srq(&init_attr, &x.srq),
        None => pdr.pd.create_qp(&init_attr),
    };
    let qp = match created {
        Ok(qp) => qp,
        Err(VerbsError::InvalidAttribute {
            attr: "qp_type", ..
        }) => return fail_null(EOPNOTSUPP),
        Err(e) => return fail_null(errno_of(&e)),
    };
    let qp_num = qp.qp_num();
    // What the QP holds, as rxe sizes it (one SGE is 16 bytes of inline data, and so on:
    // softroce::ib::sized_as_rxe), written back as ibv_create_qp does.
    let sized = softroce::ib::sized_as_rxe(&cap);
    let actual = ibv_qp_cap {
        max_send_sge: sized.max_send_sge,
        max_inline_data: sized.max_inline_data,
        ..ia.cap
    };
    let inline = match inline_scratch(&pdr.pd, actual.max_inline_data) {
        Ok(x) => x,
        Err(e) => return fail_null(e),
    };
    let obj = Obj::new(
        super::qp_ex_state::with_base(ibv_qp {
            context: pdr.context(),
            qp_context: ia.qp_context,
            pd,
            send_cq: ia.send_cq,
            recv_cq: ia.recv_cq,
            srq: if xrc_send { null_mut() } else { ia.srq },
            handle: qp_num,
            qp_num,
            state: IBV_QPS_RESET,
            qp_type: ia.qp_type,
            mutex: mutex_init(),
            cond: cond_init(),
            events_completed: 0,
        }),
        Qp {
            qp: Arc::new(qp),
            _pd: Some(pdr),
            _send_cq: Some(scq),
            _recv_cq: Some(rcq),
            _srq: srq,
            _xrcd: None,
            ud: qp_type == QpType::Ud,
            xrc_send,
            cap: actual,
            sq_sig_all: ia.sq_sig_all,
            inline,
            ex: Default::default(),
        },
    );
    // SAFETY: the caller's ibv_qp_init_attr, which libibverbs writes the QP's actual
    // capacities back into; `ia` is no longer used.
    unsafe { std::ptr::addr_of_mut!((*init).cap).write(actual) };
    handle::publish(&obj)
}

/// `ibv_create_qp_ex` for `IBV_QPT_XRC_RECV`: a target QP of the XRC domain `xrcd`, with no
/// PD, CQ, send or receive queue (its requests go to the domain's SRQs). NULL and errno on
/// failure (EINVAL for a bad domain).
pub(super) fn create_xrc_recv_qp(xrcd: *mut ibv_xrcd, qp_context: *mut c_void) -> *mut ibv_qp {
    let Some(x) = xrcd_of(xrcd) else {
        return fail_null(EINVAL);
    };
    let qp = match x.xrcd.create_recv_qp() {
        Ok(qp) => qp,
        Err(e) => return fail_null(errno_of(&e)),
    };
    let qp_num = qp.qp_num();
    let obj = Obj::new(
        super::qp_ex_state::with_base(ibv_qp {
            context: x.context(),
            qp_context,
            pd: null_mut(),
            send_cq: null_mut(),
            recv_cq: null_mut(),
            srq: null_mut(),
            handle: qp_num,
            qp_num,
            state: IBV_QPS_RESET,
            qp_type: IBV_QPT_XRC_RECV,
            mutex: mutex_init(),
            cond: cond_init(),
            events_completed: 0,
        }),
        Qp {
            qp: Arc::new(qp),
            _pd: None,
            _send_cq: None,
            _recv_cq: None,
            _srq: None,
            _xrcd: Some(x),
            ud: false,
            xrc_send: false,
            cap: ibv_qp_cap::default(),
            sq_sig_all: 0,
            inline: None,
            ex: Default::default(),
        },
    );
    handle::publish(&obj)
}

/// `ibv_destroy_qp`: 0 or an errno value (EBUSY while a call on another thread uses it, or
/// while the QP is attached to a multicast group: the kernel refuses that, uverbs_free_qp's
/// `mcast_list` check, IBTA o10-2.2.3). The attachment is checked under the registry lock
/// with the QP's removal, while nothing else holds the QP: an `ibv_attach_mcast` holds it for
/// the whole attach, so it either finished before (EBUSY here) or finds the QP gone (EINVAL),
/// as the kernel's exclusive lock of a destroyed object orders the two.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(p: *mut ibv_qp) -> c_int {
    let not_attached = |_: &handle::Locked, q: &Obj<Qp>| {
        if q.qp.is_attached_to_mcast() {
            Err(libc::EBUSY)
        } else {
            Ok(())
        }
    };
    match handle::remove_if::<Qp>(p, not_attached) {
        Ok(q) => {
            // rdma_cm may hold the QP past this call: what was posted leaves now, as on rxe.
            q.qp.send_what_is_posted();
            drop(q);
            0
        }
        Err(e) => fail(e),
    }
}

fn attr_from_c(a: &ibv_qp_attr, mask: QpAttrMask) -> Result<QpAttr, c_int> {
    let mut out = QpAttr::default();
    if mask.contains(QpAttrMask::STATE) {
        out.qp_state = state_from_c(a.qp_state).ok_or(EINVAL)?;
    }
    if mask.contains(QpAttrMask::CUR_STATE) {
        out.cur_qp_state = state_from_c(a.cur_qp_state).ok_or(EINVAL)?;
    }
    if mask.contains(QpAttrMask::PATH_MTU) {
        out.path_mtu = Mtu::from_enum(a.path_mtu).ok_or(EINVAL)?;
    }
    if mask.contains(QpAttrMask::AV) {
        // RoCE needs the GRH (the kernel refuses an address vector without it: EINVAL).
        if a.ah_attr.is_global == 0 {
            return Err(EINVAL);
        }
        if mask.contains(QpAttrMask::PORT) && a.port_num != PORT {
            return Err(EINVAL);
        }
        out.ah_attr = AhAttr {
            dgid: Gid(a.ah_attr.grh.dgid),
            sgid_index: a.ah_attr.grh.sgid_index,
            hop_limit: a.ah_attr.grh.hop_limit,
            traffic_class: a.ah_attr.grh.traffic_class,
            flow_label: a.ah_attr.grh.flow_label,
            sl: a.ah_attr.sl,
        };
    }
    if mask.contains(QpAttrMask::PORT) && a.port_num != PORT {
        return Err(EINVAL);
    }
    out.qkey = a.qkey;
    out.rq_psn = a.rq_psn;
    out.sq_psn = a.sq_psn;
    out.dest_qp_num = a.dest_qp_num;
    out.qp_access_flags = AccessFlags::from_bits_truncate(a.qp_access_flags);
    out.cap = QpCap {
        max_send_wr: a.cap.max_send_wr,
        max_recv_wr: a.cap.max_recv_wr,
        max_send_sge: a.cap.max_send_sge,
        max_recv_sge: a.cap.max_recv_sge,
        max_inline_data: a.cap.max_inline_data,
    };
    out.pkey_index = a.pkey_index;
    out.en_sqd_async_notify = a.en_sqd_async_notify != 0;
    out.max_rd_atomic = a.max_rd_atomic;
    out.max_dest_rd_atomic = a.max_dest_rd_atomic;
    out.min_rnr_timer = a.min_rnr_timer;
    out.port_num = a.port_num;
    out.timeout = a.timeout;
    out.retry_cnt = a.retry_cnt;
    out.rnr_retry = a.rnr_retry;
    Ok(out)
}

/// `ibv_modify_qp`: 0 or an errno value (EINVAL for a refused transition or attribute, as
/// the kernel's ib_modify_qp_is_ok).
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_qp(
    p: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    let Some(q) = qp_of(p) else {
        return fail(EINVAL);
    };
    // The attribute bits softroce knows: IBV_QP_STATE .. IBV_QP_DEST_QPN.
    if attr.is_null() || mask & !IBV_QP_ATTR_MASK_BASIC != 0 {
        return fail(EINVAL);
    }
    let mask = QpAttrMask::from_bits_truncate(mask as u32);
    // SAFETY: the caller passes a readable ibv_qp_attr.
    let a = match attr_from_c(unsafe { &*attr }, mask) {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    if let Err(e) = q.qp.modify(&a, mask) {
        return fail(errno_of(&e));
    }
    let c = q.qp_c();
    // `state` mirrors the QP's state for the application to read. rdma-core writes it with no
    // lock; the shim takes the QP's mutex so that two threads modifying one QP never race on
    // it, and the state is queried under the lock so the last writer writes the latest state.
    // SAFETY: the mutex of the live, referenced QP's C struct; `state` is written raw under it.
    unsafe {
        let _g = CMutexGuard::lock(ptr::addr_of_mut!((*c).mutex));
        ptr::addr_of_mut!((*c).state).write(state_to_c(q.qp.query().qp_state));
    }
    0
}

/// `ibv_query_qp`: 0 or an errno value.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp(
    p: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> c_int {
    let Some(q) = qp_of(p) else {
        return fail(EINVAL);
    };
    if attr.is_null() || init.is_null() {
        return fail(EINVAL);
    }
    let a = q.qp.query();
    let cap = ibv_qp_cap {
        max_send_wr: a.cap.max_send_wr.max(q.cap.max_send_wr),
        max_recv_wr: a.cap.max_recv_wr.max(q.cap.max_recv_wr),
        max_send_sge: a.cap.max_send_sge.max(q.cap.max_send_sge),
        max_recv_sge: a.cap.max_recv_sge.max(q.cap.max_recv_sge),
        max_inline_data: a.cap.max_inline_data.max(q.cap.max_inline_data),
    };
    let out = ibv_qp_attr {
        qp_state: state_to_c(a.qp_state),
        cur_qp_state: state_to_c(a.qp_state),
        path_mtu: a.path_mtu as c_uint,
        path_mig_state: IBV_MIG_MIGRATED,
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: a.qp_access_flags.bits(),
        cap,
        ah_attr: ibv_ah_attr {
            grh: ibv_global_route {
                dgid: a.ah_attr.dgid.0,
                flow_label: a.ah_attr.flow_label,
                sgid_index: a.ah_attr.sgid_index,
                hop_limit: a.ah_attr.hop_limit,
                traffic_class: a.ah_attr.traffic_class,
            },
            dlid: 0,
            sl: a.ah_attr.sl,
            src_path_bits: 0,
            static_rate: 0,
            is_global: 1,
            port_num: PORT,
        },
        alt_ah_attr: ibv_ah_attr::default(),
        pkey_index: a.pkey_index,
        alt_pkey_index: 0,
        en_sqd_async_notify: a.en_sqd_async_notify as u8,
        sq_draining: a.sq_draining as u8,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: PORT,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        alt_port_num: 0,
        alt_timeout: 0,
        rate_limit: 0,
    };
    let c = q.qp_c();
    // SAFETY: the caller passes writable, non-null structs (checked above); the QP's C struct
    // is live (referenced) and read field by field through the raw pointer.
    unsafe {
        attr.write(out);
        let ia = &mut *init;
        ia.qp_context = ptr::addr_of!((*c).qp_context).read();
        ia.send_cq = ptr::addr_of!((*c).send_cq).read();
        ia.recv_cq = ptr::addr_of!((*c).recv_cq).read();
        ia.srq = ptr::addr_of!((*c).srq).read();
        ia.cap = cap;
        ia.qp_type = ptr::addr_of!((*c).qp_type).read();
        ia.sq_sig_all = q.sq_sig_all;
    }
    0
}

/// `ibv_qp_to_qp_ex`: the QP's `ibv_qp_ex` if `ibv_create_qp_ex` made it, else NULL (as
/// rdma-core's `VERBS_QP_EX` check).
#[no_mangle]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut c_void {
    match qp_of(qp) {
        Some(q) if q.ex.enabled() => qp.cast(),
        _ => null_mut(),
    }
}

/// Whether `p` is a live QP attached to a multicast group, for a destroy's check under the
/// registry lock (the 1.0 layer's `ibv_destroy_qp`; see [`ibv_destroy_qp`]).
pub(crate) fn attached_to_mcast_in(reg: &handle::Locked, p: *mut ibv_qp) -> bool {
    reg.find::<Qp>(p)
        .is_some_and(|q| q.qp.is_attached_to_mcast())
}

/// What `ibv_attach_mcast` and `ibv_detach_mcast` do on rxe: 0 or an errno value (EINVAL
/// for a GID that is not a multicast address, a QP that is not UD, or a detach of a QP that
/// is not attached; ENOMEM past the device's multicast limits).
fn mcast(p: *mut c_void, gid: *const c_void, attach: bool) -> c_int {
    let Some(q) = qp_of(p.cast()) else {
        return fail(EINVAL);
    };
    if gid.is_null() {
        return fail(EINVAL);
    }
    // SAFETY: the caller passes a `union ibv_gid`, 16 bytes.
    let raw = unsafe { std::ptr::read_unaligned(gid.cast::<[u8; 16]>()) };
    let r = if attach {
        q.qp.attach_mcast(Gid(raw), 0)
    } else {
        q.qp.detach_mcast(Gid(raw), 0)
    };
    match r {
        Ok(()) => 0,
        Err(VerbsError::ExceedsDeviceLimit { .. }) => fail(libc::ENOMEM),
        Err(VerbsError::NotFound(_)) => fail(EINVAL),
        Err(e) => fail(errno_of(&e)),
    }
}

/// `ibv_attach_mcast`: attaches the UD QP to the multicast group `gid` (its IP multicast
/// address; softroce joins it on the device's interface). The LID is ignored (RoCE has
/// none). 0 or an errno value.
#[no_mangle]
pub extern "C" fn ibv_attach_mcast(qp: *mut c_void, gid: *const c_void, _lid: u16) -> c_int {
    mcast(qp, gid, true)
}

/// `ibv_detach_mcast`: detaches the QP from the group `gid`. 0 or an errno value.
#[no_mangle]
pub extern "C" fn ibv_detach_mcast(qp: *mut c_void, gid: *const c_void, _lid: u16) -> c_int {
    mcast(qp, gid, false)
}
