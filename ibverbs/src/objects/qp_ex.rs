//! Extended QPs: the `create_qp_ex` op behind the inline `ibv_create_qp_ex`, and the
//! `ibv_qp_ex` work-request builder (`ibv_wr_start`, the `ibv_wr_*` operations and setters,
//! `ibv_wr_complete`, `ibv_wr_abort`) the program calls through the struct's function
//! pointers, as rxe's provider offers them (rdma-core 44 providers/rxe/rxe.c:
//! `rxe_create_qp_ex`, `check_qp_init_attr`, `set_qp_send_ops`, `wr_*`).
//!
//! rxe builds each WR into its send queue and rings the doorbell at `wr_complete`. The shim
//! builds into a staging list of the QP's own (reused from one batch to the next, so a WR
//! allocates nothing once the lists have grown to the batch size), with the inline data
//! copied out of the program's buffers as `wr_set_inline_data` is called, and posts the list
//! at `wr_complete` through the engine's post path, one WR after the other. As with rxe, an
//! error met while building (a full queue, too many SGEs, too much inline data) is kept and
//! returned by `wr_complete`, which then posts nothing of the batch.
//!
//! RC QPs also build memory-window binds, local invalidations, SEND_WITH_INV and ATOMIC WRITE
//! (IBTA 1.5), as rxe's. TSO's `send_ops_flags` bit is refused with EOPNOTSUPP, as rxe refuses
//! the bits it lacks. FLUSH has no builder in rdma-core 44's `ibv_qp_ex` (`ibv_wr_flush` came
//! with rdma-core 45): the shim offers it to no program; the native API posts it.

use std::ptr;
use std::sync::atomic::Ordering;

use libc::{c_int, c_void, EINVAL, ENOMEM, ENOSPC, EOPNOTSUPP};
use softroce::ib::{SendFlags, SendWr, Sge, VerbsError, WrOpcode};
use softroce::verbs::PostBatch;

use super::common::{errno_of, fail_null};
use super::handle::{self, Obj};
use super::post::post_send_one;
use super::qp::{create_qp, Qp};
use super::qp_ex_state::{Limits, Staged, Staging};
use crate::ffi::*;

/// `IBV_QP_INIT_ATTR_PD`, `_CREATE_FLAGS`, `_SEND_OPS_FLAGS`: the comp_mask bits rxe takes
/// (`RXE_QP_COMP_MASK_SUP`).
const INIT_ATTR_PD: u32 = 1 << 0;
/// `IBV_QP_INIT_ATTR_XRCD`: the domain of an XRC target QP (softroce's addition to rxe's).
const INIT_ATTR_XRCD: u32 = 1 << 1;
const INIT_ATTR_CREATE_FLAGS: u32 = 1 << 2;
const INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;
const INIT_ATTR_SUPPORTED: u32 =
    INIT_ATTR_PD | INIT_ATTR_XRCD | INIT_ATTR_CREATE_FLAGS | INIT_ATTR_SEND_OPS_FLAGS;

/// `IBV_QP_EX_WITH_*`.
const WITH_RDMA_WRITE: u64 = 1 << 0;
const WITH_RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
const WITH_SEND: u64 = 1 << 2;
const WITH_SEND_WITH_IMM: u64 = 1 << 3;
const WITH_RDMA_READ: u64 = 1 << 4;
const WITH_ATOMIC_CMP_AND_SWP: u64 = 1 << 5;
const WITH_ATOMIC_FETCH_AND_ADD: u64 = 1 << 6;
const WITH_LOCAL_INV: u64 = 1 << 7;
const WITH_BIND_MW: u64 = 1 << 8;
const WITH_SEND_WITH_INV: u64 = 1 << 9;
const WITH_ATOMIC_WRITE: u64 = 1 << 12;

/// The operations an RC QP builds: rxe's `RXE_SUP_RC_QP_SEND_OPS_FLAGS`.
const RC_OPS: u64 = WITH_RDMA_WRITE
    | WITH_RDMA_WRITE_WITH_IMM
    | WITH_SEND
    | WITH_SEND_WITH_IMM
    | WITH_RDMA_READ
    | WITH_ATOMIC_CMP_AND_SWP
    | WITH_ATOMIC_FETCH_AND_ADD
    | WITH_LOCAL_INV
    | WITH_BIND_MW
    | WITH_SEND_WITH_INV
    | WITH_ATOMIC_WRITE;
/// UC: rxe's `RXE_SUP_UC_QP_SEND_OPS_FLAGS` less BIND_MW and SEND_WITH_INV.
const UC_OPS: u64 = WITH_RDMA_WRITE | WITH_RDMA_WRITE_WITH_IMM | WITH_SEND | WITH_SEND_WITH_IMM;
/// UD: rxe's `RXE_SUP_UD_QP_SEND_OPS_FLAGS`.
const UD_OPS: u64 = WITH_SEND | WITH_SEND_WITH_IMM;

/// `IBV_SEND_INLINE`.
const SEND_INLINE: u32 = 1 << 3;

/// The QP behind an `ibv_qp_ex` and its staging list.
///
/// # Safety
///
/// `p` is an extended QP of the shim the program has not destroyed (the data path's trust
/// rule, handle module), alive for the call, and the calling thread holds its builder
/// (`wr_start` was called) unless the caller is `wr_start`, which takes it.
unsafe fn parts<'a>(p: *mut ibv_qp_ex) -> (&'a Obj<Qp>, &'a mut Staging) {
    // SAFETY: by the caller's promise the QP is live (its handle is its C struct's address);
    // this thread holds `busy`, so it alone touches `st` until it lets go.
    unsafe {
        let q = Obj::<Qp>::trusted(p.cast::<ibv_qp>());
        (q, &mut *q.ex.st.get())
    }
}

fn limits(q: &Obj<Qp>) -> &Limits {
    // Set before the QP's handle reached the program (`op_create_qp_ex`); the builders are
    // only reachable through it.
    q.ex.limits.get().unwrap_or(&Limits {
        max_send_wr: 0,
        max_send_sge: 0,
        max_inline: 0,
    })
}

/// Starts a WR of `opcode` with the `wr_id` and `wr_flags` the program set in the struct.
///
/// # Safety
///
/// As [`parts`].
unsafe fn build(p: *mut ibv_qp_ex, opcode: WrOpcode) {
    // SAFETY: the caller's promise.
    let (q, st) = unsafe { parts(p) };
    if st.err != 0 {
        return;
    }
    if st.outstanding + st.wrs.len() >= limits(q).max_send_wr {
        st.err = ENOSPC;
        return;
    }
    // SAFETY: the live QP's C struct; the program's fields read raw.
    let (wr_id, flags) = unsafe {
        (
            ptr::addr_of!((*p).wr_id).read(),
            ptr::addr_of!((*p).wr_flags).read(),
        )
    };
    st.wrs.push(Staged {
        wr_id,
        flags,
        opcode,
        sge_at: st.sges.len(),
        sge_n: 0,
        inline: None,
        ud: None,
        xrc_srqn: 0,
    });
}

/// The WR a setter adjusts (the last one built); None, with EINVAL kept, if none was built
/// or an error is already kept.
fn last(st: &mut Staging) -> Option<&mut Staged> {
    if st.err != 0 {
        return None;
    }
    if st.wrs.is_empty() {
        st.err = EINVAL;
        return None;
    }
    st.wrs.last_mut()
}

/// Drops the last WR's SGEs and inline data (a setter replaces them).
fn clear_data(st: &mut Staging) {
    if let Some(w) = st.wrs.last_mut() {
        st.sges.truncate(w.sge_at);
        w.sge_n = 0;
        if let Some((at, _)) = w.inline.take() {
            st.inline.truncate(at);
        }
    }
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    p: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    compare: u64,
    swap: u64,
) {
    let op = WrOpcode::AtomicCmpSwap {
        remote_addr,
        rkey,
        compare,
        swap,
    };
    // SAFETY: the builder's contract (see `parts`).
    unsafe { build(p, op) }
}

unsafe extern "C" fn wr_atomic_fetch_add(p: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, add: u64) {
    let op = WrOpcode::AtomicFetchAdd {
        remote_addr,
        rkey,
        add,
    };
    // SAFETY: the builder's contract (see `parts`).
    unsafe { build(p, op) }
}

/// `ibv_wr_atomic_write`: the 8 bytes at `atomic_wr` are copied now, as rxe's provider copies
/// them into the WQE (`memcpy(wqe->dma.atomic_wr, atomic_wr, 8)`).
unsafe extern "C" fn wr_atomic_write(
    p: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    atomic_wr: *const c_void,
) {
    let mut data = [0u8; 8];
    if !atomic_wr.is_null() {
        // SAFETY: the API's contract: `atomic_wr` points to the 8 bytes to write (rxe reads
        // them the same way); a NULL pointer is refused below instead of read.
        unsafe { ptr::copy_nonoverlapping(atomic_wr.cast::<u8>(), data.as_mut_ptr(), 8) };
    }
    let op = WrOpcode::AtomicWrite {
        remote_addr,
        rkey,
        data,
    };
    // SAFETY: the builder's contract (see `parts`).
    unsafe { build(p, op) };
    if atomic_wr.is_null() {
        // SAFETY: as above; the batch fails at wr_complete with EINVAL.
        let (_, st) = unsafe { parts(p) };
        if st.err == 0 {
            st.err = EINVAL;
        }
    }
}

unsafe extern "C" fn wr_rdma_read(p: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: the builder's contract (see `parts`).
    unsafe { build(p, WrOpcode::RdmaRead { remote_addr, rkey }) }
}

unsafe extern "C" fn wr_rdma_write(p: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: the builder's contract (see `parts`).
    unsafe { build(p, WrOpcode::RdmaWrite { remote_addr, rkey }) }
}

unsafe extern "C" fn wr_rdma_write_imm(p: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, imm: u32) {
    let op = WrOpcode::RdmaWriteWithImm {
        remote_addr,
        rkey,
        imm: u32::from_be(imm),
    };
    // SAFETY: the builder's contract (see `parts`).
    unsafe { build(p, op) }
}

unsafe extern "C" fn wr_send(p: *mut ibv_qp_ex) {
    // SAFETY: the builder's contract (see `parts`).
    unsafe { build(p, WrOpcode::Send) }
}

unsafe extern "C" fn wr_send_imm(p: *mut ibv_qp_ex, imm: u32) {
    let op = WrOpcode::SendWithImm {
        imm: u32::from_be(imm),
    };
    // SAFETY: the builder's contract (see `parts`).
    unsafe { build(p, op) }
}

unsafe extern "C" fn wr_send_inv(p: *mut ibv_qp_ex, rkey: u32) {
    // SAFETY: the builder's contract (see `parts`).
    unsafe { build(p, WrOpcode::SendWithInv { rkey }) }
}

unsafe extern "C" fn wr_local_inv(p: *mut ibv_qp_ex, rkey: u32) {
    // SAFETY: the builder's contract (see `parts`).
    unsafe { build(p, WrOpcode::LocalInv { rkey }) }
}

/// `ibv_wr_bind_mw`: binds `mw` (its key now in `mw->rkey`) to `rkey` over `info`, as
/// `IBV_WR_BIND_MW`; a NULL window or bind info is kept as EINVAL.
unsafe extern "C" fn wr_bind_mw(
    p: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    info: *const ibv_mw_bind_info,
) {
    if mw.is_null() || info.is_null() {
        // SAFETY: the builder's contract (see `parts`).
        let (_, st) = unsafe { parts(p) };
        if st.err == 0 {
            st.err = EINVAL;
        }
        return;
    }
    // SAFETY: the data path trusts the window and the bind info's region as providers do
    // (handle module): objects the program has not freed, read raw; `info` is readable (the
    // API's contract).
    let op = unsafe {
        let mw_rkey = ptr::addr_of!((*mw).rkey).read();
        super::post::bind_mw_op(mw_rkey, rkey, &info.read())
    };
    // SAFETY: the builder's contract (see `parts`).
    unsafe { build(p, op) }
}

unsafe extern "C" fn wr_set_ud_addr(p: *mut ibv_qp_ex, ah: *mut ibv_ah, qpn: u32, qkey: u32) {
    // SAFETY: the builder's contract (see `parts`).
    let (_, st) = unsafe { parts(p) };
    if let Some(w) = last(st) {
        w.ud = Some((ah as usize, qpn, qkey));
    }
}

/// `ibv_qp_ex.wr_set_xrc_srqn`'s type.
type SetXrcSrqnFn = unsafe extern "C" fn(*mut ibv_qp_ex, u32);

unsafe extern "C" fn wr_set_xrc_srqn(p: *mut ibv_qp_ex, remote_srqn: u32) {
    // SAFETY: the builder's contract (see `parts`).
    let (_, st) = unsafe { parts(p) };
    if let Some(w) = last(st) {
        w.xrc_srqn = remote_srqn;
    }
}

unsafe extern "C" fn wr_set_inline_data(p: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    let one = ibv_data_buf { addr, length };
    // SAFETY: the builder's contract; `one` is a list of one buffer.
    unsafe { wr_set_inline_data_list(p, 1, &one) }
}

unsafe extern "C" fn wr_set_inline_data_list(
    p: *mut ibv_qp_ex,
    num_buf: usize,
    bufs: *const ibv_data_buf,
) {
    // SAFETY: the builder's contract (see `parts`).
    let (q, st) = unsafe { parts(p) };
    if last(st).is_none() {
        return;
    }
    if num_buf > 0 && bufs.is_null() {
        st.err = EINVAL;
        return;
    }
    let max = limits(q).max_inline;
    let mut total = 0usize;
    for i in 0..num_buf {
        // SAFETY: the program's list holds `num_buf` entries (the API's contract).
        total = total.saturating_add(unsafe { (*bufs.add(i)).length });
    }
    if total > max {
        st.err = ENOSPC;
        return;
    }
    clear_data(st);
    let at = st.inline.len();
    for i in 0..num_buf {
        // SAFETY: as above; each buffer names `length` readable bytes at `addr` (the API's
        // contract for inline data), copied now, as rxe copies them into its WQE.
        unsafe {
            let b = &*bufs.add(i);
            if b.length > 0 {
                let src = std::slice::from_raw_parts(b.addr as *const u8, b.length);
                st.inline.extend_from_slice(src);
            }
        }
    }
    if let Some(w) = st.wrs.last_mut() {
        w.inline = Some((at, total));
    }
}

unsafe extern "C" fn wr_set_sge(p: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    let one = ibv_sge { addr, length, lkey };
    // As rxe, a zero length means no SGE.
    let n = usize::from(length != 0);
    // SAFETY: the builder's contract; `one` is a list of one SGE.
    unsafe { wr_set_sge_list(p, n, &one) }
}

unsafe extern "C" fn wr_set_sge_list(p: *mut ibv_qp_ex, num_sge: usize, list: *const ibv_sge) {
    // SAFETY: the builder's contract (see `parts`).
    let (q, st) = unsafe { parts(p) };
    if last(st).is_none() {
        return;
    }
    if num_sge > limits(q).max_send_sge {
        st.err = ENOSPC;
        return;
    }
    if num_sge > 0 && list.is_null() {
        st.err = EINVAL;
        return;
    }
    clear_data(st);
    for i in 0..num_sge {
        // SAFETY: the program's list holds `num_sge` SGEs (the API's contract).
        let s = unsafe { list.add(i).read() };
        st.sges.push(Sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        });
    }
    if let Some(w) = st.wrs.last_mut() {
        w.sge_n = num_sge;
    }
}

unsafe extern "C" fn wr_start(p: *mut ibv_qp_ex) {
    // SAFETY: the QP is live (the data path's trust rule); `busy` is taken before `st` is
    // touched.
    let q = unsafe { Obj::<Qp>::trusted(p.cast::<ibv_qp>()) };
    while q
        .ex
        .busy
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::hint::spin_loop();
        std::thread::yield_now();
    }
    // SAFETY: this thread now holds the builder.
    let (q, st) = unsafe { parts(p) };
    st.wrs.clear();
    st.sges.clear();
    st.inline.clear();
    st.err = 0;
    st.outstanding = q.qp.send_queue_len();
}

/// Posts one staged WR into `batch` through the shim's post path.
fn post_one(q: &Obj<Qp>, batch: &mut PostBatch<'_>, st: &Staging, w: &Staged) -> Result<(), c_int> {
    let mut flags = SendFlags::from_bits_truncate(w.flags);
    let mut list = &st.sges[w.sge_at..w.sge_at + w.sge_n];
    let arena;
    if let Some((at, len)) = w.inline {
        // The data copied at wr_set_inline_data, sent inline.
        arena = [Sge {
            addr: st.inline[at..].as_ptr() as u64,
            length: len as u32,
            lkey: 0,
        }];
        list = if len > 0 { &arena[..] } else { &[] };
        flags |= SendFlags::from_bits_truncate(SEND_INLINE);
    }
    let one = SendWr {
        wr_id: w.wr_id,
        sg_list: list,
        opcode: w.opcode,
        send_flags: flags,
    };
    let ud = w.ud.map(|(ah, qpn, qkey)| (ah as *mut ibv_ah, qpn, qkey));
    // SAFETY: the SGEs name readable process memory: the staging bytes (alive in `st`), or
    // the program's inline buffers (the verbs contract for IBV_SEND_INLINE); the address
    // handle is one the program has not destroyed (the data path's trust rule).
    unsafe { post_send_one(q, batch, one, ud, w.xrc_srqn, builder_errno) }
}

/// The builder path's errno for a refused WR: a full send queue is ENOSPC, as rxe's
/// check_qp_queue_full.
fn builder_errno(e: &VerbsError) -> c_int {
    match e {
        VerbsError::QueueFull { .. } => ENOSPC,
        other => match errno_of(other) {
            ENOMEM => ENOSPC,
            x => x,
        },
    }
}

unsafe extern "C" fn wr_complete(p: *mut ibv_qp_ex) -> c_int {
    // SAFETY: the builder's contract (see `parts`).
    let (q, st) = unsafe { parts(p) };
    let mut r = st.err;
    if r == 0 && !st.wrs.is_empty() {
        // One lock and one doorbell for the staged WRs; the WRs before a refused one are
        // posted (they complete as usual), the rest are not.
        r = match q.qp.send_batch() {
            Ok(mut batch) => st
                .wrs
                .iter()
                .try_for_each(|w| post_one(q, &mut batch, st, w))
                .err()
                .unwrap_or(0),
            Err(e) => builder_errno(&e),
        };
    }
    q.ex.busy.store(false, Ordering::Release);
    r
}

unsafe extern "C" fn wr_abort(p: *mut ibv_qp_ex) {
    // SAFETY: the data path's trust rule; the batch is dropped at the next wr_start.
    let q = unsafe { Obj::<Qp>::trusted(p.cast::<ibv_qp>()) };
    q.ex.busy.store(false, Ordering::Release);
}

/// The `create_qp_ex` op: NULL and errno on failure (EOPNOTSUPP for a comp_mask bit, creation
/// flag or `send_ops_flags` operation rxe or softroce lacks, as `check_qp_init_attr`; EINVAL
/// without a PD; then as `ibv_create_qp`).
pub(super) unsafe extern "C" fn op_create_qp_ex(
    _c: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    if attr.is_null() {
        return fail_null(EINVAL);
    }
    // SAFETY: non-null; the caller passes an ibv_qp_init_attr_ex, read here and its `cap`
    // written back as ibv_create_qp writes the base struct's.
    let a = unsafe { &mut *attr };
    if a.comp_mask & !INIT_ATTR_SUPPORTED != 0 {
        return fail_null(EOPNOTSUPP);
    }
    // rxe takes no creation flag (RXE_QP_CREATE_FLAGS_SUP is 0); 0 with the bit set is fine.
    if a.comp_mask & INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0 {
        return fail_null(EOPNOTSUPP);
    }
    let ops = if a.comp_mask & INIT_ATTR_SEND_OPS_FLAGS != 0 {
        let supported = match a.qp_type {
            IBV_QPT_RC => RC_OPS,
            IBV_QPT_XRC_SEND => RC_OPS & !WITH_ATOMIC_WRITE,
            IBV_QPT_UC => UC_OPS,
            IBV_QPT_UD => UD_OPS,
            _ => return fail_null(EOPNOTSUPP),
        };
        if a.send_ops_flags & !supported != 0 {
            return fail_null(EOPNOTSUPP);
        }
        a.send_ops_flags
    } else {
        0
    };
    if a.qp_type == IBV_QPT_XRC_RECV {
        // A target QP belongs to its domain and has no PD, CQ or queue to build WRs on.
        if a.comp_mask & INIT_ATTR_XRCD == 0 {
            return fail_null(EINVAL);
        }
        return super::qp::create_xrc_recv_qp(a.xrcd.cast::<ibv_xrcd>(), a.qp_context);
    }
    if a.comp_mask & INIT_ATTR_PD == 0 {
        return fail_null(EINVAL);
    }
    let mut base = ibv_qp_init_attr {
        qp_context: a.qp_context,
        send_cq: a.send_cq,
        recv_cq: a.recv_cq,
        srq: a.srq,
        cap: a.cap,
        qp_type: a.qp_type,
        sq_sig_all: a.sq_sig_all,
    };
    // SAFETY: the program's PD is passed on (ibv_create_qp checks it) with a local init attr.
    let h = unsafe { create_qp(a.pd, &mut base) };
    let Some(q) = handle::get::<Qp>(h) else {
        return ptr::null_mut(); // errno from ibv_create_qp
    };
    a.cap = base.cap;
    let _ = q.ex.limits.set(Limits {
        max_send_wr: base.cap.max_send_wr as usize,
        max_send_sge: base.cap.max_send_sge as usize,
        max_inline: base.cap.max_inline_data as usize,
    });
    // SAFETY: `h` is the live QP's C struct (the registry holds it; its handle is made from
    // the allocation), not yet returned to the program.
    unsafe { install_builders(h.cast::<ibv_qp_ex>(), ops, a.qp_type == IBV_QPT_XRC_SEND) };
    h
}

/// Fills the builder entries of a new extended QP: each operation of `ops` (the QP's
/// `send_ops_flags`), and, as rxe, the setters and batch calls whatever the operations;
/// `wr_set_xrc_srqn` on an XRC initiator only (as mlx5).
///
/// # Safety
///
/// `x` is a live QP's C struct that no other thread reaches yet.
unsafe fn install_builders(x: *mut ibv_qp_ex, ops: u64, xrc_send: bool) {
    let on = |bit: u64| ops & bit != 0;
    // SAFETY: by the caller's promise; written field by field, raw.
    unsafe {
        if on(WITH_ATOMIC_CMP_AND_SWP) {
            ptr::addr_of_mut!((*x).wr_atomic_cmp_swp).write(Some(wr_atomic_cmp_swp));
        }
        if on(WITH_ATOMIC_FETCH_AND_ADD) {
            ptr::addr_of_mut!((*x).wr_atomic_fetch_add).write(Some(wr_atomic_fetch_add));
        }
        if on(WITH_RDMA_READ) {
            ptr::addr_of_mut!((*x).wr_rdma_read).write(Some(wr_rdma_read));
        }
        if on(WITH_RDMA_WRITE) {
            ptr::addr_of_mut!((*x).wr_rdma_write).write(Some(wr_rdma_write));
        }
        if on(WITH_RDMA_WRITE_WITH_IMM) {
            ptr::addr_of_mut!((*x).wr_rdma_write_imm).write(Some(wr_rdma_write_imm));
        }
        if on(WITH_SEND) {
            ptr::addr_of_mut!((*x).wr_send).write(Some(wr_send));
        }
        if on(WITH_SEND_WITH_IMM) {
            ptr::addr_of_mut!((*x).wr_send_imm).write(Some(wr_send_imm));
        }
        if on(WITH_SEND_WITH_INV) {
            ptr::addr_of_mut!((*x).wr_send_inv).write(Some(wr_send_inv));
        }
        if on(WITH_LOCAL_INV) {
            ptr::addr_of_mut!((*x).wr_local_inv).write(Some(wr_local_inv));
        }
        if on(WITH_BIND_MW) {
            ptr::addr_of_mut!((*x).wr_bind_mw).write(Some(wr_bind_mw));
        }
        if on(WITH_ATOMIC_WRITE) {
            ptr::addr_of_mut!((*x).wr_atomic_write).write(Some(wr_atomic_write));
        }
        // As rxe, the setters and the batch calls are set whatever the operations.
        ptr::addr_of_mut!((*x).wr_set_ud_addr).write(Some(wr_set_ud_addr));
        // An XRC initiator's only, as mlx5 sets it (other QPs keep it NULL).
        if xrc_send {
            ptr::addr_of_mut!((*x).wr_set_xrc_srqn)
                .write(wr_set_xrc_srqn as SetXrcSrqnFn as *mut c_void);
        }
        ptr::addr_of_mut!((*x).wr_set_inline_data).write(Some(wr_set_inline_data));
        ptr::addr_of_mut!((*x).wr_set_inline_data_list).write(Some(wr_set_inline_data_list));
        ptr::addr_of_mut!((*x).wr_set_sge).write(Some(wr_set_sge));
        ptr::addr_of_mut!((*x).wr_set_sge_list).write(Some(wr_set_sge_list));
        ptr::addr_of_mut!((*x).wr_start).write(Some(wr_start));
        ptr::addr_of_mut!((*x).wr_complete).write(Some(wr_complete));
        ptr::addr_of_mut!((*x).wr_abort).write(Some(wr_abort));
    }
}
