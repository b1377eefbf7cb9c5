//! Registered memory regions and their keys, as the transport sees them.
//!
//! Keys follow rxe (rxe_mr.c): `key = index << 8 | variant`, where `index` names the table slot
//! and the low byte changes every time a slot is (re)used, so a stale key from a deregistered
//! region never matches a new one. The rkey equals the lkey when the region grants any remote
//! access, and is 0 otherwise.

use std::sync::Arc;

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
    /// Remote key (0 when no remote access is granted).
    pub rkey: u32,
    /// Access rights.
    pub access: AccessFlags,
    /// Protection domain handle.
    pub pd: u32,
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

/// The memory regions of a device context, indexed by key.
#[derive(Debug, Default)]
pub struct MrTable {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

#[derive(Debug, Default)]
struct Slot {
    mr: Option<Arc<Mr>>,
    /// Low byte of the key last issued from this slot.
    variant: u8,
}

/// Largest number of live regions (the index must fit in the top 24 bits of a key).
pub const MAX_MR: usize = 1 << 24;

impl MrTable {
    /// An empty table.
    pub fn new() -> MrTable {
        MrTable::default()
    }

    /// Registers `storage` at virtual address `iova` in protection domain `pd`. Returns `None`
    /// when the table is full.
    pub fn register(
        &mut self,
        pd: u32,
        storage: Arc<SharedBytes>,
        iova: u64,
        access: AccessFlags,
    ) -> Option<Arc<Mr>> {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                if self.slots.len() >= MAX_MR - 1 {
                    return None;
                }
                // Index 0 is never used, so that no key is 0 (rkey 0 means "no remote access").
                if self.slots.is_empty() {
                    self.slots.push(Slot::default());
                }
                self.slots.push(Slot::default());
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.variant = slot.variant.wrapping_add(1);
        let lkey = (index << 8) | slot.variant as u32;
        let remote =
            AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
        let mr = Arc::new(Mr {
            storage,
            iova,
            lkey,
            rkey: if access.intersects(remote) { lkey } else { 0 },
            access,
            pd,
        });
        slot.mr = Some(Arc::clone(&mr));
        Some(mr)
    }

    /// Removes the region with local key `lkey`. In-flight operations holding it finish
    /// normally; new lookups fail.
    pub fn deregister(&mut self, lkey: u32) -> Option<Arc<Mr>> {
        let index = (lkey >> 8) as usize;
        let slot = self.slots.get_mut(index)?;
        match &slot.mr {
            Some(mr) if mr.lkey == lkey => {
                self.free.push(index as u32);
                slot.mr.take()
            }
            _ => None,
        }
    }

    /// Finds a live region by its local key.
    pub fn by_lkey(&self, lkey: u32) -> Option<&Arc<Mr>> {
        let slot = self.slots.get((lkey >> 8) as usize)?;
        slot.mr.as_ref().filter(|mr| mr.lkey == lkey)
    }

    /// Finds a live region by its remote key (rkey 0 never matches).
    pub fn by_rkey(&self, rkey: u32) -> Option<&Arc<Mr>> {
        if rkey == 0 {
            return None;
        }
        let slot = self.slots.get((rkey >> 8) as usize)?;
        slot.mr.as_ref().filter(|mr| mr.rkey == rkey)
    }

    /// Resolves a remote access: the region of `rkey` in protection domain `pd`, with rights
    /// `need` over `va .. va + len`. Returns the region and the offset.
    pub fn resolve_remote(
        &self,
        pd: u32,
        rkey: u32,
        va: u64,
        len: u64,
        need: AccessFlags,
    ) -> Result<(&Arc<Mr>, u64), MrFault> {
        let mr = self.by_rkey(rkey).ok_or(MrFault::UnknownKey)?;
        if mr.pd != pd {
            return Err(MrFault::WrongPd);
        }
        let off = mr.check(va, len, need)?;
        Ok((mr, off))
    }

    /// Number of live regions.
    pub fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.mr.is_some()).count()
    }

    /// Whether no region is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table_with(access: AccessFlags) -> (MrTable, Arc<Mr>) {
        let mut t = MrTable::new();
        let mr = t
            .register(1, Arc::new(SharedBytes::new(4096)), 0x10_0000, access)
            .unwrap();
        (t, mr)
    }

    #[test]
    fn keys_change_on_reregistration() {
        let (mut t, a) = table_with(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE);
        assert_eq!(a.lkey, a.rkey);
        assert_ne!(a.lkey, 0);
        let old = a.lkey;
        t.deregister(old).unwrap();
        assert!(t.by_lkey(old).is_none());
        let b = t
            .register(
                1,
                Arc::new(SharedBytes::new(8)),
                0,
                AccessFlags::LOCAL_WRITE,
            )
            .unwrap();
        assert_eq!(b.lkey >> 8, old >> 8, "slot reused");
        assert_ne!(b.lkey, old, "low byte differs");
        assert_eq!(b.rkey, 0, "no remote access, no rkey");
        assert!(t.by_rkey(old).is_none(), "stale key rejected");
        assert!(t.by_rkey(0).is_none());
    }

    #[test]
    fn remote_resolution_checks_pd_access_and_bounds() {
        let (t, mr) = table_with(AccessFlags::REMOTE_READ);
        let k = mr.rkey;
        assert_eq!(
            t.resolve_remote(1, k, 0x10_0000, 4096, AccessFlags::REMOTE_READ)
                .map(|(_, o)| o),
            Ok(0)
        );
        assert_eq!(
            t.resolve_remote(1, k, 0x10_0010, 16, AccessFlags::REMOTE_READ)
                .map(|(_, o)| o),
            Ok(16)
        );
        let e = |r: Result<(&Arc<Mr>, u64), MrFault>| r.err();
        assert_eq!(
            e(t.resolve_remote(1, k, 0x10_0000, 1, AccessFlags::REMOTE_WRITE)),
            Some(MrFault::AccessDenied)
        );
        assert_eq!(
            e(t.resolve_remote(2, k, 0x10_0000, 1, AccessFlags::REMOTE_READ)),
            Some(MrFault::WrongPd)
        );
        assert_eq!(
            e(t.resolve_remote(1, k, 0x0F_FFFF, 2, AccessFlags::REMOTE_READ)),
            Some(MrFault::OutOfRange)
        );
        assert_eq!(
            e(t.resolve_remote(1, k, 0x10_0001, 4096, AccessFlags::REMOTE_READ)),
            Some(MrFault::OutOfRange)
        );
        assert_eq!(
            e(t.resolve_remote(1, k, u64::MAX, 2, AccessFlags::REMOTE_READ)),
            Some(MrFault::OutOfRange)
        );
        assert_eq!(
            e(t.resolve_remote(1, k ^ 1, 0x10_0000, 1, AccessFlags::REMOTE_READ)),
            Some(MrFault::UnknownKey)
        );
    }
}
