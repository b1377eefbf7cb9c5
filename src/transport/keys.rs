//! The key table of a device context: memory regions and windows by key.
//!
//! Keys follow rxe (rxe_mr.c): `key = index << 8 | variant`, where `index` names the table slot
//! and the low byte is drawn from the kernel's random generator each time a slot is (re)used,
//! differing from the slot's previous one (rxe_get_next_key), so a stale key from a
//! deregistered region never matches the slot's next one and a peer that learned one key
//! cannot derive another. The rkey equals the lkey (as mlx5 gives them; rxe 6.1 gives 0 to a
//! region without remote rights): a region that gains remote rights through `ibv_rereg_mr`
//! keeps the keys a peer already holds (spec-notes/beyond-rxe.md rule 5), and one without
//! them is refused by its rights ([`Mr::check`]), not by its key.
//!
//! Memory windows (mw.rs) live in the same table, in their own index range: a key with the
//! top bit set names a window.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use super::mr::{Mr, MrFault};
use super::mw::{key_is_mw, Mw, MwType};
use super::params::{MAX_MR, MAX_MW, MW_INDEX_BASE};
use crate::ib::AccessFlags;
use crate::memory::SharedBytes;

/// The memory regions of a device context, indexed by key.
#[derive(Debug, Default)]
pub struct MrTable {
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Memory windows: slot `i` holds index `MW_INDEX_BASE + i`.
    mw_slots: Vec<MwSlot>,
    mw_free: Vec<u32>,
}

#[derive(Debug, Default)]
struct MwSlot {
    mw: Option<Arc<Mw>>,
    variant: Option<u8>,
}

/// Why a region could not be deregistered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeregFault {
    /// No live region has the key.
    UnknownKey,
    /// Memory windows are bound to it (IBTA 10.6.7.2.6; rxe_dereg_mr answers EINVAL).
    WindowsBound,
}

#[derive(Debug, Default)]
struct Slot {
    mr: Option<Arc<Mr>>,
    /// Low byte of the key last issued from this slot (none before the first).
    variant: Option<u8>,
}

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
                // Index 0 is never used, so that no key is 0 (a peer's rkey 0 names no region).
                if self.slots.is_empty() {
                    self.slots.push(Slot::default());
                }
                self.slots.push(Slot::default());
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        let variant = next_variant(slot.variant);
        slot.variant = Some(variant);
        let lkey = (index << 8) | u32::from(variant);
        let mr = Arc::new(Mr {
            storage,
            iova,
            lkey,
            rkey: lkey,
            access,
            pd,
            num_mw: AtomicU32::new(0),
            live: AtomicBool::new(true),
        });
        slot.mr = Some(Arc::clone(&mr));
        Some(mr)
    }

    /// `ibv_rereg_mr` in place: the live region `lkey` becomes one over `storage` at `iova`
    /// in `pd` with rights `access`, under the same keys; the old one is no longer live (an
    /// operation still holding it finishes). `None` if no live region has the key.
    pub fn replace(
        &mut self,
        lkey: u32,
        pd: u32,
        storage: Arc<SharedBytes>,
        iova: u64,
        access: AccessFlags,
    ) -> Option<Arc<Mr>> {
        let slot = self.slots.get_mut((lkey >> 8) as usize)?;
        let old = slot
            .mr
            .as_ref()
            .filter(|mr| mr.lkey == lkey && !key_is_mw(lkey))?;
        let mr = Arc::new(Mr {
            storage,
            iova,
            lkey,
            rkey: old.rkey,
            access,
            pd,
            num_mw: AtomicU32::new(0),
            live: AtomicBool::new(true),
        });
        old.live.store(false, Ordering::Release);
        slot.mr = Some(Arc::clone(&mr));
        Some(mr)
    }

    /// Removes the region with local key `lkey`, windows bound or not (an application that
    /// drops its handle). In-flight operations holding it finish normally; new lookups fail,
    /// and so do accesses through windows still bound to it.
    pub fn deregister(&mut self, lkey: u32) -> Option<Arc<Mr>> {
        if key_is_mw(lkey) {
            return None;
        }
        let index = (lkey >> 8) as usize;
        let slot = self.slots.get_mut(index)?;
        match &slot.mr {
            Some(mr) if mr.lkey == lkey => {
                self.free.push(index as u32);
                let mr = slot.mr.take()?;
                mr.live.store(false, Ordering::Release);
                Some(mr)
            }
            _ => None,
        }
    }

    /// `ibv_dereg_mr` as rxe answers it: refused while memory windows are bound to the region
    /// (IBTA 10.6.7.2.6).
    pub fn try_deregister(&mut self, lkey: u32) -> Result<Arc<Mr>, DeregFault> {
        let mr = self.by_lkey(lkey).ok_or(DeregFault::UnknownKey)?;
        if mr.bound_windows() > 0 {
            return Err(DeregFault::WindowsBound);
        }
        self.deregister(lkey).ok_or(DeregFault::UnknownKey)
    }

    /// `ibv_alloc_mw`: a new window of `mw_type` in protection domain `pd`, with a key byte
    /// drawn as for regions. Returns `None` when the table is full.
    pub fn alloc_mw(&mut self, pd: u32, mw_type: MwType) -> Option<Arc<Mw>> {
        let i = match self.mw_free.pop() {
            Some(i) => i,
            None => {
                if self.mw_slots.len() >= MAX_MW {
                    return None;
                }
                self.mw_slots.push(MwSlot::default());
                (self.mw_slots.len() - 1) as u32
            }
        };
        let slot = &mut self.mw_slots[i as usize];
        let variant = next_variant(slot.variant);
        slot.variant = Some(variant);
        let rkey = ((MW_INDEX_BASE + i) << 8) | u32::from(variant);
        let mw = Arc::new(Mw::new(mw_type, pd, rkey));
        slot.mw = Some(Arc::clone(&mw));
        Some(mw)
    }

    /// `ibv_dealloc_mw`: the window stops serving (and lets go of its region) and its slot is
    /// freed; returns false if `mw` is not in the table.
    pub fn dealloc_mw(&mut self, mw: &Arc<Mw>) -> bool {
        let Some(i) = Self::mw_slot(mw.rkey()) else {
            return false;
        };
        let Some(slot) = self.mw_slots.get_mut(i) else {
            return false;
        };
        if !slot.mw.as_ref().is_some_and(|m| Arc::ptr_eq(m, mw)) {
            return false;
        }
        slot.mw = None;
        mw.dealloc();
        self.mw_free.push(i as u32);
        true
    }

    /// QP `qpn` is destroyed: the type 2 windows bound to it serve no QP from now on (see
    /// `Mw::forget_qp`).
    pub fn forget_qp(&self, qpn: u32) {
        for mw in self.mw_slots.iter().filter_map(|s| s.mw.as_ref()) {
            mw.forget_qp(qpn);
        }
    }

    fn mw_slot(key: u32) -> Option<usize> {
        (key >> 8).checked_sub(MW_INDEX_BASE).map(|i| i as usize)
    }

    /// The window whose table index `key` carries (whatever its key byte: a bind or an
    /// invalidation checks the whole key under the window's lock).
    pub fn mw_by_index(&self, key: u32) -> Option<&Arc<Mw>> {
        let i = Self::mw_slot(key)?;
        self.mw_slots.get(i)?.mw.as_ref()
    }

    /// Resolves a remote access by QP `qpn` of protection domain `pd`: the region or window of
    /// `rkey`, with rights `need` over `va .. va + len` (rxe check_rkey: a window key goes to
    /// the window, any other to the regions). Returns the region and the offset.
    pub fn resolve_remote_qp(
        &self,
        pd: u32,
        qpn: u32,
        rkey: u32,
        va: u64,
        len: u64,
        need: AccessFlags,
    ) -> Result<(Arc<Mr>, u64), MrFault> {
        if key_is_mw(rkey) {
            let mw = self.mw_by_index(rkey).ok_or(MrFault::UnknownKey)?;
            return mw.resolve(pd, qpn, rkey, va, len, need);
        }
        let (mr, off) = self.resolve_remote(pd, rkey, va, len, need)?;
        Ok((Arc::clone(mr), off))
    }

    /// Finds a live region by its local key.
    pub fn by_lkey(&self, lkey: u32) -> Option<&Arc<Mr>> {
        if key_is_mw(lkey) {
            return None;
        }
        let slot = self.slots.get((lkey >> 8) as usize)?;
        slot.mr.as_ref().filter(|mr| mr.lkey == lkey)
    }

    /// Finds a live region by its remote key (rkey 0 never matches).
    pub fn by_rkey(&self, rkey: u32) -> Option<&Arc<Mr>> {
        if rkey == 0 || key_is_mw(rkey) {
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

/// A random key byte, other than `last` (rxe_get_next_key: `do get_random_bytes(&key, 1)
/// while (key == last_key)`).
fn next_variant(last: Option<u8>) -> u8 {
    loop {
        let v = crate::random::u8();
        if Some(v) != last {
            return v;
        }
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
    fn replace_keeps_the_keys_and_retires_the_old_region() {
        let (mut t, a) = table_with(AccessFlags::LOCAL_WRITE);
        assert_eq!(a.rkey, a.lkey, "an rkey even without remote rights");
        let need = AccessFlags::REMOTE_WRITE;
        assert_eq!(
            t.resolve_remote(1, a.rkey, 0x10_0000, 8, need).err(),
            Some(MrFault::AccessDenied)
        );
        let b = t
            .replace(
                a.lkey,
                2,
                Arc::clone(&a.storage),
                a.iova,
                need | AccessFlags::LOCAL_WRITE,
            )
            .unwrap();
        assert_eq!((b.lkey, b.rkey, b.pd), (a.lkey, a.rkey, 2));
        assert!(!a.is_live() && b.is_live());
        assert_eq!(
            t.resolve_remote(2, a.rkey, 0x10_0000, 8, need).unwrap().1,
            0
        );
        assert_eq!(
            t.resolve_remote(1, a.rkey, 0x10_0000, 8, need).err(),
            Some(MrFault::WrongPd)
        );
        assert!(t
            .replace(a.lkey ^ 1, 1, Arc::clone(&a.storage), 0, need)
            .is_none());
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
        assert_eq!(b.rkey, b.lkey, "the rkey is the lkey, remote rights or not");
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

    #[test]
    fn key_bytes_are_random_and_never_repeat_the_slots_last() {
        let mut t = MrTable::new();
        let mut keys = Vec::new();
        for _ in 0..100_000 {
            let mr = t
                .register(
                    1,
                    Arc::new(SharedBytes::new(8)),
                    0,
                    AccessFlags::REMOTE_READ,
                )
                .unwrap();
            keys.push(mr.rkey);
            t.deregister(mr.lkey).unwrap();
        }
        // One slot throughout: only the key byte changes.
        assert!(keys.iter().all(|k| k >> 8 == keys[0] >> 8));
        let bytes: Vec<u64> = keys.iter().map(|k| u64::from(k & 0xff)).collect();
        assert!(
            bytes.windows(2).all(|w| w[0] != w[1]),
            "a key repeats its slot's last"
        );
        assert!(
            !crate::random::tests::affine(&bytes, 8),
            "keys follow x' = a x + c"
        );
        // Uniform over the 255 values that differ from the last: every byte appears about
        // 392 times; a chi-squared statistic over 256 cells beyond 400 (p < 1e-7 for a
        // uniform source) means a biased or patterned source.
        let mut count = [0f64; 256];
        for &b in &bytes {
            count[b as usize] += 1.0;
        }
        let e = bytes.len() as f64 / 256.0;
        let chi2: f64 = count.iter().map(|c| (c - e) * (c - e) / e).sum();
        assert!(chi2 < 400.0, "chi2 {chi2}");
        // The byte that follows a given one is not predictable either: over the pairs
        // starting at the most common byte, followers spread over many values.
        let lead = (0..256).max_by_key(|&i| count[i] as u64).unwrap() as u64;
        let followers: std::collections::HashSet<u64> = bytes
            .windows(2)
            .filter(|w| w[0] == lead)
            .map(|w| w[1])
            .collect();
        assert!(followers.len() > 150, "{} followers", followers.len());
    }
}
