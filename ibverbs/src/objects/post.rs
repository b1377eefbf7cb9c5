//! The data-path ops a context publishes (`post_send`, `post_recv`): no registry lookup, the
//! handles trusted as rdma-core's providers trust theirs (see the handle module).

use libc::{c_int, EINVAL};
use softroce::ib::VerbsError;
use softroce::ib::{AccessFlags, MwBindInfo, SendFlags, SendWr, WrOpcode};
use softroce::verbs::{PostBatch, QueuePair, UdSendWr};

use super::ah::Ah;
use super::common::errno_of;
use super::handle::Obj;
use super::qp::Qp;
use super::wr::{null_handle, recv_wr, sges, walk};
use crate::ffi::*;

/// The BIND_MW of a window (its current key `mw_rkey`) to `new_rkey` over `info`: what
/// `IBV_WR_BIND_MW` and `ibv_wr_bind_mw` post. The window's and region's keys are read from
/// their C structs, as rxe's provider reads them (the data path trusts its handles).
///
/// # Safety
///
/// `info.mr` is NULL or an MR of the shim the application has not deregistered.
pub(super) unsafe fn bind_mw_op(mw_rkey: u32, new_rkey: u32, info: &ibv_mw_bind_info) -> WrOpcode {
    let mr_lkey = if info.mr.is_null() {
        0
    } else {
        // SAFETY: the caller's promise; a raw read of a field written at registration.
        unsafe { std::ptr::addr_of!((*info.mr).lkey).read() }
    };
    WrOpcode::BindMw {
        mw_rkey,
        new_rkey,
        bind: MwBindInfo {
            mr_lkey,
            addr: info.addr,
            length: info.length,
            access: AccessFlags::from_bits_truncate(info.mw_access_flags),
        },
    }
}

fn wr_opcode(wr: &ibv_send_wr) -> Result<WrOpcode, c_int> {
    let imm = u32::from_be(wr.imm_data);
    let remote_addr = wr.wr.remote_addr;
    Ok(match wr.opcode {
        IBV_WR_RDMA_WRITE => WrOpcode::RdmaWrite {
            remote_addr,
            rkey: wr.rdma_rkey(),
        },
        IBV_WR_RDMA_WRITE_WITH_IMM => WrOpcode::RdmaWriteWithImm {
            remote_addr,
            rkey: wr.rdma_rkey(),
            imm,
        },
        IBV_WR_SEND => WrOpcode::Send,
        IBV_WR_SEND_WITH_IMM => WrOpcode::SendWithImm { imm },
        IBV_WR_RDMA_READ => WrOpcode::RdmaRead {
            remote_addr,
            rkey: wr.rdma_rkey(),
        },
        IBV_WR_ATOMIC_CMP_AND_SWP => WrOpcode::AtomicCmpSwap {
            remote_addr,
            rkey: wr.wr.rkey,
            compare: wr.wr.compare_add,
            swap: wr.wr.swap,
        },
        IBV_WR_ATOMIC_FETCH_AND_ADD => WrOpcode::AtomicFetchAdd {
            remote_addr,
            rkey: wr.wr.rkey,
            add: wr.wr.compare_add,
        },
        IBV_WR_LOCAL_INV => WrOpcode::LocalInv {
            rkey: wr.invalidate_rkey(),
        },
        IBV_WR_SEND_WITH_INV => WrOpcode::SendWithInv {
            rkey: wr.invalidate_rkey(),
        },
        IBV_WR_BIND_MW => {
            let mw = wr.bind_mw_mw();
            if mw.is_null() {
                return Err(EINVAL);
            }
            // SAFETY: the data path trusts the WR's window and region as providers do (handle
            // module): objects the application has not freed; raw reads of their C structs.
            unsafe {
                let mw_rkey = std::ptr::addr_of!((*mw).rkey).read();
                bind_mw_op(mw_rkey, wr.bind_mw_rkey(), &wr.bind_mw_info())
            }
        }
        _ => return Err(EINVAL),
    })
}

/// Whether `op` carries data out of its SGEs (what `IBV_SEND_INLINE` copies).
fn carries_data(op: &WrOpcode) -> bool {
    matches!(
        op,
        WrOpcode::Send
            | WrOpcode::SendWithImm { .. }
            | WrOpcode::SendWithInv { .. }
            | WrOpcode::RdmaWrite { .. }
            | WrOpcode::RdmaWriteWithImm { .. }
    )
}

/// A UD send's destination as C gives it: the address handle, the remote QPN and Q_Key.
pub(super) type UdAddr = (*mut ibv_ah, u32, u32);

/// Queues one send WR of `q` into `batch` (both post paths: `ibv_post_send` and the
/// extended builder's `wr_complete`): inline data is gathered into the QP's registered
/// scratch, which stays locked until the transport has copied it (in the post); a UD QP's WR
/// needs its destination, an XRC initiator's goes to the remote XRC SRQ `xrc_srqn`. `errno` turns the transport's refusal into the path's errno.
///
/// # Safety
///
/// An inline WR's SGEs name readable memory of this process (the verbs contract for
/// IBV_SEND_INLINE); `ud`'s address handle is one the application has not destroyed.
pub(super) unsafe fn post_send_one(
    q: &Qp,
    batch: &mut PostBatch<'_>,
    wr: SendWr<'_>,
    ud: Option<UdAddr>,
    xrc_srqn: u32,
    errno: fn(&VerbsError) -> c_int,
) -> Result<(), c_int> {
    let gathered;
    let mut guard = None;
    let mut sg_list = wr.sg_list;
    if wr.send_flags.contains(SendFlags::INLINE)
        && carries_data(&wr.opcode)
        && !wr.sg_list.is_empty()
    {
        let mut g = q
            .inline
            .as_ref()
            .ok_or(EINVAL)?
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // SAFETY: the caller's promise for inline SGEs.
        gathered = [unsafe { g.gather(sg_list)? }];
        guard = Some(g);
        sg_list = &gathered[..];
    }
    let _inline = guard;
    let wr = SendWr { sg_list, ..wr };
    if q.xrc_send {
        return batch.post_send_xrc(&wr, xrc_srqn).map_err(|e| errno(&e));
    }
    if !q.ud {
        return batch.post_send(&wr).map_err(|e| errno(&e));
    }
    let (ah_ptr, remote_qpn, remote_qkey) = ud.ok_or(EINVAL)?;
    if ah_ptr.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: the data path trusts the WR's address handle as providers do (handle module):
    // an AH the application has not destroyed, alive for this call; no registry lock per
    // datagram.
    let ah = unsafe { Obj::<Ah>::trusted(ah_ptr) };
    let ud = UdSendWr {
        wr,
        ah: &ah.ah,
        remote_qpn,
        remote_qkey,
    };
    batch.post_send_ud(&ud).map_err(|e| errno(&e))
}

/// The QP of a post op, or the op's return for a NULL one.
///
/// # Safety
///
/// `p` is NULL or a QP the application has not destroyed; `bad_wr` is NULL or writable.
unsafe fn qp_of<'a, W>(
    p: *mut ibv_qp,
    first: *mut W,
    bad_wr: *mut *mut W,
) -> Result<&'a Obj<Qp>, c_int> {
    if p.is_null() {
        // SAFETY: the caller's pointer.
        return Err(unsafe { null_handle(first, bad_wr) });
    }
    // SAFETY: the data path trusts its handle as rdma-core's providers do (handle module): `p`
    // is a QP the application has not destroyed, alive for this call.
    Ok(unsafe { Obj::<Qp>::trusted(p) })
}

/// A post op's chain on QP `p`: the batch `open` makes (of sends or of receives) takes each
/// WR through `post_one`, under one QP lock, and rings once, as rxe's provider posts a list;
/// 0, or the first refused WR's errno with `*bad_wr` at it (the WRs before it stay posted).
///
/// # Safety
///
/// As the op's: `p` is NULL or a QP of the shim the application has not destroyed, `wr` a
/// valid linked list of WRs (`next` follows it), `bad_wr` NULL or writable.
unsafe fn post_chain<W>(
    p: *mut ibv_qp,
    wr: *mut W,
    bad_wr: *mut *mut W,
    next: fn(&W) -> *mut W,
    open: for<'q> fn(&'q QueuePair) -> softroce::ib::Result<PostBatch<'q>>,
    mut post_one: impl FnMut(&Qp, &mut PostBatch<'_>, &W) -> Result<(), c_int>,
) -> c_int {
    // SAFETY: the op's contract (a QP of the shim, or NULL).
    let q = match unsafe { qp_of(p, wr, bad_wr) } {
        Ok(q) => q,
        Err(e) => return e,
    };
    // SAFETY (both walks): the caller's list is a valid linked list of WRs (the verbs
    // contract); a batch that cannot open refuses the first WR.
    match open(&q.qp) {
        Ok(mut batch) => unsafe { walk(wr, bad_wr, next, |w| post_one(q, &mut batch, w)) },
        Err(e) => unsafe { walk(wr, bad_wr, next, |_| Err(errno_of(&e))) },
    }
}

/// The `post_send` op: 0, or an errno value with `*bad_wr` the first WR not posted.
pub(super) unsafe extern "C" fn op_post_send(
    p: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: the op's contract, which post_chain has.
    unsafe {
        post_chain(
            p,
            wr,
            bad_wr,
            |w| w.next,
            QueuePair::send_batch,
            |q, batch, w| {
                // SAFETY: the WR's sg_list holds num_sge SGEs (the verbs contract).
                let sg_list = sges(w.sg_list, w.num_sge)?;
                let one = SendWr {
                    wr_id: w.wr_id,
                    sg_list,
                    opcode: wr_opcode(w)?,
                    send_flags: SendFlags::from_bits_truncate(w.send_flags),
                };
                let ud =
                    q.ud.then(|| (w.ud_ah(), w.ud_remote_qpn(), w.ud_remote_qkey()));
                // SAFETY: the verbs contract for inline SGEs and the WR's address handle.
                post_send_one(q, batch, one, ud, w.qp_type, errno_of)
            },
        )
    }
}

/// The `post_recv` op: 0, or an errno value with `*bad_wr` the first WR not posted.
pub(super) unsafe extern "C" fn op_post_recv(
    p: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: the op's contract, which post_chain has.
    unsafe {
        post_chain(
            p,
            wr,
            bad_wr,
            |w| w.next,
            QueuePair::recv_batch,
            |_, batch, w| {
                // SAFETY: the verbs contract for the WR's SGE list.
                batch.post_recv(&recv_wr(w)?).map_err(|e| errno_of(&e))
            },
        )
    }
}
