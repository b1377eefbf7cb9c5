//! The device context (`ibv_context`) and protection domains (`ibv_pd`).
//!
//! A context is one RoCE "port": a local IP address (its GID) and a UDP socket on the RoCEv2
//! port, with an engine thread that runs the transport for every QP of the context. Contexts
//! are independent: two in one process (or two processes) on 127.0.0.1 and 127.0.0.2 talk to
//! each other over loopback as two RDMA devices would over a wire.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::ah::AddressHandle;
use super::cq::CompletionQueue;
use super::qp::{QpInitAttr, QueuePair};
use super::srq::SharedReceiveQueue;
use crate::driver::device::{Device, QpEntry};
use crate::driver::{CqInner, DeviceConfig};
use crate::ib::{check_cap, DeviceLimits};
use crate::ib::{AhAttr, Gid, Result, SrqAttr, VerbsError};
use crate::transport::{Counters, QpConfig, QpCore, Srq, XrcRole};

/// A device context: the entry point of the verbs API.
#[derive(Debug)]
pub struct Context {
    pub(crate) dev: Arc<Device>,
    pub(crate) engine: Option<JoinHandle<()>>,
}

impl Context {
    /// Opens a device context: binds the socket, builds the link stack and starts the engine
    /// thread (see `driver::open`).
    pub fn open(cfg: &DeviceConfig) -> Result<Context> {
        let (dev, engine) = crate::driver::open(cfg)?;
        Ok(Context {
            dev,
            engine: Some(engine),
        })
    }

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
            inner: Arc::new(CqInner::new(capacity, &self.dev)),
            dev: Arc::downgrade(&self.dev),
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

    /// Whether the engine thread has done all it had to and waits in poll for a packet, a
    /// doorbell or its next deadline (tests use it to post to an idle engine). Always false in
    /// busy-poll mode, where it never waits.
    pub fn engine_waiting(&self) -> bool {
        self.dev.engine_sleeping.load(Ordering::SeqCst)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        self.dev.shut_down(self.engine.take());
    }
}

/// A protection domain: memory regions and QPs of one PD may work together only.
#[derive(Debug)]
pub struct ProtectionDomain {
    pub(crate) dev: Arc<Device>,
    pub(crate) handle: u32,
}

impl ProtectionDomain {
    /// Another handle on this protection domain, for a parent domain (`ibv_alloc_parent_domain`):
    /// regions, QPs and SRQs made through either are of one PD and work together.
    pub fn parent_domain(&self) -> ProtectionDomain {
        ProtectionDomain {
            dev: Arc::clone(&self.dev),
            handle: self.handle,
        }
    }

    /// `ibv_create_qp` for an RC, UC or UD QP with a receive queue of its own.
    pub fn create_qp(&self, init: &QpInitAttr) -> Result<QueuePair> {
        self.create_qp_inner(init, None)
    }

    /// `ibv_create_qp` with `srq` set: the QP (RC, UC or UD) takes its receive WRs from the
    /// shared receive queue, which cannot be destroyed while the QP exists.
    pub fn create_qp_with_srq(
        &self,
        init: &QpInitAttr,
        srq: &SharedReceiveQueue,
    ) -> Result<QueuePair> {
        if srq.srq.pd() != self.handle || !Arc::ptr_eq(&srq.dev, &self.dev) {
            return Err(VerbsError::ForeignObject("shared receive queue"));
        }
        self.create_qp_inner(init, Some(Arc::clone(&srq.srq)))
    }

    /// `ibv_create_ah`.
    pub fn create_ah(&self, attr: &AhAttr) -> Result<AddressHandle> {
        self.dev.check_open()?;
        AddressHandle::new(&self.dev, self.handle, attr)
    }

    /// `ibv_create_srq`: `max_wr` and `max_sge` within the device's limits, no limit armed
    /// at creation.
    pub fn create_srq(&self, attr: &SrqAttr) -> Result<SharedReceiveQueue> {
        self.new_srq(attr, None)
    }

    /// `ibv_create_srq_ex` with `IBV_SRQT_TM`: a tag matching SRQ whose tag list holds up to
    /// `max_num_tags` entries (at most `tag_match::MAX_NUM_TAGS`) and whose tag list
    /// operations complete on `cq` (spec-notes/beyond-rxe.md rule 13).
    pub fn create_tm_srq(
        &self,
        attr: &SrqAttr,
        cq: &CompletionQueue,
        max_num_tags: u32,
    ) -> Result<SharedReceiveQueue> {
        if !std::ptr::eq(cq.dev.as_ptr(), Arc::as_ptr(&self.dev)) {
            return Err(VerbsError::ForeignObject("CQ"));
        }
        self.new_srq(attr, Some((cq, max_num_tags)))
    }

    fn new_srq(
        &self,
        attr: &SrqAttr,
        tm: Option<(&CompletionQueue, u32)>,
    ) -> Result<SharedReceiveQueue> {
        self.dev.check_open()?;
        let mut srq = Srq::new(
            self.handle,
            *attr,
            &self.dev.limits,
            Arc::clone(&self.dev.counters),
        )?;
        if let Some((_, n)) = tm {
            srq = srq.with_tm(n)?;
        }
        Ok(SharedReceiveQueue {
            dev: Arc::clone(&self.dev),
            srq: Arc::new(srq),
            xrcd: None,
            tm_cq: tm.map(|(cq, _)| cq.clone()),
        })
    }

    fn create_qp_inner(&self, init: &QpInitAttr, srq: Option<Arc<Srq>>) -> Result<QueuePair> {
        self.create_qp_with(init, srq, None)
    }

    pub(super) fn create_qp_with(
        &self,
        init: &QpInitAttr,
        srq: Option<Arc<Srq>>,
        xrc: Option<XrcRole>,
    ) -> Result<QueuePair> {
        self.dev.check_open()?;
        // The engine of this device fills the QP's CQs: they must be of this device (a
        // process may have several, each with its own engine), as the kernel refuses a CQ
        // of another context.
        for cq in [init.send_cq, init.recv_cq] {
            if !std::ptr::eq(cq.dev.as_ptr(), Arc::as_ptr(&self.dev)) {
                return Err(VerbsError::ForeignObject("completion queue"));
            }
        }
        check_cap(&init.cap, &self.dev.limits)?;
        ProtectionDomain::create_qp_parts(
            &self.dev,
            self.handle,
            QpParts {
                send_cq: Arc::clone(&init.send_cq.inner),
                recv_cq: Arc::clone(&init.recv_cq.inner),
                cap: init.cap,
                qp_type: init.qp_type,
                sq_sig_all: init.sq_sig_all,
                srq,
                xrc,
            },
        )
    }

    /// Makes a QP of PD `pd` from checked parts and adds it to the engine's table.
    pub(super) fn create_qp_parts(dev: &Arc<Device>, pd: u32, parts: QpParts) -> Result<QueuePair> {
        let cap = crate::ib::sized_as_rxe(&parts.cap);
        let qpn = dev.alloc_qpn()?;
        let srq = parts.srq;
        let core = QpCore::new(
            QpConfig {
                qpn,
                pd,
                cap,
                sq_sig_all: parts.sq_sig_all,
                local: dev.local,
                remote_port: dev.remote_port,
                qp_type: parts.qp_type,
                srq: srq.clone(),
                xrc: parts.xrc,
            },
            dev.limits.clone(),
            Arc::clone(&dev.counters),
        );
        let core = Arc::new(Mutex::new(core));
        dev.add_qp(
            qpn,
            QpEntry {
                core: Arc::clone(&core),
                send_cq: parts.send_cq,
                recv_cq: parts.recv_cq,
            },
        );
        if let Some(s) = &srq {
            s.attach();
        }
        Ok(QueuePair::new(Arc::clone(dev), core, qpn, srq, pd))
    }
}

/// What a QP is made of, for [`ProtectionDomain::create_qp_parts`].
#[derive(Debug)]
pub(crate) struct QpParts {
    pub(crate) send_cq: Arc<CqInner>,
    pub(crate) recv_cq: Arc<CqInner>,
    pub(crate) cap: crate::ib::QpCap,
    pub(crate) qp_type: crate::ib::QpType,
    pub(crate) sq_sig_all: bool,
    pub(crate) srq: Option<Arc<Srq>>,
    pub(crate) xrc: Option<XrcRole>,
}
