//! Memory regions over the application's own memory (`ibv_reg_mr` as the libibverbs shim
//! implements it), and the completion-event hook of its completion channels.
//!
//! The Rust API keeps its owned regions ([`MemoryRegion`] from
//! [`ProtectionDomain::register_mr`]); only the C shim registers foreign memory, through the
//! unsafe [`ProtectionDomain::register_foreign_mr`] whose contract is that of
//! [`crate::memory::foreign`].

use std::sync::Arc;

use super::{CompletionQueue, MemoryRegion, ProtectionDomain};
use crate::ib::{AccessFlags, Result, VerbsError};
use crate::memory::mapping::{self, MappingFault};
use crate::memory::SharedBytes;

/// The rights that write the memory (ib_access_writable): registering with one of them needs
/// writable pages.
const WRITING: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_ATOMIC)
    .union(AccessFlags::MW_BIND);

impl ProtectionDomain {
    /// `ibv_reg_mr` / `ibv_reg_mr_iova` on application memory: registers `len` bytes at `ptr`,
    /// addressed by the peer (and by SGEs) as `iova ..`. Dropping the region deregisters it
    /// and waits until the engine no longer touches the memory.
    ///
    /// # Safety
    ///
    /// `ptr .. ptr + len` must stay the application's memory (not freed and reused for Rust
    /// objects of this process) until the returned region is dropped, and the application's
    /// own accesses to it meanwhile are its business as the memory model of [`crate::memory`]
    /// says (a buffer is the engine's between post and completion). It may be unmapped or
    /// protected meanwhile: the engine's accesses then fail (remote access errors), as on an
    /// on-demand-paging device. Registration fails with [`VerbsError::NotMapped`],
    /// [`VerbsError::NotReadable`] or [`VerbsError::NotWritable`] where rxe's pinning would
    /// (EFAULT), unless `access` has [`AccessFlags::ON_DEMAND`]: an on-demand region's memory
    /// may be mapped later, so nothing is checked, and a null `ptr` with `len == usize::MAX`
    /// is the implicit region over the whole address space (spec-notes/beyond-rxe.md rules 1
    /// and 2).
    pub unsafe fn register_foreign_mr(
        &self,
        ptr: *mut u8,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MemoryRegion> {
        self.dev.check_open()?;
        super::mr::remote_needs_local_write(access)?;
        let on_demand = access.contains(AccessFlags::ON_DEMAND);
        let implicit = on_demand && ptr.is_null() && len == usize::MAX;
        if ptr.is_null() && len != 0 && !implicit {
            return Err(VerbsError::InvalidAttribute {
                attr: "addr",
                reason: "null",
            });
        }
        // rxe pins the pages here and fails where it cannot (EFAULT): softroce asks the kernel
        // instead (crate::memory::mapping), writable pages for a right that writes
        // (ib_access_writable).
        let write = access.intersects(WRITING);
        if !on_demand {
            check_mapped(ptr, len, write)?;
        }
        // SAFETY: ForeignBytes::new's contract is the caller's (valid until revoked): the
        // region built on this storage revokes it in MemoryRegion's Drop, and the caller keeps
        // the memory valid until that drop.
        let storage = Arc::new(unsafe { SharedBytes::foreign(ptr, len) });
        MemoryRegion::register_storage(&self.dev, self.handle, storage, iova, access)
    }
}

impl MemoryRegion {
    /// `ibv_rereg_mr` with `IBV_REREG_MR_CHANGE_TRANSLATION` on application memory: the
    /// region, under the keys it has, now over `len` bytes at `ptr` (addressed as `ptr`), in
    /// `pd` if given, with rights `access`; the new memory is checked as
    /// [`ProtectionDomain::register_foreign_mr`] checks it, and the old memory is no longer
    /// touched once this returns. On error the region is as it was.
    ///
    /// # Safety
    ///
    /// [`ProtectionDomain::register_foreign_mr`]'s contract for `ptr .. ptr + len`.
    pub unsafe fn modify_translation(
        &mut self,
        pd: Option<&ProtectionDomain>,
        ptr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<()> {
        if ptr.is_null() || len == 0 {
            return Err(VerbsError::InvalidAttribute {
                attr: "addr",
                reason: "null or empty",
            });
        }
        if !access.contains(AccessFlags::ON_DEMAND) {
            check_mapped(ptr, len, access.intersects(WRITING))?;
        }
        // SAFETY: ForeignBytes::new's contract is the caller's (valid until revoked): the
        // region revokes this storage when it is dropped or given other memory.
        let storage = Arc::new(unsafe { SharedBytes::foreign(ptr, len) });
        self.replace(pd, Some((storage, ptr as u64)), access)
    }
}

/// The registration-time check that stands in for rxe's pinning ([`mapping`]).
fn check_mapped(ptr: *mut u8, len: usize, write: bool) -> Result<()> {
    let (addr, bytes) = (ptr as u64, len as u64);
    mapping::check(ptr as usize, len, write).map_err(|f| match f {
        MappingFault::NotMapped => VerbsError::NotMapped { addr, len: bytes },
        MappingFault::NotReadable => VerbsError::NotReadable { addr, len: bytes },
        MappingFault::NotWritable => VerbsError::NotWritable { addr, len: bytes },
    })
}

/// What `ibv_advise_mr` asks of a range (`enum ibv_advise_mr_advice`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// `IBV_ADVISE_MR_ADVICE_PREFETCH`: fault the pages in for reading.
    Prefetch,
    /// `IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE`: fault them in for writing (the region must
    /// grant local write).
    PrefetchWrite,
    /// `IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT`: map what is already resident, fault nothing
    /// in; softroce maps nothing ahead, so only the range is checked.
    PrefetchNoFault,
}

/// Why `ibv_advise_mr` refused an SGE (the man page's errno in brackets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdviseFault {
    /// No on-demand region of the PD has the lkey (EFAULT).
    UnknownKey,
    /// The range is not inside the region (EFAULT).
    OutOfRange,
    /// A write prefetch of a region registered without local write (EPERM).
    NotWritable,
    /// A page of the range could not be faulted in: not mapped, or protected (EFAULT).
    Fault,
}

impl ProtectionDomain {
    /// `ibv_advise_mr` for one SGE: `len` bytes at `addr` of the on-demand region `lkey` of
    /// this PD (spec-notes/beyond-rxe.md rule 3).
    pub fn advise_mr(
        &self,
        lkey: u32,
        addr: u64,
        len: u32,
        advice: Advice,
    ) -> core::result::Result<(), AdviseFault> {
        let (storage, off) = {
            let mrs = self.dev.mrs.read().unwrap_or_else(|e| e.into_inner());
            let mr = mrs
                .by_lkey(lkey)
                .filter(|mr| mr.pd == self.handle && mr.access.contains(AccessFlags::ON_DEMAND))
                .ok_or(AdviseFault::UnknownKey)?;
            let off = mr
                .check(addr, u64::from(len), AccessFlags::EMPTY)
                .map_err(|_| AdviseFault::OutOfRange)?;
            if advice == Advice::PrefetchWrite && !mr.access.contains(AccessFlags::LOCAL_WRITE) {
                return Err(AdviseFault::NotWritable);
            }
            (Arc::clone(&mr.storage), off)
        };
        if advice == Advice::PrefetchNoFault {
            return Ok(());
        }
        storage
            .prefetch(off, u64::from(len), advice == Advice::PrefetchWrite)
            .map_err(|_| AdviseFault::Fault)
    }
}

impl CompletionQueue {
    /// Calls `f` from the engine each time completions are added to this queue (after they
    /// are visible to `poll`). The shim arms its completion channel's eventfd with it. Only
    /// the first hook set stays; returns false when one was already set.
    pub fn set_event_hook(&self, f: Box<dyn Fn() + Send + Sync>) -> bool {
        self.inner.set_event_hook(f)
    }
}
