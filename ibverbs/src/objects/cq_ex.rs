//! Extended CQs: the `create_cq_ex` op behind the inline `ibv_create_cq_ex`, and the
//! `ibv_cq_ex` polling functions (`start_poll`, `next_poll`, `end_poll`, `read_*`) the
//! program calls through the struct's function pointers, as rxe's provider offers them
//! (rdma-core 44 providers/rxe/rxe.c: `rxe_create_cq_ex`, `cq_start_poll` and the rest).
//!
//! A poll holds the CQ from `start_poll` to `end_poll` (rxe holds its spinlock): one
//! completion at a time is taken out of the softroce CQ into the CQ's current slot, and the
//! `read_*` functions read that slot. Beyond rxe, which writes no completion timestamps
//! (EOPNOTSUPP for both flags), a CQ may ask for them, and for tag matching's
//! `read_tm_info` (rule 13): `read_completion_ts` gives the
//! free-running clock (`CLOCK_MONOTONIC` in ns: `hca_core_clock` is 1 GHz) and
//! `read_completion_wallclock_ns` the wall clock, both read when the engine added the
//! completion to the CQ (spec-notes/beyond-rxe.md rule 11).

use std::ptr::{self, null_mut};

use libc::{c_int, c_uint, EINVAL, ENOENT, EOPNOTSUPP};
use softroce::ib::WorkCompletion;

use super::common::{errno_of, fail_null, set_errno};
use super::cq::{cq_of, ibv_create_cq, wc_to_c, Cq};
use super::handle::Obj;
use crate::ffi::*;

/// The `ibv_wc_flags` an extended CQ may ask for: rxe's `RXE_SUP_WC_EX_FLAGS`
/// (`IBV_WC_STANDARD_FLAGS`: byte_len, imm, qp_num, src_qp, slid, sl, dlid_path_bits).
pub(super) const SUPPORTED_WC_FLAGS: u64 =
    0x7f | WITH_COMPLETION_TIMESTAMP | WITH_WALLCLOCK | IBV_WC_EX_WITH_TM_INFO;
/// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`.
const WITH_COMPLETION_TIMESTAMP: u64 = 1 << 7;
/// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK`.
const WITH_WALLCLOCK: u64 = 1 << 11;
/// `IBV_WC_EX_WITH_BYTE_LEN` .. `IBV_WC_EX_WITH_DLID_PATH_BITS`, one bit each.
const WITH_BYTE_LEN: u64 = 1 << 0;
const WITH_IMM: u64 = 1 << 1;
const WITH_QP_NUM: u64 = 1 << 2;
const WITH_SRC_QP: u64 = 1 << 3;
const WITH_SLID: u64 = 1 << 4;
const WITH_SL: u64 = 1 << 5;
const WITH_DLID_PATH_BITS: u64 = 1 << 6;
/// `IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD`: the comp_mask bits
/// `ibv_cmd_create_cq_ex` knows (others: EOPNOTSUPP).
const CQ_INIT_ATTR_MASK_KNOWN: u32 = 0b11;
/// `IBV_CQ_INIT_ATTR_MASK_PD`: `parent_domain` is set.
const CQ_INIT_ATTR_MASK_PD: u32 = 0b10;
/// `IBV_CQ_INIT_ATTR_MASK_FLAGS`.
const CQ_INIT_ATTR_MASK_FLAGS: u32 = 1 << 0;
/// `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN`: passed to the kernel, whose rxe refuses every CQ
/// creation flag (EOPNOTSUPP). `IBV_CREATE_CQ_ATTR_SINGLE_THREADED` is a hint libibverbs
/// keeps to itself, accepted.
const CREATE_CQ_ATTR_IGNORE_OVERRUN: u32 = 1 << 1;

/// The CQ behind an `ibv_cq_ex` the program polls.
///
/// # Safety
///
/// `p` is an extended CQ of the shim the program has not destroyed (the data path's trust
/// rule, handle module), alive for the call.
unsafe fn cq_ex<'a>(p: *mut ibv_cq_ex) -> &'a Obj<Cq> {
    // SAFETY: by the caller's promise; the handle of a CQ is its C struct's address.
    unsafe { Obj::<Cq>::trusted(p.cast::<ibv_cq>()) }
}

/// Takes the next completion into the current slot and publishes its `wr_id` and `status`
/// in the C struct: 0, ENOENT when the CQ is empty, or the CQ's error (an overrun).
fn take_next(cq: &Obj<Cq>) -> c_int {
    match cq.cq.poll_one_stamped() {
        Ok(Some((w, stamp))) => {
            // SAFETY: the caller holds the poll (`busy`), so this thread alone touches `cur`
            // and `stamp`; the C struct's `status` and `wr_id` are written raw, as rxe writes
            // them.
            unsafe {
                *cq.ex.cur.get() = w;
                *cq.ex.stamp.get() = stamp;
                let c = cq.c();
                ptr::addr_of_mut!((*c).status).write(w.status as c_uint);
                ptr::addr_of_mut!((*c).wr_id).write(w.wr_id);
            }
            0
        }
        Ok(None) => ENOENT,
        Err(e) => errno_of(&e),
    }
}

/// The completion being read.
///
/// # Safety
///
/// As [`cq_ex`]; the calling thread holds the poll (between `start_poll` returning 0 and
/// `end_poll`, the API's contract).
unsafe fn cur<'a>(p: *mut ibv_cq_ex) -> &'a WorkCompletion {
    // SAFETY: by the caller's promise the CQ is live and this thread holds its poll, so no
    // one writes `cur` while the reference lives (until the thread's next poll call).
    unsafe { &*cq_ex(p).ex.cur.get() }
}

unsafe extern "C" fn start_poll(p: *mut ibv_cq_ex, _attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: the data path's trust rule (see `cq_ex`).
    let cq = unsafe { cq_ex(p) };
    cq.ex.lock();
    let r = take_next(cq);
    if r != 0 {
        // Nothing to read: the poll is not held (rxe unlocks before returning ENOENT).
        cq.ex.unlock();
        set_errno(r);
    }
    r
}

unsafe extern "C" fn next_poll(p: *mut ibv_cq_ex) -> c_int {
    // SAFETY: the data path's trust rule (see `cq_ex`); the caller holds the poll.
    let cq = unsafe { cq_ex(p) };
    // The poll stays held on ENOENT: the program may try again, and calls end_poll in any
    // case.
    let r = take_next(cq);
    if r != 0 {
        set_errno(r);
    }
    r
}

unsafe extern "C" fn end_poll(p: *mut ibv_cq_ex) {
    // SAFETY: the data path's trust rule (see `cq_ex`).
    unsafe { cq_ex(p) }.ex.unlock();
}

unsafe extern "C" fn read_opcode(p: *mut ibv_cq_ex) -> c_uint {
    // SAFETY: the polling contract (see `cur`).
    unsafe { cur(p) }.opcode as c_uint
}

unsafe extern "C" fn read_vendor_err(_p: *mut ibv_cq_ex) -> u32 {
    0
}

unsafe extern "C" fn read_byte_len(p: *mut ibv_cq_ex) -> u32 {
    // SAFETY: the polling contract (see `cur`).
    unsafe { cur(p) }.byte_len
}

unsafe extern "C" fn read_imm_data(p: *mut ibv_cq_ex) -> u32 {
    // SAFETY: the polling contract (see `cur`).
    wc_to_c(unsafe { cur(p) }).imm_data
}

unsafe extern "C" fn read_qp_num(p: *mut ibv_cq_ex) -> u32 {
    // SAFETY: the polling contract (see `cur`).
    unsafe { cur(p) }.qp_num
}

unsafe extern "C" fn read_src_qp(p: *mut ibv_cq_ex) -> u32 {
    // SAFETY: the polling contract (see `cur`).
    unsafe { cur(p) }.src_qp
}

unsafe extern "C" fn read_wc_flags(p: *mut ibv_cq_ex) -> c_uint {
    // SAFETY: the polling contract (see `cur`).
    wc_to_c(unsafe { cur(p) }).wc_flags
}

/// RoCE has no LIDs: 0, as rxe's completions carry.
unsafe extern "C" fn read_slid(_p: *mut ibv_cq_ex) -> u32 {
    0
}

unsafe extern "C" fn read_sl(p: *mut ibv_cq_ex) -> u8 {
    // SAFETY: the polling contract (see `cur`).
    wc_to_c(unsafe { cur(p) }).sl
}

unsafe extern "C" fn read_dlid_path_bits(_p: *mut ibv_cq_ex) -> u8 {
    0
}

unsafe extern "C" fn read_completion_ts(p: *mut ibv_cq_ex) -> u64 {
    // SAFETY: the polling contract (see `cur`): this thread holds the poll.
    unsafe { *cq_ex(p).ex.stamp.get() }.monotonic_ns
}

unsafe extern "C" fn read_completion_wallclock_ns(p: *mut ibv_cq_ex) -> u64 {
    // SAFETY: the polling contract (see `cur`): this thread holds the poll.
    unsafe { *cq_ex(p).ex.stamp.get() }.realtime_ns
}

/// `ibv_wc_read_tm_info`: a tagged message's tag and `app_ctx` (`priv`); zeroes for other
/// completions (spec-notes/beyond-rxe.md rule 13).
unsafe extern "C" fn read_tm_info(p: *mut ibv_cq_ex, out: *mut ibv_wc_tm_info) {
    // SAFETY: the polling contract (see `cur`).
    let t = unsafe { cur(p) }.tm.unwrap_or_default();
    if !out.is_null() {
        // SAFETY: the caller passes a writable ibv_wc_tm_info.
        unsafe {
            out.write(ibv_wc_tm_info {
                tag: t.tag,
                priv_: t.app_ctx,
            })
        };
    }
}

/// The `read_tm_info` slot's type.
type ReadTmInfoFn = unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_wc_tm_info);

/// The `create_cq_ex` op: NULL and errno on failure (EOPNOTSUPP for a `wc_flags`, comp_mask
/// or creation flag rxe refuses; then as `ibv_create_cq`).
pub(super) unsafe extern "C" fn op_create_cq_ex(
    c: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    if attr.is_null() {
        return fail_null(EINVAL);
    }
    // SAFETY: non-null; the caller passes a readable ibv_cq_init_attr_ex (read only).
    let a = unsafe { &*attr };
    if a.wc_flags & !SUPPORTED_WC_FLAGS != 0 || a.comp_mask & !CQ_INIT_ATTR_MASK_KNOWN != 0 {
        return fail_null(EOPNOTSUPP);
    }
    if a.comp_mask & CQ_INIT_ATTR_MASK_FLAGS != 0 && a.flags & CREATE_CQ_ATTR_IGNORE_OVERRUN != 0 {
        return fail_null(EOPNOTSUPP);
    }
    if a.comp_mask & CQ_INIT_ATTR_MASK_PD != 0
        && !super::pd::is_parent_domain_of(a.parent_domain, c)
    {
        // ibv_create_cq_ex(3): the CQ's parent_domain must be a parent domain.
        return fail_null(EINVAL);
    }
    let Ok(cqe) = c_int::try_from(a.cqe) else {
        return fail_null(EINVAL);
    };
    // SAFETY: the caller's context and channel are passed on; ibv_create_cq checks both.
    let h = unsafe { ibv_create_cq(c, cqe, a.cq_context, a.channel, a.comp_vector as c_int) };
    let Some(cq) = cq_of(h) else {
        return null_mut(); // errno from ibv_create_cq
    };
    let on = |bit: u64| a.wc_flags & bit != 0;
    // The handle (made from the allocation, see the handle module) is the C struct's address.
    let x = h.cast::<ibv_cq_ex>();
    if on(WITH_COMPLETION_TIMESTAMP | WITH_WALLCLOCK) {
        cq.cq.enable_timestamps();
    }
    drop(cq);
    // SAFETY: `x` is the live CQ's C struct (just created; the registry holds it), not yet
    // returned to the program, so nothing else reads its extension; written field by field
    // through the raw pointer.
    unsafe {
        ptr::addr_of_mut!((*x).start_poll).write(Some(start_poll));
        ptr::addr_of_mut!((*x).next_poll).write(Some(next_poll));
        ptr::addr_of_mut!((*x).end_poll).write(Some(end_poll));
        ptr::addr_of_mut!((*x).read_opcode).write(Some(read_opcode));
        ptr::addr_of_mut!((*x).read_vendor_err).write(Some(read_vendor_err));
        ptr::addr_of_mut!((*x).read_wc_flags).write(Some(read_wc_flags));
        // As rxe, the reader of a field is set only when wc_flags asks for it.
        if on(WITH_BYTE_LEN) {
            ptr::addr_of_mut!((*x).read_byte_len).write(Some(read_byte_len));
        }
        if on(WITH_IMM) {
            ptr::addr_of_mut!((*x).read_imm_data).write(Some(read_imm_data));
        }
        if on(WITH_QP_NUM) {
            ptr::addr_of_mut!((*x).read_qp_num).write(Some(read_qp_num));
        }
        if on(WITH_SRC_QP) {
            ptr::addr_of_mut!((*x).read_src_qp).write(Some(read_src_qp));
        }
        if on(WITH_SLID) {
            ptr::addr_of_mut!((*x).read_slid).write(Some(read_slid));
        }
        if on(WITH_SL) {
            ptr::addr_of_mut!((*x).read_sl).write(Some(read_sl));
        }
        if on(WITH_DLID_PATH_BITS) {
            ptr::addr_of_mut!((*x).read_dlid_path_bits).write(Some(read_dlid_path_bits));
        }
        if on(WITH_COMPLETION_TIMESTAMP) {
            ptr::addr_of_mut!((*x).read_completion_ts).write(Some(read_completion_ts));
        }
        if on(IBV_WC_EX_WITH_TM_INFO) {
            ptr::addr_of_mut!((*x).read_tm_info)
                .write(read_tm_info as ReadTmInfoFn as *mut std::ffi::c_void);
        }
        if on(WITH_WALLCLOCK) {
            ptr::addr_of_mut!((*x).read_completion_wallclock_ns)
                .write(Some(read_completion_wallclock_ns));
        }
    }
    x
}
