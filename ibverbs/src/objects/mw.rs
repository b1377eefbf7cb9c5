//! Memory windows: the context ops `alloc_mw`, `bind_mw` and `dealloc_mw` behind libibverbs'
//! inline `ibv_alloc_mw`, `ibv_bind_mw` and `ibv_dealloc_mw`, on softroce's windows
//! (`softroce::verbs::mw`; rules in spec-notes/memory-windows.md). Type 2 windows are bound
//! by `IBV_WR_BIND_MW` work requests (the `post` module and the `ibv_wr_bind_mw` builder).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use libc::{c_int, c_uint, EINVAL};
use softroce::ib::{AccessFlags, SendFlags};
use softroce::verbs::{MemoryWindow, MwBind, MwType};

use super::common::{errno_of, fail, fail_null};
use super::handle::{self, Obj, Object};
use super::mr::Mr;
use super::pd::{pd_of, Pd};
use super::qp::Qp;
use crate::ffi::*;

/// A memory window. It holds its PD, so `ibv_dealloc_pd` is EBUSY while it lives.
pub(super) struct Mw {
    mw: MemoryWindow,
    _pd: Arc<Obj<Pd>>,
}

impl Object for Mw {
    type C = ibv_mw;
    type Handle = ibv_mw;
}

/// The `alloc_mw` op: NULL and errno on failure (EINVAL for a type other than 1 or 2, as rxe).
pub(super) unsafe extern "C" fn op_alloc_mw(pd: *mut ibv_pd, mw_type: c_uint) -> *mut ibv_mw {
    let Some(pdr) = pd_of(pd) else {
        return fail_null(EINVAL);
    };
    let t = match mw_type {
        IBV_MW_TYPE_1 => MwType::Type1,
        IBV_MW_TYPE_2 => MwType::Type2,
        _ => return fail_null(EINVAL),
    };
    let mw = match pdr.pd.alloc_mw(t) {
        Ok(mw) => mw,
        Err(e) => return fail_null(errno_of(&e)),
    };
    static HANDLES: AtomicU32 = AtomicU32::new(1);
    let obj = Obj::new(
        ibv_mw {
            context: pdr.context(),
            pd,
            rkey: mw.rkey(),
            handle: HANDLES.fetch_add(1, Ordering::Relaxed),
            type_: mw_type,
        },
        Mw { mw, _pd: pdr },
    );
    handle::publish(&obj)
}

/// The `dealloc_mw` op: 0 or an errno value. A bound window is unbound with it (its key
/// stops working), as rxe's `rxe_dealloc_mw` does.
pub(super) unsafe extern "C" fn op_dealloc_mw(m: *mut ibv_mw) -> c_int {
    match handle::remove::<Mw>(m) {
        Ok(mw) => {
            drop(mw);
            0
        }
        Err(e) => fail(e),
    }
}

/// The `bind_mw` op (`ibv_bind_mw`, type 1 windows; libibverbs has checked the type and the
/// PDs): posts the bind and writes the window's next key into `mw->rkey`, as rxe's provider.
/// 0 or an errno value (EINVAL for a bad handle or a bind softroce refuses at the post).
pub(super) unsafe extern "C" fn op_bind_mw(
    qp: *mut ibv_qp,
    m: *mut ibv_mw,
    bind: *mut ibv_mw_bind,
) -> c_int {
    let (Some(q), Some(mw)) = (handle::get::<Qp>(qp), handle::get::<Mw>(m)) else {
        return EINVAL;
    };
    if bind.is_null() {
        return EINVAL;
    }
    // SAFETY: non-null; the caller passes a readable ibv_mw_bind (ibv_bind_mw's contract).
    let b = unsafe { bind.read() };
    let info = b.bind_info;
    let mr = if info.mr.is_null() {
        None
    } else {
        match handle::get::<Mr>(info.mr) {
            Some(mr) => Some(mr),
            None => return EINVAL,
        }
    };
    let region = mr.as_ref().map(|m| m.region());
    let res = q.qp.bind_mw(
        &mw.mw,
        &MwBind {
            wr_id: b.wr_id,
            send_flags: SendFlags::from_bits_truncate(b.send_flags),
            mr: region.as_ref().and_then(|g| g.as_ref()),
            addr: info.addr,
            length: info.length,
            access: AccessFlags::from_bits_truncate(info.mw_access_flags),
        },
    );
    match res {
        Ok(rkey) => {
            // SAFETY: a raw write into the live window's C struct (the registry reference
            // `mw` keeps it allocated); C reads the field after the call returns.
            unsafe { std::ptr::addr_of_mut!((*mw.c()).rkey).write(rkey) };
            0
        }
        Err(e) => errno_of(&e),
    }
}
