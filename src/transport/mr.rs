//! A registered memory region, as the transport sees it; [`super::keys`] issues the keys and
//! finds regions and windows by them.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

pub use super::params::{MAX_MR, MAX_MW};

use crate::ib::AccessFlags;
use crate::memory::SharedBytes;

/// A registered memory region.
#[derive(Debug)]
pub struct Mr {
    /// The bytes (shared with the application's handle).
    pub storage: Arc<SharedBytes>,
    /// Virtual address of the first byte, as the peer addresses it (RETH/AtomicETH VA).
    pub iova: u64,
    /// Local key.
    pub lkey: u32,
    /// Remote key (the lkey).
    pub rkey: u32,
    /// Access rights.
    pub access: AccessFlags,
    /// Protection domain handle.
    pub pd: u32,
    /// Memory windows bound to the region (rxe `mr->num_mw`): while any is, the region
    /// cannot be deregistered ([`super::keys::MrTable::try_deregister`]).
    pub num_mw: AtomicU32,
    /// False once deregistered: a window still holding the region serves nothing (rxe's
    /// `mr->state` check in rxe_recheck_mr).
    pub(super) live: AtomicBool,
}

/// Why an access to a memory region was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MrFault {
    /// No live region has the key.
    UnknownKey,
    /// The region is in another protection domain.
    WrongPd,
    /// The region lacks the access right.
    AccessDenied,
    /// The range is not inside the region (or wraps around).
    OutOfRange,
    /// A type 2 memory window bound to another QP.
    WrongQp,
    /// A memory window that is not bound (invalidated, FREE, or bound with length 0), or
    /// whose region is gone.
    Invalidated,
}

impl Mr {
    /// Size in bytes.
    pub fn len(&self) -> u64 {
        self.storage.len() as u64
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.storage.is_empty()
    }

    /// Whether the region is still registered.
    pub fn is_live(&self) -> bool {
        self.live.load(Ordering::Acquire)
    }

    /// Memory windows bound to the region now.
    pub fn bound_windows(&self) -> u32 {
        self.num_mw.load(Ordering::Acquire)
    }

    /// Checks that `va .. va + len` lies within the region and that it grants `need`; returns
    /// the offset of `va` in the storage.
    pub fn check(&self, va: u64, len: u64, need: AccessFlags) -> Result<u64, MrFault> {
        if !self.access.contains(need) {
            return Err(MrFault::AccessDenied);
        }
        let off = va.checked_sub(self.iova).ok_or(MrFault::OutOfRange)?;
        match off.checked_add(len) {
            Some(end) if end <= self.len() => Ok(off),
            _ => Err(MrFault::OutOfRange),
        }
    }
}
