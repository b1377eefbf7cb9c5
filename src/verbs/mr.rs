//! Memory regions (`ibv_mr`).
//!
//! softroce allocates the memory of a region itself, as an array of atomic words
//! ([`SharedBytes`]), because the peer writes into it through the network while the
//! application may be reading it: with a plain `&mut [u8]` that would be a data race, which is
//! undefined behaviour in Rust. The application reads and writes the region through copying
//! methods ([`read`](MemoryRegion::read), [`write`](MemoryRegion::write)) and 8-byte atomics;
//! there is no unsafe escape hatch to a raw slice. The data of a completed operation is
//! visible once its completion has been polled (the CQ's lock orders it), as with a real HCA.

use std::sync::Arc;

use super::device::ProtectionDomain;
use crate::driver::device::Device;
use crate::ib::{AccessFlags, Result, VerbsError};
use crate::memory::SharedBytes;
use crate::transport::Mr;

/// A registered memory region. Deregistered when dropped.
#[derive(Debug)]
pub struct MemoryRegion {
    pub(crate) dev: Arc<Device>,
    pub(crate) mr: Arc<Mr>,
}

impl MemoryRegion {
    pub(crate) fn register(
        dev: &Arc<Device>,
        pd: u32,
        len: usize,
        access: AccessFlags,
    ) -> Result<Self> {
        remote_needs_local_write(access)?;
        let storage = Arc::new(
            SharedBytes::try_new(len).ok_or(VerbsError::OutOfMemory { bytes: len as u64 })?,
        );
        let iova = storage.addr();
        Self::register_storage(dev, pd, storage, iova, access)
    }

    /// Registers `storage` (owned or the application's) at `iova`.
    pub(crate) fn register_storage(
        dev: &Arc<Device>,
        pd: u32,
        storage: Arc<SharedBytes>,
        iova: u64,
        access: AccessFlags,
    ) -> Result<Self> {
        refuse_flush_persistent(access)?;
        let mr = dev
            .mrs
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .register(pd, storage, iova, access)
            .ok_or(VerbsError::ExceedsDeviceLimit {
                what: "memory regions",
                requested: crate::transport::mr::MAX_MR as u64,
                limit: crate::transport::mr::MAX_MR as u64 - 1,
            })?;
        Ok(MemoryRegion {
            dev: Arc::clone(dev),
            mr,
        })
    }

    /// Local key, for SGEs.
    pub fn lkey(&self) -> u32 {
        self.mr.lkey
    }

    /// Remote key, for the peer's RDMA operations (the lkey; used only as the rights allow).
    pub fn rkey(&self) -> u32 {
        self.mr.rkey
    }

    /// Virtual address of the first byte (what SGEs and the peer's RETH address).
    pub fn addr(&self) -> u64 {
        self.mr.iova
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.mr.storage.len()
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.mr.storage.is_empty()
    }

    /// Access rights.
    pub fn access(&self) -> AccessFlags {
        self.mr.access
    }

    /// An SGE covering `len` bytes at `offset` of this region.
    pub fn sge(&self, offset: u64, len: u32) -> crate::ib::Sge {
        crate::ib::Sge {
            addr: self.mr.iova + offset,
            length: len,
            lkey: self.mr.lkey,
        }
    }

    /// Copies `dst.len()` bytes at `offset` out of the region.
    pub fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.mr.storage.read(offset, dst).map_err(access_error)
    }

    /// Copies `src` into the region at `offset`.
    pub fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        self.mr.storage.write(offset, src).map_err(access_error)
    }

    /// Sets `len` bytes at `offset` to `value`.
    pub fn fill(&self, offset: u64, len: u64, value: u8) -> Result<()> {
        self.mr
            .storage
            .fill(offset, len, value)
            .map_err(access_error)
    }

    /// Copies `len` bytes at `offset` into a new vector.
    pub fn to_vec(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        self.mr.storage.to_vec(offset, len).map_err(access_error)
    }

    /// Atomically reads the 8-byte word at `offset` (8-byte aligned), host byte order.
    pub fn load_u64(&self, offset: u64) -> Result<u64> {
        self.mr.storage.load_u64(offset).map_err(access_error)
    }

    /// Atomically writes the 8-byte word at `offset` (8-byte aligned), host byte order.
    pub fn store_u64(&self, offset: u64, value: u64) -> Result<()> {
        self.mr
            .storage
            .store_u64(offset, value)
            .map_err(access_error)
    }

    /// `ibv_dereg_mr` with its answer: refused while memory windows are bound to the region
    /// (IBTA 10.6.7.2.6; rxe answers EINVAL), and then the region is handed back unchanged.
    /// (Dropping the handle deregisters in any case; windows still bound to it then serve
    /// nothing.)
    pub fn deregister(self) -> core::result::Result<(), (MemoryRegion, VerbsError)> {
        if self.mr.bound_windows() > 0 {
            return Err((self, windows_bound()));
        }
        drop(self);
        Ok(())
    }

    /// Memory windows bound to the region now.
    pub fn bound_windows(&self) -> u32 {
        self.mr.bound_windows()
    }

    /// `ibv_rereg_mr` with new access rights: the same memory under new keys (the low byte of
    /// the key changes, so the old keys stop working).
    pub fn reregister(&mut self, access: AccessFlags) -> Result<()> {
        if self.mr.bound_windows() > 0 {
            return Err(windows_bound());
        }
        refuse_flush_persistent(access)?;
        let storage = Arc::clone(&self.mr.storage);
        let mut mrs = self.dev.mrs.write().unwrap_or_else(|e| e.into_inner());
        mrs.deregister(self.mr.lkey);
        self.mr = mrs
            .register(self.mr.pd, storage, self.mr.iova, access)
            .ok_or(VerbsError::ExceedsDeviceLimit {
                what: "memory regions",
                requested: crate::transport::mr::MAX_MR as u64,
                limit: crate::transport::mr::MAX_MR as u64 - 1,
            })?;
        Ok(())
    }
}

impl MemoryRegion {
    /// `ibv_rereg_mr` as the shim does it: the region in place, under the keys it has (a peer
    /// that holds them keeps them; spec-notes/beyond-rxe.md rule 5), moved to `pd` if given
    /// (`IBV_REREG_MR_CHANGE_PD`, a PD of the same device) with rights `access`. Refused while
    /// memory windows are bound to it, and for rights registration refuses.
    pub fn modify(&mut self, pd: Option<&ProtectionDomain>, access: AccessFlags) -> Result<()> {
        self.replace(pd, None, access)
    }

    /// [`MemoryRegion::modify`], and with `memory` (storage and the address the peer and
    /// SGEs use for it) over other bytes as well (`IBV_REREG_MR_CHANGE_TRANSLATION`): the
    /// old bytes are revoked before it returns, as `ibv_dereg_mr` revokes them. Work requests
    /// posted before the change that name the region fail where their data lands.
    pub(crate) fn replace(
        &mut self,
        pd: Option<&ProtectionDomain>,
        memory: Option<(Arc<SharedBytes>, u64)>,
        access: AccessFlags,
    ) -> Result<()> {
        if self.mr.bound_windows() > 0 {
            return Err(windows_bound());
        }
        refuse_flush_persistent(access)?;
        remote_needs_local_write(access)?;
        let pd = match pd {
            Some(pd) if !Arc::ptr_eq(&pd.dev, &self.dev) => {
                return Err(VerbsError::InvalidAttribute {
                    attr: "pd",
                    reason: "of another device",
                })
            }
            Some(pd) => pd.handle,
            None => self.mr.pd,
        };
        let old = Arc::clone(&self.mr.storage);
        let (storage, iova) = memory.unwrap_or_else(|| (Arc::clone(&old), self.mr.iova));
        self.mr = self
            .dev
            .mrs
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .replace(self.mr.lkey, pd, storage, iova, access)
            .ok_or(VerbsError::InvalidAttribute {
                attr: "memory region",
                reason: "deregistered",
            })?;
        if !Arc::ptr_eq(&old, &self.mr.storage) {
            old.revoke();
        }
        Ok(())
    }
}

/// IBTA 10.6.3.1 (and ibv_reg_mr's EINVAL): remote write or atomic access requires local
/// write.
pub(crate) fn remote_needs_local_write(access: AccessFlags) -> Result<()> {
    if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
        && !access.contains(AccessFlags::LOCAL_WRITE)
    {
        return Err(VerbsError::InvalidAttribute {
            attr: "access",
            reason: "REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE",
        });
    }
    Ok(())
}

/// rxe refuses persistent-flush access on memory that is not persistent memory (rxe_mr.c,
/// "Unable to register persistent access to non-pmem device": EINVAL); softroce has none.
fn refuse_flush_persistent(access: AccessFlags) -> Result<()> {
    if access.contains(AccessFlags::FLUSH_PERSISTENT) {
        return Err(VerbsError::InvalidAttribute {
            attr: "access",
            reason: "FLUSH_PERSISTENT needs persistent memory, which softroce has not",
        });
    }
    Ok(())
}

fn windows_bound() -> VerbsError {
    VerbsError::InvalidAttribute {
        attr: "memory region",
        reason: "memory windows are bound to it",
    }
}

fn access_error(e: crate::memory::AccessError) -> VerbsError {
    match e {
        crate::memory::AccessError::OutOfBounds { .. } => VerbsError::InvalidAttribute {
            attr: "offset",
            reason: "outside the memory region",
        },
        crate::memory::AccessError::Misaligned { .. } => VerbsError::InvalidAttribute {
            attr: "offset",
            reason: "not 8-byte aligned",
        },
        crate::memory::AccessError::Revoked => VerbsError::InvalidAttribute {
            attr: "memory region",
            reason: "deregistered",
        },
        crate::memory::AccessError::Fault => VerbsError::InvalidAttribute {
            attr: "memory region",
            reason: "the application's memory is unmapped or protected",
        },
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        self.dev
            .mrs
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .deregister(self.mr.lkey);
        // Application memory (the shim's regions): no access may follow the return of
        // ibv_dereg_mr, whatever still holds the region. No effect on owned memory.
        self.mr.storage.revoke();
    }
}

impl ProtectionDomain {
    /// `ibv_reg_mr`: allocates and registers `len` zeroed bytes with the given rights.
    ///
    /// The bytes are the allocator's zeroed pages, resident only once touched (rxe pins, and so
    /// faults in, every page at registration; here the first write to a page does, once).
    /// `VerbsError::OutOfMemory` if the allocator cannot give `len` bytes.
    pub fn register_mr(&self, len: usize, access: AccessFlags) -> Result<MemoryRegion> {
        self.dev.check_open()?;
        MemoryRegion::register(&self.dev, self.handle, len, access)
    }
}
