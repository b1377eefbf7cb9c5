//! Memory windows (IBTA vol. 1 §10.6.7; Linux rxe_mw.c): a remote key onto a range of a
//! memory region, bound and invalidated while the region stays registered.
//!
//! - Type 1 windows are bound with `ibv_bind_mw` (a BIND_MW work request on a QP of the
//!   window's PD), serve every QP of the PD, and are unbound only by binding them again with
//!   length 0 or by deallocating them; LOCAL_INV and SEND with invalidate refuse them
//!   (o10-37.2.26).
//! - Type 2 windows (rxe's type 2B) start FREE, are bound with a BIND_MW work request to the
//!   posting QP (o10-37.2.30: only when FREE), serve that QP only, and return to FREE by
//!   LOCAL_INV on that QP or a SEND with invalidate arriving on it.
//!
//! Keys are as for regions (`index << 8 | key byte`), from a separate index range
//! ([`MW_INDEX_BASE`] and up), so the top bit of a key tells a window from a region, as rxe's
//! separate MR and MW pools with disjoint index ranges do (`rkey_is_mw`). A bind takes the
//! consumer's key byte (rxe_do_bind_mw); `ibv_bind_mw` chooses the next one
//! (`ibv_inc_rkey`), so a key learned before a rebind stops working.
//!
//! A window's state sits behind its own lock, so that the requester (bind, local invalidate)
//! and the responder (remote invalidate, key checks) reach it through the shared table, as
//! rxe takes `mw->lock`.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use super::mr::{Mr, MrFault};
use crate::ib::{AccessFlags, MwBindInfo};

pub use super::params::MW_INDEX_BASE;

/// Whether `key` names a memory window rather than a region (rxe `rkey_is_mw`).
pub fn key_is_mw(key: u32) -> bool {
    key >> 8 >= MW_INDEX_BASE
}

/// The access bits a bind may carry (rxe `RXE_ACCESS_SUPPORTED_MW`, which is the region's
/// set, `RXE_ACCESS_SUPPORTED_MR`, plus ZERO_BASED): LOCAL_WRITE and MW_BIND are accepted and
/// mean nothing for a window (only the remote rights are checked at the responder), as rxe
/// accepts them (rdma-core's test_mr binds with LOCAL_WRITE | REMOTE_WRITE, test_qpex with
/// LOCAL_WRITE alone).
pub const MW_ACCESS: AccessFlags = AccessFlags(
    AccessFlags::LOCAL_WRITE.0
        | AccessFlags::REMOTE_READ.0
        | AccessFlags::REMOTE_WRITE.0
        | AccessFlags::REMOTE_ATOMIC.0
        | AccessFlags::MW_BIND.0
        | AccessFlags::ZERO_BASED.0,
);

/// Memory window type (`enum ibv_mw_type`, same values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MwType {
    /// Bound by `ibv_bind_mw`, usable from every QP of the PD.
    Type1 = 1,
    /// Bound by a BIND_MW work request to one QP, invalidated by LOCAL_INV or a SEND with
    /// invalidate.
    Type2 = 2,
}

/// Window state (rxe `enum rxe_mw_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MwState {
    /// Deallocated (a WR that resolved it before sees this).
    Invalid,
    /// A type 2 window not bound.
    Free,
    /// Bound (a type 1 window from allocation on, possibly with length 0).
    Valid,
}

/// Why a bind or an invalidation was refused. A bind that fails completes with
/// `IBV_WC_MW_BIND_ERR`, an invalidation with `IBV_WC_LOC_QP_OP_ERR` (rxe_do_local_ops); the
/// QP then goes to ERROR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MwFault {
    /// No window has this key (unknown index, another key byte, or deallocated).
    UnknownKey,
    /// The new key's index bits are not the window's.
    KeyIndex,
    /// A type 1 window that is not VALID, or a type 2 window that is not FREE (o10-37.2.30).
    State,
    /// The window is in another protection domain than the QP (C10-72).
    WrongPd,
    /// A type 2 window bound to another QP.
    WrongQp,
    /// A type 2 bind without a region or with length 0 (o10-37.2.40).
    NoRegion,
    /// The region lkey names no live region of the PD.
    UnknownRegion,
    /// The region lacks `MW_BIND` access (C10-73).
    NoBindAccess,
    /// Remote write or atomic on a window whose region lacks local write (C10-74).
    NeedsLocalWrite,
    /// A zero-based type 1 window (o10-36.2.2), or a right windows cannot have.
    BadAccess,
    /// The window does not lie inside the region (C10-75).
    OutOfRange,
    /// LOCAL_INV or SEND with invalidate on a type 1 window (o10-37.2.26), or on a window
    /// not bound.
    NotInvalidatable,
    /// LOCAL_INV names a memory region: softroce has no fast-register regions, the only kind
    /// rxe invalidates (rxe_invalidate_mr: `IB_MR_TYPE_MEM_REG`).
    RegionKey,
}

/// A window's binding, as a snapshot ([`Mw::binding`]).
#[derive(Debug, Clone)]
pub struct Binding {
    /// Current R_Key.
    pub rkey: u32,
    /// State.
    pub state: MwState,
    /// The region (none when unbound or bound with length 0).
    pub mr: Option<Arc<Mr>>,
    /// Type 2: the QP it is bound to.
    pub qpn: Option<u32>,
    /// Virtual address of the first byte in the region.
    pub addr: u64,
    /// Length in bytes.
    pub length: u64,
    /// Rights.
    pub access: AccessFlags,
}

/// A memory window.
#[derive(Debug)]
pub struct Mw {
    /// Type.
    pub mw_type: MwType,
    /// Protection domain handle.
    pub pd: u32,
    inner: Mutex<Binding>,
}

impl Mw {
    pub(super) fn new(mw_type: MwType, pd: u32, rkey: u32) -> Mw {
        Mw {
            mw_type,
            pd,
            inner: Mutex::new(Binding {
                rkey,
                state: match mw_type {
                    MwType::Type1 => MwState::Valid,
                    MwType::Type2 => MwState::Free,
                },
                mr: None,
                qpn: None,
                addr: 0,
                length: 0,
                access: AccessFlags::EMPTY,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Binding> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current R_Key.
    pub fn rkey(&self) -> u32 {
        self.lock().rkey
    }

    /// A snapshot of the binding.
    pub fn binding(&self) -> Binding {
        self.lock().clone()
    }

    /// Executes a BIND_MW work request posted on QP `qpn` of PD `qp_pd` (rxe_bind_mw with
    /// rxe_check_bind_mw's checks, in its order). `mr` is the region `bind.mr_lkey` named
    /// (resolved in the QP's PD; none if it named none). Returns the new R_Key.
    pub fn bind(
        &self,
        qp_pd: u32,
        qpn: u32,
        mw_rkey: u32,
        new_rkey: u32,
        bind: &MwBindInfo,
        mr: Option<&Arc<Mr>>,
    ) -> Result<u32, MwFault> {
        let mut b = self.lock();
        if b.state == MwState::Invalid || b.rkey != mw_rkey {
            return Err(MwFault::UnknownKey);
        }
        if new_rkey >> 8 != mw_rkey >> 8 {
            return Err(MwFault::KeyIndex);
        }
        let access = bind.access;
        if !MW_ACCESS.contains(access) {
            return Err(MwFault::BadAccess);
        }
        // A length of 0 binds no region (rxe: `mr = NULL`).
        let mr = if bind.length == 0 {
            None
        } else {
            match mr {
                Some(m) if m.is_live() => Some(m),
                _ => return Err(MwFault::UnknownRegion),
            }
        };
        match self.mw_type {
            MwType::Type1 => {
                if b.state != MwState::Valid {
                    return Err(MwFault::State);
                }
                if access.contains(AccessFlags::ZERO_BASED) {
                    return Err(MwFault::BadAccess); // o10-36.2.2
                }
            }
            MwType::Type2 => {
                if b.state != MwState::Free {
                    return Err(MwFault::State); // o10-37.2.30
                }
                if qp_pd != self.pd {
                    return Err(MwFault::WrongPd); // C10-72
                }
                if mr.is_none() {
                    return Err(MwFault::NoRegion); // o10-37.2.40
                }
            }
        }
        // A type 1 bind by a QP of another PD: the window must serve its own PD's QPs only.
        if qp_pd != self.pd {
            return Err(MwFault::WrongPd);
        }
        if let Some(m) = mr {
            if m.pd != self.pd {
                return Err(MwFault::UnknownRegion);
            }
            if m.access.contains(AccessFlags::ZERO_BASED) {
                return Err(MwFault::BadAccess);
            }
            if !m.access.contains(AccessFlags::MW_BIND) {
                return Err(MwFault::NoBindAccess); // C10-73
            }
            if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
                && !m.access.contains(AccessFlags::LOCAL_WRITE)
            {
                return Err(MwFault::NeedsLocalWrite); // C10-74
            }
            // C10-75: inside the region (a zero-based window too: rxe checks only its length
            // against the region's, but the window's bytes are those at `addr`).
            let end = bind.addr.checked_add(bind.length);
            let inside = bind.addr >= m.iova && end.is_some_and(|e| e <= m.iova + m.len());
            if !inside {
                return Err(MwFault::OutOfRange);
            }
        }
        // rxe_do_bind_mw.
        b.rkey = (b.rkey & !0xff) | (new_rkey & 0xff);
        b.access = access;
        b.state = MwState::Valid;
        b.addr = bind.addr;
        b.length = bind.length;
        if let Some(old) = b.mr.take() {
            old.num_mw.fetch_sub(1, Ordering::AcqRel);
        }
        if let Some(m) = mr {
            m.num_mw.fetch_add(1, Ordering::AcqRel);
            b.mr = Some(Arc::clone(m));
        }
        if self.mw_type == MwType::Type2 {
            b.qpn = Some(qpn);
        }
        Ok(b.rkey)
    }

    /// Invalidates the window on behalf of QP `qpn` of PD `qp_pd`: LOCAL_INV, or a SEND with
    /// invalidate arriving there (rxe_invalidate_mw). Beyond rxe's checks (the key, a state
    /// other than deallocated, type 2), the window must be VALID, in the QP's PD and bound to
    /// that QP: a peer may invalidate only the windows of its own connection (rxe would
    /// invalidate any type 2 window of the device, and oops on a FREE one).
    pub fn invalidate(&self, qp_pd: u32, qpn: u32, rkey: u32) -> Result<(), MwFault> {
        let mut b = self.lock();
        if b.state == MwState::Invalid || b.rkey != rkey {
            return Err(MwFault::UnknownKey);
        }
        if self.mw_type == MwType::Type1 || b.state != MwState::Valid {
            return Err(MwFault::NotInvalidatable); // o10-37.2.26
        }
        if qp_pd != self.pd {
            return Err(MwFault::WrongPd);
        }
        if b.qpn != Some(qpn) {
            return Err(MwFault::WrongQp);
        }
        Self::unbind(&mut b, MwState::Free);
        Ok(())
    }

    /// QP `qpn` is destroyed: a type 2 window bound to it stays bound, to no QP, so that it
    /// serves nothing and cannot be invalidated, only deallocated (rxe keeps the destroyed QP
    /// referenced from the window, with the same effect); a later QP given the same number
    /// gains nothing.
    pub(super) fn forget_qp(&self, qpn: u32) {
        let mut b = self.lock();
        if b.qpn == Some(qpn) {
            b.qpn = None;
        }
    }

    /// Deallocation: the window stops serving and lets go of its region.
    pub(super) fn dealloc(&self) {
        Self::unbind(&mut self.lock(), MwState::Invalid);
    }

    fn unbind(b: &mut Binding, state: MwState) {
        if let Some(old) = b.mr.take() {
            old.num_mw.fetch_sub(1, Ordering::AcqRel);
        }
        b.qpn = None;
        b.access = AccessFlags::EMPTY;
        b.addr = 0;
        b.length = 0;
        b.state = state;
    }

    /// Whether the window still serves `rkey`: the key is current and the window bound to a
    /// live region (rxe_recheck_mr, before each READ response packet).
    pub fn serves(&self, rkey: u32) -> bool {
        let b = self.lock();
        b.rkey == rkey
            && b.state == MwState::Valid
            && b.length > 0
            && b.mr.as_ref().is_some_and(|m| m.is_live())
    }

    /// The responder's key check for an access through the window (rxe check_rkey with
    /// rxe_lookup_mw): the key, the PD, for type 2 the QP, a length, the rights and the state,
    /// then the range. The range is checked against the window (`va .. va + len` inside it;
    /// for a zero-based window `va` is an offset into it), not only against the region as rxe
    /// 6.1 does, so that a window exposes its own bytes and no others. Returns the region and
    /// the offset in its storage.
    pub fn resolve(
        &self,
        pd: u32,
        qpn: u32,
        rkey: u32,
        va: u64,
        len: u64,
        need: AccessFlags,
    ) -> Result<(Arc<Mr>, u64), MrFault> {
        let b = self.lock();
        if b.rkey != rkey || b.state == MwState::Invalid {
            return Err(MrFault::UnknownKey);
        }
        if self.pd != pd {
            return Err(MrFault::WrongPd);
        }
        if self.mw_type == MwType::Type2 && b.qpn != Some(qpn) {
            return Err(MrFault::WrongQp);
        }
        if b.length == 0 || b.state != MwState::Valid {
            return Err(MrFault::Invalidated);
        }
        if !b.access.contains(need) {
            return Err(MrFault::AccessDenied);
        }
        let mr = match &b.mr {
            Some(m) if m.is_live() => m,
            _ => return Err(MrFault::Invalidated),
        };
        let in_window = if b.access.contains(AccessFlags::ZERO_BASED) {
            va
        } else {
            va.checked_sub(b.addr).ok_or(MrFault::OutOfRange)?
        };
        match in_window.checked_add(len) {
            Some(end) if end <= b.length => {}
            _ => return Err(MrFault::OutOfRange),
        }
        let off = mr.check(b.addr + in_window, len, AccessFlags::EMPTY)?;
        Ok((Arc::clone(mr), off))
    }
}
