//! The engine's own copy of the device's QP table, keyed by a cheap hash, and the view of it
//! the transport's endpoint borrows (`QpSet`): a QP is lent under its own lock, with the
//! device's memory regions.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use super::device::{Device, QpEntry};
use crate::transport::{QpCore, QpSet};

/// Hashes a QP number for the engine's table: the keys are small local numbers, which a
/// multiplicative hash spreads well at a fraction of SipHash's cost per packet. A peer chooses
/// only which number it looks up, never what is inserted, so it cannot build collisions.
#[derive(Default, Clone, Copy)]
pub(super) struct QpnHasher(u64);

impl std::hash::Hasher for QpnHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

pub(super) type QpTable = HashMap<u32, EngineQp, std::hash::BuildHasherDefault<QpnHasher>>;

/// The engine's view of one QP.
pub(super) struct EngineQp {
    pub(super) entry: QpEntry,
    /// Source port prepared on the link for this QP.
    pub(super) port: Option<u16>,
    /// The deadline this QP has on the heap, if any.
    pub(super) armed: Option<Duration>,
    /// Whether the QP is on the work list.
    pub(super) queued: bool,
}

/// The engine's QP table as the endpoint sees it: a QP is lent under its own lock, with the
/// device's memory regions (read-locked after the QP, the order every path takes). A QP
/// created since the last refresh is found by refreshing on a miss (a cheap check otherwise).
pub(super) struct EngineQps<'e> {
    pub(super) dev: &'e Device,
    pub(super) generation: &'e mut u64,
    pub(super) qps: &'e mut QpTable,
}

impl QpSet for EngineQps<'_> {
    fn with_qp<R>(
        &mut self,
        qpn: u32,
        f: impl FnOnce(&mut QpCore, &crate::transport::MrTable) -> R,
    ) -> Option<R> {
        // One lookup for a QP the table has (every packet but a new QP's first).
        if let Some(q) = self.qps.get(&qpn) {
            return Some(lend(self.dev, q, f));
        }
        let g = self.dev.qps_generation.load(Ordering::Acquire);
        if g != *self.generation {
            sync_table(self.dev, self.generation, self.qps);
        }
        let q = self.qps.get(&qpn)?;
        Some(lend(self.dev, q, f))
    }

    fn multicast_members(&mut self, group: std::net::IpAddr) -> crate::transport::Members {
        self.dev
            .groups
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .members(group)
    }
}

/// Runs `f` on the QP `q` under its lock, with the device's memory regions read-locked.
fn lend<R>(
    dev: &Device,
    q: &EngineQp,
    f: impl FnOnce(&mut QpCore, &crate::transport::MrTable) -> R,
) -> R {
    let mut core = lock(&q.entry.core);
    let mrs = dev.mrs.read().unwrap_or_else(|e| e.into_inner());
    f(&mut core, &mrs)
}

/// Copies the device's QP table (keeping what the engine knows of QPs it had), on split
/// borrows so that it can run while the receive batch is borrowed.
pub(super) fn sync_table(dev: &Device, generation: &mut u64, qps: &mut QpTable) {
    *generation = dev.qps_generation.load(Ordering::Acquire);
    let table = dev.qps.read().unwrap_or_else(|e| e.into_inner());
    qps.retain(|qpn, q| {
        table
            .get(qpn)
            .is_some_and(|e| Arc::ptr_eq(&e.core, &q.entry.core))
    });
    for (qpn, e) in table.iter() {
        qps.entry(*qpn).or_insert_with(|| EngineQp {
            entry: e.clone(),
            port: None,
            armed: None,
            queued: false,
        });
    }
}

/// A QP's lock, poison or not (a panicked holder leaves the QP as it was).
pub(super) fn lock(core: &std::sync::Mutex<QpCore>) -> MutexGuard<'_, QpCore> {
    core.lock().unwrap_or_else(|e| e.into_inner())
}
