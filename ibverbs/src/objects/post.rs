//! The data-path ops a context publishes (`post_send`, `post_recv`): no registry lookup, the
//! handles trusted as rdma-core's providers trust theirs (see the handle module).

use libc::{c_int, EINVAL};
use softroce::ib::{AccessFlags, MwBindInfo, RecvWr, SendFlags, SendWr, Sge, WrOpcode};
use softroce::verbs::UdSendWr;

use super::ah::Ah;
use super::common::{errno_of, fail};
use super::handle::Obj;
use super::qp::Qp;
use crate::ffi::*;

/// The most SGEs one WR may carry.
pub(super) const MAX_SGE: usize = 32;

/// Copies a C SGE list into `buf`; EINVAL for a negative or too long list.
///
/// # Safety
///
/// `list` holds `n` readable SGEs when `n > 0`.
pub(super) unsafe fn sges(
    list: *const ibv_sge,
    n: c_int,
    buf: &mut [Sge; MAX_SGE],
) -> Result<&[Sge], c_int> {
    if n < 0 || n as usize > MAX_SGE || (n > 0 && list.is_null()) {
        return Err(EINVAL);
    }
    for (i, slot) in buf.iter_mut().enumerate().take(n as usize) {
        // SAFETY: the caller's list holds n SGEs.
        let s = unsafe { list.add(i).read() };
        *slot = Sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        };
    }
    Ok(&buf[..n as usize])
}

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

/// The `post_send` op: 0, or an errno value with `*bad_wr` the first WR not posted.
pub(super) unsafe extern "C" fn op_post_send(
    p: *mut ibv_qp,
    mut wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    if p.is_null() {
        if !bad_wr.is_null() {
            // SAFETY: the caller passes a writable pointer.
            unsafe { *bad_wr = wr };
        }
        return fail(EINVAL);
    }
    // SAFETY: the data path trusts its handle as rdma-core's providers do (handle module): `p`
    // is a QP the application has not destroyed, alive for this call.
    let q = unsafe { Obj::<Qp>::trusted(p) };
    let mut buf = [Sge::default(); MAX_SGE];
    while !wr.is_null() {
        // SAFETY: the caller's list is a valid linked list of WRs, which C does not change
        // during the call (the verbs contract).
        let w = unsafe { &*wr };
        let res = (|| {
            // SAFETY: the WR's sg_list holds num_sge SGEs (the verbs contract).
            let mut sg_list = unsafe { sges(w.sg_list, w.num_sge, &mut buf)? };
            let opcode = wr_opcode(w)?;
            let flags = SendFlags::from_bits_truncate(w.send_flags);
            // The opcodes that carry data out of the WR's SGEs, which inline sends copy.
            let inline_op = matches!(
                w.opcode,
                IBV_WR_RDMA_WRITE
                    | IBV_WR_RDMA_WRITE_WITH_IMM
                    | IBV_WR_SEND
                    | IBV_WR_SEND_WITH_IMM
                    | IBV_WR_SEND_WITH_INV
            );
            let mut gathered = [Sge::default(); 1];
            let mut guard = None;
            if flags.contains(SendFlags::INLINE) && inline_op {
                let mut g = q
                    .inline
                    .as_ref()
                    .ok_or(EINVAL)?
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                // SAFETY: the application's inline SGEs (see InlineScratch::gather).
                gathered[0] = unsafe { g.gather(sg_list)? };
                guard = Some(g);
                sg_list = &gathered[..];
            }
            let one = SendWr {
                wr_id: w.wr_id,
                sg_list,
                opcode,
                send_flags: flags,
            };
            // The scratch stays locked until the transport has copied the data (in the post).
            let _inline = guard;
            if q.ud {
                let ah_ptr = w.ud_ah();
                if ah_ptr.is_null() {
                    return Err(EINVAL);
                }
                // SAFETY: the data path trusts the WR's address handle as providers do (handle
                // module): an AH the application has not destroyed, alive for this call; no
                // registry lock per datagram.
                let ah = unsafe { Obj::<Ah>::trusted(ah_ptr) };
                let ud = UdSendWr {
                    wr: one,
                    ah: &ah.ah,
                    remote_qpn: w.ud_remote_qpn(),
                    remote_qkey: w.ud_remote_qkey(),
                };
                return q
                    .qp
                    .post_send_ud(std::slice::from_ref(&ud))
                    .map_err(|e| errno_of(&e.error));
            }
            q.qp.post_send(std::slice::from_ref(&one))
                .map_err(|e| errno_of(&e.error))
        })();
        if let Err(e) = res {
            if !bad_wr.is_null() {
                // SAFETY: the caller passes a writable pointer.
                unsafe { *bad_wr = wr };
            }
            return fail(e);
        }
        wr = w.next;
    }
    0
}

/// The `post_recv` op: 0, or an errno value with `*bad_wr` the first WR not posted.
pub(super) unsafe extern "C" fn op_post_recv(
    p: *mut ibv_qp,
    mut wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    if p.is_null() {
        if !bad_wr.is_null() {
            // SAFETY: the caller passes a writable pointer.
            unsafe { *bad_wr = wr };
        }
        return fail(EINVAL);
    }
    // SAFETY: the data path trusts its handle as rdma-core's providers do (handle module): `p`
    // is a QP the application has not destroyed, alive for this call.
    let q = unsafe { Obj::<Qp>::trusted(p) };
    let mut buf = [Sge::default(); MAX_SGE];
    while !wr.is_null() {
        // SAFETY: the caller's list is a valid linked list of WRs, which C does not change
        // during the call (the verbs contract).
        let w = unsafe { &*wr };
        let res = (|| {
            // SAFETY: the WR's sg_list holds num_sge SGEs (the verbs contract).
            let sg_list = unsafe { sges(w.sg_list, w.num_sge, &mut buf)? };
            let one = RecvWr {
                wr_id: w.wr_id,
                sg_list,
            };
            q.qp.post_recv(std::slice::from_ref(&one))
                .map_err(|e| errno_of(&e.error))
        })();
        if let Err(e) = res {
            if !bad_wr.is_null() {
                // SAFETY: the caller passes a writable pointer.
                unsafe { *bad_wr = wr };
            }
            return fail(e);
        }
        wr = w.next;
    }
    0
}
