//! Memory windows (`ibv_mw`): `ibv_alloc_mw`, `ibv_dealloc_mw` and `ibv_bind_mw`.
//!
//! A window is a remote key onto part of a memory region registered with
//! [`AccessFlags::MW_BIND`]. A type 1 window is bound with [`QueuePair::bind_mw`] (which
//! posts a BIND_MW work request, as libibverbs' `ibv_bind_mw` does for rxe) and serves every
//! QP of its protection domain; a type 2 window is bound with a [`WrOpcode::BindMw`] work
//! request, serves only the QP that bound it, and is invalidated by [`WrOpcode::LocalInv`] or
//! by a peer's [`WrOpcode::SendWithInv`]. Rules: spec-notes/memory-windows.md.

use std::sync::Arc;

use super::{MemoryRegion, ProtectionDomain, QueuePair};
use crate::driver::device::Device;
use crate::ib::{AccessFlags, MwBindInfo, Result, SendFlags, SendWr, VerbsError, WrOpcode};
use crate::transport::{Mw, MwState, MwType};

/// A memory window. Deallocated when dropped.
#[derive(Debug)]
pub struct MemoryWindow {
    dev: Arc<Device>,
    mw: Arc<Mw>,
}

/// `struct ibv_mw_bind` for [`QueuePair::bind_mw`]: the work request's id and flags, and what
/// to bind (a region of `None` with length 0 unbinds).
#[derive(Debug, Clone, Copy)]
pub struct MwBind<'a> {
    /// Returned in the completion (`IBV_WC_BIND_MW`).
    pub wr_id: u64,
    /// SIGNALED, FENCE.
    pub send_flags: SendFlags,
    /// The region (registered with `MW_BIND`); `None` unbinds (with length 0).
    pub mr: Option<&'a MemoryRegion>,
    /// Virtual address of the window's first byte.
    pub addr: u64,
    /// Length in bytes (0: unbind).
    pub length: u64,
    /// The window's rights (REMOTE_READ, REMOTE_WRITE, REMOTE_ATOMIC).
    pub access: AccessFlags,
}

impl ProtectionDomain {
    /// `ibv_alloc_mw`: a window of `mw_type` in this protection domain. A type 1 window starts
    /// bound to nothing (VALID with length 0), a type 2 window FREE.
    pub fn alloc_mw(&self, mw_type: MwType) -> Result<MemoryWindow> {
        self.dev.check_open()?;
        let mw = self
            .dev
            .mrs
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .alloc_mw(self.handle, mw_type)
            .ok_or(VerbsError::ExceedsDeviceLimit {
                what: "memory windows",
                requested: crate::transport::mr::MAX_MW as u64 + 1,
                limit: crate::transport::mr::MAX_MW as u64,
            })?;
        Ok(MemoryWindow {
            dev: Arc::clone(&self.dev),
            mw,
        })
    }
}

impl MemoryWindow {
    /// The current remote key (it changes when a bind executes).
    pub fn rkey(&self) -> u32 {
        self.mw.rkey()
    }

    /// The window's type.
    pub fn mw_type(&self) -> MwType {
        self.mw.mw_type
    }

    /// Whether the window is bound now (VALID with a nonzero length).
    pub fn is_bound(&self) -> bool {
        let b = self.mw.binding();
        b.state == MwState::Valid && b.length > 0
    }

    /// The bind work request that gives this window `new_key` (the low byte of its next
    /// R_Key, the consumer's choice) over `length` bytes at `addr` of `mr` with `access`:
    /// `IBV_WR_BIND_MW` with `bind_mw.rkey = ibv_inc_rkey(mw->rkey)` or any other key byte.
    /// Type 2 windows are bound this way; a type 1 window with [`QueuePair::bind_mw`].
    pub fn bind_wr(
        &self,
        new_key: u8,
        mr: Option<&MemoryRegion>,
        addr: u64,
        length: u64,
        access: AccessFlags,
    ) -> WrOpcode {
        let rkey = self.rkey();
        WrOpcode::BindMw {
            mw_rkey: rkey,
            new_rkey: (rkey & !0xff) | u32::from(new_key),
            bind: MwBindInfo {
                mr_lkey: mr.map_or(0, |m| m.lkey()),
                addr,
                length,
                access,
            },
        }
    }
}

/// `ibv_inc_rkey`: the same index, the next key byte.
pub fn inc_rkey(rkey: u32) -> u32 {
    (rkey & 0xffff_ff00) | (rkey.wrapping_add(1) & 0xff)
}

impl QueuePair {
    /// `ibv_bind_mw` for a type 1 window: posts a BIND_MW work request with the next key
    /// byte and returns the R_Key the window will have once it executes (the completion,
    /// `IBV_WC_BIND_MW`, says whether it did: on error the window keeps its key). A type 2
    /// window or a zero-based bind is refused (EINVAL), as libibverbs and rxe refuse them.
    pub fn bind_mw(&self, mw: &MemoryWindow, bind: &MwBind<'_>) -> Result<u32> {
        if mw.mw_type() != MwType::Type1 {
            return Err(VerbsError::InvalidAttribute {
                attr: "mw",
                reason: "ibv_bind_mw binds type 1 windows; type 2 takes a BIND_MW work request",
            });
        }
        if bind.access.contains(AccessFlags::ZERO_BASED) {
            return Err(VerbsError::InvalidAttribute {
                attr: "mw_access_flags",
                reason: "a type 1 window cannot be zero-based",
            });
        }
        let old = mw.rkey();
        let new_rkey = inc_rkey(old);
        let wr = SendWr {
            wr_id: bind.wr_id,
            sg_list: &[],
            opcode: WrOpcode::BindMw {
                mw_rkey: old,
                new_rkey,
                bind: MwBindInfo {
                    mr_lkey: bind.mr.map_or(0, |m| m.lkey()),
                    addr: bind.addr,
                    length: bind.length,
                    access: bind.access,
                },
            },
            send_flags: bind.send_flags,
        };
        self.post_send(&[wr]).map_err(|e| e.error)?;
        Ok(new_rkey)
    }
}

impl Drop for MemoryWindow {
    fn drop(&mut self) {
        self.dev
            .mrs
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .dealloc_mw(&self.mw);
    }
}
