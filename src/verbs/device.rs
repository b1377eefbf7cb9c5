//! The device context (`ibv_context`) and protection domains (`ibv_pd`).
//!
//! A context is one RoCE "port": a local IP address (its GID) and a UDP socket on the RoCEv2
//! port, with an engine thread that runs the transport for every QP of the context. Contexts
//! are independent: two in one process (or two processes) on 127.0.0.1 and 127.0.0.2 talk to
//! each other over loopback as two RDMA devices would over a wire.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;

use super::cq::{CompletionQueue, CqInner};
use super::mr::MemoryRegion;
use super::qp::{QpInitAttr, QueuePair};
use super::qp_attr::{check_cap, DeviceLimits};
use super::{AccessFlags, Gid, QpType, Result, VerbsError};
use crate::transport::{Counters, MrTable, QpConfig, QpCore};

/// What the engine needs to know about a QP.
#[derive(Debug, Clone)]
pub(crate) struct QpEntry {
    pub(crate) core: Arc<Mutex<QpCore>>,
    pub(crate) send_cq: Arc<CqInner>,
    pub(crate) recv_cq: Arc<CqInner>,
}

/// State shared by the context's handles and its engine thread.
#[derive(Debug)]
pub(crate) struct Device {
    pub(crate) local: SocketAddr,
    pub(crate) remote_port: u16,
    pub(crate) limits: DeviceLimits,
    pub(crate) counters: Arc<Counters>,
    pub(crate) mrs: RwLock<MrTable>,
    pub(crate) qps: RwLock<HashMap<u32, QpEntry>>,
    /// Bumped whenever `qps` changes, so that the engine refreshes its own copy of the table
    /// only then and looks QPs up without a lock on the packet path.
    pub(crate) qps_generation: AtomicU64,
    /// QPs with new work for the engine; the engine takes the whole list on each pass.
    pub(crate) doorbell: Mutex<Vec<u32>>,
    /// The engine is about to wait or waiting in poll: a doorbell must wake it. While it
    /// runs, it reads the doorbell before it next waits, so no wake (a system call) is needed.
    pub(crate) engine_sleeping: AtomicBool,
    pub(crate) waker: mio::Waker,
    pub(crate) closed: AtomicBool,
    /// Busy-poll mode: the engine spins on the socket and CQ waits spin instead of sleeping.
    pub(crate) busy_poll: bool,
    next_qpn: AtomicU32,
    next_handle: AtomicU32,
}

impl Device {
    pub(crate) fn new(
        local: SocketAddr,
        remote_port: u16,
        waker: mio::Waker,
        busy_poll: bool,
    ) -> Device {
        Device {
            local,
            remote_port,
            limits: DeviceLimits::default(),
            counters: Arc::new(Counters::default()),
            mrs: RwLock::new(MrTable::new()),
            qps: RwLock::new(HashMap::new()),
            qps_generation: AtomicU64::new(0),
            doorbell: Mutex::new(Vec::new()),
            engine_sleeping: AtomicBool::new(false),
            waker,
            closed: AtomicBool::new(false),
            busy_poll,
            // rxe hands out QPNs from 17 (0x11) upwards; 0 and 1 are the special QPs.
            next_qpn: AtomicU32::new(0x11),
            next_handle: AtomicU32::new(1),
        }
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(VerbsError::DeviceClosed)
        } else {
            Ok(())
        }
    }

    /// Tells the engine that QP `qpn` has work.
    pub(crate) fn ring(&self, qpn: u32) {
        let was_empty = {
            let mut d = self.doorbell.lock().unwrap_or_else(|e| e.into_inner());
            let e = d.is_empty();
            d.push(qpn);
            e
        };
        // The engine sets `engine_sleeping` before it last looks at the doorbell and then
        // waits; SeqCst on both sides means that either it saw our entry or we see the flag.
        // A non-empty list was rung by someone who made the same check.
        if was_empty && self.engine_sleeping.load(Ordering::SeqCst) {
            let _ = self.waker.wake();
        }
    }

    pub(crate) fn remove_qp(&self, qpn: u32) {
        self.qps
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&qpn);
        self.qps_generation.fetch_add(1, Ordering::AcqRel);
        // The engine drops its copy of the entry on its next pass.
        self.ring(qpn);
    }

    fn alloc_qpn(&self) -> Result<u32> {
        let qps = self.qps.read().unwrap_or_else(|e| e.into_inner());
        for _ in 0..0x100_0000 {
            let n = self.next_qpn.fetch_add(1, Ordering::Relaxed) & 0xFF_FFFF;
            if n >= 2 && !qps.contains_key(&n) {
                return Ok(n);
            }
        }
        Err(VerbsError::ExceedsDeviceLimit {
            what: "queue pairs",
            requested: 0x100_0000,
            limit: 0xFF_FFFE,
        })
    }

    fn alloc_handle(&self) -> u32 {
        self.next_handle.fetch_add(1, Ordering::Relaxed)
    }
}

/// A device context: the entry point of the verbs API.
#[derive(Debug)]
pub struct Context {
    pub(crate) dev: Arc<Device>,
    pub(crate) engine: Option<JoinHandle<()>>,
}

impl Context {
    /// The local address (IP and RoCEv2 UDP port).
    pub fn local_addr(&self) -> SocketAddr {
        self.dev.local
    }

    /// The GID table: index 0 is the context's address (IPv4-mapped for IPv4); index 1 is
    /// the same GID, so that `-g 1`, the usual RoCEv2 index on rxe, works as users expect.
    pub fn gid(&self, index: u8) -> Option<Gid> {
        (index < 2).then(|| Gid::from_ip(self.dev.local.ip()))
    }

    /// Device limits.
    pub fn limits(&self) -> &DeviceLimits {
        &self.dev.limits
    }

    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> Result<ProtectionDomain> {
        self.dev.check_open()?;
        Ok(ProtectionDomain {
            dev: Arc::clone(&self.dev),
            handle: self.dev.alloc_handle(),
        })
    }

    /// `ibv_create_cq` with room for `capacity` completions.
    pub fn create_cq(&self, capacity: usize) -> Result<CompletionQueue> {
        self.dev.check_open()?;
        if capacity == 0 || capacity > self.dev.limits.max_cqe as usize {
            return Err(VerbsError::ExceedsDeviceLimit {
                what: "CQ entries",
                requested: capacity as u64,
                limit: self.dev.limits.max_cqe as u64,
            });
        }
        Ok(CompletionQueue {
            inner: Arc::new(CqInner::new(capacity, self.dev.busy_poll)),
        })
    }

    /// The device counters, named as rxe names its hardware counters.
    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        self.dev.counters.snapshot()
    }

    /// A shared handle on the device counters that outlives borrows of the context (for
    /// reporting them when a program ends, however it ends).
    pub fn counter_handle(&self) -> Arc<Counters> {
        Arc::clone(&self.dev.counters)
    }

    /// One counter by name.
    pub fn counter(&self, name: &str) -> Option<u64> {
        self.dev.counters.get(name)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        self.dev.closed.store(true, Ordering::Release);
        let _ = self.dev.waker.wake();
        if let Some(h) = self.engine.take() {
            let _ = h.join();
        }
    }
}

/// A protection domain: memory regions and QPs of one PD may work together only.
#[derive(Debug)]
pub struct ProtectionDomain {
    dev: Arc<Device>,
    handle: u32,
}

impl ProtectionDomain {
    /// `ibv_reg_mr`: allocates and registers `len` zeroed bytes with the given rights.
    pub fn register_mr(&self, len: usize, access: AccessFlags) -> Result<MemoryRegion> {
        self.dev.check_open()?;
        MemoryRegion::register(&self.dev, self.handle, len, access)
    }

    /// `ibv_create_qp`.
    pub fn create_qp(&self, init: &QpInitAttr) -> Result<QueuePair> {
        self.dev.check_open()?;
        if init.qp_type != QpType::Rc {
            return Err(VerbsError::InvalidAttribute {
                attr: "qp_type",
                reason: "only RC is implemented so far",
            });
        }
        check_cap(&init.cap, &self.dev.limits)?;
        let qpn = self.dev.alloc_qpn()?;
        let core = QpCore::new(
            QpConfig {
                qpn,
                pd: self.handle,
                cap: init.cap,
                sq_sig_all: init.sq_sig_all,
                local: self.dev.local,
                remote_port: self.dev.remote_port,
            },
            self.dev.limits.clone(),
            Arc::clone(&self.dev.counters),
        );
        let core = Arc::new(Mutex::new(core));
        self.dev
            .qps
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                qpn,
                QpEntry {
                    core: Arc::clone(&core),
                    send_cq: Arc::clone(&init.send_cq.inner),
                    recv_cq: Arc::clone(&init.recv_cq.inner),
                },
            );
        self.dev.qps_generation.fetch_add(1, Ordering::AcqRel);
        Ok(QueuePair::new(Arc::clone(&self.dev), core, qpn))
    }
}
